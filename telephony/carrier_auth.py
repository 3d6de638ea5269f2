"""Who may speak as a carrier: signed voice webhooks, and the media streams they announced.

Without this, anyone could post ``/voice/twilio`` or open ``/media/twilio`` and start a
call that stores whatever caller number it claims. So:

- a voice webhook is taken only with its carrier's signature: Twilio's
  ``X-Twilio-Signature`` (HMAC-SHA1 with the account's auth token over the URL Twilio
  called and the POST parameters), Telnyx's ``telnyx-signature-ed25519`` (Ed25519 with
  the account's key over ``timestamp|body``, the timestamp fresh). A signed request is
  taken once: the same one again within ``REPLAY_WINDOW_S`` is a replay;
- the webhook's answer names a stream URL that holds a one-time token (random,
  ``TOKEN_TTL_S`` to live); the media socket is upgraded only with a live token, which
  it spends, and the call gets the numbers the signed webhook gave.

Tokens and the replay memory are kept in the database, not in the process: the
socket is a new connection, which the supervisor's entry or a Service may send to
another worker or pod than the one that answered the webhook.

The carriers document the algorithms; nothing here needs their SDKs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import Connection, Engine, delete, insert
from sqlalchemy.exc import IntegrityError

from agent.access import Refusal, refuse
from agent.config import ConfigError
from agent.store.tables import MediaStreamToken, SeenWebhook

logger = logging.getLogger(__name__)

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
#: The carrier opens the stream within a second or two of our answer.
TOKEN_TTL_S = 60.0


class BadSignature(Exception):
    """A webhook's signature does not hold; the message says why and holds no secret."""


def _utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def _purge(connection: Connection, table: type[MediaStreamToken | SeenWebhook], now: float) -> None:
    """Drop ``table``'s expired rows: an index range, a few rows at most."""
    connection.execute(delete(table).where(table.expires_at <= _utc(now)))


# --- Webhook signatures -------------------------------------------------------------------


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
        """The key as the portal shows it; ``ConfigError`` for anything else."""
        try:
            raw = base64.b64decode(key.strip(), validate=True)
            return cls(Ed25519PublicKey.from_public_bytes(raw))
        except (binascii.Error, ValueError):
            raise ConfigError(
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
    """The carriers whose webhooks can be verified, by name (a malformed key: ConfigError)."""
    signatures: dict[str, WebhookSignature] = {}
    if twilio_auth_token:
        signatures["twilio"] = TwilioSignature(twilio_auth_token)
    if telnyx_public_key:
        signatures["telnyx"] = TelnyxSignature.from_base64(telnyx_public_key)
    return signatures


#: The setting each carrier's webhooks need, for the refusal of an unconfigured one.
SETTINGS = {"twilio": TwilioSignature.setting, "telnyx": TelnyxSignature.setting}


class SeenWebhooks:
    """The signed webhooks taken within ``REPLAY_WINDOW_S``, in the database at ``engine``
    so that a copy is known whichever worker or pod it reaches. Blocking: call it from a
    thread."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def first_time(self, carrier: str, signed: bytes, now: float) -> bool:
        """Remember ``carrier``'s webhook (``signed``: the hash of what it signed); False if
        it was taken already, a replay. Of two copies at once, the primary key lets one in."""
        try:
            with self._engine.begin() as connection:
                # Purged first: a copy whose window is over is taken again.
                _purge(connection, SeenWebhook, now)
                connection.execute(
                    insert(SeenWebhook).values(
                        carrier=carrier,
                        signed_hash=signed.hex(),
                        expires_at=_utc(now + REPLAY_WINDOW_S),
                    )
                )
        except IntegrityError:
            return False
        return True


class CarrierSignature:
    """Admits ``POST /voice/{carrier}`` signed by that carrier, once: 403 unsigned, wrongly
    signed, stale or replayed; 503 for a carrier whose key is not configured."""

    def __init__(
        self,
        signatures: Mapping[str, WebhookSignature],
        seen: SeenWebhooks,
        public_url: str | None = None,
        clock: Clock = time.time,
    ) -> None:
        self._signatures = dict(signatures)
        self._seen = seen
        self._public_url = public_url
        self._clock = clock

    @property
    def name(self) -> str:
        return "carrier signature (X-Twilio-Signature, telnyx-signature-ed25519)"

    async def check(self, request: web.Request) -> Refusal | None:
        carrier = request.match_info["carrier"]
        signature = self._signatures.get(carrier)
        if signature is None:
            return refuse(503, f"{carrier} webhooks are not configured: set {SETTINGS[carrier]}")
        if signature.header not in request.headers:
            return self._refuse(
                request, carrier, f"unsigned (no {signature.header})", presented=False
            )
        url = public_base(request, self._public_url) + request.raw_path
        now = self._clock()
        try:
            signed = await signature.verify(request, url, now)
        except BadSignature as e:
            return self._refuse(request, carrier, str(e), presented=True)
        if not await asyncio.to_thread(self._seen.first_time, carrier, signed, now):
            return self._refuse(request, carrier, "replayed: already taken", presented=True)
        return None

    @staticmethod
    def _refuse(request: web.Request, carrier: str, why: str, *, presented: bool) -> Refusal:
        logger.warning("%s webhook from %s refused: %s", carrier, request.remote, why)
        return refuse(403, f"not a {carrier} webhook: {why}", presented=presented)


# --- One-time media tokens ----------------------------------------------------------------


@dataclass(frozen=True)
class Announced:
    """What a carrier's signed webhook said about the call its stream will carry."""

    carrier: str
    remote_number: str | None = None
    local_number: str | None = None


#: The webhook's word on the stream a ``MediaToken`` let in.
ANNOUNCED = web.RequestKey("carrier_announced", Announced)


class StreamTokens:
    """One-time tokens for media streams, in the database at ``engine``: the voice webhook
    mints one per call, the media socket spends it on whichever worker or pod it reaches.
    Only the SHA-256 is kept, so a copy of the table opens no stream and a lookup's timing
    says nothing of a token. Blocking: call it from a thread."""

    def __init__(self, engine: Engine, clock: Clock = time.time) -> None:
        self._engine = engine
        self._clock = clock

    def mint(self, announced: Announced) -> str:
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with self._engine.begin() as connection:
            # Tokens no socket came for go here: each call mints one, so none piles up.
            _purge(connection, MediaStreamToken, now)
            connection.execute(
                insert(MediaStreamToken).values(
                    token_hash=_digest(token),
                    carrier=announced.carrier,
                    remote_number=announced.remote_number,
                    local_number=announced.local_number,
                    expires_at=_utc(now + TOKEN_TTL_S),
                )
            )
        return token

    def spend(self, carrier: str, token: str) -> Announced | None:
        """What the token's webhook announced, once; None for a token unknown, spent,
        expired or minted for another carrier (tried on this one, it is spent too)."""
        now = _utc(self._clock())
        # One statement finds and deletes the row: of two sockets racing for a token, on
        # one worker or two, only the one whose DELETE returns the row gets in.
        spend = (
            delete(MediaStreamToken)
            .where(MediaStreamToken.token_hash == _digest(token), MediaStreamToken.expires_at > now)
            .returning(
                MediaStreamToken.carrier,
                MediaStreamToken.remote_number,
                MediaStreamToken.local_number,
            )
        )
        with self._engine.begin() as connection:
            row = connection.execute(spend).one_or_none()
        if row is None or row.carrier != carrier:
            return None
        return Announced(row.carrier, row.remote_number, row.local_number)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class MediaToken:
    """Admits ``GET /media/{carrier}/{token}`` with a live token, spending it (a replay is
    refused), and keeps what its webhook announced on the request (``ANNOUNCED``)."""

    tokens: StreamTokens

    @property
    def name(self) -> str:
        return "one-time media token (from a signed voice webhook)"

    async def check(self, request: web.Request) -> Refusal | None:
        carrier = request.match_info["carrier"]
        token = request.match_info.get("token")
        if not token:
            return refuse(
                403, f"/media/{carrier} takes only the stream URL of a signed voice webhook"
            )
        announced = await asyncio.to_thread(self.tokens.spend, carrier, token)
        if announced is None:
            logger.warning(
                "%s media socket from %s refused: unknown, spent or expired token",
                carrier,
                request.remote,
            )
            return refuse(403, "this media token is unknown, spent or expired", presented=True)
        request[ANNOUNCED] = announced
        return None
