"""Per-source brakes for what reaches the SIP socket: new requests, and unreadable datagrams.

A source is an IP address as the datagram gives it; over UDP anyone can forge one, so these
limit the work and the log lines a flood costs, not who may call (that is digest and the allow
list). :class:`RateLimiter` meters new requests (the endpoint answers 503 past it);
:class:`Quarantine` meters unreadable datagrams: past a few, a source's datagrams are dropped
unread for a while, and the warnings they cause are themselves rate-limited.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class RateLimiter:
    """A token bucket per source address for new requests: ``burst`` at once, then ``rate``
    a second. It keeps at most ``max_sources`` buckets: when full, the refilled ones (sources
    gone quiet, the same as no bucket) are dropped, and if every one is still draining (a
    spoofed flood from everywhere, which no per-source limit stops) all are."""

    def __init__(self, rate: float, burst: float, max_sources: int = 10_000) -> None:
        self.rate, self.burst, self.max_sources = rate, burst, max_sources
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, source: str) -> bool:
        now = time.monotonic()
        tokens, last = self._buckets.get(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if source not in self._buckets and len(self._buckets) >= self.max_sources:
            self._buckets = {
                s: (t, at)
                for s, (t, at) in self._buckets.items()
                if t + (now - at) * self.rate < self.burst
            }
            if len(self._buckets) >= self.max_sources:
                self._buckets.clear()
        allowed = tokens >= 1
        self._buckets[source] = (tokens - 1 if allowed else tokens, now)
        return allowed


class Quarantine:
    """A budget of unreadable datagrams per source: ``burst`` at once, then ``rate`` a second.

    A source past it is ignored for ``ban_s``: :meth:`ignored`, a dictionary look-up, drops its
    datagrams before they are parsed or answered (a 400 to a forged source is a reflection).
    Warnings: at most one per source per ``log_interval_s`` (the next says how many were
    suppressed), one per ban, and at most ``max_warnings`` per interval over all sources
    (spoofed from everywhere), the excess summed up in the first warning after it.
    """

    def __init__(
        self,
        burst: float = 10,
        rate: float = 1.0,
        ban_s: float = 10.0,
        log_interval_s: float = 10.0,
        max_warnings: int = 20,
        max_sources: int = 10_000,
    ) -> None:
        self.budget = RateLimiter(rate, burst, max_sources)
        self.ban_s, self.log_interval_s = ban_s, log_interval_s
        self.max_warnings, self.max_sources = max_warnings, max_sources
        #: source -> (ignored until, datagrams dropped unread since)
        self._banned: dict[str, tuple[float, int]] = {}
        #: source -> (when its last warning went out, warnings suppressed since)
        self._logged: dict[str, tuple[float, int]] = {}
        self._window, self._warnings, self._suppressed = float("-inf"), 0, 0

    def ignored(self, source: str) -> bool:
        """True while ``source`` is banned: drop its datagram unread (the cheap check first)."""
        if not self._banned:
            return False
        entry = self._banned.get(source)
        if entry is None:
            return False
        until, dropped = entry
        if time.monotonic() < until:
            self._banned[source] = (until, dropped + 1)
            return True
        del self._banned[source]
        log.info("SIP source %s heard again (%d datagrams dropped unread)", source, dropped)
        return False

    def unreadable(self, source: str, where: str, error: object) -> bool:
        """Count an unreadable datagram from ``source`` (``where``: its address, for the log);
        False once its budget is spent, and the source is ignored for ``ban_s`` from now."""
        if self.budget.allow(source):
            self._warn(source, where, error)
            return True
        now = time.monotonic()
        if len(self._banned) >= self.max_sources:
            self._banned = {s: e for s, e in self._banned.items() if e[0] > now}
            if len(self._banned) >= self.max_sources:
                self._banned.clear()
        self._banned[source] = (now + self.ban_s, 0)
        _, suppressed = self._logged.pop(source, (0.0, 0))
        log.warning(
            "SIP source %s sent too many unreadable datagrams (%d warnings suppressed): "
            "ignoring it for %.0f s",
            source,
            suppressed,
            self.ban_s,
        )
        return False

    def _warn(self, source: str, where: str, error: object) -> None:
        now = time.monotonic()
        last, suppressed = self._logged.get(source, (float("-inf"), 0))
        if now - last < self.log_interval_s:
            self._logged[source] = (last, suppressed + 1)
            return
        if now - self._window >= self.log_interval_s:
            self._window, self._warnings = now, 0
        if self._warnings >= self.max_warnings:
            self._suppressed += 1
            return
        self._warnings += 1
        if len(self._logged) >= self.max_sources:
            horizon = now - self.log_interval_s
            self._logged = {s: e for s, e in self._logged.items() if e[0] > horizon}
            if len(self._logged) >= self.max_sources:
                self._logged.clear()
        self._logged[source] = (now, 0)
        more = f" ({suppressed} more from {source} suppressed)" if suppressed else ""
        if self._suppressed:
            more += f" ({self._suppressed} more from elsewhere suppressed)"
            self._suppressed = 0
        log.warning("unreadable SIP datagram from %s: %s%s", where, error, more)
