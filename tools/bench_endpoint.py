"""``python -m agent bench endpoint``: how soon the turn is called over, and how often wrongly.

Why: on the CPU default the wait from the last voiced frame to the turn's commit (the
endpointing wait, then the end-of-turn decision) is the largest part of voice-to-voice,
and the obvious lever is the VAD's stop time. Speed alone is the wrong score, though: a
shorter stop makes the VAD report a stop at every thinking pause ("I could do, um, ...
two hundred a month"), and then only the end-of-turn decision stands between the caller
and an agent that answers in the middle of their sentence. So this bench speaks the
built-in scenarios' caller lines with real mid-turn pauses and counts the *false cuts*
next to the delay, for each VAD stop time and each end-of-turn decision:

- ``smart-turn``: what the pipeline does (agent/pipeline/call.py): pipecat's
  ``TurnAnalyzerUserTurnStopStrategy`` over ``LocalSmartTurnAnalyzerV3``, driven here as
  pipecat objects, not a re-implementation: smart-turn v3 asked at every VAD stop, and
  its own ``stop_secs`` silence (3 s) as the fallback when it keeps saying "incomplete";
- ``vad``: commit at the VAD stop itself (no model).

Offline and faster than real time: the audio goes in 20 ms frames through the VAD the
pipeline builds (``create_vad_analyzer``, inside pipecat's ``VADController``) and into
the strategy, with no pipeline, transport or server. The decisions run on audio time:
the VAD counts frames, smart-turn's fallback counts the silence it is given in audio
milliseconds, and the one place smart-turn reads the wall clock (``time.monotonic()``
in ``base_smart_turn``: the timestamps of its audio buffer, which pick the 0.5 s plus
VAD start time of pre-speech audio it sends the model, and trim the buffer before
speech) is given an audio clock for the run (:func:`audio_time`). The wall time the
pipeline really waits, smart-turn's inference, is measured and added to the delay;
whether a turn was cut is judged at the audio frame that led to the commit, so the
cuts are the same on every run.
The strategy's wait for the final transcript (``wait_for_transcript``, timed on
``time.time()`` against the STT's p99) is not modelled: a commit here is the turn
detection's own decision, as if the transcript were in hand (the stub run of ``bench
turn``); with Whisper on the CPU the real commit also waits for the final, and a
caller who resumes within that wait cancels the cut.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, cast
from unittest import mock

import numpy as np

from agent.config import Settings
from agent.ledger.quantiles import percentile

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT = "docs/benchmarks/endpointing.md"
DEFAULT_STOPS = (0.1, 0.15, 0.2, 0.3, 0.5)
#: The mid-turn pauses (ms) between a turn's clauses: a speaker thinking, short to long.
DEFAULT_PAUSES_MS = (300, 500, 700)
#: smart-turn fallbacks (its ``stop_secs``) swept besides pipecat's 3 s: longer than every
#: pause here, so the cuts stay smart-turn's own and only the wait for an "incomplete"
#: turn's end shrinks.
DEFAULT_FALLBACKS = (1.0,)
FRAME_MS = 20
#: Noise floor under the whole turn (pauses included): a quiet phone line, not digital zero.
NOISE_DBFS = -60.0
LEAD_S = 1.0  # noise before the first word: the VAD and smart-turn's pre-speech buffer fill
TAIL_S = 1.0  # after smart-turn's fallback would have fired, before "never committed"
#: A 10 ms window louder than this (about -50 dBFS) is voiced, when trimming Piper's
#: clips and when marking where a clause starts and the turn's voice ends.
VOICED_RMS = 100.0

Decision = Literal["smart-turn", "vad"]
DECISIONS: tuple[Decision, ...] = ("smart-turn", "vad")
DECISION_LABELS: dict[Decision, str] = {
    "smart-turn": "smart-turn v3 (as the pipeline)",
    "vad": "VAD stop alone",
}

#: Hesitations, as their clauses: a filler or an unfinished phrase, a pause, the rest.
HESITATIONS: tuple[tuple[str, ...], ...] = (
    ("I could do, um,", "two hundred a month."),
    ("My date of birth is, uh,", "March fifth, nineteen eighty."),
    ("I can pay, uh,", "maybe fifty dollars on Friday."),
    ("The last four are, um,", "four eight two one."),
    ("Can you, uh,", "can you call me back after five?"),
    ("I want to pay it, but,", "I need to talk to my wife first."),
    ("So if I pay today,", "um,", "is that the whole thing settled?"),
    ("Well, I was thinking,", "maybe a hundred now and the rest next month."),
)

_CLAUSE_END = re.compile(r"(?<=[.?!,;])\s+")


def _say(text: str = "") -> None:
    """The bench's own table and progress lines, on the terminal."""
    print(text, flush=True)  # noqa: T201


# --- the corpus -------------------------------------------------------------------------


class Voice(Protocol):
    """What speaks the clauses: ``tools.simulate.CallerVoice`` (Piper), or a fake in tests."""

    sample_rate: int

    def say(self, text: str) -> bytes: ...


Rendition = Literal["apart", "in-context"]
RENDITIONS: tuple[Rendition, ...] = ("apart", "in-context")
#: Piper's own silence at a clause boundary (a comma, a sentence end) is 140 ms or more;
#: inside a clause (a stop consonant's closure) up to about 130 ms: a boundary is one of
#: the turn's longest silences, at least this long and this much longer than any other.
BOUNDARY_GAP_S = 0.1
BOUNDARY_RATIO = 1.5
#: Syntheses of a whole turn tried before giving up on finding its boundaries.
IN_CONTEXT_TRIES = 5


@dataclass(frozen=True)
class CorpusTurn:
    """One caller turn: its clauses with ``pause_ms`` of pause between each two.

    ``apart``: each clause synthesized on its own (as an utterance of its own: its end
    sounds final even at a comma); ``in-context``: the whole turn synthesized at once and
    Piper's silences at the clause boundaries stretched to the pause (the clause before
    a pause keeps the prosody of speech that goes on).
    """

    source: str  # the scenario (the first that says the line) or "hesitation"
    clauses: tuple[str, ...]
    pause_ms: int  # 0 for a turn of one clause
    rendition: Rendition = "apart"

    @property
    def text(self) -> str:
        return " | ".join(self.clauses)

    @property
    def hesitation(self) -> bool:
        return self.source == "hesitation"


@dataclass(frozen=True)
class TurnAudio:
    """A turn's audio (int16 mono) and where, in seconds from its start, its voice is."""

    turn: CorpusTurn
    pcm: bytes
    sample_rate: int
    last_clause_start_s: float
    voiced_end_s: float

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


def split_clauses(line: str) -> tuple[str, ...]:
    """A line's clauses: split after sentence ends and commas, punctuation kept."""
    return tuple(c for c in _CLAUSE_END.split(line.strip()) if c)


def build_corpus(
    lines: Sequence[tuple[str, str]],
    pauses_ms: Sequence[int] = DEFAULT_PAUSES_MS,
    hesitations: Sequence[Sequence[str]] = HESITATIONS,
    renditions: Sequence[Rendition] = RENDITIONS,
) -> list[CorpusTurn]:
    """The turns: each (source, line) of several clauses once per pause and rendition,
    one-clause lines once (they have no pause, and both renditions are the same audio).

    Lines said word for word in several scenarios are measured once (the first source).
    """
    turns: list[CorpusTurn] = []
    seen: set[str] = set()
    every = [(source, split_clauses(line)) for source, line in lines]
    every += [("hesitation", tuple(h)) for h in hesitations]
    for source, clauses in every:
        if " ".join(clauses) in seen:
            continue
        seen.add(" ".join(clauses))
        if len(clauses) == 1:
            turns.append(CorpusTurn(source, clauses, 0))
            continue
        for rendition in renditions:
            turns.extend(CorpusTurn(source, clauses, p, rendition) for p in pauses_ms)
    return turns


def scenario_lines(names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(scenario, line) for the built-in scenarios (all, or those named), in name order."""
    from agent.conversation.scenarios import builtin_scenarios

    scenarios = builtin_scenarios()
    unknown = sorted(set(names or ()) - set(scenarios))
    if unknown:
        raise ValueError(f"no such scenario: {', '.join(unknown)}")
    chosen = sorted(names) if names else sorted(scenarios)
    return [(name, line) for name in chosen for line in scenarios[name].lines]


def _voiced_windows(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Whether each whole 10 ms window of ``audio`` (int16 values) is voiced."""
    window = sample_rate // 100
    count = len(audio) // window
    frames = audio[: count * window].astype(np.float32).reshape(count, window)
    return np.asarray(np.sqrt((frames**2).mean(axis=1)) > VOICED_RMS)


def voiced_span(pcm: bytes, sample_rate: int) -> tuple[int, int] | None:
    """First and past-the-last sample of the voiced 10 ms windows, or None if all quiet."""
    voiced = np.nonzero(_voiced_windows(np.frombuffer(pcm, dtype=np.int16), sample_rate))[0]
    if len(voiced) == 0:
        return None
    window = sample_rate // 100
    return int(voiced[0]) * window, (int(voiced[-1]) + 1) * window


def boundary_gaps(audio: np.ndarray, sample_rate: int, count: int) -> list[tuple[int, int]]:
    """The ``count`` silences in ``audio`` (trimmed to its voice) that are clause
    boundaries, in order, as sample ranges: its ``count`` longest, each at least
    ``BOUNDARY_GAP_S`` long and ``BOUNDARY_RATIO`` times longer than any other.
    ValueError if they cannot be told apart."""
    window = sample_rate // 100
    voiced = _voiced_windows(audio, sample_rate)
    gaps: list[tuple[int, int]] = []
    start: int | None = None
    for i, v in enumerate(voiced):
        if not v and start is None:
            start = i
        elif v and start is not None:
            gaps.append((start * window, i * window))
            start = None
    longest = sorted(gaps, key=lambda g: g[0] - g[1])  # longest first
    chosen, rest = longest[:count], longest[count:]
    shortest = min((b - a for a, b in chosen), default=0)
    if len(chosen) < count or shortest < BOUNDARY_GAP_S * sample_rate:
        raise ValueError(f"found {len(chosen)} clause-length silences, expected {count}")
    if rest and shortest < BOUNDARY_RATIO * max(b - a for a, b in rest):
        raise ValueError("a silence inside a clause is as long as one between clauses")
    return sorted(chosen)


class _Speaker:
    """Synthesizes each text once and trims it to its voice."""

    def __init__(self, voice: Voice) -> None:
        self.voice = voice
        self._clips: dict[str, np.ndarray] = {}

    def clip(self, text: str, fresh: bool = False) -> np.ndarray:
        if fresh or text not in self._clips:
            pcm = self.voice.say(text)
            span = voiced_span(pcm, self.voice.sample_rate)
            if span is None:
                raise ValueError(f"the voice said nothing for {text!r}")
            self._clips[text] = np.frombuffer(pcm, dtype=np.int16)[span[0] : span[1]]
        return self._clips[text]

    def clauses(self, turn: CorpusTurn) -> list[np.ndarray]:
        """The turn's clauses as voice, in its rendition, without the pauses."""
        if turn.rendition == "apart" or len(turn.clauses) == 1:
            return [self.clip(c) for c in turn.clauses]
        # Piper pauses at every comma and sentence end; the turn pauses at some of them.
        fine = [len(split_clauses(c)) for c in turn.clauses]
        text = " ".join(turn.clauses)
        for attempt in range(IN_CONTEXT_TRIES):
            whole = self.clip(text, fresh=attempt > 0)
            try:
                gaps = boundary_gaps(whole, self.voice.sample_rate, sum(fine) - 1)
                break
            except ValueError as e:
                why = e
        else:
            raise ValueError(f"{turn.text!r} in context: {why}")
        cuts = [gaps[sum(fine[: i + 1]) - 1] for i in range(len(fine) - 1)]
        edges = [0, *(x for gap in cuts for x in gap), len(whole)]
        return [whole[edges[i] : edges[i + 1]] for i in range(0, len(edges), 2)]


def speak_turns(
    turns: Sequence[CorpusTurn], voice: Voice, tail_s: float, seed: int = 7
) -> list[TurnAudio]:
    """Each turn as audio: ``LEAD_S`` of noise, its clauses (trimmed to their voice) with
    exactly its pause between each two, ``tail_s`` of noise after; noise (``NOISE_DBFS``,
    seeded per turn) under it all. Each text is synthesized once."""
    rate = voice.sample_rate
    speaker = _Speaker(voice)
    std = 32768.0 * 10 ** (NOISE_DBFS / 20)
    out: list[TurnAudio] = []
    for index, turn in enumerate(turns):
        parts: list[np.ndarray] = [np.zeros(int(LEAD_S * rate), dtype=np.float32)]
        pause = np.zeros(int(turn.pause_ms * rate / 1000), dtype=np.float32)
        last_start = 0
        for i, clause in enumerate(speaker.clauses(turn)):
            if i:
                parts.append(pause)
            last_start = sum(len(p) for p in parts)
            parts.append(clause.astype(np.float32))
        voiced_end = sum(len(p) for p in parts)
        parts.append(np.zeros(int(tail_s * rate), dtype=np.float32))
        audio = np.concatenate(parts)
        audio += np.random.default_rng([seed, index]).normal(0.0, std, len(audio))
        pcm = np.clip(np.round(audio), -32768, 32767).astype(np.int16).tobytes()
        out.append(TurnAudio(turn, pcm, rate, last_start / rate, voiced_end / rate))
    return out


# --- where each turn was committed -------------------------------------------------------


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
        from pipecat.frames.frames import (
            InputAudioRawFrame,
            VADUserStartedSpeakingFrame,
            VADUserStoppedSpeakingFrame,
        )

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
        rate = audio.sample_rate
        step = rate * FRAME_MS // 1000 * 2
        turn_started = False
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
                    if event == "start":
                        if not turn_started and self._strategy is not None:
                            # The user aggregator's VAD start strategy opens the turn.
                            await self._strategy.handle_user_turn_started()
                        turn_started = True
                        await self._strategy_frame(
                            VADUserStartedSpeakingFrame(start_secs=analyzer.params.start_secs)
                        )
                    else:
                        if s.vad_commit_s is None:
                            s.vad_commit_s = s.frame_end_s
                            s.vad_wait_ms = (time.perf_counter() - s.frame_arrived) * 1000
                            s.vad_cpu_at_commit = s.vad_cpu_ms
                        await self._strategy_frame(
                            VADUserStoppedSpeakingFrame(stop_secs=analyzer.params.stop_secs)
                        )
                done_vad = s.vad_commit_s is not None
                if done_vad and (self._strategy is None or s.smart_commit_s is not None):
                    break
        finally:
            await vad.cleanup()
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
    progress: bool = False,
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
                if progress:
                    done = [r for r in results if r.config.stop_secs == stop]
                    summary = "; ".join(
                        f"{r.config.label.split(' + ')[1]}: {r.false_cut_pct:.0f}% false cuts, "
                        f"p95 {_ms(r.delay(0.95))} ms"
                        for r in done
                    )
                    _say(
                        f"  stop {stop:.2f} s: {len(audios)} turns in "
                        f"{time.perf_counter() - started:.1f} s ({summary})"
                    )
    finally:
        pipecat_logger.enable(quiet)
    return results


# --- the verdict and the report ---------------------------------------------------------


def recommend(results: Sequence[ConfigResult], hesitations_too: bool = False) -> ConfigResult:
    """The lowest endpoint p95 (then p50) among the configurations no worse than the
    baseline on false cuts, on all cuts (false cuts and cuts in the last clause) and on
    turns never committed; with ``hesitations_too``, on the hesitations' cuts as well."""
    baseline = next(r for r in results if r.baseline)

    def no_worse(mine: float | None, theirs: float | None) -> bool:
        return mine is None or theirs is None or mine <= theirs + 1e-9

    eligible = [
        r
        for r in results
        if r.delays
        and no_worse(r.false_cut_pct, baseline.false_cut_pct)
        and no_worse(r.cut_pct, baseline.cut_pct)
        and r.never <= baseline.never
        and (not hesitations_too or no_worse(r.hesitation_cut_pct, baseline.hesitation_cut_pct))
    ]
    if not eligible:
        return baseline
    return min(
        eligible,
        key=lambda r: (r.delay(0.95) or 0.0, r.delay(0.5) or 0.0, not r.baseline),
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(results: Sequence[ConfigResult], recommended: ConfigResult | None = None) -> str:
    """The markdown table: one row per configuration, the baseline marked."""
    rows = [
        "| configuration | turns | false cuts % | cut in last clause % | hesitations cut % "
        "| never committed "
        "| endpoint p50 ms | endpoint p95 ms | ended by fallback % | decision CPU ms/turn "
        "| smart-turn calls/turn |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        label = r.config.label
        if r.baseline:
            label = f"**{label} (baseline)**"
        if recommended is not None and r is recommended and not r.baseline:
            label += " (recommended)"
        if r.current:
            label += " (the pipeline's setting)"
        rows.append(
            f"| {label} | {r.turns} | {_pct(r.false_cut_pct)} | {_pct(r.early_pct)} "
            f"| {_pct(r.hesitation_cut_pct)} "
            f"| {r.never} | {_ms(r.delay(0.5))} | {_ms(r.delay(0.95))} "
            f"| {_pct(r.fallback_pct)} | {r.cpu_ms_per_turn:.1f} | {r.model_calls_per_turn:.1f} |"
        )
    return "\n".join(rows)


def pause_table(results: Sequence[ConfigResult], pauses_ms: Sequence[int]) -> str:
    """False cuts by mid-turn pause on the scenario lines, and on the hesitations; each
    cell: clauses spoken apart / in context."""
    head = "| configuration | " + " | ".join(f"pause {p} ms" for p in pauses_ms)
    rows = [head + " | hesitations |", "|---|" + "---:|" * (len(pauses_ms) + 1)]

    def cell(pause: int | None, hesitation: bool, r: ConfigResult) -> str:
        return " / ".join(_pct(r.false_cut_pct_where(pause, x, hesitation)) for x in RENDITIONS)

    for r in results:
        label = f"**{r.config.label}**" if r.baseline else r.config.label
        cells = [cell(p, False, r) for p in pauses_ms] + [cell(None, True, r)]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _how(config: Config) -> str:
    """What the pipeline would change to run ``config``."""
    steps = []
    if config.stop_secs != Settings().vad_stop_secs:
        steps.append(f"`VAD_STOP_SECS={config.stop_secs:g}` (agent/config.py's default)")
    if config.decision == "vad":
        steps.append(
            "in agent/pipeline/call.py, `SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0)` "
            "in place of the smart-turn strategy (which also frees smart-turn's CPU)"
        )
    elif config.fallback_secs is not None:
        steps.append(
            "in agent/pipeline/call.py, `LocalSmartTurnAnalyzerV3(params=SmartTurnParams("
            f"stop_secs={config.fallback_secs:g}))`"
        )
    return "; ".join(steps) if steps else "nothing"


def _verdict(results: Sequence[ConfigResult], best: ConfigResult) -> str:
    baseline = next(r for r in results if r.baseline)
    base = (
        f"The baseline ({baseline.config.label}) cuts {baseline.cut_pct:.1f}% of the turns "
        f"({baseline.false_cut_pct:.1f}% in a mid-turn pause) and commits the others "
        f"{_ms(baseline.delay(0.5))} ms (p50) / {_ms(baseline.delay(0.95))} ms (p95) after "
        "the caller's voice ends."
    )
    if best is baseline:
        return (
            base + " No configuration measured is faster at p95 without cutting more "
            "turns: **keep the default** (VAD stop "
            f"{baseline.config.stop_secs:.2f} s with smart-turn)."
        )
    p50 = (best.delay(0.5) or 0.0) - (baseline.delay(0.5) or 0.0)
    return (
        base + f" **Recommended: {best.config.label}**: the lowest endpoint p95 "
        f"({_ms(best.delay(0.95))} ms) among the configurations that cut no more turns "
        f"than the baseline, in a pause or at all ({best.false_cut_pct:.1f}% false cuts, "
        f"{best.cut_pct:.1f}% in all); its p50 is {_ms(best.delay(0.5))} ms "
        f"({'+' if p50 >= 0 else '-'}{abs(p50):.0f} ms against the baseline's), at "
        f"{best.cpu_ms_per_turn:.1f} ms of CPU per turn for the decision (baseline "
        f"{baseline.cpu_ms_per_turn:.1f}). To run it: {_how(best.config)}."
    )


def _hesitation_view(results: Sequence[ConfigResult], best: ConfigResult) -> str:
    """The verdict held to the hesitations too, where every cut is a real one."""
    baseline = next(r for r in results if r.baseline)
    if baseline.hesitation_cut_pct is None or best.hesitation_cut_pct is None:
        return ""
    text = (
        "A stricter reading: many scenario lines open with a sentence of their own (*I can't "
        "pay anything right now. | I lost my job.*), where an agent that answers after the "
        "pause is not plainly wrong, though the rule above counts it a false cut. The "
        "hesitations are unfinished by construction, so every cut there is a real one: "
        f"the baseline cuts {baseline.hesitation_cut_pct:.1f}% of them"
    )
    if best is baseline:
        return text + "."
    text += f", the recommended setting {best.hesitation_cut_pct:.1f}%."
    if best.hesitation_cut_pct <= baseline.hesitation_cut_pct + 1e-9:
        return text + " It is no worse there either."
    strict = recommend(results, hesitations_too=True)
    if strict is baseline:
        fallback = baseline.fallback_pct or 0.0
        return (
            text + " Held to the hesitations as well, nothing measured here has a lower p95 "
            "than the baseline: its p95 is smart-turn's 3 s fallback (which ends "
            f"{fallback:.1f}% of its turns, where the model keeps saying *incomplete*); "
            "`--fallbacks` sweeps shorter ones."
        )
    return (
        text + f" Held to the hesitations as well, the choice is **{strict.config.label}** "
        f"(p95 {_ms(strict.delay(0.95))} ms, p50 {_ms(strict.delay(0.5))} ms, "
        f"{strict.false_cut_pct:.1f}% false cuts, {strict.hesitation_cut_pct or 0.0:.1f}% of "
        f"the hesitations cut; to run it: {_how(strict.config)})."
    )


def _corpus_section(audios: Sequence[TurnAudio], pauses_ms: Sequence[int], seed: int) -> list[str]:
    turns = [a.turn for a in audios]
    scenario = {t.text: t for t in turns if not t.hesitation}
    multi = [t for t in scenario.values() if len(t.clauses) > 1]
    hes = {t.text for t in turns if t.hesitation}
    sources = sorted({t.source for t in scenario.values()})
    minutes = sum(a.duration_s for a in audios) / 60
    pauses = ", ".join(str(p) for p in pauses_ms)
    out = [
        "## Corpus",
        "",
        f"{len(turns)} turns, {minutes:.1f} minutes of audio, spoken by the Piper voice "
        f"(`CallerVoice`, {audios[0].sample_rate} Hz; onnxruntime seeded with {seed}, so "
        "every run speaks the same audio):",
        "",
        f"- **scenario lines**: the {len(scenario)} distinct caller lines of "
        f"{len(sources)} built-in scenarios ({', '.join(sources)}; a line said word for word "
        "in several scenarios counts once), split into clauses after sentence ends and "
        f"commas. The {len(multi)} lines of two clauses or more are spoken with every pause "
        f"({pauses} ms) in both renditions; the {len(scenario) - len(multi)} lines of one "
        "clause once (no pause: they measure the delay alone);",
        f"- **hesitations**: {len(hes)} turns written for this bench (a filler or an "
        "unfinished phrase, the pause, the rest; listed below), with every pause in both "
        "renditions.",
        "",
        "Two renditions of a turn with pauses: *apart*, each clause synthesized on its own "
        "and the clips joined with the pause: Piper says each clause as a whole utterance, "
        "so its end sounds final even at a comma (the hard case for smart-turn); *in "
        "context*, the whole turn synthesized at once and Piper's own silence at each of the "
        "turn's pause points (it pauses 140 ms or more at every comma and sentence end) "
        "stretched to the pause, so the speech before the pause keeps the prosody of speech "
        "that goes on (the easier case). A comma inside one of the turn's clauses keeps "
        "Piper's own pause (about 150 to 400 ms), as in *My date of birth is, uh, | March "
        "fifth, nineteen eighty.*",
        "",
        "Voice is trimmed to its 10 ms windows above about -50 dBFS, so a pause is exactly "
        f"the gap between voice. A turn is {LEAD_S:.0f} s of line noise, the clauses with "
        "their pauses, and enough noise after for smart-turn's fallback to fire; Gaussian "
        f"noise at {NOISE_DBFS:.0f} dBFS (seeded per turn) lies under the whole turn, pauses "
        "included: a quiet line, not digital silence.",
        "",
        "*False cut*: committed before the turn's last clause started (the agent answers in "
        "the caller's pause). *Cut in last clause*: committed after it started, before the "
        "caller's voice ended. *Never committed*: no commit before the audio ran out. "
        "*Endpoint*: end of the turn's last voiced audio to the commit, for the turns "
        "committed after it (nearest-rank percentiles). *Decision CPU*: process CPU time "
        "spent in the VAD and, for smart-turn, the strategy and its model, per turn up to "
        "its commit.",
        "",
        "Turns (`|` marks a pause):",
        "",
    ]
    listed: set[str] = set()
    for t in turns:
        if t.text not in listed:
            listed.add(t.text)
            out.append(f"- {t.source}: {t.text}")
    out.append("")
    return out


def _cut_list(result: ConfigResult, limit: int = 15) -> list[str]:
    cut = [o for o in result.outcomes if o.outcome in ("false_cut", "early")]
    if not cut:
        return []
    out = [f"Cut turns under {result.config.label}:", ""]
    for o in cut[:limit]:
        where = "in the pause" if o.outcome == "false_cut" else "in the last clause"
        rendition = o.turn.rendition.replace("-", " ")
        out.append(f"- {o.turn.text} ({o.turn.pause_ms} ms pauses, {rendition}): {where}")
    if len(cut) > limit:
        out.append(f"- ... and {len(cut) - limit} more")
    out.append("")
    return out


def report(
    results: Sequence[ConfigResult],
    audios: Sequence[TurnAudio],
    settings: Settings,
    pauses_ms: Sequence[int],
    command: str,
    seed: int = 7,
) -> str:
    from tools.bench import _machine

    best = recommend(results)
    baseline = next(r for r in results if r.baseline)
    vad_rows = [r for r in results if r.config.decision == "vad" and r.delays]
    lag = ", ".join(f"{r.config.stop_secs:.2f} s: {_ms(r.delay(0.5))} ms" for r in vad_rows)
    model_ms = [
        ms
        for r in results
        if r.config.decision == "smart-turn"
        for o in r.outcomes
        for ms in o.model_ms
    ]
    inference = (
        f" Smart-turn's inference took {percentile(model_ms, 0.5):.0f} ms (p50) / "
        f"{percentile(model_ms, 0.95):.0f} ms (p95) per call here ({len(model_ms)} calls)."
        if model_ms
        else ""
    )
    return "\n".join(
        [
            "# Endpointing: VAD stop time and end-of-turn decision, false cuts and delay",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`{command}`; VAD {settings.vad} (aggressiveness {settings.vad_aggressiveness}, "
            f"start {settings.vad_start_secs:.2f} s), {FRAME_MS} ms frames, smart-turn v3 "
            "(pipecat's bundled `smart-turn-v3.2-cpu` ONNX model, fallback after "
            f"{_fallback_secs():.0f} s of silence).",
            "",
            "Each turn is fed offline, faster than real time, through the VAD the pipeline "
            "builds (`create_vad_analyzer` inside pipecat's `VADController`) and, for the "
            "smart-turn rows, pipecat's own `TurnAnalyzerUserTurnStopStrategy` over "
            "`LocalSmartTurnAnalyzerV3`, in the pipeline's frame order. Decisions run on "
            "audio time: the VAD counts frames; smart-turn counts its fallback silence in "
            "audio milliseconds; the wall clock it reads for its buffer's timestamps (which "
            "choose the pre-speech audio the model hears) is replaced by the audio clock "
            "for the run. Smart-turn's inference, which the pipeline waits for, is timed "
            "on the wall clock and added to each delay; whether a turn was cut is judged at "
            "the audio frame that led to its commit. *VAD stop alone* commits at the "
            "VAD's stop event (what `SpeechTimeoutUserTurnStopStrategy` does with "
            "`user_speech_timeout=0`).",
            "",
            "Not modelled: the wait for the final transcript. A commit here is the turn "
            "detection's own decision, as if the transcript were in hand (the stub models "
            "of `bench turn`, or a fast STT: the production target is 60 ms). In the "
            "pipeline the commit also waits for the final, and a caller who speaks again "
            "before it arrives cancels the pending end of turn (pipecat drops it at a VAD "
            "start): on the CPU default, where Whisper's final comes about 390 ms after "
            "the VAD stop, that wait adds its own delay and hides some of the false cuts "
            "measured here (those in pauses that end within it).",
            "",
            table(results, best),
            "",
            "False cuts (%) by mid-turn pause on the scenario lines of several clauses, and "
            "on the hesitations; each cell: clauses spoken *apart* / *in context* (see "
            "Corpus):",
            "",
            pause_table(results, pauses_ms),
            "",
            "## Recommendation",
            "",
            _verdict(results, best),
            "",
            _hesitation_view(results, best),
            "",
            "The VAD stops later than its stop time: it needs both webrtcvad's verdict and "
            "pipecat's smoothed volume (over a 0.4 s window) to drop, so the *VAD stop "
            f"alone* rows' p50 is the real stop lag ({lag}); `bench turn`'s *endpoint* "
            "counts from the VAD stop less `stop_secs` and does not see that lag."
            + inference
            + " That time varies with the machine's load and is part of each smart-turn "
            "delay, so those rows' delays move by a few tens of ms from run to run; the "
            "cuts, and the VAD rows, are the same on every run.",
            "",
            "Caveats: the caller is a synthetic voice. Smart-turn v3 listens to prosody and "
            "was trained on people; on Piper's it may judge worse than on callers' (the "
            "*apart* and *in context* columns bracket how much the prosody before a pause "
            "matters). The *VAD stop alone* rows do not depend on prosody at all: a pause "
            "longer than the stop time plus the VAD's lag is cut, whatever was said, so "
            "their false cuts follow from the pause lengths chosen here (300, 500, 700 ms in "
            "equal shares); a caller who pauses longer is cut every time. Likewise a "
            "shorter smart-turn fallback cuts nothing here only because no pause here is "
            "longer than it: a caller silent for longer than the fallback after the VAD's "
            "stop, with smart-turn saying *incomplete*, is cut by it. Confirm on recorded "
            "caller audio before changing production.",
            "",
            *_cut_list(baseline),
            *([] if best is baseline else _cut_list(best)),
            *_corpus_section(audios, pauses_ms, seed),
        ]
    )


def _fallback_secs() -> float:
    from pipecat.audio.turn.smart_turn.base_smart_turn import STOP_SECS

    return float(STOP_SECS)


def run_endpoint_bench(
    output: str = DEFAULT_OUTPUT,
    stops: Sequence[float] = DEFAULT_STOPS,
    scenarios: Sequence[str] | None = None,
    pauses_ms: Sequence[int] = DEFAULT_PAUSES_MS,
    *,
    settings: Settings | None = None,
    hesitations: bool = True,
    fallbacks: Sequence[float] = DEFAULT_FALLBACKS,
    seed: int = 7,
    command: str | None = None,
) -> int:
    """``python -m agent bench endpoint``: measure, print the table, write ``output``.

    The baseline, ``settings.vad_stop_secs`` (0.2 s by default) with smart-turn, is
    measured in the same run whether or not ``stops`` names it.
    """
    import onnxruntime
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

    from tools.bench import _write_report
    from tools.simulate import CallerVoice

    settings = settings or Settings()
    base_stop = settings.vad_stop_secs
    sweep = sorted({round(s, 3) for s in stops} | {round(base_stop, 3)})
    corpus = build_corpus(scenario_lines(scenarios), pauses_ms, HESITATIONS if hesitations else ())
    _say(f"speaking {len(corpus)} turns with the Piper voice ...")
    # Piper samples its prosody (onnxruntime random ops, seeded when a session is made):
    # seeded here, the same corpus is the same audio on every run.
    onnxruntime.set_seed(seed)
    voice = CallerVoice(settings.audio_in_sample_rate)
    smart_turn = LocalSmartTurnAnalyzerV3()
    tail = max(sweep) + max([float(smart_turn.params.stop_secs), *fallbacks]) + TAIL_S
    audios = speak_turns(corpus, voice, tail_s=tail, seed=seed)
    minutes = sum(a.duration_s for a in audios) / 60
    _say(
        f"measuring {len(sweep)} stop times x {len(DECISIONS)} decisions ({minutes:.1f} min "
        "of audio per stop time) ..."
    )
    results = asyncio.run(
        measure(audios, settings, sweep, smart_turn, fallbacks=fallbacks, progress=True)
    )
    fallback = settings.turn_fallback_secs
    now = Config(
        round(base_stop, 3), "smart-turn", None if fallback == _fallback_secs() else fallback
    )
    for r in results:
        r.baseline = r.config == Config(round(base_stop, 3), "smart-turn")
        r.current = r.config == now
    order = {d: i for i, d in enumerate(DECISIONS)}
    results.sort(
        key=lambda r: (
            order[r.config.decision],
            -1.0 if r.config.fallback_secs is None else r.config.fallback_secs,
            r.config.stop_secs,
        )
    )
    best = recommend(results)
    _say()
    _say(table(results, best))
    _say()
    _say(_verdict(results, best))
    if command is None:
        command = "python -m agent bench endpoint"
        if tuple(stops) != DEFAULT_STOPS:
            command += " --stops " + ",".join(f"{s:g}" for s in stops)
        if scenarios:
            command += " --scenarios " + ",".join(scenarios)
        if tuple(pauses_ms) != DEFAULT_PAUSES_MS:
            command += " --pauses " + ",".join(str(p) for p in pauses_ms)
        if not hesitations:
            command += " --no-hesitations"
        if tuple(fallbacks) != DEFAULT_FALLBACKS:
            command += " --fallbacks '" + ",".join(f"{f:g}" for f in fallbacks) + "'"
    return _write_report(output, report(results, audios, settings, pauses_ms, command, seed) + "\n")


# --- the command line -------------------------------------------------------------------


def _floats(raw: str) -> list[float]:
    return [float(x) for x in raw.split(",") if x.strip()]


def add_endpoint_parser(benches: Any) -> None:
    """``python -m agent bench endpoint``."""
    parser = benches.add_parser(
        "endpoint",
        help="false cuts and endpoint delay per VAD stop time, smart-turn vs VAD alone, "
        "on the scenario lines spoken with mid-turn pauses (offline, CPU)",
    )
    parser.add_argument(
        "--stops",
        default=",".join(f"{s:g}" for s in DEFAULT_STOPS),
        help="comma-separated VAD stop times in seconds (the current one is always added)",
    )
    parser.add_argument(
        "--pauses",
        default=",".join(str(p) for p in DEFAULT_PAUSES_MS),
        help="comma-separated mid-turn pauses in ms",
    )
    parser.add_argument(
        "--scenarios", help="comma-separated built-in scenarios (default: all of them)"
    )
    parser.add_argument(
        "--no-hesitations", action="store_true", help="leave out the hesitation turns"
    )
    parser.add_argument(
        "--fallbacks",
        default=",".join(f"{f:g}" for f in DEFAULT_FALLBACKS),
        help="comma-separated smart-turn fallback silences in seconds (its stop_secs) to "
        "sweep besides pipecat's 3 s, each at every stop time ('' for none)",
    )
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="where to write the results")


def run_endpoint_command(args: argparse.Namespace, settings: Settings) -> int:
    """The command line's side: check the arguments, run, exit status (2: bad arguments)."""
    try:
        stops = _floats(args.stops)
        fallbacks = _floats(args.fallbacks)
        pauses = [int(p) for p in args.pauses.split(",") if p.strip()]
    except ValueError:
        print(  # noqa: T201
            "--stops must be seconds like 0.1,0.2 and --pauses milliseconds like 300,500",
            file=sys.stderr,
        )
        return 2
    if not stops or not pauses or min([*stops, *pauses, *fallbacks]) <= 0:
        print("--stops, --pauses and --fallbacks must be positive", file=sys.stderr)  # noqa: T201
        return 2
    names = [n.strip() for n in (args.scenarios or "").split(",") if n.strip()] or None
    try:
        return run_endpoint_bench(
            args.output,
            stops,
            names,
            pauses,
            settings=settings,
            hesitations=not args.no_hesitations,
            fallbacks=fallbacks,
        )
    except ValueError as e:
        print(f"bench endpoint: {e}", file=sys.stderr)  # noqa: T201
        return 2
