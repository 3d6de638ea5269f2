"""Text-to-speech client for our streaming HTTP protocol (docs/protocols.md).

Each sentence is one POST on the process's pooled session; the PCM body is
turned into audio frames as it arrives, so the first frame leaves while the
server is still synthesizing the rest.

With a ``playout`` (``agent.pipeline.playout``) each text frame it speaks is a piece whose
audio is counted, and a ``PlayedFrame`` goes behind it into the same audio context,
so the mark reaches the line right after the piece's last sound, or is dropped with
it by an interruption. That needs pipecat's TOKEN aggregation (each text frame
synthesized whole as it comes, as the call uses it with the policy); with sentence
aggregation a frame's last sentence waits for the next one, so pieces are not
followed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import aiohttp
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStoppedFrame,
)
from pipecat.metrics.metrics import MetricsData
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.utils.context.word_timestamp_tracker import WordTimestamp

from agent.pipeline.playout import EPOCH, TAG, Piece, PlayedFrame, Playout
from agent.pipeline.usage import (
    ComputeUsageMetricsData,
    TTSAudioUsageMetricsData,
    report_usage,
)

logger = logging.getLogger(__name__)

#: The header our TTS server says its time for a request in (infra/tts_server.py).
REAL_TIME_FACTOR = "X-Real-Time-Factor"


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
        #: Where the pieces spoken are followed to the line (set by the call); None: not.
        self.playout: Playout | None = None
        self._whole_frames = kwargs.get("text_aggregation_mode") == TextAggregationMode.TOKEN
        #: The piece being synthesized, and the audio context it went into last.
        self._piece: Piece | None = None
        self._open_context: str | None = None

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        playout = self.playout if self._whole_frames else None
        if playout is None or direction is not FrameDirection.DOWNSTREAM:
            await super().process_frame(frame, direction)
            return
        if isinstance(frame, PlayedFrame):  # a bare mark: it follows what was said before it
            frame.piece = playout.begin("", frame.tag, frame.interruptible)
            frame.piece.synthesized = True
            await self._mark(frame)
            return
        if isinstance(frame, InterruptionFrame):
            playout.tts_epoch = frame.metadata.get(EPOCH, playout.tts_epoch + 1)
        if not isinstance(frame, LLMTextFrame | TTSSpeakFrame) or not frame.text.strip():
            await super().process_frame(frame, direction)
            return
        # The TTS synthesizes a text frame inline (TOKEN mode: one request each), so
        # its audio is all in its context when this returns.
        piece = playout.begin(frame.text, frame.metadata.get(TAG), frame.interruptible)
        self._piece = piece
        try:
            await super().process_frame(frame, direction)
        finally:
            self._piece = None
        piece.synthesized = True
        mark = PlayedFrame(tag=piece.tag, piece=piece)
        mark.interruptible = frame.interruptible
        await self._mark(mark)

    async def _mark(self, mark: PlayedFrame) -> None:
        """Put ``mark`` behind the audio queued so far: into the open audio context,
        or, with none open, in the play queue after the contexts queued."""
        context_id = self._open_context
        if context_id is not None and self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, mark)
        else:
            await self._audio_context_manager.put_frame(mark)

    async def append_to_audio_context(
        self, context_id: str | None, frame: Frame | WordTimestamp | None
    ) -> None:
        if frame is None:  # the context's end: nothing may follow it there
            if context_id == self._open_context:
                self._open_context = None
        elif context_id:
            self._open_context = context_id
            if isinstance(frame, TTSAudioRawFrame) and self._piece is not None:
                self._piece.audio_s += _seconds(frame)
        await super().append_to_audio_context(context_id, frame)

    async def _report_audio(self, seconds: float, headers: Mapping[str, str]) -> None:
        """The request's audio seconds and, from the server's real-time factor, its time."""
        data: list[MetricsData] = [TTSAudioUsageMetricsData(processor=self.name, value=seconds)]
        rtf = _real_time_factor(headers.get(REAL_TIME_FACTOR))
        if rtf is not None:
            data.append(
                ComputeUsageMetricsData(processor=self.name, stage="tts", value=rtf * seconds)
            )
        await report_usage(self, *data)

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
                audio_s = 0.0
                async for frame in self._stream_audio_frames_from_iterator(
                    response.content.iter_chunked(self.chunk_size),
                    in_sample_rate=rate,
                    context_id=context_id,
                ):
                    await self.stop_ttfb_metrics()
                    if isinstance(frame, TTSAudioRawFrame):
                        audio_s += _seconds(frame)
                    yield frame
                await self._report_audio(audio_s, response.headers)
        except aiohttp.ClientError as e:
            logger.warning("TTS request failed: %s", e)
            yield ErrorFrame(error=f"TTS server unreachable: {e}")
            yield TTSStoppedFrame(context_id=context_id)


def _real_time_factor(header: str | None) -> float | None:
    """The server's ``X-Real-Time-Factor`` (compute seconds per audio second), if sane."""
    try:
        value = float(header) if header is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _seconds(frame: TTSAudioRawFrame) -> float:
    return len(frame.audio) / (2 * frame.sample_rate * max(frame.num_channels, 1))
