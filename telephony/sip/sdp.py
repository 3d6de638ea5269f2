"""SDP offer/answer (RFC 4566, RFC 3264) for G.711 (PCMU, PCMA) with telephone-event (RFC 4733)."""

from __future__ import annotations

import ipaddress
import re
import secrets
from dataclasses import dataclass, field

STATIC = {0: "PCMU", 8: "PCMA"}
DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
MIRROR = {"sendrecv": "sendrecv", "sendonly": "recvonly", "recvonly": "sendonly"}
MIRROR["inactive"] = "inactive"
#: A port or payload type: ASCII digits, few of them (``str.isdigit`` takes "\u00b2").
_NUMBER = re.compile(r"[0-9]{1,5}")


class SdpError(ValueError):
    """An SDP body we cannot read or answer (the endpoint answers 488 or 400)."""


@dataclass
class Media:
    """The negotiated audio stream: where to send, which codec, DTMF payload type, direction."""

    remote_ip: str
    remote_port: int
    codec: str
    payload_type: int
    dtmf_payload_type: int | None
    direction: str


@dataclass
class Offer:
    """What a peer's SDP says about its first audio stream."""

    ip: str
    port: int
    formats: list[int]
    rtpmap: dict[int, str] = field(default_factory=dict)
    direction: str = "sendrecv"


def parse(body: bytes) -> Offer:
    """Read the first usable ``m=audio`` of an SDP body; SdpError (and only that) otherwise.

    Other media sections (video, an audio stream refused with port 0) are skipped with their
    c= and a= lines, so they change nothing of the session's or the audio's address."""
    try:
        lines = body.decode("utf-8").replace("\r\n", "\n").split("\n")
    except UnicodeDecodeError as exc:
        raise SdpError("SDP is not UTF-8") from exc
    session_ip, offer, direction = None, None, "sendrecv"
    skipping = False  # inside a media section that is not our audio stream
    for line in lines:
        if len(line) < 2 or line[1] != "=":
            continue
        kind, value = line[0], line[2:].strip()
        if kind == "m":
            if offer is not None:
                break
            parts = value.split()
            skipping = True
            if len(parts) < 4 or parts[0] != "audio" or not _NUMBER.fullmatch(parts[1]):
                continue
            port = int(parts[1])
            if port == 0:
                continue  # RFC 3264 6: a refused stream
            if port > 65535 or not all(_NUMBER.fullmatch(p) and int(p) < 128 for p in parts[3:]):
                raise SdpError(f"bad port or formats in m= line: {value[:80]!r}")
            offer = Offer(session_ip or "", port, [int(p) for p in parts[3:]])
            offer.direction = direction
            skipping = False
        elif skipping:
            continue
        elif kind == "c":
            parts = value.split()
            if len(parts) != 3:
                raise SdpError(f"bad c= line: {value!r}")
            if offer is None:
                session_ip = parts[2].split("/")[0]
            else:
                offer.ip = parts[2].split("/")[0]
        elif kind == "a":
            name, _, rest = value.partition(":")
            if name in DIRECTIONS:
                if offer is None:
                    direction = name
                else:
                    offer.direction = name
            elif name == "rtpmap" and offer is not None:
                pt, _, encoding = rest.partition(" ")
                if _NUMBER.fullmatch(pt):
                    offer.rtpmap[int(pt)] = encoding.strip()
    if offer is None:
        raise SdpError("no audio stream in SDP")
    if not offer.ip:
        raise SdpError("no connection address in SDP")
    try:
        ipaddress.ip_address(offer.ip)  # the RTP session sends to an address, resolves no name
    except ValueError:
        raise SdpError(f"connection address is not an IP address: {offer.ip[:80]!r}") from None
    if offer.ip == "0.0.0.0" and offer.direction == "sendrecv":
        offer.direction = "sendonly"  # RFC 2543 hold
    return offer


def _name(offer: Offer, pt: int) -> str:
    encoding = offer.rtpmap.get(pt)
    if encoding:
        return encoding.split("/")[0].upper()
    return STATIC.get(pt, "")


def negotiate(offer: Offer, codecs: tuple[str, ...] = ("PCMU", "PCMA")) -> Media:
    """Pick the first offered codec we support and mirror the direction; SdpError if none."""
    dtmf = next(
        (
            pt
            for pt in offer.formats
            if _name(offer, pt) == "TELEPHONE-EVENT" and offer.rtpmap.get(pt, "").endswith("/8000")
        ),
        None,
    )
    for pt in offer.formats:
        name = _name(offer, pt)
        if name in codecs and (pt in STATIC or offer.rtpmap.get(pt, "").endswith("/8000")):
            return Media(offer.ip, offer.port, name, pt, dtmf, MIRROR[offer.direction])
    raise SdpError("no codec in common (we take PCMU and PCMA)")


class LocalSession:
    """Our side's SDP: origin kept across the call, version bumped per new description."""

    def __init__(self, ip: str, port: int) -> None:
        self.ip, self.port = ip, port
        self.session_id = secrets.randbelow(2**31)
        self.version = self.session_id
        self._last: tuple[object, ...] | None = None

    def describe(self, payloads: list[tuple[int, str]], dtmf: int | None, direction: str) -> bytes:
        """An SDP body with the given (payload type, codec) list, DTMF type and direction."""
        key = (tuple(payloads), dtmf, direction)
        if key != self._last:
            self.version += 1
            self._last = key
        formats = [pt for pt, _ in payloads] + ([dtmf] if dtmf is not None else [])
        lines = [
            "v=0",
            f"o=- {self.session_id} {self.version} IN IP4 {self.ip}",
            "s=-",
            f"c=IN IP4 {self.ip}",
            "t=0 0",
            f"m=audio {self.port} RTP/AVP {' '.join(map(str, formats))}",
        ]
        lines += [f"a=rtpmap:{pt} {name}/8000" for pt, name in payloads]
        if dtmf is not None:
            lines += [f"a=rtpmap:{dtmf} telephone-event/8000", f"a=fmtp:{dtmf} 0-16"]
        lines += ["a=ptime:20", f"a={direction}"]
        return ("\r\n".join(lines) + "\r\n").encode()

    def answer(self, media: Media) -> bytes:
        return self.describe(
            [(media.payload_type, media.codec)], media.dtmf_payload_type, media.direction
        )

    def offer(self, direction: str = "sendrecv") -> bytes:
        return self.describe([(0, "PCMU"), (8, "PCMA")], 101, direction)
