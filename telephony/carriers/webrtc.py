"""WebRTC calls from a browser through pipecat's SmallWebRTC transport (aiortc).

Signalling is one HTTP exchange (the browser posts its offer with its ICE
candidates gathered, we answer with ours), so it fits on any aiohttp route and
needs no trickle-ICE state between requests.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport

logger = logging.getLogger(__name__)

MAX_SDP_BYTES = 64 * 1024


class OfferError(ValueError):
    """The browser's offer is unusable; the message says why (HTTP 400)."""


@dataclass(frozen=True)
class Offer:
    """A browser's SDP offer, checked."""

    sdp: str

    @classmethod
    def from_json(cls, body: object) -> Offer:
        if not isinstance(body, dict):
            raise OfferError("expected a JSON object with 'sdp' and 'type'")
        sdp, kind = body.get("sdp"), body.get("type")
        if kind != "offer":
            raise OfferError(f"'type' must be 'offer', got {kind!r}")
        if not isinstance(sdp, str) or not sdp.startswith("v=0"):
            raise OfferError("'sdp' must be an SDP session description starting with 'v=0'")
        if len(sdp) > MAX_SDP_BYTES:
            raise OfferError(f"'sdp' is larger than {MAX_SDP_BYTES} bytes")
        if "m=audio" not in sdp:
            raise OfferError("the offer has no audio media section")
        return cls(sdp=sdp)


async def accept(offer: Offer) -> tuple[SmallWebRTCConnection, dict[str, str]]:
    """Answer ``offer``; returns the connection and the answer to send back."""
    connection = SmallWebRTCConnection(ice_servers=[])
    try:
        await connection.initialize(sdp=offer.sdp, type="offer")
    except ValueError as e:
        raise OfferError(f"the offer could not be negotiated: {e}") from e
    answer = connection.get_answer()
    if answer is None:
        raise OfferError("no answer could be produced for this offer")
    return connection, answer


def transport_for(connection: SmallWebRTCConnection, sample_rate: int) -> SmallWebRTCTransport:
    """A pipecat transport carrying the call's audio over ``connection``."""
    params = TransportParams(
        audio_in_enabled=True,
        audio_out_enabled=True,
        audio_in_sample_rate=sample_rate,
        audio_out_sample_rate=sample_rate,
    )
    return SmallWebRTCTransport(webrtc_connection=connection, params=params)
