"""Text-to-speech client for our streaming HTTP protocol (docs/protocols.md).

Each sentence is one POST on the process's pooled session; the PCM body is
turned into audio frames as it arrives, so the first frame leaves while the
server is still synthesizing the rest.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp
from pipecat.frames.frames import ErrorFrame, Frame, TTSStoppedFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TTSService

logger = logging.getLogger(__name__)


class StreamingTTSService(TTSService):
    """Speaks text through a TTS server that streams raw 16-bit PCM back."""

    def __init__(self, *, url: str, session: aiohttp.ClientSession, **kwargs: Any) -> None:
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            settings=TTSSettings(model=None, voice=None, language=None),
            **kwargs,
        )
        self._url = url
        self._session = session

    def can_generate_metrics(self) -> bool:
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        body = {"text": text, "sample_rate": self.sample_rate}
        try:
            async with self._session.post(self._url, json=body) as response:
                if response.status != 200:
                    detail = await response.text()
                    yield ErrorFrame(error=f"TTS server answered {response.status}: {detail}")
                    yield TTSStoppedFrame(context_id=context_id)
                    return
                await self.start_tts_usage_metrics(text)
                rate = int(response.headers.get("X-Sample-Rate", self.sample_rate))
                async for frame in self._stream_audio_frames_from_iterator(
                    response.content.iter_chunked(self.chunk_size),
                    in_sample_rate=rate,
                    context_id=context_id,
                ):
                    await self.stop_ttfb_metrics()
                    yield frame
        except aiohttp.ClientError as e:
            logger.warning("TTS request failed: %s", e)
            yield ErrorFrame(error=f"TTS server unreachable: {e}")
            yield TTSStoppedFrame(context_id=context_id)
