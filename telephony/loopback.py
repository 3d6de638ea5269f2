"""An in-process phone line: a synthetic caller at one end, the agent at the other.

Both directions run on a real-time clock, as a phone line does: the caller's
side sends a 20 ms frame every 20 ms (silence when nobody speaks, which is
what lets the VAD hear the end of an utterance), and the agent's audio is
consumed at the rate it would be played. So a call over this line takes as
long, and measures the same, as one over the network.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    InputAudioRawFrame,
    OutputAudioRawFrame,
    StartFrame,
)
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

FRAME_MS = 20


@dataclass
class AgentUtterance:
    """One stretch of agent speech as the caller heard it (monotonic seconds)."""

    first_sound_at: float
    last_sound_at: float
    audio: bytes


class CallerEnd:
    """The caller's end of the line: speak into it, listen to the agent on it."""

    def __init__(self, sample_rate: int, speech_rms: float = 300.0) -> None:
        self.sample_rate = sample_rate
        self._speech_rms = speech_rms
        self._outgoing = bytearray()
        self._drained = asyncio.Event()
        self._drained.set()
        self._heard = bytearray()
        self._first_sound_at: float | None = None
        self._last_sound_at: float | None = None
        self._sound = asyncio.Event()
        #: When each audible frame of the agent's arrived (monotonic seconds).
        self.sound_log: list[float] = []

    async def speak(self, pcm: bytes) -> float:
        """Send ``pcm`` (16-bit mono at ``sample_rate``) in real time; return when the
        last sample has gone down the line, as monotonic seconds."""
        self._outgoing.extend(pcm)
        self._drained.clear()
        await self._drained.wait()
        return time.monotonic()

    async def listen(self, *, silence_s: float = 1.2, timeout_s: float = 60.0) -> AgentUtterance:
        """Wait for the agent to speak, then for ``silence_s`` without agent sound."""
        await self._next_sound(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._last_sound_at is not None
            quiet = time.monotonic() - self._last_sound_at
            if quiet >= silence_s:
                break
            await asyncio.sleep(silence_s - quiet)
        assert self._first_sound_at is not None and self._last_sound_at is not None
        return AgentUtterance(self._first_sound_at, self._last_sound_at, bytes(self._heard))

    async def listen_for(self, seconds: float, *, timeout_s: float = 60.0) -> AgentUtterance:
        """Wait for the agent to speak, then ``seconds`` more: what a caller who starts
        talking that far into the agent's words has heard of them."""
        await self._next_sound(timeout_s)
        assert self._first_sound_at is not None
        await asyncio.sleep(max(0.0, self._first_sound_at + seconds - time.monotonic()))
        last = self._last_sound_at or self._first_sound_at
        return AgentUtterance(self._first_sound_at, last, bytes(self._heard))

    async def _next_sound(self, timeout_s: float) -> None:
        self._heard.clear()
        self._first_sound_at = self._last_sound_at = None
        self._sound.clear()
        await asyncio.wait_for(self._sound.wait(), timeout_s)

    def pull_frame(self, nbytes: int) -> bytes:
        if not self._outgoing:
            self._drained.set()
            return bytes(nbytes)
        chunk = bytes(self._outgoing[:nbytes])
        del self._outgoing[:nbytes]
        if not self._outgoing:
            self._drained.set()
        return chunk.ljust(nbytes, b"\0")

    def deliver(self, pcm: bytes) -> None:
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
        if samples.size and float(np.sqrt(np.mean(samples * samples))) >= self._speech_rms:
            now = time.monotonic()
            self.sound_log.append(now)
            self._first_sound_at = self._first_sound_at or now
            self._last_sound_at = now
            self._sound.set()
        if self._first_sound_at is not None:
            self._heard.extend(pcm)


class LoopbackInputTransport(BaseInputTransport):
    """Delivers the caller's audio to the agent, one frame per ``FRAME_MS``."""

    def __init__(self, caller: CallerEnd, params: TransportParams) -> None:
        super().__init__(params)
        self._caller = caller
        self._clock_task: asyncio.Task[None] | None = None

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)
        if self._clock_task is None:
            self._clock_task = self.create_task(self._clock(), name="loopback_in_clock")

    async def stop(self, frame: EndFrame) -> None:
        await self._stop_clock()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        await self._stop_clock()
        await super().cancel(frame)

    async def _stop_clock(self) -> None:
        if self._clock_task is not None:
            await self.cancel_task(self._clock_task)
            self._clock_task = None

    async def _clock(self) -> None:
        rate = self._caller.sample_rate
        nbytes = rate * FRAME_MS // 1000 * 2
        period = FRAME_MS / 1000
        next_at = time.monotonic()
        while True:
            audio = self._caller.pull_frame(nbytes)
            await self.push_audio_frame(
                InputAudioRawFrame(audio=audio, sample_rate=rate, num_channels=1)
            )
            next_at += period
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


class LoopbackOutputTransport(BaseOutputTransport):
    """Plays the agent's audio to the caller at the rate a sound card would."""

    def __init__(self, caller: CallerEnd, params: TransportParams) -> None:
        super().__init__(params)
        self._caller = caller
        self._play_until = 0.0

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = time.monotonic()
        # Hand the frame over now, then wait while it "plays", so the pipeline
        # is held back exactly as a real-time sink holds it back.
        self._caller.deliver(frame.audio)
        duration = len(frame.audio) / (2 * frame.sample_rate * frame.num_channels)
        self._play_until = max(self._play_until, now) + duration
        await asyncio.sleep(max(0.0, self._play_until - time.monotonic() - duration))
        return True


class LoopbackTransport(BaseTransport):
    """The agent's side of an in-process line; ``caller`` is the other end."""

    def __init__(self, sample_rate: int = 16000) -> None:
        super().__init__()
        self.caller = CallerEnd(sample_rate)
        self._params = TransportParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            audio_in_sample_rate=sample_rate,
            audio_out_sample_rate=sample_rate,
        )
        self._input = LoopbackInputTransport(self.caller, self._params)
        self._output = LoopbackOutputTransport(self.caller, self._params)

    def input(self) -> LoopbackInputTransport:
        return self._input

    def output(self) -> LoopbackOutputTransport:
        return self._output
