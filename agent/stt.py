"""Speech-to-text client for our streaming websocket protocol (docs/protocols.md).

The websocket is opened when the call starts, so the first turn pays no
handshake. Audio is streamed while the caller speaks (plus a short pre-roll,
because the VAD confirms speech only after ``start_secs``); when the VAD says
the caller stopped, a ``finalize`` asks for the transcript of the utterance at
once instead of waiting for a server-side endpointer.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    StartFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import STTUsage
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import STTService
from pipecat.utils.time import time_now_iso8601

from agent.understanding import redact_card_numbers

logger = logging.getLogger(__name__)


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
        **kwargs: Any,
    ) -> None:
        super().__init__(
            ttfs_p99_latency=2.0,
            settings=STTSettings(model=None, language=language),
            **kwargs,
        )
        self._url = url
        self._session = session
        self._call_id = call_id
        self._language = language
        self._preroll_s = preroll_s
        self._preroll: collections.deque[bytes] = collections.deque()
        self._preroll_bytes = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._receive_task: asyncio.Task[None] | None = None
        self._speaking = False
        self._turn = 0

    def can_generate_metrics(self) -> bool:
        return True

    def _record_stt_audio_usage(self, audio: bytes | bytearray) -> None:
        # Usage is what the server says it transcribed (reported with each final),
        # not every frame the transport delivered: silence between turns is not sent.
        return None

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self._connect()

    async def stop(self, frame: EndFrame) -> None:
        await self._disconnect(graceful=True)
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        await self._disconnect(graceful=False)
        await super().cancel(frame)

    async def _connect(self) -> None:
        self._ws = await self._session.ws_connect(self._url, heartbeat=20)
        await self._ws.send_str(
            json.dumps(
                {
                    "type": "start",
                    "call_id": self._call_id,
                    "sample_rate": self.sample_rate,
                    "language": self._language,
                }
            )
        )
        reply = await self._ws.receive_json(timeout=10)
        if reply.get("type") != "ready":
            raise ConnectionError(f"STT server refused the stream: {reply}")
        self._receive_task = self.create_task(self._receive(), name="stt_receive")
        logger.debug("STT stream open for call %s at %d Hz", self._call_id, self.sample_rate)

    async def _disconnect(self, *, graceful: bool) -> None:
        ws, self._ws = self._ws, None
        if ws is None or ws.closed:
            return
        if graceful:
            try:
                await ws.send_str(json.dumps({"type": "stop"}))
                if self._receive_task:
                    await asyncio.wait_for(asyncio.shield(self._receive_task), timeout=2)
            except (TimeoutError, ConnectionError, aiohttp.ClientError):
                logger.warning("STT stream of call %s did not close cleanly", self._call_id)
        if self._receive_task:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await ws.close()

    async def _receive(self) -> None:
        ws = self._ws
        assert ws is not None
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
                await self.push_error(f"STT server: {event.get('message')}")
        if not self._ws or self._ws.closed:
            logger.info("STT stream of call %s closed by the server", self._call_id)

    async def _on_final(self, event: dict[str, Any]) -> None:
        seconds = float(event.get("audio_seconds") or 0.0)
        if seconds:
            await self.start_stt_usage_metrics(STTUsage(audio_seconds=seconds))
        # C11: card digits never go further than this, not to the LLM, the store or a log.
        text, _ = redact_card_numbers((event.get("text") or "").strip())
        if event.get("turn") is not None:
            self.confirm_finalize()
        if text:
            await self.push_frame(TranscriptionFrame(text, self._user_id, time_now_iso8601()))

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
        if self._ws is None or self._ws.closed:
            return
        await self._ws.send_bytes(audio)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, VADUserStartedSpeakingFrame):
            self._speaking = True
            while self._preroll:
                await self._send_audio(self._preroll.popleft())
            self._preroll_bytes = 0
        elif isinstance(frame, VADUserStoppedSpeakingFrame) and self._speaking:
            self._speaking = False
            self._turn += 1
            if self._ws is not None and not self._ws.closed:
                self.request_finalize()
                await self._ws.send_str(json.dumps({"type": "finalize", "turn": self._turn}))
        await super().process_frame(frame, direction)
