"""Speech-to-text client for our streaming websocket protocol (docs/protocols.md).

The websocket is opened when the call starts, so the first turn pays no
handshake. Audio is streamed while the caller speaks (plus a short pre-roll,
because the VAD confirms speech only after ``start_secs``); when the VAD says
the caller stopped, a ``finalize`` asks for the transcript of the utterance at
once instead of waiting for a server-side endpointer. The caller's pauses before that
(``agent.pipeline.vad.CallerVAD``) are passed on as ``pause``/``resume``: the server
decodes the utterance during the pause, and the final is ready when the VAD stops.

If the stream is lost in the middle of the call (the server died, restarted or
closed it after an error) the caller must not go on talking to no one
(docs/faults.md). The loss is recorded (``stt_lost``) and a new stream is
opened, at once and then with a short backoff (``RECONNECT_DELAYS_S``: at most
six attempts, within ``RECONNECT_BUDGET_S``). The caller hears the fixed ``technical_hold`` line as
soon as words of theirs were lost (they were speaking, or waiting for their
transcript) or the first attempt failed; once the stream is back
(``stt_reconnected``) they are asked to say it again (``technical_resume``),
and what remains of an utterance cut in two is not transcribed, so the policy
never acts on half a sentence. A loss during silence that the first attempt
repairs is not mentioned to the caller. If no attempt succeeds, the call ends
cleanly: ``technical_end`` is spoken, ``stt_unavailable`` recorded, and the
pipeline asked to end once the line has been said.

Nothing of the stream outlives its call, however the call ends: hung up, cancelled, or
cut short before its pipeline had started (then pipecat only cleans it up). A stream
still opening is cancelled, the reconnecting stopped, the open stream and its receive
task closed (``_disconnect``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    EndWorkerFrame,
    Frame,
    StartFrame,
    TranscriptionFrame,
    TTSSpeakFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import STTUsage
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import STTService
from pipecat.utils.time import time_now_iso8601

from agent.conversation.redaction import redact_card_numbers
from agent.conversation.replies import PolicyEvent
from agent.pipeline.usage import report_compute, reported_seconds
from agent.pipeline.vad import VADUserPausedFrame, VADUserResumedFrame

logger = logging.getLogger(__name__)

#: The wait before each attempt to open a new stream once one is lost: the first at
#: once, then backing off; about five seconds of waiting in all.
RECONNECT_DELAYS_S: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0)
#: How long one attempt (connect, ``start``, ``ready``) may take, and all the attempts
#: after a loss together: a server that accepts connections but never answers costs the
#: call no more than the budget.
CONNECT_TIMEOUT_S = 2.0
RECONNECT_BUDGET_S = 8.0
#: The websocket's ping interval: a server that stops answering (hung, its host gone)
#: is noticed within about one and a half of these, not at the caller's next turn.
HEARTBEAT_S = 5.0
#: How long our ``stop`` may wait for the server's ``usage`` at the call's end.
STOP_TIMEOUT_S = 2.0
#: ``end_reason`` of a call ended because no STT stream could be opened again.
STT_UNAVAILABLE = "stt_unavailable"
#: The fixed texts (``prompts/<version>/templates.toml``) the caller hears on a loss.
HOLD, RESUME, END = "technical_hold", "technical_resume", "technical_end"

EventSink = Callable[[PolicyEvent], None]
#: What a failed attempt to open a stream raises.
RECONNECTABLE = (OSError, TimeoutError, ValueError, aiohttp.ClientError)


class StreamLost(ConnectionError):
    """The server closed a new stream before it was ready."""


class UtteranceListener(Protocol):
    """Told of the caller's words the moment the STT has them (``agent.pipeline.speculation``)."""

    def heard(self, text: str) -> None:
        """An utterance's final transcript, before it goes down the pipeline."""

    def resumed(self) -> None:
        """The caller started speaking again."""


class StreamingSTTService(STTService):
    """Streams caller audio to an STT server and pushes its final transcripts."""

    def __init__(
        self,
        *,
        url: str,
        session: aiohttp.ClientSession,
        call_id: str,
        language: str = "en",
        preroll_s: float = 0.5,
        texts: Mapping[str, str] | None = None,
        on_event: EventSink | None = None,
        reconnect_delays_s: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> None:
        # In the line's own task, after the VAD: a frame costs a websocket write, and its
        # own hop would be one more queue and task switch (``bench capacity --profile``).
        super().__init__(
            ttfs_p99_latency=2.0,
            settings=STTSettings(model=None, language=language),
            enable_direct_mode=True,
            **kwargs,
        )
        self._url = url
        self._session = session
        self._call_id = call_id
        self._language = language
        self._preroll_s = preroll_s
        self._texts = dict(texts or {})
        self._on_event = on_event
        self._delays = tuple(
            RECONNECT_DELAYS_S if reconnect_delays_s is None else reconnect_delays_s
        )
        self._preroll: collections.deque[bytes] = collections.deque()
        self._preroll_bytes = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        #: A stream being opened (``_open``): the call's end cancels it.
        self._opening: asyncio.Future[None] | None = None
        self._receive_task: asyncio.Task[None] | None = None
        self._speaking = False
        self._turn = 0
        #: The turns whose ``finalize`` has gone out and whose final has not come back.
        self._awaiting: set[int] = set()
        #: Set once the call is ending: a close from here on is ours.
        self._closing = False
        self._recovery: asyncio.Task[None] | None = None
        #: During a loss: words of the caller's went unheard / the hold line was said.
        self._missed = False
        self._held = False
        #: The rest of an utterance cut by a loss is not sent (half a sentence).
        self._discarding = False
        #: Who is told of each utterance ahead of the pipeline, if anyone.
        self.listener: UtteranceListener | None = None

    def can_generate_metrics(self) -> bool:
        return True

    def _record_stt_audio_usage(self, audio: bytes | bytearray) -> None:
        # Usage is what the server says it transcribed (reported with each final),
        # not every frame the transport delivered: silence between turns is not sent.
        return None

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        try:
            await self._open(CONNECT_TIMEOUT_S)
        except RECONNECTABLE as e:
            # Down between calls: the same as a loss, without a hold line before the
            # greeting (unless the caller speaks first).
            await self._lose(f"not reachable at the call's start: {_describe(e)}", at_start=True)

    async def stop(self, frame: EndFrame) -> None:
        await self._disconnect(graceful=True)
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        await self._disconnect(graceful=False)
        await super().cancel(frame)

    async def cleanup(self) -> None:
        # A call ended before its pipeline had started gets no stop or cancel, only this.
        # pipecat's part first: it cancels the frame tasks, and with them a start still
        # opening the stream, so that no StartFrame goes on into a pipeline torn down.
        await super().cleanup()
        await self._disconnect(graceful=False)

    async def _open(self, timeout: float) -> bool:
        """Open a stream: True once it is open, False if the call ended meanwhile.

        The attempt runs in a future of its own, which the call's end cancels
        (``_disconnect``) without cancelling whoever awaits it: pipecat's frame task at the
        call's start, which goes on to pass the StartFrame along."""
        if self._closing:
            return False
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        self._opening = asyncio.ensure_future(self._connect(timeout))
        try:
            await self._opening
        except asyncio.CancelledError:
            if task is not None and task.cancelling() > cancels:
                raise  # we were cancelled ourselves (and the attempt with us)
            return False
        finally:
            self._opening = None
        return True

    async def _connect(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            ws = await self._session.ws_connect(
                self._url, heartbeat=HEARTBEAT_S, timeout=aiohttp.ClientWSTimeout(ws_close=1.0)
            )
            try:
                await ws.send_str(
                    json.dumps(
                        {
                            "type": "start",
                            "call_id": self._call_id,
                            "sample_rate": self.sample_rate,
                            "language": self._language,
                        }
                    )
                )
                reply = await ws.receive()
                if reply.type != aiohttp.WSMsgType.TEXT:
                    raise StreamLost(
                        f"STT server closed the stream before it was ready ({reply.type.name})"
                    )
                event = json.loads(reply.data)
                if event.get("type") != "ready":
                    raise ConnectionError(f"STT server refused the stream: {event}")
            except BaseException:
                await ws.close()
                raise
        self._ws = ws
        self._receive_task = self.create_task(self._receive(ws), name="stt_receive")
        logger.debug("STT stream open for call %s at %d Hz", self._call_id, self.sample_rate)

    async def _disconnect(self, *, graceful: bool) -> None:
        """End the call's stream for good, whatever it is doing: reconnecting, opening (both
        cancelled, what they opened closed), or open (closed, after our ``stop`` if
        ``graceful``). Called again (pipecat's cleanup after a stop cut short), it closes
        what the first call left."""
        self._closing = True
        if self._recovery is not None and self._recovery is not asyncio.current_task():
            await self.cancel_task(self._recovery)
            self._recovery = None
        if (opening := self._opening) is not None:
            opening.cancel()
            await asyncio.wait([opening])
        ws = self._ws
        if graceful and ws is not None and not ws.closed:
            try:
                await ws.send_str(json.dumps({"type": "stop"}))
                if self._receive_task is not None:
                    _, late = await asyncio.wait([self._receive_task], timeout=STOP_TIMEOUT_S)
                    if late:
                        logger.warning(
                            "STT server did not answer the stop of call %s", self._call_id
                        )
            except (ConnectionError, aiohttp.ClientError):
                logger.warning("STT stream of call %s did not close cleanly", self._call_id)
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        if ws is not None:
            self._ws = None
            await ws.close()

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        why = "closed by the server"
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                event = json.loads(message.data)
                kind = event.get("type")
                if kind == "final":
                    await self._on_final(event)
                elif kind == "usage":
                    return
                elif kind == "error":
                    why = f"server error: {event.get('message')}"
                    await self.push_error(f"STT server: {event.get('message')}")
        except (ConnectionError, aiohttp.ClientError) as e:
            why = f"{type(e).__name__}: {e}"
        if ws is self._ws and not self._closing:
            code = ws.close_code
            await self._lose(f"{why} (close code {code})" if code is not None else why)

    async def _on_final(self, event: dict[str, Any]) -> None:
        seconds = float(event.get("audio_seconds") or 0.0)
        if seconds:
            await self.start_stt_usage_metrics(STTUsage(audio_seconds=seconds))
        await report_compute(self, "stt", reported_seconds(event))
        # C11: card digits never go further than this, not to the LLM, the store or a log.
        text, _ = redact_card_numbers((event.get("text") or "").strip())
        turn = event.get("turn")
        if turn is not None:
            self._awaiting.discard(turn)
            self.confirm_finalize()
        if text:
            if self.listener is not None:
                self.listener.heard(text)
            await self.push_frame(TranscriptionFrame(text, self._user_id, time_now_iso8601()))

    # -- a lost stream -----------------------------------------------------------

    async def _lose(self, reason: str, *, at_start: bool = False) -> None:
        """The stream failed mid-call: record it and start replacing it (once)."""
        if self._closing or self._recovery is not None:
            return
        ws, self._ws = self._ws, None
        self._missed = self._speaking or bool(self._awaiting)
        self._held = False
        self._awaiting.clear()
        logger.warning(
            "STT stream of call %s lost (%s)%s: reconnecting",
            self._call_id,
            reason,
            ", the caller's words with it" if self._missed else "",
        )
        self._report(
            "stt_lost", {"reason": reason, "caller_speaking": self._speaking, "turn": self._turn}
        )
        self._recovery = self.create_task(
            self._recover(ws, reason, announce=not at_start), name="stt_recover"
        )

    async def _recover(
        self, lost: aiohttp.ClientWebSocketResponse | None, reason: str, *, announce: bool
    ) -> None:
        loop = asyncio.get_running_loop()
        lost_at = loop.time()
        deadline = lost_at + RECONNECT_BUDGET_S
        if lost is not None and not lost.closed:
            await lost.close()
        attempts = 0
        try:
            for delay in self._delays:
                if (delay and announce) or self._missed:
                    await self._hold()
                await asyncio.sleep(delay)
                left = deadline - loop.time()
                if left <= 0:
                    break
                attempts += 1
                try:
                    if not await self._open(min(CONNECT_TIMEOUT_S, left)):
                        return  # the call ended meanwhile
                except RECONNECTABLE as e:
                    reason = _describe(e)
                    logger.info("STT reconnect attempt %d failed: %s", attempts, reason)
                    continue
                # Whatever the caller is saying now began before the stream did: drop it.
                self._discarding = self._speaking
                outage_ms = round((loop.time() - lost_at) * 1000)
                logger.warning(
                    "STT stream of call %s back after %d attempt(s), %d ms",
                    self._call_id,
                    attempts,
                    outage_ms,
                )
                self._report("stt_reconnected", {"attempts": attempts, "outage_ms": outage_ms})
                if self._held or self._missed:
                    await self._say(RESUME)
                return
            logger.error(
                "STT unavailable for call %s after %d attempt(s) (%s): ending the call",
                self._call_id,
                attempts,
                reason,
            )
            self._report(STT_UNAVAILABLE, {"attempts": attempts, "reason": reason})
            await self._say(END, interruptible=False)
            await self.push_frame(EndWorkerFrame(reason=STT_UNAVAILABLE))
        finally:
            self._recovery = None

    async def _hold(self) -> None:
        """Tell the caller, once per loss, that they are not being heard."""
        if not self._held:
            self._held = True
            await self._say(HOLD)

    async def _say(self, key: str, *, interruptible: bool = True) -> None:
        text = self._texts.get(key)
        if not text:
            return
        frame = TTSSpeakFrame(text, append_to_context=True)
        frame.interruptible = interruptible
        await self.push_frame(frame)

    def _report(self, kind: str, detail: dict[str, Any]) -> None:
        if self._on_event is not None:
            self._on_event(PolicyEvent(kind, detail, datetime.now(UTC)))

    # -- audio ---------------------------------------------------------------------

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        if self._speaking:
            await self._send_audio(audio)
        else:
            self._keep_preroll(audio)
        yield None

    def _keep_preroll(self, audio: bytes) -> None:
        self._preroll.append(audio)
        self._preroll_bytes += len(audio)
        limit = int(self._preroll_s * self.sample_rate) * 2
        while self._preroll_bytes - len(self._preroll[0]) >= limit:
            self._preroll_bytes -= len(self._preroll.popleft())

    async def _send_audio(self, audio: bytes) -> None:
        ws = self._ws
        if ws is None or ws.closed or self._discarding:
            return
        try:
            await ws.send_bytes(audio)
        except (ConnectionError, aiohttp.ClientError) as e:
            await self._lose(f"send failed: {_describe(e)}")

    async def _send_hint(self, kind: str) -> None:
        """Tell the server the caller paused or resumed: it may decode ahead (only a hint)."""
        if not self._speaking or self._discarding or (ws := self._ws) is None or ws.closed:
            return
        try:
            await ws.send_str(json.dumps({"type": kind}))
        except (ConnectionError, aiohttp.ClientError) as e:
            await self._lose(f"send failed: {_describe(e)}")

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        # The pause hints are for the server alone: no later processor reads them.
        if isinstance(frame, VADUserPausedFrame):
            await self._send_hint("pause")
            return
        if isinstance(frame, VADUserResumedFrame):
            await self._send_hint("resume")
            return
        if isinstance(frame, VADUserStartedSpeakingFrame):
            self._speaking = True
            if self.listener is not None:
                self.listener.resumed()
            if self._recovery is not None:
                # The caller speaks while nobody listens.
                self._missed = True
                await self._hold()
            while self._preroll:
                await self._send_audio(self._preroll.popleft())
            self._preroll_bytes = 0
        elif isinstance(frame, VADUserStoppedSpeakingFrame) and self._speaking:
            self._speaking = False
            self._turn += 1
            if self._discarding:
                self._discarding = False  # the tail of a cut utterance: never finalized
            elif (ws := self._ws) is not None and not ws.closed:
                self.request_finalize()
                self._awaiting.add(self._turn)
                try:
                    await ws.send_str(json.dumps({"type": "finalize", "turn": self._turn}))
                except (ConnectionError, aiohttp.ClientError) as e:
                    await self._lose(f"send failed: {_describe(e)}")
        await super().process_frame(frame, direction)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
