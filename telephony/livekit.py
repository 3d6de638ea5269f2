"""LiveKit rooms: the agent joins a room as a participant through pipecat's LiveKit transport.

A dispatcher (a LiveKit webhook handler, a SIP-to-room bridge, an operator)
asks ``POST /api/livekit/dispatch {"room": NAME}``; we mint an access token for
the agent with ``livekit-api`` (join that room only, publish and subscribe, a
short lifetime) and start a call whose transport connects to the room. The
greeting waits for the first other participant, as on every other path.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import timedelta

from aiohttp import web
from livekit.api import AccessToken, VideoGrants
from pipecat.transports.livekit.transport import LiveKitParams, LiveKitTransport

from agent.access import guard
from agent.config import ConfigError, Settings
from agent.console.tokens import Token
from telephony.line import CallInfo, LineBusy
from telephony.media_stream import StartCall

logger = logging.getLogger(__name__)

#: The agent's identity in every room (what other participants see as its id).
AGENT_IDENTITY = "collections-agent"
AGENT_NAME = "Collections agent"
#: Long enough to join and hold one call; LiveKit checks it only when the agent connects.
TOKEN_TTL = timedelta(minutes=10)
#: LiveKit room names are free text; we accept the safe subset dispatchers use.
ROOM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class LiveKitConfigError(ConfigError):
    """LiveKit is configured partly or wrongly; the message names the variable."""


class DispatchError(ValueError):
    """A dispatch request is unusable; the message says why (HTTP 400)."""


@dataclass(frozen=True)
class LiveKitConfig:
    """Where the LiveKit server is and the API key pair that signs our tokens."""

    url: str
    api_key: str
    api_secret: str

    @classmethod
    def from_settings(cls, settings: Settings) -> LiveKitConfig | None:
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
        return cls(url=url, api_key=api_key, api_secret=api_secret)


def check_room(body: object) -> str:
    """The room named in a dispatch request body."""
    if not isinstance(body, dict):
        raise DispatchError("expected a JSON object: {'room': NAME}")
    room = body.get("room")
    if not isinstance(room, str) or not ROOM_NAME.match(room):
        raise DispatchError(
            "'room' must be 1-128 letters, digits, '_', '.', ':' or '-', starting with a "
            "letter or digit"
        )
    return room


def access_token(
    config: LiveKitConfig, room: str, identity: str = AGENT_IDENTITY, ttl: timedelta = TOKEN_TTL
) -> str:
    """A JWT that lets ``identity`` join ``room`` (and only it) as an agent for ``ttl``."""
    grants = VideoGrants(
        room_join=True, room=room, can_publish=True, can_subscribe=True, can_publish_data=True
    )
    return (
        AccessToken(config.api_key, config.api_secret)
        .with_identity(identity)
        .with_name(AGENT_NAME)
        .with_kind("agent")
        .with_grants(grants)
        .with_ttl(ttl)
        .to_jwt()
    )


def transport_for(config: LiveKitConfig, room: str, sample_rate: int) -> LiveKitTransport:
    """pipecat's LiveKit transport, joining ``room`` as the agent when the call starts."""
    params = LiveKitParams(
        audio_in_enabled=True,
        audio_out_enabled=True,
        audio_in_sample_rate=sample_rate,
        audio_out_sample_rate=sample_rate,
    )
    return LiveKitTransport(
        url=config.url, token=access_token(config, room), room_name=room, params=params
    )


def add_routes(
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
        transport = transport_for(config, room, sample_rate)
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
