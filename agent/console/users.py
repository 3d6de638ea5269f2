"""Console accounts: adding, disabling and listing them, and checking a password.

Passwords are hashed with argon2id (argon2-cffi's ``PasswordHasher``, its
RFC 9106 defaults). A hash made under older parameters is replaced by one under
the current parameters the next time its owner logs in, so raising the cost
needs no password reset. Accounts are disabled, never deleted: the audit log
keeps pointing at who did what; each change is written to it in the change's
own transaction, with who made it and from where.

A new password is judged as NIST SP 800-63B asks: long enough, and not one
that attackers try first. "First" is zxcvbn's estimate (Dropbox's, from its
lists of 30,000 leaked passwords, English words and names, keyboard walks,
repeats, sequences and dates), which catches ``password1234`` and
``P@ssw0rd!2024`` alike where an exact list would let the variants through.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Engine, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from zxcvbn import zxcvbn

from agent.console.audit import BY_CODE, Actor, entry
from agent.store.tables import Role, User, UserSession

logger = logging.getLogger(__name__)

#: NIST SP 800-63B asks for at least 8; a console full of personal data gets more.
MIN_PASSWORD_LENGTH = 12
#: Long enough for any passphrase, short enough that hashing it is no denial of service.
MAX_PASSWORD_LENGTH = 1024
#: zxcvbn's score a new password needs: 3, "safely unguessable" (10^8 guesses or more), the
#: bar its authors set for a site that hashes slowly, as argon2 does.
MIN_STRENGTH = 3
#: zxcvbn's own limit (its matching grows with the square of the length): a longer
#: password is judged by its start.
_JUDGED = 72
#: zxcvbn keeps the user's words in a module-level dictionary while it judges.
_zxcvbn_lock = threading.Lock()
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
    """Refuse a password that is short, mostly one character, holds the username, or is
    one that attackers try early (``MIN_STRENGTH``). Spaces at either end do not count."""
    core = password.strip()
    if not core:
        raise UserError("the password is empty")
    if len(core) < MIN_PASSWORD_LENGTH:
        raise UserError(
            f"the password is too short: at least {MIN_PASSWORD_LENGTH} characters, "
            "not counting spaces at either end"
        )
    if len(password) > MAX_PASSWORD_LENGTH:
        raise UserError(f"the password is too long: at most {MAX_PASSWORD_LENGTH} characters")
    _, most = Counter(core.lower()).most_common(1)[0]
    if 2 * most > len(core):
        raise UserError("the password is mostly one character, repeated")
    names = _name_parts(username)
    if any(name in core.lower() for name in names):
        raise UserError("the password must not contain the username")
    with _zxcvbn_lock:
        judged = zxcvbn(core[:_JUDGED], user_inputs=list(names))
    if judged["score"] < MIN_STRENGTH:
        why = judged["feedback"]["warning"] or "It is a pattern that is tried early."
        raise UserError(f"the password is too easy to guess: {why[0].lower()}{why[1:-1]}")


def _name_parts(username: str) -> tuple[str, ...]:
    """The username and the part before its ``@``, if three characters or more."""
    name = username.strip().lower()
    return tuple(part for part in dict.fromkeys((name, name.partition("@")[0])) if len(part) >= 3)


@dataclass(frozen=True)
class Attempt:
    """What a login found: ``account`` when the password is right and the account enabled;
    else, for the audit log, the account the name is of (``user_id``; None: no such
    account) and ``why`` it failed."""

    account: Account | None
    user_id: int | None = None
    why: str | None = None


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Users:
    """The accounts in the database at ``engine``; every method is one transaction.

    The methods block (database, argon2): call them from a thread in async code.
    """

    def __init__(
        self,
        engine: Engine,
        hasher: PasswordHasher | None = None,
        clock: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self._engine = engine
        self._hasher = hasher or PasswordHasher()
        self._clock = clock
        # Verified against when the user is unknown, so that answer takes as long as a wrong
        # password: the response time does not tell which usernames exist.
        self._decoy_hash = self._hasher.hash(secrets.token_urlsafe(16))

    def add(self, username: str, password: str, role: str, by: Actor = BY_CODE) -> Account:
        """Create an account; ``UserError`` for a bad name or role, a weak password, a duplicate.

        ``by``: the admin doing it and their address, or ``audit.BY_COMMAND_LINE``; the
        audit entry (``user_add``) says which role was granted."""
        name = normalise_username(username)
        checked_role = parse_role(role)
        check_password(password, name)
        now = self._clock()
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
                session.add(entry(now, "user_add", str(user.id), by, f"role {checked_role.value}"))
                account = account_of(user)
        except IntegrityError:  # added by someone else between the check and the insert
            raise UserError(f"user {name!r} already exists") from None
        logger.info("added user %s (%s)", name, checked_role.value)
        return account

    def disable(self, username: str, by: Actor = BY_CODE) -> Account:
        """Disable an account and end its sessions at once (``by``: as for ``add``)."""
        name = normalise_username(username)
        now = self._clock()
        with Session(self._engine) as session, session.begin():
            user = session.scalar(select(User).where(User.username == name))
            if user is None:
                raise UserError(f"no user {name!r}")
            user.disabled = True
            session.execute(delete(UserSession).where(UserSession.user_id == user.id))
            if by.user_id == user.id:
                raise UserError("you cannot disable your own account")
            session.add(entry(now, "user_disable", str(user.id), by))
            account = account_of(user)
        logger.info("disabled user %s", name)
        return account

    def list(self) -> list[Account]:
        with Session(self._engine) as session:
            return [account_of(u) for u in session.scalars(select(User).order_by(User.username))]

    def authenticate(self, username: str, password: str) -> Attempt:
        """The account if the password is right and the account enabled; else why not.

        Unknown, disabled and wrong all cost one argon2 verification, so the time taken
        does not tell them apart (the caller answers them alike).
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
                return Attempt(None, why="unknown username")
            if not self._verify(user.password_hash, password):
                return Attempt(None, user.id, "wrong password")
            if user.disabled:
                return Attempt(None, user.id, "account disabled")
            if self._hasher.check_needs_rehash(user.password_hash):
                user.password_hash = self._hasher.hash(password)
                logger.info("rehashed the password of user %s under new parameters", name)
            return Attempt(account_of(user), user.id)

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
