"""LiveKit rooms: the agent joins a room as a participant through pipecat's LiveKit transport.

A dispatcher (a LiveKit webhook handler, a SIP-to-room bridge, an operator)
asks ``POST /api/livekit/dispatch {"room": NAME}`` (the route: ``agent/server/carriers.py``);
we mint an access token for the agent with ``livekit-api`` (join that room only, publish
and subscribe, a short lifetime) and start a call whose transport connects to the room.
The greeting waits for the first other participant, as on every other path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from livekit.api import AccessToken, VideoGrants
from pipecat.transports.livekit.transport import LiveKitParams, LiveKitTransport

#: The agent's identity in every room (what other participants see as its id).
AGENT_IDENTITY = "collections-agent"
AGENT_NAME = "Collections agent"
#: Long enough to join and hold one call; LiveKit checks it only when the agent connects.
TOKEN_TTL = timedelta(minutes=10)
#: LiveKit room names are free text; we accept the safe subset dispatchers use.
ROOM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class DispatchError(ValueError):
    """A dispatch request is unusable; the message says why (HTTP 400)."""


@dataclass(frozen=True)
class LiveKitConfig:
    """Where the LiveKit server is (``ws(s)://`` or ``http(s)://``) and the API key pair
    that signs our tokens."""

    url: str
    api_key: str
    api_secret: str


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
