"""The carriers' routes: Twilio's and Telnyx's voice webhooks and media streams, LiveKit dispatch.

    POST /voice/{twilio|telnyx}          the carrier's signed voice webhook: TwiML/TeXML to stream
    GET  /media/{twilio|telnyx}/{token}  the media-stream websocket that webhook announced
    POST /api/livekit/dispatch           {room}: the agent joins that LiveKit room

The protocols are telephony's (``telephony/carriers/``: ``media_stream.py``, ``livekit.py``,
the signatures of ``signatures.py``); here are who may call the routes
(``agent/server/carrier_auth.py``), the settings that configure them and the call each
starts (docs/carriers.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pipecat.transports.base_transport import BaseTransport

from agent.access import guard
from agent.config import ConfigError, Settings
from agent.console.context import ENGINE
from agent.console.tokens import Token
from agent.server.carrier_auth import (
    ANNOUNCED,
    CarrierSignature,
    MediaToken,
    SeenWebhooks,
    StreamTokens,
)
from telephony.carriers.livekit import AGENT_IDENTITY, DispatchError, LiveKitConfig, check_room
from telephony.carriers.livekit import transport_for as livekit_transport
from telephony.carriers.media_stream import (
    CARRIERS,
    CLOSE_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    POLICY_VIOLATION,
    START_TIMEOUT_S,
    TRY_AGAIN_LATER,
    CarrierCredentials,
    MediaStreamTransport,
    StreamProtocolError,
    await_start,
    connect_document,
    serializer_for,
    stream_url,
)
from telephony.carriers.signatures import Announced, CarrierKeyError, Clock, webhook_signatures
from telephony.line import CallInfo, LineBusy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartedCall:
    """A call the server has started on a transport: its id and the task that runs it."""

    call_id: str
    task: asyncio.Task[Any]


#: Start a call on ``transport`` (the server's one way to do so: policy, records, answer).
StartCall = Callable[[BaseTransport, CallInfo], StartedCall]


class LiveKitConfigError(ConfigError):
    """LiveKit is configured partly or wrongly; the message names the variable."""


@dataclass(frozen=True)
class MediaStreamConfig:
    """How the carrier routes are set up."""

    credentials: CarrierCredentials = CarrierCredentials()
    #: ``https://agent.example.com``: where carriers reach us; default: the request's host.
    public_url: str | None = None
    start_timeout_s: float = START_TIMEOUT_S
    #: Checks Telnyx's webhook timestamps and expires stream tokens; injectable for tests.
    clock: Clock = time.time


def carrier_config(settings: Settings) -> MediaStreamConfig:
    """The carrier routes as the process's settings configure them."""
    return MediaStreamConfig(
        credentials=CarrierCredentials(
            twilio_account_sid=settings.twilio_account_sid,
            twilio_auth_token=settings.twilio_auth_token,
            telnyx_api_key=settings.telnyx_api_key,
            telnyx_public_key=settings.telnyx_public_key,
            hang_up=settings.carrier_hang_up,
        ),
        public_url=settings.public_url,
    )


def livekit_config(settings: Settings) -> LiveKitConfig | None:
    """None when LiveKit is not configured at all; an error when it is half configured."""
    values = {
        "LIVEKIT_URL": settings.livekit_url,
        "LIVEKIT_API_KEY": settings.livekit_api_key,
        "LIVEKIT_API_SECRET": settings.livekit_api_secret,
    }
    if not any(values.values()):
        return None
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise LiveKitConfigError(
            f"LiveKit needs LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET together; "
            f"missing: {', '.join(missing)}"
        )
    url, api_key, api_secret = (str(value) for value in values.values())
    if not url.startswith(("ws://", "wss://", "http://", "https://")):
        raise LiveKitConfigError(f"LIVEKIT_URL must be a ws(s):// or http(s):// URL: {url!r}")
    return LiveKitConfig(url=url, api_key=api_key, api_secret=api_secret)


# --- Twilio and Telnyx ----------------------------------------------------------------


def add_carrier_routes(
    app: web.Application, config: MediaStreamConfig, start_call: StartCall
) -> None:
    """``POST /voice/{carrier}`` (the carrier's signed voice webhook) and
    ``GET /media/{carrier}/{token}`` (the stream it announced); ``ConfigError`` for a
    malformed carrier key.

    The app needs the console's ``ENGINE`` (``setup_auth`` sets it): the tokens and the
    replay memory are kept there, for every worker and pod to share."""
    if ENGINE not in app:
        raise RuntimeError("the carrier routes need the console's engine: call setup_auth first")
    credentials = config.credentials
    try:
        signatures = webhook_signatures(
            credentials.twilio_auth_token, credentials.telnyx_public_key
        )
    except CarrierKeyError as e:
        raise ConfigError(str(e)) from None
    tokens = StreamTokens(app[ENGINE], config.clock)
    seen = SeenWebhooks(app[ENGINE])

    @guard(CarrierSignature(signatures, seen, config.public_url, config.clock))
    async def voice(request: web.Request) -> web.StreamResponse:
        carrier = request.match_info["carrier"]
        form = await request.post()
        said = {key: value for key, value in form.items() if isinstance(value, str) and value}
        webhook = Announced(carrier, said.get("From"), said.get("To"))
        parameters = {
            name: said[key] for name, key in (("from", "From"), ("to", "To")) if key in said
        }
        token = await asyncio.to_thread(tokens.mint, webhook)
        url = stream_url(request, carrier, config.public_url, token)
        return web.Response(
            text=connect_document(carrier, url, parameters), content_type="application/xml"
        )

    @guard(MediaToken(tokens))
    async def media(request: web.Request) -> web.StreamResponse:
        return await _media_stream(request, config, start_call)

    carriers = "{carrier:" + "|".join(CARRIERS) + "}"
    app.router.add_post(f"/voice/{carriers}", voice)
    app.router.add_get(f"/media/{carriers}/{{token}}", media)
    # Without a token: refused by the same guard, with a reason rather than a 404.
    app.router.add_get(f"/media/{carriers}", media)


async def _media_stream(
    request: web.Request, config: MediaStreamConfig, start_call: StartCall
) -> web.StreamResponse:
    """The media socket a live token let in: its ``start``, bound to what the webhook
    announced, then a call on it until either side ends it."""
    carrier = request.match_info["carrier"]
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, timeout=CLOSE_TIMEOUT_S)
    if not ws.can_prepare(request).ok:
        return web.json_response(
            {"error": f"/media/{carrier} is a websocket: connect with an Upgrade request"},
            status=400,
        )
    await ws.prepare(request)
    try:
        start = (await await_start(ws, carrier, config.start_timeout_s)).bound_to(
            request[ANNOUNCED]
        )
        serializer = serializer_for(start, config.credentials)
    except (StreamProtocolError, ValueError) as e:
        logger.warning("%s stream from %s refused: %s", carrier, request.remote, e)
        await ws.close(code=POLICY_VIOLATION, message=str(e).encode()[:120])
        return ws
    transport = MediaStreamTransport(ws, start, serializer)
    try:
        started = start_call(transport, start.call_info())
    except LineBusy as e:
        logger.info("%s stream %s refused: %s", carrier, start.stream_id, e)
        await ws.close(code=TRY_AGAIN_LATER, message=str(e).encode()[:120])
        return ws
    logger.info(
        "%s stream %s (call %s) is call %s",
        carrier,
        start.stream_id,
        start.call_id,
        started.call_id,
    )
    try:
        await asyncio.shield(started.task)
    except asyncio.CancelledError:
        raise
    except Exception:
        # The call logged and recorded its own failure; the socket just closes.
        pass
    finally:
        await transport.close()
    return ws


# --- LiveKit --------------------------------------------------------------------------


def add_livekit_routes(
    app: web.Application, config: LiveKitConfig | None, sample_rate: int, start_call: StartCall
) -> None:
    """``POST /api/livekit/dispatch``: send the agent into a room (for a machine with a
    ``livekit:dispatch`` API token: it mints an agent token and takes a call slot)."""

    @guard(Token("livekit:dispatch"))
    async def dispatch(request: web.Request) -> web.Response:
        if config is None:
            return web.json_response(
                {
                    "error": "LiveKit is not configured: set LIVEKIT_URL, LIVEKIT_API_KEY "
                    "and LIVEKIT_API_SECRET"
                },
                status=503,
            )
        try:
            room = check_room(await request.json())
        except json.JSONDecodeError:
            return web.json_response({"error": "the body must be JSON: {'room': NAME}"}, status=400)
        except DispatchError as e:
            return web.json_response({"error": str(e)}, status=400)
        transport = livekit_transport(config, room, sample_rate)
        try:
            started = start_call(
                transport, CallInfo(path="livekit", network_id=room, sample_rate=sample_rate)
            )
        except LineBusy as e:
            return web.json_response(
                {"error": str(e)},
                status=503,
                headers={"Retry-After": str(LineBusy.retry_after_s)},
            )
        logger.info("call %s: joining LiveKit room %s", started.call_id, room)
        return web.json_response(
            {"call_id": started.call_id, "room": room, "identity": AGENT_IDENTITY}
        )

    app.router.add_post("/api/livekit/dispatch", dispatch)
