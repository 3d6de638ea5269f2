"""The pipecat transport of a SIP call: caller audio and DTMF in, agent audio and DTMF out,
over the call's ``RtpSession``.

The SIP user agent owns the session (it opens it before the SDP answer and closes it at
BYE); this transport only reads and writes it, so ending the pipeline never closes the
media under the UA's feet. Like pipecat's own transports it tells the application
``on_client_connected`` once its media flows (the agent greets) and
``on_client_disconnected`` when the media ends under it (the caller hung up), and
``on_media_timeout`` when the caller's RTP stopped for the session's ``timeout_s`` while the
call is not on hold: its network is gone, and no BYE will come.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InputDTMFFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    OutputDTMFFrame,
    OutputDTMFUrgentFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from telephony.rtp.session import PACKET_S, RtpClosed, RtpSession

logger = logging.getLogger(__name__)

SAMPLE_RATE = 8000
#: The pipeline's audio frames, each way: two of the line's 20 ms packets. Every frame
#: costs the worker the same whatever its length (a hop through each processor, the VAD's
#: loudness window, the sender's message), so 40 ms frames halve that cost per call
#: (``bench capacity``), for at most 20 ms more before the VAD hears the caller stop. The
#: packets on the wire stay 20 ms: the session's jitter buffer and sender cut them.
FRAME_S = 2 * PACKET_S
FRAME_BYTES = round(FRAME_S * SAMPLE_RATE) * 2
#: Audio handed to the session's sender ahead of the wire: enough to ride out a pause of
#: the worker (a garbage collection, a call being set up); a barge-in's ``clear`` drops it
#: in the sender at once.
AHEAD_S = 3 * PACKET_S


class SipInputTransport(BaseInputTransport):
    """Pushes the caller's audio, in frames of ``FRAME_S``, and DTMF keys into the pipeline."""

    def __init__(
        self, transport: SipTransport, session: RtpSession, params: TransportParams, **kwargs: Any
    ) -> None:
        super().__init__(params, **kwargs)
        self._transport = transport
        self._session = session
        self._tasks: list[asyncio.Task[None]] = []
        self._connected = False

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if not self._tasks:
            self._tasks = [
                self.create_task(self._audio(), name="sip_audio_in"),
                self.create_task(self._dtmf(), name="sip_dtmf_in"),
                self.create_task(self._watch(), name="sip_media_watch"),
            ]
        await self.set_transport_ready(frame)
        if not self._connected:
            self._connected = True
            await self._transport.notify("on_client_connected")

    async def stop(self, frame: EndFrame) -> None:
        await self._stop_reading()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        await self._stop_reading()
        await super().cancel(frame)

    async def _stop_reading(self) -> None:
        for task in self._tasks:
            await self.cancel_task(task)
        self._tasks = []

    async def _audio(self) -> None:
        pcm = bytearray()
        async for frame in self._session:
            pcm += frame.pcm
            if len(pcm) < FRAME_BYTES:
                continue
            await self.push_audio_frame(
                InputAudioRawFrame(audio=bytes(pcm), sample_rate=SAMPLE_RATE, num_channels=1)
            )
            pcm.clear()
        await self._transport.notify("on_client_disconnected")

    async def _dtmf(self) -> None:
        while True:
            try:
                digit = await self._session.read_dtmf()
            except RtpClosed:
                return
            try:
                button = KeypadEntry(digit)
            except ValueError:
                logger.info("a DTMF key with no keypad entry; not passed on")  # C11: no digit
                continue
            await self.push_frame(InputDTMFFrame(button=button))

    async def _watch(self) -> None:
        try:
            await self._session.silent()
        except RtpClosed:
            return
        logger.info("no RTP from the caller for %g s", self._session.timeout_s)
        await self._transport.notify("on_media_timeout")


class SipOutputTransport(BaseOutputTransport):
    """Hands the agent's audio to the session's sender; ``clear`` on barge-in."""

    def __init__(self, session: RtpSession, params: TransportParams, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._session = session

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._session.clear()

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        # The media sender has resampled to our 8 kHz output rate and cut FRAME_S chunks.
        self._session.write(frame.audio)
        await self._session.wait_queued_below(AHEAD_S)
        return True

    def _supports_native_dtmf(self) -> bool:
        return self._session.dtmf_payload_type is not None

    async def _write_dtmf_native(self, frame: OutputDTMFFrame | OutputDTMFUrgentFrame) -> None:
        for button in frame.buttons or []:
            try:
                await self._session.send_dtmf(str(button.value))
            except (ValueError, RtpClosed) as e:
                logger.warning("DTMF %s not sent: %s", button.value, e)


class SipTransport(BaseTransport):
    """One SIP call's media as a pipecat transport (8 kHz in and out)."""

    def __init__(self, session: RtpSession) -> None:
        super().__init__()
        self.session = session
        self._register_event_handler("on_client_connected")
        self._register_event_handler("on_client_disconnected")
        self._register_event_handler("on_media_timeout")
        params = TransportParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            audio_in_sample_rate=SAMPLE_RATE,
            audio_out_sample_rate=SAMPLE_RATE,
            audio_out_10ms_chunks=round(FRAME_S * 100),
        )
        self._input = SipInputTransport(self, session, params, name=self._input_name)
        self._output = SipOutputTransport(session, params, name=self._output_name)

    async def notify(self, event: str) -> None:
        await self._call_event_handler(event, self.session)

    def input(self) -> SipInputTransport:
        return self._input

    def output(self) -> SipOutputTransport:
        return self._output
