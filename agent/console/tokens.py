"""API tokens: how machine clients (a CI job, a scraper, a dialer) call the agent's API.

A token is ``agt_`` and 256 random bits; the prefix makes a leaked one easy to spot
(secret scanners, logs). The table keeps only its SHA-256: the token is high-entropy,
so a slow password hash would add nothing, and a copy of the table calls nothing. It
is shown once, when it is made. Each token carries scopes (``SCOPES``) and no role:
a route lets it in with the ``Token(scope)`` rule of ``agent.access.guard``. Tokens
are revoked, never deleted, so the audit log keeps pointing at something; making and
revoking one are audited. Everything here but ``Token.check`` blocks: call it from a
thread in async code. See docs/console.md, "API tokens".
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import hdrs, web
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.access import Refusal, refuse
from agent.console.audit import Actor, entry
from agent.console.context import ENGINE, now
from agent.console.sessions import token_hash
from agent.store.tables import ApiToken, User

logger = logging.getLogger(__name__)

#: What every token starts with, so that one pasted somewhere is recognised.
PREFIX = "agt_"
#: The scopes a token may carry, and what each lets it do. No scope implies another.
SCOPES = {
    "campaigns:write": "start a dialing campaign (POST /api/campaigns)",
    "campaigns:read": "read a campaign's progress (GET /api/campaigns/{id})",
    "livekit:dispatch": "send the agent into a LiveKit room (POST /api/livekit/dispatch)",
    "metrics:read": "scrape the Prometheus metrics (GET /metrics)",
}
MAX_NAME_LENGTH = 100
#: ``last_used_at`` is written at most this often, not on every request.
TOUCH_EVERY = dt.timedelta(minutes=1)
#: Longer than any token we make: a longer header is not hashed, only refused.
_MAX_TOKEN_LENGTH = 128


class TokenError(ValueError):
    """A token operation refused; the message says why and is safe to show."""


@dataclass(frozen=True)
class TokenInfo:
    """A token as the console shows it: everything but the secret."""

    id: int
    name: str
    scopes: tuple[str, ...]
    #: The console user who made it; None: the command line.
    created_by: str | None
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


#: The token a request was let in with, set by ``Token``; absent otherwise.
API_TOKEN = web.RequestKey("api_token", TokenInfo)


def parse_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """``scopes`` sorted and without repeats; ``TokenError`` for none or an unknown one."""
    chosen = sorted({scope.strip() for scope in scopes})
    if not chosen:
        raise TokenError(f"a token needs at least one scope: {', '.join(SCOPES)}")
    unknown = [scope for scope in chosen if scope not in SCOPES]
    if unknown:
        raise TokenError(
            f"unknown scope {', '.join(map(repr, unknown))}: one of {', '.join(SCOPES)}"
        )
    return tuple(chosen)


def check_name(name: str) -> str:
    """The trimmed name; ``TokenError`` if empty, too long or with control characters."""
    trimmed = name.strip()
    if not trimmed:
        raise TokenError("a token needs a name: what uses it (say, 'ci-dialer')")
    if len(trimmed) > MAX_NAME_LENGTH:
        raise TokenError(f"the name is too long: at most {MAX_NAME_LENGTH} characters")
    if any(not c.isprintable() for c in trimmed):
        raise TokenError("the name has control characters")
    return trimmed


class Tokens:
    """The API tokens in the database at ``engine``; every method is one transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def create(
        self,
        name: str,
        scopes: Iterable[str],
        at: dt.datetime,
        *,
        by: Actor,
    ) -> tuple[str, TokenInfo]:
        """A new token and its info; the token is not kept, so show it now or never.

        ``by``: the admin doing it, from where (``audit.BY_COMMAND_LINE``: the command line)."""
        checked_name = check_name(name)
        checked_scopes = parse_scopes(scopes)
        token = PREFIX + secrets.token_urlsafe(32)
        with Session(self._engine) as session, session.begin():
            row = ApiToken(
                name=checked_name,
                token_hash=token_hash(token),
                scopes=" ".join(checked_scopes),
                created_by=by.user_id,
                created_at=at,
            )
            session.add(row)
            session.flush()
            detail = f"{checked_name}: {' '.join(checked_scopes)}"
            session.add(entry(at, "token_create", _object_id(row), by, detail))
            info = _info(session, row)
        logger.info("created API token %d (%s) with %s", info.id, info.name, " ".join(info.scopes))
        return token, info

    def revoke(self, token_id: int, at: dt.datetime, *, by: Actor) -> TokenInfo:
        """Revoke a token at once (``by``: as for ``create``)."""
        with Session(self._engine) as session, session.begin():
            row = session.get(ApiToken, token_id)
            if row is None:
                raise TokenError(f"no token {token_id}")
            if row.revoked_at is not None:
                raise TokenError(f"token {token_id} ({row.name}) is already revoked")
            row.revoked_at = at
            session.add(entry(at, "token_revoke", _object_id(row), by, row.name))
            info = _info(session, row)
        logger.info("revoked API token %d (%s)", info.id, info.name)
        return info

    def list(self) -> list[TokenInfo]:
        """All tokens, revoked ones too, oldest first."""
        with Session(self._engine) as session:
            query = (
                select(ApiToken, User.username)
                .outerjoin(User, User.id == ApiToken.created_by)
                .order_by(ApiToken.id)
            )
            return [_info_of(row, username) for row, username in session.execute(query)]

    def look_up(self, token: str, at: dt.datetime) -> TokenInfo | None:
        """The token's info, or None if there is no such token; a live token's use at
        ``at`` is recorded, unless one was recorded less than ``TOUCH_EVERY`` before."""
        if not token.startswith(PREFIX) or len(token) > _MAX_TOKEN_LENGTH:
            return None
        # Found by its hash: an index lookup, and no secret is compared byte by byte.
        with Session(self._engine) as session, session.begin():
            row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash(token)))
            if row is None:
                return None
            if row.revoked_at is None and (
                row.last_used_at is None or at - row.last_used_at >= TOUCH_EVERY
            ):
                row.last_used_at = at
            return _info(session, row)


@dataclass(frozen=True)
class Token:
    """A machine client with an API token that carries ``scope``, sent as
    ``Authorization: Bearer agt_...``. No cookie is involved, so there is no CSRF to
    check: another site's page cannot make a browser send this header.

    The app needs the console's ``ENGINE`` and ``CLOCK`` (``setup_auth`` sets them).
    """

    scope: str

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope {self.scope!r}: one of {', '.join(SCOPES)}")

    @property
    def name(self) -> str:
        return f"API token with {self.scope}"

    async def check(self, request: web.Request) -> Refusal | None:
        scheme, _, credentials = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        credentials = credentials.strip()
        if scheme.lower() != "bearer" or not credentials:
            # Another scheme is someone else's credential, unless it is plainly ours.
            ours = credentials.startswith(PREFIX)
            return self._refuse(
                401,
                f"send an API token with the scope {self.scope} as "
                f"{hdrs.AUTHORIZATION}: Bearer {PREFIX}...",
                presented=ours,
            )
        if ENGINE not in request.app:
            raise RuntimeError("a Token guard on an app without the console's engine")
        tokens = Tokens(request.app[ENGINE])
        info = await asyncio.to_thread(tokens.look_up, credentials, now(request.app))
        if info is None:
            return self._refuse(401, "unknown API token", presented=True)
        if info.revoked:
            return self._refuse(401, "this API token was revoked", presented=True)
        if self.scope not in info.scopes:
            return self._refuse(403, f"this API token lacks the scope {self.scope}", presented=True)
        request[API_TOKEN] = info
        return None

    def _refuse(self, status: int, message: str, *, presented: bool) -> Refusal:
        refusal = refuse(status, message, presented=presented)
        # RFC 6750: say which scheme and scope would do, and why this one did not.
        challenge = f'Bearer scope="{self.scope}"'
        if presented:
            error = "insufficient_scope" if status == 403 else "invalid_token"
            challenge += f', error="{error}"'
        refusal.response.headers[hdrs.WWW_AUTHENTICATE] = challenge
        return refusal


def _info(session: Session, row: ApiToken) -> TokenInfo:
    creator = session.get(User, row.created_by) if row.created_by is not None else None
    return _info_of(row, creator.username if creator is not None else None)


def _info_of(row: ApiToken, created_by: str | None) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        name=row.name,
        scopes=tuple(row.scopes.split()),
        created_by=created_by,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


def _object_id(row: ApiToken) -> str:
    """The audit log's name of a token: apart from user ids, which are bare numbers."""
    return f"token:{row.id}"
