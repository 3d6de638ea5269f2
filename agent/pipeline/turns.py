"""The turn ledger: every caller turn's latency broken into its parts, text and usage.

An observer, so it sees each frame as it is pushed between processors, stamped
with the pipeline clock at the push, without sitting in the audio path. A turn
opens when the caller's turn starts and is written when the agent has finished
answering it (or the caller cut in, or the call ended), so a crash loses at
most the turn in progress.

The parts, all measured server-side on one clock (the two totals as
``agent.ledger.latency`` defines them):

    last voiced frame --endpointing--> VAD stop --response--> first audio sent
    VAD stop --stt--> final transcript
    reply requested --llm_ttft--> first token (of the LLM, or of the policy's template)
    TTS request --tts_ttfb--> first audio byte --transport_out--> first audio sent
    last voiced frame --voice_to_voice--> first audio sent

The last voiced frame is placed ``stop_secs`` before the VAD's stop: the VAD
calls the utterance over after exactly that much unvoiced audio, which arrives
in real time. A turn committed without a VAD stop (keypad digits, a transcript
with no speech detected) has its response from the commit, when the pipeline
knew the caller was done, and no endpointing or voice-to-voice.

With a ``playout`` (``agent.pipeline.playout``) a turn's agent text is what the caller
heard of the reply, cut where the caller cut in, not what the TTS was given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMTextFrame,
    MetricsFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import (
    LLMUsageMetricsData,
    STTUsageMetricsData,
    TTSUsageMetricsData,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameProcessor

from agent.ledger.pricebook import CallUsage
from agent.ledger.records import TurnRecord
from agent.pipeline.playout import Playout
from agent.pipeline.usage import ComputeUsageMetricsData, TTSAudioUsageMetricsData

logger = logging.getLogger(__name__)

NS = 1_000_000_000


@dataclass
class CallUsageTotals:
    """What the call's model requests consumed, for the cost ledger (greeting included)."""

    stt_audio_s: float = 0.0
    stt_compute_s: float = 0.0
    llm_prompt_tokens: int = 0
    llm_cached_tokens: int = 0
    llm_completion_tokens: int = 0
    llm_compute_s: float = 0.0
    tts_characters: int = 0
    tts_audio_s: float = 0.0
    tts_compute_s: float = 0.0

    def priced_as(
        self,
        transport: str,
        duration_s: float,
        *,
        fallback_tts_characters: int = 0,
        worker_cpu_s: float = 0.0,
    ) -> CallUsage:
        """The call's usage as the price book takes it."""
        return CallUsage(
            transport=transport,
            duration_s=duration_s,
            fallback_tts_characters=fallback_tts_characters,
            worker_cpu_s=worker_cpu_s,
            **asdict(self),
        )


@dataclass
class _Turn:
    number: int
    started_at: datetime
    vad_stopped: int | None = None
    stop_secs: float = 0.0
    transcript: int | None = None
    committed: int | None = None
    llm_request: int | None = None
    llm_first_token: int | None = None
    llm_done: bool = False
    tts_request: int | None = None
    tts_first_audio: int | None = None
    first_audio_out: int | None = None
    bot_speaking: bool = False
    interrupted: bool = False
    user_text: list[str] = field(default_factory=list)
    agent_text: list[str] = field(default_factory=list)
    #: Where the playout's log stood when the turn was committed (its reply is after).
    heard_from: int | None = None
    stt_audio_s: float = 0.0
    llm_prompt_tokens: int | None = None
    llm_cached_tokens: int | None = None
    llm_completion_tokens: int | None = None
    tts_characters: int | None = None

    @property
    def speech_ended(self) -> int | None:
        """When the pipeline knew the caller had finished: the VAD's stop, else the commit."""
        return self.vad_stopped if self.vad_stopped is not None else self.committed

    @property
    def last_voiced(self) -> int | None:
        if self.vad_stopped is None:
            return None
        return self.vad_stopped - int(self.stop_secs * NS)


def _ms(start: int | None, end: int | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start) / 1_000_000, 3)


@dataclass(frozen=True)
class CallProcessors:
    """The processors of one call whose frames mark the turn's moments.

    ``thinkers`` compose the reply: the conversation policy (fixed texts) and/or
    the LLM; the first of them receives the caller's finished turn.
    """

    stt: FrameProcessor
    thinkers: tuple[FrameProcessor, ...]
    tts: FrameProcessor
    output: FrameProcessor


TranscriptListener = Callable[[str, str], None]
RecordSink = Callable[[TurnRecord], None]


class TurnLedger(BaseObserver):
    """Builds a ``TurnRecord`` per caller turn and hands it to ``sink`` when the turn ends."""

    def __init__(
        self,
        call_id: str,
        processors: CallProcessors,
        sink: RecordSink,
        on_transcript: TranscriptListener | None = None,
        playout: Playout | None = None,
    ) -> None:
        # Every moment it times is a frame's first push, by the processor that made it:
        # the frame's later hops (each audio frame makes several) are not queued to it.
        super().__init__(observe_every_push=False)
        self._call_id = call_id
        self._p = processors
        self._sink = sink
        self._on_transcript = on_transcript
        #: What the caller heard of the agent (it publishes the agent's words itself).
        self._playout = playout
        self._turn: _Turn | None = None
        self._count = 0
        self._vad_stopped: tuple[int, float] | None = None
        self.totals = CallUsageTotals()
        self.records: list[TurnRecord] = []

    async def on_push_frame(self, data: FramePushed) -> None:
        frame, src, t = data.frame, data.source, data.timestamp
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            if data.first_push:
                self._vad_stopped = (t, frame.stop_secs)
        elif isinstance(frame, UserStartedSpeakingFrame):
            if data.first_push:
                self._start_turn()
        elif isinstance(frame, TranscriptionFrame):
            if src is self._p.stt:
                current = self._turn or self._start_turn()
                current.transcript = t
                current.user_text.append(frame.text)
                self._publish("caller", frame.text)
        elif isinstance(frame, UserStoppedSpeakingFrame):
            if data.first_push:
                self._commit(t)
        elif isinstance(frame, LLMContextFrame):
            if data.destination is self._p.thinkers[0] and self._turn is not None:
                # The user aggregator hands the context to the LLM just before it
                # announces the end of the turn: either one commits the turn.
                self._commit(t)
                self._turn.llm_request = self._turn.llm_request or t
        elif isinstance(frame, LLMTextFrame):
            turn = self._turn
            thinking = turn is not None and turn.llm_request is not None
            if data.first_push and src in self._p.thinkers and thinking:
                assert turn is not None
                turn.llm_first_token = turn.llm_first_token or t
        elif isinstance(frame, LLMFullResponseEndFrame):
            if data.first_push and src in self._p.thinkers and self._turn:
                self._turn.llm_done = self._turn.llm_request is not None
        elif isinstance(frame, TTSStartedFrame):
            if src is self._p.tts and self._turn and self._turn.committed is not None:
                self._turn.tts_request = self._turn.tts_request or t
        elif isinstance(frame, TTSAudioRawFrame):
            turn = self._turn
            if src is self._p.tts and turn and turn.tts_request is not None:
                turn.tts_first_audio = turn.tts_first_audio or t
        elif isinstance(frame, TTSTextFrame):
            turn = self._turn
            if src is self._p.tts and turn and turn.committed is not None and not self._playout:
                turn.agent_text.append(frame.text)
                self._publish("agent", frame.text)
        elif isinstance(frame, BotStartedSpeakingFrame):
            turn = self._turn
            if src is self._p.output and turn and turn.committed is not None:
                turn.first_audio_out = turn.first_audio_out or t
                turn.bot_speaking = True
        elif isinstance(frame, BotStoppedSpeakingFrame):
            turn = self._turn
            if src is self._p.output and turn:
                turn.bot_speaking = False
                if turn.llm_done and turn.first_audio_out is not None:
                    self._end_turn()
        elif isinstance(frame, InterruptionFrame):
            if data.first_push and self._turn and self._turn.bot_speaking:
                self._turn.interrupted = True
        elif isinstance(frame, MetricsFrame):
            if data.first_push:
                self._count_usage(frame)
        elif isinstance(frame, EndFrame | CancelFrame):
            if data.first_push:
                self.close()

    def close(self) -> None:
        """End the open turn, if the caller finished it; called when the call ends."""
        if self._turn and self._turn.committed is not None:
            self._end_turn()
        self._turn = None

    def _start_turn(self) -> _Turn:
        if self._turn is not None:
            if self._turn.committed is not None:
                self._turn.interrupted = self._turn.interrupted or self._turn.bot_speaking
                self._end_turn()
            else:
                # The caller resumed before the turn was committed: same turn.
                return self._turn
        self._count += 1
        self._turn = _Turn(number=self._count, started_at=datetime.now(UTC))
        return self._turn

    def _commit(self, t: int) -> None:
        turn = self._turn or self._start_turn()
        if turn.committed is not None:
            return
        turn.committed = t
        if self._playout is not None:
            turn.heard_from = self._playout.position
        if self._vad_stopped is not None:
            turn.vad_stopped, turn.stop_secs = self._vad_stopped

    def _count_usage(self, frame: MetricsFrame) -> None:
        turn, totals = self._turn, self.totals
        for item in frame.data:
            if isinstance(item, STTUsageMetricsData):
                totals.stt_audio_s += item.value.audio_seconds
                if turn:
                    turn.stt_audio_s += item.value.audio_seconds
            elif isinstance(item, LLMUsageMetricsData):
                tokens = item.value
                cached = tokens.cache_read_input_tokens or 0
                totals.llm_prompt_tokens += tokens.prompt_tokens
                totals.llm_cached_tokens += cached
                totals.llm_completion_tokens += tokens.completion_tokens
                if turn:
                    turn.llm_prompt_tokens = (turn.llm_prompt_tokens or 0) + tokens.prompt_tokens
                    turn.llm_cached_tokens = (turn.llm_cached_tokens or 0) + cached
                    turn.llm_completion_tokens = (
                        turn.llm_completion_tokens or 0
                    ) + tokens.completion_tokens
            elif isinstance(item, ComputeUsageMetricsData):
                name = f"{item.stage}_compute_s"
                setattr(totals, name, getattr(totals, name) + item.value)
            elif isinstance(item, TTSAudioUsageMetricsData):
                totals.tts_audio_s += item.value
            elif isinstance(item, TTSUsageMetricsData):
                self.totals.tts_characters += item.value
                if turn:
                    turn.tts_characters = (turn.tts_characters or 0) + item.value

    def _publish(self, speaker: str, text: str) -> None:
        if self._on_transcript is not None:
            self._on_transcript(speaker, text)

    def _end_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        self._vad_stopped = None
        agent_text = " ".join(s.strip() for s in turn.agent_text).strip()
        if self._playout is not None and turn.heard_from is not None:
            agent_text = self._playout.said_since(turn.heard_from)
        record = TurnRecord(
            call_id=self._call_id,
            number=turn.number,
            started_at=turn.started_at,
            ended_at=datetime.now(UTC),
            user_text=" ".join(turn.user_text).strip(),
            agent_text=agent_text,
            interrupted=turn.interrupted,
            endpointing_ms=_ms(turn.last_voiced, turn.vad_stopped),
            stt_ms=_ms(turn.vad_stopped, turn.transcript),
            llm_ttft_ms=_ms(turn.llm_request, turn.llm_first_token),
            tts_ttfb_ms=_ms(turn.tts_request, turn.tts_first_audio),
            transport_out_ms=_ms(turn.tts_first_audio, turn.first_audio_out),
            response_ms=_ms(turn.speech_ended, turn.first_audio_out),
            voice_to_voice_ms=_ms(turn.last_voiced, turn.first_audio_out),
            stt_audio_s=turn.stt_audio_s or None,
            llm_prompt_tokens=turn.llm_prompt_tokens,
            llm_cached_tokens=turn.llm_cached_tokens,
            llm_completion_tokens=turn.llm_completion_tokens,
            tts_characters=turn.tts_characters,
        )
        self.records.append(record)
        logger.info(
            "call %s turn %d: response %s ms, voice-to-voice %s ms",
            self._call_id,
            record.number,
            record.response_ms,
            record.voice_to_voice_ms,
        )
        self._sink(record)
