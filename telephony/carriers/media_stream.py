"""Carrier media streams (Twilio Media Streams, Telnyx media streaming) on our aiohttp server.

The carrier answers the phone, fetches a TwiML/TeXML document from us
(``POST /voice/twilio``, ``POST /voice/telnyx``) that says "connect the call's
audio to this websocket", and opens ``GET /media/twilio/<token>`` or
``/media/telnyx/<token>``. The webhook must be signed by the carrier and the socket
must bring the one-time token the webhook's answer gave (the routes and their guards are
``agent/server/carriers.py`` and ``agent/server/carrier_auth.py``); the call gets the
caller's number the signed webhook said, not what the stream claims.
Over it come JSON events: ``connected``, ``start`` (the stream and call ids, the
media format and our custom parameters, e.g. the caller's number), ``media``
(base64 G.711, 20 ms each), ``dtmf``, ``mark`` (a mark we sent has been played)
and ``stop`` (the caller hung up). We send ``media`` paced in real time, ``mark``
after each agent utterance and ``clear`` on barge-in.

pipecat's websocket transports are written for FastAPI and the ``websockets``
server, so this module holds the same serializer-driven transport over an
aiohttp ``WebSocketResponse``; the wire format is all pipecat's
(``TwilioFrameSerializer``, ``TelnyxFrameSerializer``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any
from xml.etree import ElementTree

from aiohttp import WSMsgType, web
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.serializers.base_serializer import FrameSerializer
from pipecat.serializers.telnyx import TelnyxFrameSerializer
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from telephony.carriers.signatures import Announced, public_base
from telephony.line import CallInfo

logger = logging.getLogger(__name__)

CARRIERS = ("twilio", "telnyx")
#: The carrier sends ``start`` right after connecting; a socket silent for longer is not one.
START_TIMEOUT_S = 5.0
#: Websocket close codes (RFC 6455 7.4.1): the peer broke the protocol.
POLICY_VIOLATION = 1008
#: RFC 6455 close code 1013: the server is overloaded (full or draining); try another.
TRY_AGAIN_LATER = 1013
#: Twilio and Telnyx play (and send) 8 kHz G.711 in 20 ms packets.
CARRIER_SAMPLE_RATE = 8000
PACKET_MS = 20
MAX_MESSAGE_BYTES = 64 * 1024
#: How long our close waits for the carrier's answer (it may already have hung up).
CLOSE_TIMEOUT_S = 2.0


class StreamProtocolError(ValueError):
    """The carrier's messages break the media-stream protocol; the message says how."""


@dataclass(frozen=True)
class CarrierCredentials:
    """The carrier accounts' keys: to verify their webhooks (Twilio's auth token, Telnyx's
    public key) and to hang a call up through their REST API."""

    twilio_account_sid: str | None = None
    twilio_auth_token: str | None = field(default=None, repr=False)
    telnyx_api_key: str | None = field(default=None, repr=False)
    telnyx_public_key: str | None = None
    #: Hang up through the REST API when the agent ends the call (only with credentials).
    hang_up: bool = True

    def can_hang_up(self, carrier: str) -> bool:
        if not self.hang_up:
            return False
        if carrier == "twilio":
            return bool(self.twilio_auth_token)
        return bool(self.telnyx_api_key)


@dataclass(frozen=True)
class StreamStart:
    """The carrier's ``start`` event, checked: which stream, which call, in what format."""

    carrier: str
    stream_id: str
    call_id: str | None
    encoding: str
    remote_number: str | None = None
    local_number: str | None = None
    account_id: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)

    def bound_to(self, webhook: Announced) -> StreamStart:
        """This stream with the numbers its signed webhook gave: the stream's own claims
        are not signed."""
        return replace(self, remote_number=webhook.remote_number, local_number=webhook.local_number)

    def call_info(self) -> CallInfo:
        extra = {"stream_id": self.stream_id, "encoding": self.encoding, **self.parameters}
        return CallInfo(
            path=self.carrier,
            remote_number=self.remote_number,
            local_number=self.local_number,
            network_id=self.call_id,
            sample_rate=CARRIER_SAMPLE_RATE,
            extra=extra,
        )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _parameters(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items() if isinstance(v, (str, int, float))}


def parse_start(carrier: str, message: dict[str, Any]) -> StreamStart:
    """Read a ``start`` event as Twilio or Telnyx documents it."""
    start = message.get("start")
    if not isinstance(start, dict):
        raise StreamProtocolError("the 'start' event has no 'start' object")
    if carrier == "twilio":
        stream_id = _text(start.get("streamSid")) or _text(message.get("streamSid"))
        if stream_id is None:
            raise StreamProtocolError("the 'start' event has no streamSid")
        media = start.get("mediaFormat") or {}
        encoding = media.get("encoding", "audio/x-mulaw") if isinstance(media, dict) else ""
        rate = media.get("sampleRate", CARRIER_SAMPLE_RATE) if isinstance(media, dict) else 0
        if encoding != "audio/x-mulaw" or rate != CARRIER_SAMPLE_RATE:
            raise StreamProtocolError(f"unsupported media format {encoding!r} at {rate} Hz")
        parameters = _parameters(start.get("customParameters"))
        return StreamStart(
            carrier=carrier,
            stream_id=stream_id,
            call_id=_text(start.get("callSid")),
            encoding="PCMU",
            remote_number=parameters.get("from"),
            local_number=parameters.get("to"),
            account_id=_text(start.get("accountSid")),
            parameters=parameters,
        )
    stream_id = _text(message.get("stream_id")) or _text(start.get("stream_id"))
    if stream_id is None:
        raise StreamProtocolError("the 'start' event has no stream_id")
    media = start.get("media_format") or {}
    encoding = media.get("encoding", "PCMU") if isinstance(media, dict) else ""
    rate = media.get("sample_rate", CARRIER_SAMPLE_RATE) if isinstance(media, dict) else 0
    if encoding not in ("PCMU", "PCMA") or rate != CARRIER_SAMPLE_RATE:
        raise StreamProtocolError(f"unsupported media format {encoding!r} at {rate} Hz")
    parameters = _parameters(start.get("custom_parameters"))
    return StreamStart(
        carrier=carrier,
        stream_id=stream_id,
        call_id=_text(start.get("call_control_id")),
        encoding=encoding,
        remote_number=_text(start.get("from")) or parameters.get("from"),
        local_number=_text(start.get("to")) or parameters.get("to"),
        account_id=_text(start.get("user_id")),
        parameters=parameters,
    )


def _event(raw: str | bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise StreamProtocolError("a message is not JSON") from None
    if not isinstance(message, dict) or not isinstance(message.get("event"), str):
        raise StreamProtocolError("a message has no 'event'")
    return message


async def await_start(
    ws: web.WebSocketResponse, carrier: str, timeout_s: float = START_TIMEOUT_S
) -> StreamStart:
    """Read the stream's opening (``connected``, then ``start``) within ``timeout_s``."""

    async def opening() -> StreamStart:
        async for msg in ws:
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                break
            message = _event(msg.data)
            event = message["event"]
            if event == "connected":
                continue
            if event != "start":
                raise StreamProtocolError(f"expected 'start' first, got {event!r}")
            return parse_start(carrier, message)
        raise StreamProtocolError("the socket closed before the 'start' event")

    try:
        return await asyncio.wait_for(opening(), timeout_s)
    except TimeoutError:
        raise StreamProtocolError(f"no 'start' event within {timeout_s:g} s") from None


def serializer_for(start: StreamStart, credentials: CarrierCredentials) -> FrameSerializer:
    """pipecat's serializer for the carrier, hanging up by REST only when it can."""
    hang_up = credentials.can_hang_up(start.carrier)
    if start.carrier == "twilio":
        return TwilioFrameSerializer(
            stream_sid=start.stream_id,
            call_sid=start.call_id,
            account_sid=credentials.twilio_account_sid or start.account_id,
            auth_token=credentials.twilio_auth_token,
            params=TwilioFrameSerializer.InputParams(auto_hang_up=hang_up),
        )
    return TelnyxFrameSerializer(
        stream_id=start.stream_id,
        outbound_encoding=start.encoding,
        inbound_encoding=start.encoding,
        call_control_id=start.call_id,
        api_key=credentials.telnyx_api_key,
        params=TelnyxFrameSerializer.InputParams(auto_hang_up=hang_up),
    )


class MediaStreamInput(BaseInputTransport):
    """Carrier events in: audio and DTMF through the serializer, ``stop`` ends the call."""

    def __init__(
        self,
        transport: MediaStreamTransport,
        ws: web.WebSocketResponse,
        serializer: FrameSerializer,
        params: TransportParams,
        **kwargs: Any,
    ) -> None:
        super().__init__(params, **kwargs)
        self._transport = transport
        self._ws = ws
        self._serializer = serializer
        self._receive_task: asyncio.Task[None] | None = None

    # pipecat's FrameProcessor.setup narrows BaseObject.setup; mypy flags every override.
    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        await self._serializer.setup(setup)

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self._transport.connected()
        if self._receive_task is None:
            self._receive_task = self.create_task(self._receive())
        await self.set_transport_ready(frame)

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._stop_receiving()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._stop_receiving()

    async def cleanup(self) -> None:
        await super().cleanup()
        await self._stop_receiving()

    async def _stop_receiving(self) -> None:
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None

    async def _receive(self) -> None:
        reason = "the carrier closed the socket"
        async for msg in self._ws:
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                break
            try:
                message = _event(msg.data)
            except StreamProtocolError as e:
                logger.warning("%s stream: %s; ignored", self._transport.carrier, e)
                continue
            if message["event"] == "stop":
                reason = "the carrier stopped the stream"
                break
            if message["event"] == "mark":
                self._transport.mark_played(message)
                continue
            frame = await self._serializer.deserialize(msg.data)
            if isinstance(frame, InputAudioRawFrame):
                await self.push_audio_frame(frame)
            elif frame is not None:
                await self.push_frame(frame)
        logger.info(
            "%s stream %s ended: %s", self._transport.carrier, self._transport.stream_id, reason
        )
        if not self._transport.closing:
            await self._transport.disconnected()


class MediaStreamOutput(BaseOutputTransport):
    """Agent audio out in 20 ms packets at the rate the carrier plays them; ``clear`` on
    barge-in, a ``mark`` after each utterance."""

    def __init__(
        self,
        transport: MediaStreamTransport,
        ws: web.WebSocketResponse,
        serializer: FrameSerializer,
        params: TransportParams,
        **kwargs: Any,
    ) -> None:
        super().__init__(params, **kwargs)
        self._transport = transport
        self._ws = ws
        self._serializer = serializer
        self._packet_s = 0.0
        self._next_send = 0.0

    # pipecat's FrameProcessor.setup narrows BaseObject.setup; mypy flags every override.
    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        await self._serializer.setup(setup)
        self._packet_s = self.audio_chunk_size / 2 / self.sample_rate

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._send(frame)
        await self._transport.close()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._send(frame)
        await self._transport.close()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            await self._send(frame)
            self._next_send = 0.0

    async def push_frame(
        self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM
    ) -> None:
        if isinstance(frame, BotStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            await self._transport.send_mark(self._ws)
        await super().push_frame(frame, direction)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        # The media sender has cut and resampled the audio to our rate; say so.
        frame = OutputAudioRawFrame(frame.audio, self.sample_rate, frame.num_channels)
        if not await self._send(frame):
            return False
        # The carrier plays what it gets at once, so packets leave on the 20 ms clock
        # (a ``clear`` then cuts off at most one packet).
        now = time.monotonic()
        if self._next_send <= now:
            self._next_send = now + self._packet_s
        else:
            await asyncio.sleep(self._next_send - now)
            self._next_send += self._packet_s
        return True

    async def _send(self, frame: Frame) -> bool:
        if self._ws.closed:
            return False
        payload = await self._serializer.serialize(frame)
        if payload is None:
            return True
        try:
            if isinstance(payload, bytes):
                await self._ws.send_bytes(payload)
            else:
                await self._ws.send_str(payload)
        except ConnectionError as e:
            logger.warning(
                "%s stream %s: send failed: %s",
                self._transport.carrier,
                self._transport.stream_id,
                e,
            )
            return False
        return True


class MediaStreamTransport(BaseTransport):
    """One carrier media stream as a pipecat transport.

    Events, as on pipecat's websocket transports: ``on_client_connected`` when the
    pipeline starts on the stream, ``on_client_disconnected`` when the carrier stops
    it or the socket drops.
    """

    def __init__(
        self, ws: web.WebSocketResponse, start: StreamStart, serializer: FrameSerializer
    ) -> None:
        super().__init__()
        self.carrier = start.carrier
        self.stream_id = start.stream_id
        self.closing = False
        #: Marks sent, and those the carrier reported played (in order).
        self.marks_sent: list[str] = []
        self.marks_played: list[str] = []
        self._start = start
        self._ws = ws
        params = TransportParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            # The media sender resamples the agent's audio to the carrier's rate before
            # cutting it into packets (the serializer's stream resampler would hand out
            # ~100 ms bursts); caller audio is resampled by the serializer to the
            # pipeline's rate.
            audio_out_sample_rate=CARRIER_SAMPLE_RATE,
            audio_out_10ms_chunks=PACKET_MS // 10,
        )
        self._input = MediaStreamInput(self, ws, serializer, params, name=self._input_name)
        self._output = MediaStreamOutput(self, ws, serializer, params, name=self._output_name)
        self._register_event_handler("on_client_connected")
        self._register_event_handler("on_client_disconnected")

    def input(self) -> MediaStreamInput:
        return self._input

    def output(self) -> MediaStreamOutput:
        return self._output

    async def connected(self) -> None:
        await self._call_event_handler("on_client_connected", self._ws)

    async def disconnected(self) -> None:
        await self._call_event_handler("on_client_disconnected", self._ws)

    def mark_played(self, message: dict[str, Any]) -> None:
        mark = message.get("mark")
        name = mark.get("name") if isinstance(mark, dict) else None
        if isinstance(name, str):
            self.marks_played.append(name)
            logger.debug("%s stream %s: mark %s played", self.carrier, self.stream_id, name)

    async def send_mark(self, ws: web.WebSocketResponse) -> None:
        """Ask the carrier to tell us when the audio sent so far has been played."""
        if ws.closed:
            return
        name = f"utterance-{len(self.marks_sent) + 1}"
        message: dict[str, Any] = {"event": "mark", "mark": {"name": name}}
        if self.carrier == "twilio":
            message["streamSid"] = self.stream_id
        else:
            message["stream_id"] = self.stream_id
        self.marks_sent.append(name)
        await ws.send_str(json.dumps(message))

    async def close(self) -> None:
        """End the stream from our side (the carrier then ends the call or moves on)."""
        self.closing = True
        if not self._ws.closed:
            await self._ws.close(message=b"call ended")


# --- The webhook's answer ---------------------------------------------------------------


def stream_url(request: web.Request, carrier: str, public_url: str | None, token: str) -> str:
    """The ``wss://`` address of our media route with a stream's one-time token, as the
    carrier must dial it (a path segment: Twilio's ``<Stream url>`` takes no query)."""
    base = public_base(request, public_url)
    if base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    elif base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    return f"{base}/media/{carrier}/{token}"


def connect_document(carrier: str, url: str, parameters: dict[str, str]) -> str:
    """The TwiML (Twilio) or TeXML (Telnyx) that connects the call to ``url``."""
    response = ElementTree.Element("Response")
    connect = ElementTree.SubElement(response, "Connect")
    attributes = {"url": url}
    if carrier == "telnyx":
        attributes |= {"bidirectionalMode": "rtp", "bidirectionalCodec": "PCMU"}
    stream = ElementTree.SubElement(connect, "Stream", attributes)
    for name, value in parameters.items():
        ElementTree.SubElement(stream, "Parameter", {"name": name, "value": value})
    body = ElementTree.tostring(response, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body
