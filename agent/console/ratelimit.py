"""The brake on password guessing: failed logins make the next attempt wait, longer each time.

Three counts, so that an attacker is slowed without locking the owner out:

- per account and address: the tightest, and the one that stops a guesser at one
  address; it is cleared when the owner logs in from there;
- per address: looser (an office shares one), against spraying many accounts;
- per account, from every address: against a guesser with many addresses. It
  would let an attacker slow the owner down, so it spares the addresses the
  account has logged in from lately, and it waits at most ``LoginLimits.account``'s
  ``longest``.

Each count lets ``free`` failures go, then makes the next attempt wait ``first``,
and twice the last wait after each further failure, up to ``longest``: a person
who mistypes is hardly slowed, a script soon makes a guess a quarter of an hour.
A count is forgotten ``memory`` after its last failure.

Kept in the process's memory: a restart forgives, and each worker counts for
itself (docs/console.md). The clock is the caller's, so the waits can be
tested without waiting.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """After ``free`` failures, each makes the next attempt wait: ``first``, then twice the
    last wait, at most ``longest``. Failures are forgotten ``memory`` after the last one."""

    free: int
    first: dt.timedelta
    longest: dt.timedelta
    memory: dt.timedelta = dt.timedelta(hours=1)

    def wait(self, failures: int) -> dt.timedelta:
        """How long after the last of ``failures`` the next attempt must wait."""
        if failures < self.free:
            return dt.timedelta(0)
        seconds = self.first.total_seconds() * 2.0 ** min(failures - self.free, 64)
        if seconds >= self.longest.total_seconds():
            return self.longest
        return dt.timedelta(seconds=seconds)


@dataclass
class _Count:
    failures: int
    last: dt.datetime


class Throttle:
    """Failed attempts per key (an address, an account, the pair) and the wait they impose.

    At most ``max_keys`` keys are kept: past that, the one that failed longest ago goes.
    """

    def __init__(self, backoff: Backoff, max_keys: int = 10_000) -> None:
        self.backoff = backoff
        self._max_keys = max_keys
        self._counts: OrderedDict[Hashable, _Count] = OrderedDict()

    def retry_after(self, key: Hashable, now: dt.datetime) -> float | None:
        """Seconds until ``key`` may try again, or None if it may now."""
        count = self._current(key, now)
        if count is None:
            return None
        until = count.last + self.backoff.wait(count.failures)
        return (until - now).total_seconds() if until > now else None

    def failed(self, key: Hashable, now: dt.datetime) -> None:
        count = self._current(key, now)
        if count is None:
            count = self._counts[key] = _Count(0, now)
            if len(self._counts) > self._max_keys:
                self._counts.popitem(last=False)
        count.failures += 1
        count.last = max(count.last, now)
        self._counts.move_to_end(key)

    def forgive(self, key: Hashable) -> None:
        """Take back one failure (an attempt counted before it was judged, then right)."""
        count = self._counts.get(key)
        if count is not None:
            count.failures -= 1
            if count.failures <= 0:
                del self._counts[key]

    def reset(self, key: Hashable) -> None:
        self._counts.pop(key, None)

    def _current(self, key: Hashable, now: dt.datetime) -> _Count | None:
        """``key``'s count; None (and forgotten) when its last failure is out of memory."""
        count = self._counts.get(key)
        if count is not None and now - count.last >= self.backoff.memory:
            del self._counts[key]
            return None
        return count


_SECOND = dt.timedelta(seconds=1)
_MINUTE = dt.timedelta(minutes=1)


@dataclass(frozen=True)
class LoginLimits:
    """The three counts of failed logins, and how long an address stays the account's."""

    pair: Backoff = Backoff(free=5, first=30 * _SECOND, longest=15 * _MINUTE)
    address: Backoff = Backoff(free=20, first=30 * _SECOND, longest=15 * _MINUTE)
    account: Backoff = Backoff(free=10, first=5 * _SECOND, longest=2 * _MINUTE)
    #: An address the account logged in from this recently is spared the account's count.
    known_for: dt.timedelta = dt.timedelta(days=30)
    max_keys: int = 10_000


class LoginThrottle:
    """The login form's brake: ``retry_after`` before the password is checked, ``failed``
    as soon as it is to be checked (so concurrent guesses all count), ``succeeded`` when
    it was right."""

    def __init__(self, limits: LoginLimits | None = None) -> None:
        self.limits = limits = limits or LoginLimits()
        self._pairs = Throttle(limits.pair, limits.max_keys)
        self._addresses = Throttle(limits.address, limits.max_keys)
        self._accounts = Throttle(limits.account, limits.max_keys)
        #: (account, address) -> when the account last logged in from there.
        self._known: OrderedDict[tuple[str, str], dt.datetime] = OrderedDict()

    def retry_after(self, account: str, address: str, now: dt.datetime) -> float | None:
        """Seconds until ``account`` may be tried from ``address``, or None if it may now."""
        waits = [
            self._pairs.retry_after((account, address), now),
            self._addresses.retry_after(address, now),
        ]
        if not self._known_place(account, address, now):
            waits.append(self._accounts.retry_after(account, now))
        return max((w for w in waits if w is not None), default=None)

    def failed(self, account: str, address: str, now: dt.datetime) -> None:
        self._pairs.failed((account, address), now)
        self._addresses.failed(address, now)
        self._accounts.failed(account, now)

    def succeeded(self, account: str, address: str, now: dt.datetime) -> None:
        """The attempt counted by ``failed`` was right: it is taken back, the pair is
        cleared, and ``address`` becomes one the account is known at."""
        self._pairs.reset((account, address))
        self._addresses.forgive(address)
        self._accounts.forgive(account)
        self._known[(account, address)] = now
        self._known.move_to_end((account, address))
        if len(self._known) > self.limits.max_keys:
            self._known.popitem(last=False)

    def _known_place(self, account: str, address: str, now: dt.datetime) -> bool:
        since = self._known.get((account, address))
        return since is not None and now - since < self.limits.known_for
