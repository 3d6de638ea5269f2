"""What every way a call reaches the agent offers it: a phone line.

A line is a pipecat transport (audio frames in and out at the call's rate; the
caller's DTMF digits arrive as pipecat ``InputDTMFFrame``s, digits the agent
sends go out as ``OutputDTMFFrame``s) plus the call control a contact center
needs: answer, hang up, hold, transfer, and what is known of the call. The
agent's pipeline works on the transport alone, so it never knows whether a
call came over SIP, WebRTC, a carrier's media stream or a LiveKit room.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pipecat.transports.base_transport import BaseTransport


class LineError(RuntimeError):
    """A call-control request the line cannot carry out (the message says why)."""


class LineBusy(RuntimeError):
    """The agent takes no call now (its worker is full or draining): each path says so in its
    own protocol (SIP 503 with Retry-After, HTTP 503, websocket close 1013), so the caller's
    network can try another worker."""

    #: Seconds after which trying this worker again may succeed.
    retry_after_s = 5


@dataclass(frozen=True)
class CallInfo:
    """What the network told us about a call, for the call record and the pre-dial gate."""

    #: How the call arrived: ``sip``, ``webrtc``, ``twilio``, ``telnyx``, ``livekit``, ``loopback``.
    path: str
    direction: str = "inbound"
    #: The consumer's number (E.164 where the network gives one), caller id inbound,
    #: dialed number outbound.
    remote_number: str | None = None
    #: Our number or address on the call (the DID dialed, the trunk's number).
    local_number: str | None = None
    #: The network's own id for the call (SIP Call-ID, carrier call SID, room name).
    network_id: str | None = None
    #: The rate the line carries audio at (G.711: 8 kHz); the call's pipeline runs at
    #: it, so nothing is resampled up only to be sent down again. None: the agent's
    #: configured rates.
    sample_rate: int | None = None
    #: The campaign an outbound call was dialled for (``agent.campaigns.dialer``).
    campaign: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


class PhoneLine(Protocol):
    """One call on one path; see the module docstring."""

    info: CallInfo

    def transport(self) -> BaseTransport:
        """The pipecat transport that carries this call's audio and DTMF."""
        ...

    async def answer(self) -> None:
        """Pick up an inbound call (no-op once answered, or for an outbound one)."""
        ...

    async def hang_up(self) -> None:
        """End the call from our side; safe to call more than once."""
        ...

    async def hold(self, on: bool) -> None:
        """Put the caller on hold (no audio either way) or take them off it."""
        ...

    async def transfer(self, target: str) -> None:
        """Hand the caller to ``target`` (a SIP URI or number); raises ``LineError`` when
        the path cannot transfer."""
        ...
