"""Logged-in browsers: opaque random tokens, kept in the database by their SHA-256.

The cookie carries 256 random bits; the table keeps only their hash, so
reading the table (a backup, a replica) lets no one in. A session ends at the
earlier of an idle timeout and an absolute lifetime, when its user logs out or
is disabled, and when a new login replaces it (rotation: a token planted
before login is worthless after). Everything here blocks: call it from a thread.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from agent.console.users import Account, account_of
from agent.store.tables import User, UserSession


@dataclass(frozen=True)
class SessionPolicy:
    """How long a session lives."""

    #: Ended after this long without a request.
    idle: dt.timedelta = dt.timedelta(minutes=30)
    #: Ended this long after login, however busy (a working day).
    lifetime: dt.timedelta = dt.timedelta(hours=12)
    #: ``last_seen_at`` is written at most this often, not on every request.
    touch_every: dt.timedelta = dt.timedelta(minutes=1)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SessionStore:
    """Sessions in the database at ``engine``."""

    def __init__(self, engine: Engine, policy: SessionPolicy) -> None:
        self._engine = engine
        self.policy = policy

    def create(
        self,
        user_id: int,
        now: dt.datetime,
        *,
        replacing: str | None = None,
        user_agent: str | None = None,
        ip: str | None = None,
    ) -> str:
        """A new session's token; ``replacing`` (the browser's previous token) ends."""
        token = secrets.token_urlsafe(32)
        with Session(self._engine) as session, session.begin():
            if replacing is not None:
                session.execute(
                    delete(UserSession).where(UserSession.token_hash == token_hash(replacing))
                )
            # Housekeeping at the rare moment a session starts: expired rows go.
            session.execute(delete(UserSession).where(UserSession.expires_at <= now))
            session.add(
                UserSession(
                    token_hash=token_hash(token),
                    user_id=user_id,
                    created_at=now,
                    expires_at=min(now + self.policy.idle, now + self.policy.lifetime),
                    last_seen_at=now,
                    user_agent=user_agent[:256] if user_agent else None,
                    # A proxy's X-Forwarded-For is whatever the proxy was sent.
                    ip=ip[:45] if ip else None,
                )
            )
        return token

    def load(self, token: str, now: dt.datetime) -> Account | None:
        """The user of a live session, or None (unknown, expired, or user disabled)."""
        with Session(self._engine) as session, session.begin():
            found = session.execute(
                select(UserSession, User)
                .join(User, User.id == UserSession.user_id)
                .where(UserSession.token_hash == token_hash(token), UserSession.expires_at > now)
            ).one_or_none()
            if found is None:
                return None
            row, user = found
            if user.disabled:
                return None
            if now - row.last_seen_at >= self.policy.touch_every:
                row.last_seen_at = now
                row.expires_at = min(now + self.policy.idle, row.created_at + self.policy.lifetime)
            return account_of(user)

    def end(self, token: str) -> None:
        with Session(self._engine) as session, session.begin():
            session.execute(delete(UserSession).where(UserSession.token_hash == token_hash(token)))
