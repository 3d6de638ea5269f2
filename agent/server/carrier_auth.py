"""Who may speak as a carrier: signed voice webhooks, and the media streams they announced.

Without this, anyone could post ``/voice/twilio`` or open ``/media/twilio`` and start a
call that stores whatever caller number it claims. So:

- a voice webhook is taken only with its carrier's signature (checked by
  ``telephony.carriers.signatures``: Twilio's HMAC, Telnyx's Ed25519). A signed request is
  taken once: the same one again within ``REPLAY_WINDOW_S`` is a replay;
- the webhook's answer names a stream URL that holds a one-time token (random,
  ``TOKEN_TTL_S`` to live); the media socket is upgraded only with a live token, which
  it spends, and the call gets the numbers the signed webhook gave.

Tokens and the replay memory are kept in the database, not in the process: the
socket is a new connection, which the supervisor's entry or a Service may send to
another worker or pod than the one that answered the webhook.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web
from sqlalchemy import Connection, Engine, delete, insert
from sqlalchemy.exc import IntegrityError

from agent.access import Refusal, refuse
from agent.store.tables import MediaStreamToken, SeenWebhook
from telephony.carriers.signatures import (
    REPLAY_WINDOW_S,
    SETTINGS,
    Announced,
    BadSignature,
    Clock,
    WebhookSignature,
    public_base,
)

logger = logging.getLogger(__name__)

#: The carrier opens the stream within a second or two of our answer.
TOKEN_TTL_S = 60.0


def _utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def _purge(connection: Connection, table: type[MediaStreamToken | SeenWebhook], now: float) -> None:
    """Drop ``table``'s expired rows: an index range, a few rows at most."""
    connection.execute(delete(table).where(table.expires_at <= _utc(now)))


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
