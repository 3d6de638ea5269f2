"""Where ``bench endpoint`` commits each turn: the pipeline's VAD and smart-turn, fed offline.

``EndpointDriver`` feeds a turn's 20 ms frames to the VAD the pipeline builds and to
pipecat's ``TurnAnalyzerUserTurnStopStrategy`` over smart-turn v3, on audio time
(``audio_time``); ``classify`` judges each commit against where the turn's last clause
started and its voice ended. tools/bench_endpoint.py says why and how.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from unittest import mock

from agent.config import Settings
from agent.ledger.quantiles import percentile
from tools.bench_endpoint_corpus import CorpusTurn, Rendition, TurnAudio

logger = logging.getLogger(__name__)

FRAME_MS = 20

Decision = Literal["smart-turn", "vad"]
DECISIONS: tuple[Decision, ...] = ("smart-turn", "vad")
DECISION_LABELS: dict[Decision, str] = {
    "smart-turn": "smart-turn v3 (as the pipeline)",
    "vad": "VAD stop alone",
}


Outcome = Literal["ok", "false_cut", "early", "never"]


def classify(commit_s: float | None, last_clause_start_s: float, voiced_end_s: float) -> Outcome:
    """``false_cut``: committed before the last clause started (the agent answers in the
    caller's pause); ``early``: during the last clause; ``ok``: after the voice ended;
    ``never``: not committed."""
    if commit_s is None:
        return "never"
    if commit_s < last_clause_start_s:
        return "false_cut"
    if commit_s < voiced_end_s:
        return "early"
    return "ok"


@dataclass(frozen=True)
class TurnOutcome:
    """Where one turn was committed under one configuration, and what deciding cost."""

    turn: CorpusTurn
    #: The audio time (from the turn audio's start) of the frame whose arrival led to the
    #: commit: what decides false cut, cut or not; the same on every run.
    commit_s: float | None
    last_clause_start_s: float
    voiced_end_s: float
    cpu_ms: float  # CPU spent deciding (VAD, and smart-turn for its rows) up to the commit
    model_calls: int = 0  # smart-turn inferences up to the commit
    model_ms: tuple[float, ...] = ()  # each inference's own time, as pipecat reports it
    by_fallback: bool = False  # smart-turn's silence fallback ended the turn, not the model
    #: Wall time from that frame's arrival to the commit (the VAD's analysis, smart-turn's
    #: inference), which the pipeline waits too: part of the delay.
    wait_ms: float = 0.0

    @property
    def outcome(self) -> Outcome:
        return classify(self.commit_s, self.last_clause_start_s, self.voiced_end_s)

    @property
    def delay_ms(self) -> float | None:
        """End of the turn's voice to the commit, the wait for the decision included;
        None unless the turn ended ``ok``."""
        if self.outcome != "ok" or self.commit_s is None:
            return None
        return (self.commit_s - self.voiced_end_s) * 1000 + self.wait_ms


@dataclass(frozen=True)
class Config:
    stop_secs: float
    decision: Decision
    #: smart-turn's ``stop_secs``: the silence after which it ends the turn although the
    #: model says "incomplete"; None: pipecat's default (3 s), as the pipeline has it.
    fallback_secs: float | None = None

    @property
    def label(self) -> str:
        decision = DECISION_LABELS[self.decision]
        if self.fallback_secs is not None:
            decision = f"smart-turn v3, fallback {self.fallback_secs:g} s"
        return f"VAD stop {self.stop_secs:.2f} s + {decision}"


@dataclass
class ConfigResult:
    config: Config
    outcomes: list[TurnOutcome]
    baseline: bool = False
    #: The configuration the pipeline runs now (``Settings``).
    current: bool = False

    def _share(self, kind: Outcome) -> float:
        chosen = self.outcomes
        return 100.0 * sum(o.outcome == kind for o in chosen) / len(chosen) if chosen else 0.0

    @property
    def turns(self) -> int:
        return len(self.outcomes)

    @property
    def false_cut_pct(self) -> float:
        return self._share("false_cut")

    @property
    def early_pct(self) -> float:
        return self._share("early")

    @property
    def cut_pct(self) -> float:
        """Turns the agent would answer before the caller finished: false cuts and early."""
        return self.false_cut_pct + self.early_pct

    @property
    def never(self) -> int:
        return sum(o.outcome == "never" for o in self.outcomes)

    @property
    def delays(self) -> list[float]:
        return [d for o in self.outcomes if (d := o.delay_ms) is not None]

    def delay(self, q: float) -> float | None:
        return percentile(self.delays, q) if self.delays else None

    @property
    def cpu_ms_per_turn(self) -> float:
        return sum(o.cpu_ms for o in self.outcomes) / len(self.outcomes) if self.outcomes else 0.0

    @property
    def fallback_pct(self) -> float | None:
        """Turns smart-turn's silence fallback ended (the model said "incomplete")."""
        if self.config.decision != "smart-turn" or not self.outcomes:
            return None
        return 100.0 * sum(o.by_fallback for o in self.outcomes) / len(self.outcomes)

    @property
    def model_calls_per_turn(self) -> float:
        if not self.outcomes:
            return 0.0
        return sum(o.model_calls for o in self.outcomes) / len(self.outcomes)

    @property
    def hesitation_cut_pct(self) -> float | None:
        """Cuts (false cuts and in the last clause) among the hesitations: turns whose
        first part is unfinished by construction, where every cut is a real one."""
        chosen = [o for o in self.outcomes if o.turn.hesitation]
        if not chosen:
            return None
        return 100.0 * sum(o.outcome in ("false_cut", "early") for o in chosen) / len(chosen)

    def false_cut_pct_where(
        self, pause_ms: int | None, rendition: Rendition, hesitation: bool
    ) -> float | None:
        """False cuts among the turns of several clauses with this pause (None: any),
        rendition and kind (hesitations or scenario lines); None if there are none."""
        chosen = [
            o
            for o in self.outcomes
            if len(o.turn.clauses) > 1
            and pause_ms in (None, o.turn.pause_ms)
            and o.turn.rendition == rendition
            and o.turn.hesitation == hesitation
        ]
        if not chosen:
            return None
        return 100.0 * sum(o.outcome == "false_cut" for o in chosen) / len(chosen)


class _AudioClock:
    """Stands in for the ``time`` module where smart-turn reads the wall clock: its
    ``monotonic()`` is the audio time of the frame being fed, the rest is ``time``'s."""

    def __init__(self, start: float = 1000.0) -> None:
        # Never 0: smart-turn takes a speech start time of 0 for "none yet".
        self.start = start
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextmanager
def audio_time(clock: _AudioClock) -> Iterator[_AudioClock]:
    """Smart-turn's buffer timestamps on ``clock`` instead of the wall clock, while open."""
    from pipecat.audio.turn.smart_turn import base_smart_turn

    with mock.patch.object(base_smart_turn, "time", clock):
        yield clock


@dataclass
class _TurnState:
    """One turn being fed: when each decision committed and what it cost."""

    vad_commit_s: float | None = None
    vad_wait_ms: float = 0.0
    vad_cpu_ms: float = 0.0
    vad_cpu_at_commit: float = 0.0
    smart_commit_s: float | None = None
    smart_wait_ms: float = 0.0
    smart_cpu_ms: float = 0.0
    model_calls: int = 0
    frame_end_s: float = 0.0
    frame_arrived: float = 0.0  # perf_counter when the current frame arrived
    feeding_audio: bool = False  # the strategy is handling an audio frame, not a VAD one
    smart_by_fallback: bool = False
    model_ms: list[float] = field(default_factory=list)


class EndpointDriver:
    """Feeds turns, frame by frame, to the VAD the pipeline builds and, when given a
    smart-turn analyzer, to pipecat's ``TurnAnalyzerUserTurnStopStrategy`` over it, in
    the order the pipeline delivers them (the audio frame, then the VAD frame it caused).
    """

    def __init__(self, settings: Settings, stop_secs: float, smart_turn: Any | None) -> None:
        self._settings = dataclasses.replace(settings, vad_stop_secs=stop_secs)
        self.stop_secs = stop_secs
        self._smart_turn = smart_turn
        self._strategy: Any | None = None
        self._setup: Any | None = None
        self._state = _TurnState()
        self._turn_started = False

    async def __aenter__(self) -> EndpointDriver:
        from pipecat.clocks.system_clock import SystemClock
        from pipecat.processors.frame_processor import FrameProcessorSetup
        from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy
        from pipecat.utils.asyncio.task_manager import TaskManager

        self._setup = FrameProcessorSetup(
            clock=SystemClock(),
            task_manager=TaskManager(loop=asyncio.get_running_loop()),
            # Read by neither the strategy nor the VAD controller; there is no pipeline.
            pipeline_worker=cast(Any, None),
            audio_in_sample_rate=self._settings.audio_in_sample_rate,
        )
        if self._smart_turn is not None:
            # The pipeline's strategy, less the wait for a transcript (see the module doc).
            strategy = TurnAnalyzerUserTurnStopStrategy(
                turn_analyzer=self._smart_turn, wait_for_transcript=False
            )
            await strategy.setup(self._setup)
            strategy.add_event_handler("on_user_turn_stopped", self._on_smart_commit)
            strategy.add_event_handler("on_push_frame", self._on_strategy_frame)
            strategy.add_event_handler("on_broadcast_frame", lambda *_a, **_k: None)
            strategy.add_event_handler("on_user_turn_inference_triggered", lambda *_a: None)
            self._strategy = strategy
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._strategy is not None:
            await self._strategy.cleanup()

    def _on_smart_commit(self, _strategy: object, _params: object) -> None:
        s = self._state
        if s.smart_commit_s is None:
            # Audio time of the frame that decided, and the wall time deciding took.
            s.smart_commit_s = s.frame_end_s
            s.smart_wait_ms = (time.perf_counter() - s.frame_arrived) * 1000
            # On an audio frame it is the silence fallback; on a VAD stop, the model.
            s.smart_by_fallback = s.feeding_audio

    def _on_strategy_frame(self, _strategy: object, frame: object, *_direction: object) -> None:
        from pipecat.frames.frames import MetricsFrame
        from pipecat.metrics.metrics import TurnMetricsData

        if isinstance(frame, MetricsFrame):
            for data in frame.data:
                if isinstance(data, TurnMetricsData):
                    self._state.model_calls += 1
                    self._state.model_ms.append(data.e2e_processing_time_ms)

    async def _strategy_frame(self, frame: Any) -> None:
        if self._strategy is None or self._state.smart_commit_s is not None:
            return
        from pipecat.frames.frames import InputAudioRawFrame

        self._state.feeding_audio = isinstance(frame, InputAudioRawFrame)
        cpu = time.process_time()
        await self._strategy.process_frame(frame)
        self._state.smart_cpu_ms += (time.process_time() - cpu) * 1000

    async def run_turn(self, audio: TurnAudio, clock: _AudioClock) -> dict[Decision, TurnOutcome]:
        """Feed one turn (fresh VAD, the strategy reset) until it is committed or ends."""
        from pipecat.audio.vad.vad_controller import VADController
        from pipecat.frames.frames import InputAudioRawFrame

        from agent.pipeline.vad import create_vad_analyzer

        assert self._setup is not None, "use the driver as an async context manager"
        analyzer = create_vad_analyzer(self._settings)
        # No start(): its idle watchdog is wall-clock, and the audio here never pauses.
        vad = VADController(analyzer, audio_idle_timeout=0)
        await vad.setup(self._setup)
        events: list[str] = []
        vad.add_event_handler("on_speech_started", lambda _c: events.append("start"))
        vad.add_event_handler("on_speech_stopped", lambda _c: events.append("stop"))
        vad.add_event_handler("on_speech_activity", lambda _c: None)
        if self._strategy is not None:
            await self._strategy.handle_user_turn_stopped()  # the previous turn's state gone
        self._state = s = _TurnState()
        self._turn_started = False
        rate = audio.sample_rate
        step = rate * FRAME_MS // 1000 * 2
        # Every turn starts at the same clock reading, the analyzer just cleared: the
        # float arithmetic on its timestamps (which frame is exactly 0.7 s before speech)
        # is then the same for a turn whichever turns came before it.
        base = clock.start
        try:
            for offset in range(0, len(audio.pcm) - step + 1, step):
                s.frame_end_s = (offset + step) / 2 / rate
                clock.now = base + s.frame_end_s
                s.frame_arrived = time.perf_counter()
                frame = InputAudioRawFrame(
                    audio=audio.pcm[offset : offset + step], sample_rate=rate, num_channels=1
                )
                # The VAD processor passes the frame on first, then analyzes it.
                await self._strategy_frame(frame)
                events.clear()
                cpu = time.process_time()
                await vad.process_frame(frame)
                s.vad_cpu_ms += (time.process_time() - cpu) * 1000
                for event in events:
                    await self._vad_event(event, analyzer.params)
                done_vad = s.vad_commit_s is not None
                if done_vad and (self._strategy is None or s.smart_commit_s is not None):
                    break
        finally:
            await vad.cleanup()
        return self._outcomes(audio)

    async def _vad_event(self, event: str, params: Any) -> None:
        """A VAD start or stop: the VAD's own commit at its first stop, and the frame the
        VAD processor pushes on to the strategy."""
        from pipecat.frames.frames import VADUserStartedSpeakingFrame, VADUserStoppedSpeakingFrame

        s = self._state
        if event == "start":
            if not self._turn_started and self._strategy is not None:
                # The user aggregator's VAD start strategy opens the turn.
                await self._strategy.handle_user_turn_started()
            self._turn_started = True
            await self._strategy_frame(VADUserStartedSpeakingFrame(start_secs=params.start_secs))
            return
        if s.vad_commit_s is None:
            s.vad_commit_s = s.frame_end_s
            s.vad_wait_ms = (time.perf_counter() - s.frame_arrived) * 1000
            s.vad_cpu_at_commit = s.vad_cpu_ms
        await self._strategy_frame(VADUserStoppedSpeakingFrame(stop_secs=params.stop_secs))

    def _outcomes(self, audio: TurnAudio) -> dict[Decision, TurnOutcome]:
        """The fed turn's outcome under each decision this driver makes."""
        s = self._state
        vad_cpu = s.vad_cpu_at_commit if s.vad_commit_s is not None else s.vad_cpu_ms
        result: dict[Decision, TurnOutcome] = {
            "vad": TurnOutcome(
                audio.turn,
                s.vad_commit_s,
                audio.last_clause_start_s,
                audio.voiced_end_s,
                vad_cpu,
                wait_ms=s.vad_wait_ms,
            )
        }
        if self._strategy is not None:
            result["smart-turn"] = TurnOutcome(
                audio.turn,
                s.smart_commit_s,
                audio.last_clause_start_s,
                audio.voiced_end_s,
                s.vad_cpu_ms + s.smart_cpu_ms,
                s.model_calls,
                tuple(s.model_ms),
                s.smart_by_fallback,
                s.smart_wait_ms,
            )
        return result


async def measure(
    audios: Sequence[TurnAudio],
    settings: Settings,
    stops: Sequence[float],
    smart_turn: Any | None,
    fallbacks: Sequence[float] = (),
    progress: Callable[[str], None] | None = None,
) -> list[ConfigResult]:
    """Every turn under every stop time: both decisions per stop when ``smart_turn`` is
    given (one pass: the VAD commit always comes first), the VAD alone otherwise; and
    smart-turn with each of ``fallbacks`` as its ``stop_secs`` (a pass each)."""
    from loguru import logger as pipecat_logger
    from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

    variants = {f: LocalSmartTurnAnalyzerV3(params=SmartTurnParams(stop_secs=f)) for f in fallbacks}

    results: list[ConfigResult] = []
    clock = _AudioClock()
    # That module's warnings are about the STT wait's p99 assuming stop_secs=0.2, which
    # this bench does not model; they would be repeated for every stop time swept.
    quiet = "pipecat.turns.user_stop.turn_analyzer_user_turn_stop_strategy"
    pipecat_logger.disable(quiet)
    try:
        with audio_time(clock):
            for stop in stops:
                by: dict[Decision, list[TurnOutcome]] = {d: [] for d in DECISIONS}
                started = time.perf_counter()
                async with EndpointDriver(settings, stop, smart_turn) as driver:
                    for audio in audios:
                        for decision, outcome in (await driver.run_turn(audio, clock)).items():
                            by[decision].append(outcome)
                            logger.debug(
                                "stop %.2f %s: %s at %s s (%s)",
                                stop,
                                decision,
                                outcome.outcome,
                                outcome.commit_s,
                                outcome.turn.text,
                            )
                for decision in DECISIONS:
                    if by[decision]:
                        results.append(ConfigResult(Config(stop, decision), by[decision]))
                for fallback, analyzer in variants.items():
                    outcomes: list[TurnOutcome] = []
                    async with EndpointDriver(settings, stop, analyzer) as driver:
                        for audio in audios:
                            outcomes.append((await driver.run_turn(audio, clock))["smart-turn"])
                    config = Config(stop, "smart-turn", fallback)
                    results.append(ConfigResult(config, outcomes))
                if progress is not None:
                    done = [r for r in results if r.config.stop_secs == stop]
                    summary = "; ".join(
                        f"{r.config.label.split(' + ')[1]}: {r.false_cut_pct:.0f}% false cuts, "
                        f"p95 {'-' if p95 is None else f'{p95:.0f}'} ms"
                        for r in done
                        for p95 in (r.delay(0.95),)
                    )
                    progress(
                        f"  stop {stop:.2f} s: {len(audios)} turns in "
                        f"{time.perf_counter() - started:.1f} s ({summary})"
                    )
    finally:
        pipecat_logger.enable(quiet)
    return results
