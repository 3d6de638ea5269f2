"""Console accounts: adding, disabling and listing them, and checking a password.

Passwords are hashed with argon2id (argon2-cffi's ``PasswordHasher``, its
RFC 9106 defaults). A hash made under older parameters is replaced by one under
the current parameters the next time its owner logs in, so raising the cost
needs no password reset. Accounts are disabled, never deleted: the audit log
keeps pointing at who did what.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Engine, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from agent.models import AuditEntry, Role, User, UserSession

logger = logging.getLogger(__name__)

#: NIST SP 800-63B asks for at least 8; a console full of personal data gets more.
MIN_PASSWORD_LENGTH = 12
#: Long enough for any passphrase, short enough that hashing it is no denial of service.
MAX_PASSWORD_LENGTH = 1024
_USERNAME = re.compile(r"[a-z0-9._@+-]{1,254}")


class UserError(ValueError):
    """An account operation refused; the message says why and is safe to show."""


@dataclass(frozen=True)
class Account:
    """A user as the rest of the console sees it: no hash, not bound to a session."""

    id: int
    username: str
    role: Role
    created_at: dt.datetime
    disabled: bool


def normalise_username(username: str) -> str:
    """The stored form of a login name: trimmed and lower-cased, so ``Ann@X`` is ``ann@x``."""
    name = username.strip().lower()
    if not _USERNAME.fullmatch(name):
        raise UserError(f"bad username {username!r}: 1 to 254 of letters, digits and . _ @ + -")
    return name


def parse_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise UserError(
            f"unknown role {role!r}: one of {', '.join(r.value for r in Role)}"
        ) from None


def check_password(password: str, username: str) -> None:
    """Refuse passwords that are empty, short, or the username itself."""
    if not password.strip():
        raise UserError("the password is empty")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise UserError(f"the password is too short: at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise UserError(f"the password is too long: at most {MAX_PASSWORD_LENGTH} characters")
    if password.strip().lower() == username:
        raise UserError("the password must not be the username")


class Users:
    """The accounts in the database at ``engine``; every method is one transaction.

    The methods block (database, argon2): call them from a thread in async code.
    """

    def __init__(self, engine: Engine, hasher: PasswordHasher | None = None) -> None:
        self._engine = engine
        self._hasher = hasher or PasswordHasher()
        # Verified against when the user is unknown, so that answer takes as long as a wrong
        # password: the response time does not tell which usernames exist.
        self._decoy_hash = self._hasher.hash(secrets.token_urlsafe(16))

    def add(self, username: str, password: str, role: str, by: int | None = None) -> Account:
        """Create an account; ``UserError`` for a bad name or role, a weak password, a duplicate.

        ``by``: the admin doing it (the audit log's user); None: the command line."""
        name = normalise_username(username)
        checked_role = parse_role(role)
        check_password(password, name)
        now = dt.datetime.now(dt.UTC)
        try:
            with Session(self._engine) as session, session.begin():
                if session.scalar(select(User.id).where(User.username == name)) is not None:
                    raise UserError(f"user {name!r} already exists")
                user = User(
                    username=name,
                    password_hash=self._hasher.hash(password),
                    role=checked_role.value,
                    created_at=now,
                    disabled=False,
                )
                session.add(user)
                session.flush()
                session.add(_change(now, "user_add", user, by))
                account = account_of(user)
        except IntegrityError:  # added by someone else between the check and the insert
            raise UserError(f"user {name!r} already exists") from None
        logger.info("added user %s (%s)", name, checked_role.value)
        return account

    def disable(self, username: str, by: int | None = None) -> Account:
        """Disable an account and end its sessions at once (``by``: as for ``add``)."""
        name = normalise_username(username)
        now = dt.datetime.now(dt.UTC)
        with Session(self._engine) as session, session.begin():
            user = session.scalar(select(User).where(User.username == name))
            if user is None:
                raise UserError(f"no user {name!r}")
            user.disabled = True
            session.execute(delete(UserSession).where(UserSession.user_id == user.id))
            if by == user.id:
                raise UserError("you cannot disable your own account")
            session.add(_change(now, "user_disable", user, by))
            account = account_of(user)
        logger.info("disabled user %s", name)
        return account

    def list(self) -> list[Account]:
        with Session(self._engine) as session:
            return [account_of(u) for u in session.scalars(select(User).order_by(User.username))]

    def authenticate(self, username: str, password: str) -> Account | None:
        """The account if the password is right and the account enabled, else None.

        Unknown, disabled and wrong all answer None after one argon2 verification,
        so neither the answer nor its timing tells them apart.
        """
        try:
            name = normalise_username(username)
        except UserError:
            name = None
        with Session(self._engine) as session, session.begin():
            user = None
            if name is not None and len(password) <= MAX_PASSWORD_LENGTH:
                user = session.scalar(select(User).where(User.username == name))
            if user is None:
                self._verify(self._decoy_hash, password[:MAX_PASSWORD_LENGTH])
                return None
            if not self._verify(user.password_hash, password) or user.disabled:
                return None
            if self._hasher.check_needs_rehash(user.password_hash):
                user.password_hash = self._hasher.hash(password)
                logger.info("rehashed the password of user %s under new parameters", name)
            return account_of(user)

    def _verify(self, password_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(password_hash, password)
        except VerificationError:
            return False
        except InvalidHashError:
            logger.error("a stored password hash is not an argon2 hash")
            return False


def account_of(user: User) -> Account:
    """``user`` as an ``Account``, safe to use after its database session closes."""
    return Account(
        id=user.id,
        username=user.username,
        role=Role(user.role),
        created_at=user.created_at,
        disabled=user.disabled,
    )


def _change(at: dt.datetime, action: str, user: User, by: int | None) -> AuditEntry:
    """An audit entry for an account change by ``by``; None: done at the command line."""
    return AuditEntry(at=at, user_id=by, action=action, object_id=str(user.id), ip=None)
