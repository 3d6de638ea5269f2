"""The brake on password guessing: so many failed logins per key in a sliding window.

Kept in the process's memory: a restart forgives, and each worker counts for
itself (docs/console.md). The clock is the caller's, so the window can be
tested without waiting.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """At most ``failures`` failed attempts within ``window``."""

    failures: int
    window: dt.timedelta


class FailureLimiter:
    """Failed attempts per key (an IP address, a username) within a sliding window."""

    def __init__(self, limit: Limit, max_keys: int = 10_000) -> None:
        self._limit = limit
        self._max_keys = max_keys
        self._failures: dict[Hashable, deque[dt.datetime]] = {}

    def retry_after(self, key: Hashable, now: dt.datetime) -> float | None:
        """Seconds until ``key`` may try again, or None if it may now."""
        failures = self._current(key, now)
        if failures is None or len(failures) < self._limit.failures:
            return None
        return max(1.0, (failures[0] + self._limit.window - now).total_seconds())

    def failed(self, key: Hashable, now: dt.datetime) -> None:
        failures = self._current(key, now)
        if failures is None:
            if len(self._failures) >= self._max_keys:
                self._forget_oldest(now)
            failures = self._failures[key] = deque()
        failures.append(now)

    def forgive(self, key: Hashable, at: dt.datetime) -> None:
        """Take back one failure recorded at ``at`` (an attempt counted before it was judged)."""
        failures = self._failures.get(key)
        if failures is not None and at in failures:
            failures.remove(at)
            if not failures:
                del self._failures[key]

    def reset(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def _current(self, key: Hashable, now: dt.datetime) -> deque[dt.datetime] | None:
        """``key``'s failures still inside the window; None (and forgotten) if none are."""
        failures = self._failures.get(key)
        if failures is None:
            return None
        start = now - self._limit.window
        while failures and failures[0] <= start:
            failures.popleft()
        if not failures:
            del self._failures[key]
            return None
        return failures

    def _forget_oldest(self, now: dt.datetime) -> None:
        """Make room: drop keys whose failures have aged out, else the stalest key."""
        for key in list(self._failures):
            self._current(key, now)
        if len(self._failures) >= self._max_keys:
            stalest = min(self._failures, key=lambda k: self._failures[k][-1])
            del self._failures[stalest]
