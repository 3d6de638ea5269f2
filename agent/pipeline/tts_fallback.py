"""The TTS router: the self-hosted TTS speaks, a proprietary API covers for it on a deadline.

Per sentence the primary (our streaming protocol, ``agent.pipeline.tts``) is asked first
and its audio is held back until it contains a voiced sample. The primary owns
the sentence once that voiced audio arrives within the deadline; otherwise
(late, an error, or only silence: every sample's magnitude at most
``SILENCE_PEAK``) the same text goes to the fallback before any of the
primary's audio was played, so the caller never hears a sentence twice or from
both voices. A late primary keeps streaming until the fallback's first audio:
if the fallback fails, the late primary still speaks rather than nobody.

The circuit breaker is shared by all calls of a process: after ``threshold``
consecutive primary failures every sentence goes straight to the fallback, and
a background probe (a tiny synthesis held to the same deadline) runs every
``probe_interval_s`` until one succeeds and closes the breaker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import numpy as np
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame

from agent.conversation.replies import PolicyEvent
from agent.pipeline.cartesia import CartesiaClient, FallbackError
from agent.pipeline.tts import StreamingTTSService

logger = logging.getLogger(__name__)

#: Peak magnitude (16-bit) at or below which audio counts as silence (about -50 dBFS).
SILENCE_PEAK = 100
PROBE_TEXT = "Hello."

EventSink = Callable[[PolicyEvent], None]
Probe = Callable[[], Awaitable[bool]]


def is_voiced(pcm: bytes) -> bool:
    """Whether any sample of s16le ``pcm`` rises above the silence threshold."""
    samples = np.frombuffer(pcm[: len(pcm) & ~1], dtype="<i2").astype(np.int32)
    return bool(samples.size) and int(np.abs(samples).max()) > SILENCE_PEAK


class CircuitBreaker:
    """Keeps a failing primary out and probes it in the background until it recovers."""

    def __init__(self, *, threshold: int = 3, probe_interval_s: float = 5.0) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self.probe_interval_s = probe_interval_s
        self.failures = 0
        self._probe_task: asyncio.Task[None] | None = None

    @property
    def open(self) -> bool:
        return self.failures >= self.threshold

    def succeeded(self) -> None:
        self.failures = 0

    def failed(self, probe: Probe) -> None:
        """Count a failure; the one that opens the breaker starts the probing."""
        self.failures += 1
        if self.open and (self._probe_task is None or self._probe_task.done()):
            logger.warning("TTS primary failed %d times in a row: breaker open", self.failures)
            self._probe_task = asyncio.create_task(self._probe_until_healthy(probe))

    async def _probe_until_healthy(self, probe: Probe) -> None:
        while self.open:
            await asyncio.sleep(self.probe_interval_s)
            try:
                healthy = await probe()
            except Exception:
                logger.exception("TTS primary probe crashed")
                healthy = False
            if healthy:
                logger.info("TTS primary probe succeeded: breaker closed")
                self.succeeded()

    async def close(self) -> None:
        if self._probe_task is not None:
            self._probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe_task
            self._probe_task = None


@dataclass
class _Attempt:
    """The primary's answer to one sentence, streamed into a queue by its own task."""

    queue: asyncio.Queue[Frame | None]
    task: asyncio.Task[None]


class RoutedTTSService(StreamingTTSService):
    """Our TTS protocol as the primary, a proprietary websocket TTS as its fallback."""

    def __init__(
        self,
        *,
        url: str,
        session: aiohttp.ClientSession,
        fallback: CartesiaClient,
        breaker: CircuitBreaker,
        deadline_s: float = 0.2,
        on_event: EventSink | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url=url, session=session, **kwargs)
        self._fallback = fallback
        self._breaker = breaker
        self._deadline_s = deadline_s
        self._on_event = on_event
        #: Characters the fallback has spoken in this call, billed as ``fallback_tts``.
        self.fallback_characters = 0

    async def start(self, frame: Any) -> None:
        await super().start(frame)
        try:
            await self._fallback.connect()
        except FallbackError as e:
            logger.warning("fallback TTS not reachable at call start: %s", e)

    async def cleanup(self) -> None:
        await self._fallback.close()
        await super().cleanup()

    def _start_primary(self, text: str, context_id: str) -> _Attempt:
        queue: asyncio.Queue[Frame | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for frame in super(RoutedTTSService, self).run_tts(text, context_id):
                    if frame is not None:
                        queue.put_nowait(frame)
            except Exception as e:
                queue.put_nowait(ErrorFrame(error=f"TTS primary failed: {e}"))
            finally:
                queue.put_nowait(None)

        return _Attempt(queue, asyncio.create_task(pump()))

    async def _await_voice(self, attempt: _Attempt) -> tuple[list[Frame], str | None]:
        """The primary's frames up to its first voiced audio, or why it lost the sentence."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline_s
        held: list[Frame] = []
        got_audio = False
        while True:
            try:
                frame = await asyncio.wait_for(attempt.queue.get(), deadline - loop.time())
            except TimeoutError:
                return held, "silence" if got_audio else "deadline"
            if frame is None:
                # A 200 with no audio at all is the protocol's "nothing speakable".
                return held, "silence" if got_audio else None
            if isinstance(frame, ErrorFrame):
                return held, f"error: {frame.error}"
            held.append(frame)
            if isinstance(frame, TTSAudioRawFrame):
                got_audio = True
                if is_voiced(frame.audio):
                    return held, None

    async def probe(self) -> bool:
        """A tiny synthesis held to the sentence deadline: the breaker's health check."""
        attempt = self._start_primary(PROBE_TEXT, self.create_context_id())
        try:
            held, reason = await self._await_voice(attempt)
            return reason is None and any(isinstance(f, TTSAudioRawFrame) for f in held)
        finally:
            attempt.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt.task

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        if self._breaker.open:
            async for frame in self._speak_fallback(text, context_id, "breaker_open", None):
                yield frame
            return
        attempt = self._start_primary(text, context_id)
        try:
            held, reason = await self._await_voice(attempt)
            if reason is None:
                self._breaker.succeeded()
                for frame in held:
                    yield frame
                while (frame := await attempt.queue.get()) is not None:
                    yield frame
                return
            self._breaker.failed(self.probe)
            late = attempt if reason == "deadline" else None
            async for frame in self._speak_fallback(text, context_id, reason, late):
                yield frame
        finally:
            attempt.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt.task

    async def _speak_fallback(
        self, text: str, context_id: str, reason: str, late: _Attempt | None
    ) -> AsyncGenerator[Frame | None, None]:
        # Not the text itself: it carries names and amounts (the call's record has the turn).
        logger.warning("TTS fallback (%s) for %d characters", reason, len(text))
        self._report(reason, text)
        spoke = False
        stream = self._fallback.synthesize(text, self.sample_rate)
        try:
            async for pcm in stream:
                if not spoke:
                    spoke = True
                    self.fallback_characters += len(text)
                    if late is not None:
                        late.task.cancel()
                yield TTSAudioRawFrame(pcm, self.sample_rate, 1, context_id=context_id)
        except FallbackError as e:
            logger.error("TTS fallback failed: %s", e)
            self._report(f"fallback_failed: {e}", text)
            if not spoke and late is not None:
                # The primary was only late: let it speak rather than lose the sentence.
                while (frame := await late.queue.get()) is not None:
                    yield frame
                return
            if not spoke:
                yield ErrorFrame(error=f"TTS primary ({reason}) and fallback failed: {e}")
                yield TTSStoppedFrame(context_id=context_id)
        finally:
            await stream.aclose()

    def _report(self, reason: str, text: str) -> None:
        if self._on_event is not None:
            detail = {"reason": reason, "characters": len(text), "text": text}
            self._on_event(PolicyEvent("tts_fallback", detail, datetime.now(UTC)))
