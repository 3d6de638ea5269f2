"""Carrier webhook signatures: Twilio's HMAC and Telnyx's Ed25519, checked as documented.

- Twilio's ``X-Twilio-Signature``: HMAC-SHA1 with the account's auth token over the URL
  Twilio called and the POST parameters;
- Telnyx's ``telnyx-signature-ed25519``: Ed25519 with the account's key over
  ``timestamp|body``, the timestamp fresh.

``verify`` answers a hash of what was signed, so that the caller can take a signed request
only once (``REPLAY_WINDOW_S``). What the agent does with them (the route guards, the
replay memory and the media streams' one-time tokens, kept in its database) is in
``agent/server/carrier_auth.py``.

The carriers document the algorithms; nothing here needs their SDKs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

#: Seconds since the epoch: Telnyx's timestamps are Unix times.
Clock = Callable[[], float]

TWILIO_SIGNATURE = "X-Twilio-Signature"
TELNYX_SIGNATURE = "telnyx-signature-ed25519"
TELNYX_TIMESTAMP = "telnyx-timestamp"
#: A Telnyx webhook signed longer ago than this is stale (Telnyx's own libraries allow 5 min).
MAX_AGE_S = 300.0
#: A timestamp further ahead than this is not clock skew.
MAX_AHEAD_S = 60.0
#: How long a signed request is remembered: past it, a Telnyx replay is stale anyway.
REPLAY_WINDOW_S = MAX_AGE_S + MAX_AHEAD_S
#: The ports a URL of each scheme has when it names none.
DEFAULT_PORTS = {"https": 443, "http": 80}


class BadSignature(Exception):
    """A webhook's signature does not hold; the message says why and holds no secret."""


class CarrierKeyError(ValueError):
    """A carrier's key is malformed; the message names its setting."""


def public_base(request: web.Request, public_url: str | None) -> str:
    """``https://host[/prefix]`` as the carrier sees us: ``PUBLIC_URL`` when set (behind a
    proxy the request's own scheme and host are the proxy's), else the request's host."""
    if public_url:
        return public_url.rstrip("/")
    scheme = request.headers.get("X-Forwarded-Proto") or request.scheme
    return f"{scheme}://{request.host}"


def twilio_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]]) -> str:
    """Twilio's signature of a request: base64 HMAC-SHA1, keyed with the auth token, of the
    URL followed by each POST parameter's name and value, sorted by name."""
    digest = hmac.new(auth_token.encode(), _twilio_data(url, params), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _twilio_data(url: str, params: Iterable[tuple[str, str]]) -> bytes:
    return (url + "".join(name + value for name, value in sorted(params))).encode()


def _port_variants(url: str) -> tuple[str, ...]:
    """``url``, and ``url`` with its default port added or dropped: Twilio may sign either
    form of the URL it was configured with (its own validators try both)."""
    parts = urlsplit(url)
    default = DEFAULT_PORTS.get(parts.scheme)
    try:
        port = parts.port
    except ValueError:
        return (url,)
    if default is None:
        return (url,)
    if port is None:
        return url, urlunsplit(parts._replace(netloc=f"{parts.netloc}:{default}"))
    if port == default:
        return url, urlunsplit(parts._replace(netloc=parts.netloc.rsplit(":", 1)[0]))
    return (url,)


class WebhookSignature(Protocol):
    """How one carrier signs its webhooks."""

    #: The setting that configures it, named when the carrier is not configured.
    setting: ClassVar[str]
    #: The header that carries the signature.
    header: ClassVar[str]

    async def verify(self, request: web.Request, url: str, now: float) -> bytes:
        """Check ``request`` (that the carrier called as ``url``); answer what it signed,
        hashed (to know a replay), or raise ``BadSignature``."""
        ...


@dataclass(frozen=True)
class TwilioSignature:
    """Twilio's ``X-Twilio-Signature``: it signs no time, so only the replay memory limits
    a replay."""

    auth_token: str = field(repr=False)
    setting: ClassVar[str] = "TWILIO_AUTH_TOKEN"
    header: ClassVar[str] = TWILIO_SIGNATURE

    async def verify(self, request: web.Request, url: str, now: float) -> bytes:
        presented = request.headers.get(self.header, "").encode()
        form = await request.post()
        params = [(name, value) for name, value in form.items() if isinstance(value, str)]
        if len(params) != len(form):
            raise BadSignature("the webhook carries a file, which Twilio never sends")
        for candidate in _port_variants(url):
            expected = twilio_signature(self.auth_token, candidate, params).encode()
            if hmac.compare_digest(expected, presented):
                return hashlib.sha256(_twilio_data(candidate, params)).digest()
        raise BadSignature(f"{self.header} does not match the request")


@dataclass(frozen=True)
class TelnyxSignature:
    """Telnyx's Ed25519 signature over ``telnyx-timestamp|body``, with the account's public
    key (Mission Control: Account Settings, Keys & Credentials, Public Key)."""

    public_key: Ed25519PublicKey
    setting: ClassVar[str] = "TELNYX_PUBLIC_KEY"
    header: ClassVar[str] = TELNYX_SIGNATURE

    @classmethod
    def from_base64(cls, key: str) -> TelnyxSignature:
        """The key as the portal shows it; ``CarrierKeyError`` for anything else."""
        try:
            raw = base64.b64decode(key.strip(), validate=True)
            return cls(Ed25519PublicKey.from_public_bytes(raw))
        except (binascii.Error, ValueError):
            raise CarrierKeyError(
                f"{cls.setting} must be the base64 Ed25519 public key (32 bytes) of the "
                "Telnyx portal's Keys & Credentials page"
            ) from None

    async def verify(self, request: web.Request, url: str, now: float) -> bytes:
        timestamp = request.headers.get(TELNYX_TIMESTAMP, "")
        try:
            signature = base64.b64decode(request.headers.get(self.header, ""), validate=True)
            sent = int(timestamp)
        except (binascii.Error, ValueError):
            raise BadSignature(f"{self.header} or {TELNYX_TIMESTAMP} is malformed") from None
        signed = timestamp.encode() + b"|" + await request.read()
        try:
            self.public_key.verify(signature, signed)
        except InvalidSignature:
            raise BadSignature(f"{self.header} does not match the request") from None
        if now - sent > MAX_AGE_S:
            raise BadSignature(f"stale: signed {now - sent:.0f} s ago")
        if sent - now > MAX_AHEAD_S:
            raise BadSignature(f"{TELNYX_TIMESTAMP} is {sent - now:.0f} s ahead of our clock")
        return hashlib.sha256(signed).digest()


def webhook_signatures(
    twilio_auth_token: str | None, telnyx_public_key: str | None
) -> dict[str, WebhookSignature]:
    """The carriers whose webhooks can be verified, by name (a malformed key:
    ``CarrierKeyError``)."""
    signatures: dict[str, WebhookSignature] = {}
    if twilio_auth_token:
        signatures["twilio"] = TwilioSignature(twilio_auth_token)
    if telnyx_public_key:
        signatures["telnyx"] = TelnyxSignature.from_base64(telnyx_public_key)
    return signatures


#: The setting each carrier's webhooks need, for the refusal of an unconfigured one.
SETTINGS = {"twilio": TwilioSignature.setting, "telnyx": TelnyxSignature.setting}


@dataclass(frozen=True)
class Announced:
    """What a carrier's signed webhook said about the call its stream will carry."""

    carrier: str
    remote_number: str | None = None
    local_number: str | None = None
