"""One call: its pipecat pipeline, its ledger, its record in the database.

The pipeline is the same whatever carried the call (WebRTC, SIP, a loopback
line): transport in -> VAD -> STT -> user context (end of turn) -> LLM -> TTS
-> transport out -> assistant context. Barge-in is pipecat's: the caller's
turn starting while the agent speaks interrupts the agent's audio.

A call is held to its limits (``agent.pipeline.limits``: a line that never connects, too long,
too silent) so that none keeps its worker's slot, and its end is written step by step,
each step on its own: a part that fails (the price, the recording, the gate) costs the
record that part only.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
from pipecat.frames.frames import (
    AudioRawFrame,
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    OutputAudioRawFrame,
    TTSSpeakFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.tts_service import TextAggregationMode
from pipecat.transports.base_transport import BaseTransport
from pipecat.turns.empty_user_turn import EmptyUserTurnConfig
from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner
from sqlalchemy import Engine

from agent.campaigns.contact_history import record_call
from agent.config import Settings
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import PolicyEvent
from agent.ledger.cpu import WORKER_CPU
from agent.ledger.pricebook import CallCost, PriceBook, price_call
from agent.ledger.records import (
    CallEnded,
    CallEventRecord,
    CallOutcome,
    CallStarted,
    PromiseRecord,
    TurnRecord,
    new_call_id,
)
from agent.logs import CALL_ID
from agent.pipeline.breaker import CircuitBreaker
from agent.pipeline.card_guard import CardGuard
from agent.pipeline.cartesia import CartesiaClient, CartesiaConfig
from agent.pipeline.dialogue import GuardProcessor, PolicyProcessor, SpeakFrame
from agent.pipeline.http_pools import ServiceSessions
from agent.pipeline.limits import NEVER_CONNECTED, Limits, LimitWatch
from agent.pipeline.llm import ChatCompletionsLLMService
from agent.pipeline.phrasing import Phrasing
from agent.pipeline.playout import Playout
from agent.pipeline.recording import CallRecorder, recorder_for
from agent.pipeline.smart_turn import SmartTurnAnalyzer, SmartTurnClient
from agent.pipeline.speculation import Speculation
from agent.pipeline.stt import STT_UNAVAILABLE, StreamingSTTService
from agent.pipeline.tts import StreamingTTSService
from agent.pipeline.tts_fallback import Fallback, TTSFallbackAdapter
from agent.pipeline.turns import CallProcessors, TranscriptListener, TurnLedger
from agent.pipeline.vad import CallerVAD, create_vad_analyzer
from agent.store.database import StoreWriter

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: An event: a part of the call's end could not be written (``step``, the error's type);
#: the other parts were.
END_STEP_FAILED = "end_step_failed"
#: An event: the call could not be priced (the ``cost`` step); its end has no cost.
COST_ERROR = "cost_error"
#: An event: the line can no longer carry the call (a LiveKit room it could not join).
LINE_FAILED = "line_failed"
#: An event: a limit ended the call (``agent.pipeline.limits``).
CALL_LIMIT = "call_limit"
#: The end reason of a call whose line failed once connected.
LINE_LOST = "line_lost"
#: How long a call ended at a limit may go on saying what is queued; then it is cut.
END_GRACE_S = 5.0
#: The frames that say a side started or stopped speaking, for the silence limit.
SPEECH_FRAMES: dict[type[Frame], tuple[str, bool]] = {
    VADUserStartedSpeakingFrame: ("caller", True),
    UserStartedSpeakingFrame: ("caller", True),
    VADUserStoppedSpeakingFrame: ("caller", False),
    UserStoppedSpeakingFrame: ("caller", False),
    BotStartedSpeakingFrame: ("agent", True),
    BotStoppedSpeakingFrame: ("agent", False),
}


@dataclass(frozen=True)
class ModelEndpoints:
    """Where the three model servers of a call listen."""

    stt_url: str
    llm_url: str
    tts_url: str
    stt_model: str | None = None
    tts_voice: str | None = None


@dataclass(frozen=True)
class CallContext:
    """What every call of a process shares: settings, pools, the store, the price book."""

    settings: Settings
    models: ModelEndpoints
    sessions: ServiceSessions
    writer: StoreWriter
    price_book: PriceBook
    prompts: PromptSet
    engine: Engine
    #: The host's smart-turn service, as this process asks it (``agent.pipeline.smart_turn``).
    smart_turn: SmartTurnClient
    #: The TTS primary's circuit breaker, shared by all calls; set iff a fallback is configured.
    tts_breaker: CircuitBreaker | None = None


@dataclass
class CallSummary:
    """What a finished call leaves for whoever placed it (the simulator, a test)."""

    call_id: str
    duration_s: float
    end_reason: str
    turns: list[TurnRecord] = field(default_factory=list)
    cost: CallCost | None = None


class DropAudio(FrameProcessor):
    """The end of the line for one kind of raw audio going downstream, where ``tap`` (the
    recording, the last to want that audio, and the silence limit) sees every downstream
    frame.

    pipecat passes every frame on to the pipeline's end, so without it each of the 50
    audio frames a second would hop through every processor after the last one that reads
    it, each hop a queue and a task switch. The tap sees a frame after it has gone on:
    the caller's turn end and the policy's answer reach the TTS without waiting for the
    recording to file the turn's audio. It runs in the task of the processor before it
    (pipecat's direct mode): a queue of its own would cost each frame one more task switch,
    and the tap sees the frames in the order that processor pushed them.
    """

    def __init__(
        self, kind: type[AudioRawFrame], tap: Callable[[Frame], Awaitable[None]] | None = None
    ) -> None:
        super().__init__(name=f"drop-{kind.__name__}", enable_direct_mode=True)
        self._kind = kind
        self._tap = tap

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        downstream = direction is FrameDirection.DOWNSTREAM
        if not (downstream and isinstance(frame, self._kind)):
            await self.push_frame(frame, direction)
        if downstream and self._tap is not None:
            await self._tap(frame)


class Call:
    """A call in progress; ``run()`` returns when it has ended and been written down."""

    def __init__(
        self,
        ctx: CallContext,
        transport: BaseTransport,
        *,
        transport_name: str,
        direction: str = "inbound",
        scenario: str | None = None,
        call_id: str | None = None,
        on_transcript: TranscriptListener | None = None,
        policy: ConversationPolicy | None = None,
        number: str | None = None,
        campaign: str | None = None,
        sample_rate: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.id = call_id or new_call_id()
        self._ctx = ctx
        self._transport = transport
        self._transport_name = transport_name
        self._direction = direction
        self._scenario = scenario
        self._on_transcript = on_transcript
        self.policy = policy
        #: The consumer's phone number, when the call is a phone call.
        self.number = number
        self._campaign = campaign
        #: The pipeline's audio rate when the line fixes one (G.711's 8 kHz).
        self._sample_rate = sample_rate
        self._policy_processor: PolicyProcessor | None = None
        self._end_reason = "pipeline_ended"
        self._hung_up = False
        self._worker: PipelineWorker | None = None
        self._greeted = False
        self._router: TTSFallbackAdapter | None = None
        self._recorder: CallRecorder | None = None
        #: Monotonic seconds: the call's duration and its limits.
        self._clock = clock
        self._watch: LimitWatch | None = None
        #: The transport's processors: an error that leaves one unusable ends the call.
        self._line: tuple[FrameProcessor, ...] = ()

    def _build(self, turn_analyzer: SmartTurnAnalyzer) -> tuple[PipelineWorker, TurnLedger]:
        settings = self._ctx.settings
        vad = CallerVAD(vad_analyzer=create_vad_analyzer(settings))
        stt = StreamingSTTService(
            url=self._ctx.models.stt_url,
            session=self._ctx.sessions.session("stt"),
            call_id=self.id,
            texts=self._ctx.prompts.templates,  # what the caller hears if it is lost
            on_event=self._on_stt_event,
        )
        # Card digits read aloud stop right after the STT: the caller is told not to, and
        # the digits reach no context, ledger or recording (rule C11, agent/pipeline/card_guard.py).
        cards = CardGuard.for_call(self.policy, self._ctx.prompts.templates, self._record_event)
        llm = self._build_llm()
        tts = self._build_tts()
        context = LLMContext(messages=cast(Any, self._ctx.prompts.example_messages()))
        aggregators = LLMContextAggregatorPair(
            context,
            user_params=LLMUserAggregatorParams(
                user_turn_strategies=UserTurnStrategies(
                    stop=[TurnAnalyzerUserTurnStopStrategy(turn_analyzer=turn_analyzer)]
                ),
                # With the policy, a turn without words (a cough over the agent, an utterance
                # the STT lost) is left unanswered: pipecat's recovery prompt is for a free
                # LLM, and the policy would answer the caller's previous turn a second time.
                empty_user_turn=None if self.policy is not None else EmptyUserTurnConfig(),
            ),
        )
        output = self._transport.output()
        # With the policy, what the caller heard is followed to the line (agent.pipeline.playout):
        # the policy counts a text once it was played, the turns store what was played.
        playout = None
        if self.policy is not None:
            playout = Playout(on_transcript=self._on_transcript)
            playout.attach(output)
            tts.playout = playout
        thinkers, guard = self._build_thinkers(stt, cards, llm, context, playout)
        heard, said = self._build_taps()
        line_in = self._transport.input()
        self._line = (line_in, output)
        # The caller's audio goes as far as its last reader, the recording's tap after the
        # policy (``heard``); the agent's from the TTS to the line and its tap (``said``).
        pipeline = Pipeline(
            [
                line_in,
                vad,
                stt,
                cards,
                aggregators.user(),
                *thinkers[:1],
                heard,
                *thinkers[1:],
                *guard,
                tts,
                output,
                said,
                aggregators.assistant(),
            ]
        )
        ledger = TurnLedger(
            self.id,
            # The transcripts the ledger stores are the ones the card guard let through.
            CallProcessors(stt=cards, thinkers=thinkers, tts=tts, output=output),
            sink=self._ctx.writer.submit,
            on_transcript=self._on_transcript,
            playout=playout,
        )
        return self._build_worker(pipeline, ledger), ledger

    def _build_llm(self) -> ChatCompletionsLLMService | None:
        """The LLM, unless the policy's templates (``LLM_MODE=templates``) answer every turn:
        then it is left out of the pipeline, and no frame pays the hop through it."""
        settings = self._ctx.settings
        if self.policy is not None and settings.llm_mode == "templates":
            return None
        # With the policy behind it, the LLM server must begin to answer within the phrasing
        # deadline: a dead or hung one costs the caller that, not the client's retries.
        phrasing = settings.llm_mode == "phrase" and self.policy is not None
        return ChatCompletionsLLMService(
            sessions=self._ctx.sessions,
            base_url=self._ctx.models.llm_url,
            api_key=settings.llm_api_key,
            model=settings.llm_model,
            max_tokens=settings.llm_max_tokens,
            system_instruction=self._ctx.prompts.system,
            answer_timeout_s=settings.llm_phrase_deadline_ms / 1000.0 if phrasing else None,
            on_event=self._record_event,
        )

    def _build_thinkers(
        self,
        stt: StreamingSTTService,
        cards: CardGuard,
        llm: ChatCompletionsLLMService | None,
        context: LLMContext,
        playout: Playout | None,
    ) -> tuple[tuple[FrameProcessor, ...], list[FrameProcessor]]:
        """What composes the reply (the policy, then the LLM) and the output guard after it."""
        llms: tuple[FrameProcessor, ...] = () if llm is None else (llm,)
        if self.policy is None:
            return llms, []
        settings = self._ctx.settings
        phrasing = None
        if settings.llm_mode == "phrase":
            deadline_s = settings.llm_phrase_deadline_ms / 1000.0
            phrasing = Phrasing(self.policy, self._ctx.prompts.turn, deadline_s=deadline_s)
        self._policy_processor = PolicyProcessor(
            self.policy, self._record_event, phrasing, playout=playout
        )
        if phrasing is not None and llm is not None:
            phrasing.abandon = llm.abandon  # a request past its deadline is given up
            if settings.llm_speculation:
                speculation = Speculation(self.policy, phrasing, context, llm)
                stt.listener = cards.listening(speculation)
                self._policy_processor.speculation = speculation
        guard = GuardProcessor(self.policy, self._record_event, phrasing=phrasing)
        return (self._policy_processor, *llms), [guard]

    def _build_taps(self) -> tuple[DropAudio, DropAudio]:
        """Where each side's audio ends, with the recording's and the silence limit's taps.

        The recording taps the caller's audio after the policy, which judges the words
        first (rule C11), and the agent's as it is played (agent/pipeline/recording.py)."""
        rate = self._sample_rate or self._ctx.settings.audio_in_sample_rate
        self._recorder = recorder_for(
            self.id, self._ctx.settings, self.policy, self._record_event, rate
        )
        recorder = self._recorder
        heard = DropAudio(
            InputAudioRawFrame, self._watching(recorder.tap("caller") if recorder else None)
        )
        said = DropAudio(
            OutputAudioRawFrame, self._watching(recorder.tap("agent") if recorder else None)
        )
        return heard, said

    def _build_worker(self, pipeline: Pipeline, ledger: TurnLedger) -> PipelineWorker:
        settings = self._ctx.settings
        worker = PipelineWorker(
            pipeline,
            params=PipelineParams(
                audio_in_sample_rate=self._sample_rate or settings.audio_in_sample_rate,
                audio_out_sample_rate=self._sample_rate or settings.audio_out_sample_rate,
                enable_metrics=True,
                enable_usage_metrics=True,
            ),
            observers=[ledger],
            enable_rtvi=False,
            # The ledger tracks the turns: pipecat's tracker would be one more observer
            # that every frame, at every processor, is queued for.
            enable_turn_tracking=False,
            idle_timeout_secs=None,
            conversation_id=self.id,
        )

        @worker.event_handler("on_pipeline_error")
        async def _on_pipeline_error(_worker: PipelineWorker, frame: ErrorFrame) -> None:
            await self._line_failed(frame)

        return worker

    def _watching(
        self, tap: Callable[[Frame], Awaitable[None]] | None
    ) -> Callable[[Frame], Awaitable[None]]:
        """``tap``, after the silence limit has seen who is speaking."""

        async def see(frame: Frame) -> None:
            speech = SPEECH_FRAMES.get(type(frame))
            if speech is not None and self._watch is not None:
                self._watch.speaking(*speech)
            if tap is not None:
                await tap(frame)

        return see

    async def _line_failed(self, error: ErrorFrame) -> None:
        """A transport that can no longer carry the call (a LiveKit room it could not join:
        pipecat goes on without it) ends the call at once, rather than hold its slot."""
        processor = error.processor
        if processor is None or processor not in self._line or processor.is_usable:
            return
        if self._hung_up:
            return
        connected = self._watch is not None and self._watch.connected
        cause = type(error.exception).__name__ if error.exception is not None else None
        logger.warning("call %s: its line failed (%s); ending it", self.id, cause)
        self._note(LINE_FAILED, {"error": cause, "connected": connected})
        await self.cancel(LINE_LOST if connected else NEVER_CONNECTED)

    def _build_tts(self) -> StreamingTTSService:
        """The self-hosted TTS alone, or in the fallback adapter when a fallback is configured.

        With the policy in the call, the guard cuts the text into checked units (the
        first clause, then sentences), so the TTS speaks each as it comes instead of
        waiting for a sentence of its own (pipecat's TOKEN mode)."""
        settings, session = self._ctx.settings, self._ctx.sessions.session("tts")
        mode = TextAggregationMode.TOKEN if self.policy else TextAggregationMode.SENTENCE
        breaker = self._ctx.tts_breaker
        if breaker is None or settings.tts_fallback_api_key is None:
            return StreamingTTSService(
                url=self._ctx.models.tts_url, session=session, text_aggregation_mode=mode
            )
        config = CartesiaConfig(
            url=settings.tts_fallback_url,
            api_key=settings.tts_fallback_api_key,
            voice=settings.tts_fallback_voice or "",
            model=settings.tts_fallback_model,
        )
        self._router = TTSFallbackAdapter(
            url=self._ctx.models.tts_url,
            session=session,
            breaker=breaker,
            fallbacks=[Fallback(CartesiaClient(config, session))],
            deadline_s=settings.tts_fallback_deadline_ms / 1000.0,
            on_event=self._record_event,
            text_aggregation_mode=mode,
        )
        return self._router

    async def answer(self) -> None:
        """Speak the fixed greeting (AI disclosure and recording notice) once. The line has
        connected (every path answers once its peer is there): the connect timeout is off."""
        if self._watch is not None:
            self._watch.connect()
        if self._worker is None or self._greeted:
            return
        self._greeted = True
        greeting = self._ctx.prompts.greeting
        if self.policy is not None and self._policy_processor is not None:
            # Spoken as any reply of the policy: its disclosures are noted once played.
            greeting = greeting.format(consumer_name=self.policy.account.consumer_name)
            self._ctx.writer.submit(
                CallEventRecord(self.id, datetime.now(UTC), "greeting", {"text": greeting})
            )
            await self._worker.queue_frame(SpeakFrame(self.policy.opening(greeting)))
            return
        self._ctx.writer.submit(
            CallEventRecord(self.id, datetime.now(UTC), "greeting", {"text": greeting})
        )
        if self._on_transcript:
            self._on_transcript("agent", greeting)
        await self._worker.queue_frame(TTSSpeakFrame(greeting, append_to_context=True))

    def _report_policy_events(self) -> None:
        if self._policy_processor is not None:
            self._policy_processor.report_events()

    def _outcome(self) -> CallOutcome | None:
        policy = self.policy
        if policy is None:
            return None
        promise = policy.promise if policy.promise and policy.promise.amount_cents > 0 else None
        return CallOutcome(
            party=policy.party,
            disposition=policy.disposition or "no_commitment",
            verified_at=policy.verified_at,
            debt_id=policy.account.debt_id,
            promise=PromiseRecord(
                promise.amount_cents, promise.due, promise.method, promise.installments
            )
            if promise
            else None,
        )

    async def _tell_the_gate(self) -> None:
        """What the consumer said that the pre-dial gate must honour before the next
        attempt (rule C8, C12, D2, D5, 1006.14(b)(3)), with each signal's details: the
        signals whoever gave them, the conversation, a consented callback
        (``agent.campaigns.contact_history.record_call``). Only for a call about a debt in the
        portfolio."""
        policy = self.policy
        if policy is None or policy.account.debt_id is None:
            return
        try:
            problems = await asyncio.to_thread(
                record_call,
                self._ctx.engine,
                policy.account.debt_id,
                list(policy.events),
                party=policy.party,
                number=self.number,
                ended_at=policy.clock(),
            )
        except Exception as e:
            # The call's own record is already queued; the gate fails closed on its own.
            self._step_failed("gate", e)
            return
        for problem in problems:
            logger.error("call %s: the pre-dial gate did not take %s", self.id, problem)

    async def _store_recording(self) -> str | None:
        """The stored recording's URI; None when there is none, or it could not be
        stored: the call's own record goes on without it."""
        if self._recorder is None:
            return None
        try:
            return await self._recorder.store()
        except asyncio.CancelledError:
            logger.warning("call %s: stopped while storing its recording", self.id)
            # Cancelled again while finishing: write the call's record, then stop.
            task = asyncio.current_task()
            if task is not None:
                task.cancel()
            return None
        except Exception as e:
            self._step_failed("recording", e)
            return None

    def _record_event(self, event: PolicyEvent) -> None:
        self._ctx.writer.submit(CallEventRecord(self.id, event.at, event.kind, event.detail))

    def _note(self, kind: str, detail: dict[str, Any]) -> None:
        """An event of the call's own ending (a limit, a failed line or end step); never
        raises, so that what comes next (ending the call, the next end step) happens."""
        try:
            self._ctx.writer.submit(CallEventRecord(self.id, datetime.now(UTC), kind, detail))
        except Exception as e:  # the writer is gone: the log line is all there is
            logger.error(
                "call %s: its %s event was not queued: %s", self.id, kind, type(e).__name__
            )

    def _on_stt_event(self, event: PolicyEvent) -> None:
        """The STT stream lost, back, or gone for good (then the STT ends the call)."""
        self._record_event(event)
        if event.kind == STT_UNAVAILABLE:
            self._end_reason, self._hung_up = STT_UNAVAILABLE, True

    def _ending(self, reason: str) -> None:
        """The first reason given is why the call ended: the peer leaving once a limit
        ended it, say, does not change it."""
        if not self._hung_up:
            self._end_reason, self._hung_up = reason, True

    async def hang_up(self, reason: str) -> None:
        """End the call gracefully: pending audio is flushed, then the pipeline stops."""
        self._ending(reason)
        if self._worker is not None:
            await self._worker.queue_frame(EndFrame())

    async def cancel(self, reason: str) -> None:
        """End the call now (the peer is gone)."""
        self._ending(reason)
        if self._worker is not None:
            await self._worker.cancel(reason=reason)

    async def _keep_limits(self, watch: LimitWatch) -> None:
        """End the call at the first limit it passes (``agent.pipeline.limits``): at once when the
        line never connected, else after what is queued has been said, if it is said
        within ``END_GRACE_S``."""
        while (limit := watch.passed()) is None:
            watch.changed.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(watch.changed.wait(), watch.wait_s())
        logger.info("call %s: %s, ending it", self.id, limit)
        self._note(CALL_LIMIT, {"limit": limit})
        if limit == NEVER_CONNECTED:
            await self.cancel(limit)
            return
        await self.hang_up(limit)
        await asyncio.sleep(END_GRACE_S)
        await self.cancel(limit)

    async def run(self, on_started: Callable[[Call], object] | None = None) -> CallSummary:
        """Hold the call to its end; every line logged meanwhile names it (``agent.logs``)."""
        token = CALL_ID.set(self.id)
        try:
            return await self._run(on_started)
        finally:
            CALL_ID.reset(token)

    async def _run(self, on_started: Callable[[Call], object] | None) -> CallSummary:
        ctx = self._ctx
        params = SmartTurnParams(stop_secs=ctx.settings.turn_fallback_secs)
        analyzer = SmartTurnAnalyzer(ctx.smart_turn, params=params)  # the host's model
        settings = ctx.settings
        limits = Limits(settings.connect_timeout_s, settings.max_call_s, settings.max_silence_s)
        self._watch = LimitWatch(limits, self._clock)
        self._worker, ledger = self._build(analyzer)
        started_at = datetime.now(UTC)
        t0 = self._clock()
        WORKER_CPU.started(self.id)
        ctx.writer.submit(
            CallStarted(
                call_id=self.id,
                transport=self._transport_name,
                direction=self._direction,
                started_at=started_at,
                scenario=self._scenario,
                stt_model=ctx.models.stt_model,
                llm_model=ctx.settings.llm_model,
                tts_voice=ctx.models.tts_voice,
                prompt_version=ctx.prompts.version,
                number=self.number,
                campaign=self._campaign,
                worker=ctx.settings.worker_id,
            )
        )
        logger.info("call %s started over %s", self.id, self._transport_name)
        if on_started is not None:
            on_started(self)
        keeper = asyncio.create_task(self._keep_limits(self._watch), name=f"limits-{self.id}")
        try:
            runner = WorkerRunner(handle_sigint=False)
            await runner.add_workers(self._worker)
            await runner.run()
            if self.policy is not None and self.policy.disposition and not self._hung_up:
                self._end_reason = "agent_ended"
        except asyncio.CancelledError:
            self._end_reason = "server_stopped"
            raise
        except Exception:
            self._end_reason = "error"
            logger.exception("call %s failed", self.id)
            raise
        finally:
            keeper.cancel()  # not awaited: a cancel while awaiting it would skip the end
            summary = await self._write_end(ledger, self._clock() - t0)
        return summary

    async def _write_end(self, ledger: TurnLedger, duration: float) -> CallSummary:
        """Write the call's end down: its last turn, the policy's events, its cost, its
        recording, its end and outcome, then the gate's update. Each step stands alone:
        one that fails is logged and noted on the call (``end_step_failed``, or
        ``cost_error`` for the cost), and the others are written all the same."""
        self._step("turns", ledger.close)
        self._step("events", self._report_policy_events)
        cost = self._step("cost", partial(self._price, ledger, duration))
        recording_uri = await self._store_recording()
        outcome = self._step("outcome", self._outcome)

        def end() -> None:
            ended = CallEnded(
                call_id=self.id,
                ended_at=datetime.now(UTC),
                duration_s=duration,
                end_reason=self._end_reason,
                cost=cost,
                outcome=outcome,
                recording_uri=recording_uri,
            )
            self._ctx.writer.submit(ended)

        self._step("end", end)
        await self._tell_the_gate()
        priced = f"${cost.per_minute_usd or 0.0:.4f}/min" if cost is not None else "not priced"
        logger.info(
            "call %s ended (%s) after %.1f s, %s", self.id, self._end_reason, duration, priced
        )
        return CallSummary(self.id, duration, self._end_reason, list(ledger.records), cost)

    def _price(self, ledger: TurnLedger, duration: float) -> CallCost:
        usage = ledger.totals.priced_as(
            self._transport_name,
            duration,
            fallback_tts_characters=self._router.fallback_characters if self._router else 0,
            worker_cpu_s=WORKER_CPU.ended(self.id),
        )
        return price_call(self._ctx.price_book, self._ctx.settings.price_profile, usage)

    def _step(self, step: str, action: Callable[[], T]) -> T | None:
        """One step of the call's end; None when it failed (``_step_failed``)."""
        try:
            return action()
        except Exception as e:
            self._step_failed(step, e)
            return None

    def _step_failed(self, step: str, error: Exception) -> None:
        """Log a failed end step by its error's type and where it was raised, never by its
        message (which may quote a record or what was said), and note it on the call."""
        frames = traceback.extract_tb(error.__traceback__)
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        cause = type(error).__name__
        logger.error("call %s: its end step %r failed: %s%s", self.id, step, cause, where)
        self._note(
            COST_ERROR if step == "cost" else END_STEP_FAILED, {"step": step, "error": cause}
        )
