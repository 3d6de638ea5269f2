"""The TTS fallback adapter: the self-hosted TTS speaks, other TTSs cover for it on a deadline.

In the manner of livekit-agents' ``tts.FallbackAdapter``: one TTS service over an
ordered list of voices, each with its own availability. Per sentence the voices are
asked in order, the self-hosted one (our streaming protocol, ``agent.pipeline.tts``)
first. Every voice but the last is held to the deadline: its audio is held back until
it contains a voiced sample, and it owns the sentence once that voiced audio arrives
within ``deadline_s``; otherwise (late, an error, or only silence: every sample's
magnitude at most ``SILENCE_PEAK``) the same text goes to the next voice before any of
its audio was played, so the caller never hears a sentence twice or from two voices.
The last voice is waited for, and its first audio owns the sentence. A late voice keeps
streaming until a later one speaks: if every later one fails, the first late voice
still speaks rather than nobody.

Each voice but the last has a circuit breaker (``agent.pipeline.breaker``) shared by
all calls of the process: while it is open the voice is skipped, and a background
probe (a tiny synthesis held to the same deadline) closes it once the voice recovers.

Why the self-hosted voice is this service itself rather than one entry of the list:
its requests report usage and time-to-first-byte metrics and its audio goes into
pipecat's audio contexts, which belong to the processor in the pipeline. The fallbacks
are plain "text in, PCM out" clients (``FallbackTTS``, e.g. ``agent.pipeline.cartesia``),
so a second fallback is one more entry in ``fallbacks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

import aiohttp
import numpy as np
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame

from agent.conversation.replies import PolicyEvent
from agent.pipeline.breaker import CircuitBreaker, Probe
from agent.pipeline.tts import StreamingTTSService

logger = logging.getLogger(__name__)

#: Peak magnitude (16-bit) at or below which audio counts as silence (about -50 dBFS).
SILENCE_PEAK = 100
PROBE_TEXT = "Hello."
#: The self-hosted voice's name in events and logs.
PRIMARY = "primary"

EventSink = Callable[[PolicyEvent], None]


def is_voiced(pcm: bytes) -> bool:
    """Whether any sample of s16le ``pcm`` rises above the silence threshold."""
    samples = np.frombuffer(pcm[: len(pcm) & ~1], dtype="<i2").astype(np.int32)
    return bool(samples.size) and int(np.abs(samples).max()) > SILENCE_PEAK


class FallbackTTS(Protocol):
    """A TTS the adapter can hand a sentence to: text in, PCM out, connected ahead of need.

    Any exception from it is that voice failing the sentence (logged, then the next)."""

    name: str

    async def connect(self) -> None:
        """Open the connection at the call's start, so the first sentence pays no handshake."""

    def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        """s16le mono PCM at ``sample_rate`` for ``text``, chunk by chunk as it streams."""
        ...

    async def close(self) -> None:
        """Close the connection at the call's end; nothing opens one afterwards."""


@dataclass(frozen=True)
class Fallback:
    """A voice after the self-hosted one, with its breaker (the last voice needs none)."""

    tts: FallbackTTS
    breaker: CircuitBreaker | None = None


@dataclass(frozen=True)
class _Voice:
    """One entry of the adapter's order: how it speaks a sentence, and its availability."""

    name: str
    breaker: CircuitBreaker | None
    speak: Callable[[str, str], AsyncIterator[Frame | None]]


@dataclass
class _Attempt:
    """A voice's answer to one sentence, streamed into a queue by its own task."""

    voice: _Voice
    queue: asyncio.Queue[Frame | None]
    task: asyncio.Task[None]


class TTSFallbackAdapter(StreamingTTSService):
    """The self-hosted TTS at ``url``, then each of ``fallbacks`` in order, one per sentence."""

    def __init__(
        self,
        *,
        url: str,
        session: aiohttp.ClientSession,
        breaker: CircuitBreaker,
        fallbacks: Sequence[Fallback],
        deadline_s: float = 0.2,
        on_event: EventSink | None = None,
        **kwargs: Any,
    ) -> None:
        if not fallbacks:
            raise ValueError("a TTS fallback adapter needs at least one fallback")
        super().__init__(url=url, session=session, **kwargs)
        self._fallbacks = tuple(f.tts for f in fallbacks)
        self._voices = (
            _Voice(PRIMARY, breaker, self._primary),
            *(_Voice(f.tts.name, f.breaker, partial(self._client, f.tts)) for f in fallbacks),
        )
        #: Each breaker's probe through this call (the same object to attach and detach).
        self._probes: list[tuple[CircuitBreaker, Probe]] = [
            (v.breaker, partial(self.probe, i)) for i, v in enumerate(self._voices) if v.breaker
        ]
        self._deadline_s = deadline_s
        self._on_event = on_event
        #: Characters the fallbacks have spoken in this call, billed as ``fallback_tts``.
        self.fallback_characters = 0

    async def start(self, frame: Any) -> None:
        await super().start(frame)
        for breaker, probe in self._probes:
            breaker.attach(probe)
        for tts in self._fallbacks:
            try:
                await tts.connect()
            except Exception as e:
                logger.warning("fallback TTS %s not reachable at call start: %s", tts.name, e)

    async def cleanup(self) -> None:
        for breaker, probe in self._probes:
            breaker.detach(probe)
        for tts in self._fallbacks:
            await tts.close()
        await super().cleanup()

    def _primary(self, text: str, context_id: str) -> AsyncIterator[Frame | None]:
        return super().run_tts(text, context_id)

    async def _client(
        self, tts: FallbackTTS, text: str, context_id: str
    ) -> AsyncGenerator[Frame | None, None]:
        async for pcm in tts.synthesize(text, self.sample_rate):
            yield TTSAudioRawFrame(pcm, self.sample_rate, 1, context_id=context_id)

    def _ask(self, voice: _Voice, text: str, context_id: str) -> _Attempt:
        queue: asyncio.Queue[Frame | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for frame in voice.speak(text, context_id):
                    if frame is not None:
                        queue.put_nowait(frame)
            except Exception as e:
                queue.put_nowait(ErrorFrame(error=f"TTS {voice.name} failed: {e}"))
            finally:
                queue.put_nowait(None)

        return _Attempt(voice, queue, asyncio.create_task(pump()))

    async def _await_voice(self, attempt: _Attempt) -> tuple[list[Frame], str | None]:
        """The voice's frames up to its first voiced audio, or why it lost the sentence."""
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

    async def probe(self, voice: int = 0) -> bool:
        """A tiny synthesis by the ``voice``-th voice (0: the self-hosted one) held to the
        sentence deadline: its breaker's health check."""
        attempt = self._ask(self._voices[voice], PROBE_TEXT, self.create_context_id())
        try:
            held, reason = await self._await_voice(attempt)
            return reason is None and any(isinstance(f, TTSAudioRawFrame) for f in held)
        finally:
            await _cancel([attempt])

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        asked: list[_Attempt] = []
        late: _Attempt | None = None
        try:
            *held_to_deadline, last = self._voices
            for voice in held_to_deadline:
                if voice.breaker is not None and voice.breaker.open:
                    self._lost(voice, "breaker_open", text)
                    continue
                attempt = self._ask(voice, text, context_id)
                asked.append(attempt)
                held, reason = await self._await_voice(attempt)
                if reason is None:
                    if voice.breaker is not None:
                        voice.breaker.succeeded()
                    async for frame in self._speak(attempt, held, text, asked):
                        yield frame
                    return
                if voice.breaker is not None and voice.breaker.failed():
                    logger.warning(
                        "TTS %s failed %d times in a row: breaker open",
                        voice.name,
                        voice.breaker.failures,
                    )
                self._lost(voice, reason, text)
                if reason == "deadline" and late is None:
                    late = attempt
            attempt = self._ask(last, text, context_id)
            asked.append(attempt)
            first = await attempt.queue.get()
            if first is None:
                return  # the last voice had nothing to say
            if isinstance(first, ErrorFrame):
                self._lost(last, f"error: {first.error}", text)
                if late is not None:
                    # An earlier voice was only late: let it speak rather than lose the sentence.
                    async for frame in self._speak(late, [], text, asked):
                        yield frame
                    return
                yield ErrorFrame(error=f"no TTS voice could speak the sentence: {first.error}")
                yield TTSStoppedFrame(context_id=context_id)
                return
            async for frame in self._speak(attempt, [first], text, asked):
                yield frame
        finally:
            await _cancel(asked)

    async def _speak(
        self, attempt: _Attempt, held: list[Frame], text: str, asked: list[_Attempt]
    ) -> AsyncGenerator[Frame, None]:
        """``attempt``'s voice owns the sentence: the others stop, its audio plays."""
        for other in asked:
            if other is not attempt:
                other.task.cancel()
        fallback = attempt.voice is not self._voices[0]
        spoke = any(isinstance(frame, TTSAudioRawFrame) for frame in held)
        if fallback and spoke:
            self.fallback_characters += len(text)
        for early in held:
            yield early
        while (frame := await attempt.queue.get()) is not None:
            if fallback and isinstance(frame, ErrorFrame):
                self._lost(attempt.voice, f"error: {frame.error}", text)
                return
            if fallback and not spoke and isinstance(frame, TTSAudioRawFrame):
                spoke = True
                self.fallback_characters += len(text)
            yield frame

    def _lost(self, voice: _Voice, why: str, text: str) -> None:
        """``voice`` did not speak ``text`` (``why``): a warning and a ``tts_fallback`` event."""
        # Not the text itself: it carries names and amounts (the call's record has the turn).
        if voice is self._voices[0]:
            logger.warning("TTS fallback (%s) for %d characters", why, len(text))
            self._report(why, text)
            return
        level = logging.WARNING if why == "breaker_open" else logging.ERROR
        logger.log(
            level, "TTS fallback %s failed (%s) for %d characters", voice.name, why, len(text)
        )
        self._report(f"fallback_failed: {why}", text)

    def _report(self, reason: str, text: str) -> None:
        if self._on_event is not None:
            detail = {"reason": reason, "characters": len(text), "text": text}
            self._on_event(PolicyEvent("tts_fallback", detail, datetime.now(UTC)))


async def _cancel(attempts: list[_Attempt]) -> None:
    """Stop the voices' tasks and wait until each has let go of its connection."""
    for attempt in attempts:
        attempt.task.cancel()
    for attempt in attempts:
        with contextlib.suppress(asyncio.CancelledError):
            await attempt.task
