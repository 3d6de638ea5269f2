"""How long a call may hold its worker's slot: the connect timeout, the longest call, the
longest silence.

A line that never connects (a WebRTC offer abandoned, a room nobody joins), a call left
open with nobody on it, a pipeline stuck after its peer went: each would hold one of the
worker's few slots (``MAX_CALLS``) until a restart. ``LimitWatch`` says which limit a
call has passed, by the clock it is given; ``agent.pipeline.call`` acts on it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

#: The line did not connect within ``connect_s``.
NEVER_CONNECTED = "never_connected"
#: The call lasted ``call_s``.
MAX_DURATION = "max_duration"
#: Neither side spoke for ``silence_s``.
SILENCE = "silence"


@dataclass(frozen=True)
class Limits:
    """A call's limits, in seconds (``CONNECT_TIMEOUT_S``, ``MAX_CALL_S``, ``MAX_SILENCE_S``)."""

    connect_s: float
    call_s: float
    silence_s: float

    def __post_init__(self) -> None:
        for name in ("connect_s", "call_s", "silence_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


class LimitWatch:
    """One call's limits against its clock (monotonic seconds, from its start).

    Silence counts from the connection, or from the end of the last speech of either
    side; while someone speaks it does not count. The connection and the end of speech
    bring a deadline nearer (the silence's): they set ``changed``, so whoever waits for
    ``wait_s()`` waits for that too and asks again.
    """

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._started = clock()
        self._connected_at: float | None = None
        self._quiet_since = self._started
        self._speaking: set[str] = set()
        #: Set when a deadline may have come nearer than ``wait_s()`` said.
        self.changed = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self._connected_at is not None

    def connect(self) -> None:
        """The line connected (the peer is there): the connect timeout no longer applies."""
        if self._connected_at is None:
            self._connected_at = self._quiet_since = self._clock()
            self.changed.set()

    def speaking(self, side: str, on: bool) -> None:
        """``side`` ("caller", "agent") started (``on``) or stopped speaking."""
        if on:
            self._speaking.add(side)
        elif side in self._speaking:
            self._speaking.discard(side)
            if not self._speaking:
                self._quiet_since = self._clock()
                self.changed.set()

    def passed(self) -> str | None:
        """The limit the call has passed, if any (the earliest, when several)."""
        now = self._clock()
        due = [(at, limit) for limit, at in self._deadlines() if at <= now]
        return min(due)[1] if due else None

    def wait_s(self) -> float:
        """Seconds until the next deadline."""
        return max(0.0, min(at for _, at in self._deadlines()) - self._clock())

    def _deadlines(self) -> list[tuple[str, float]]:
        limits = self.limits
        deadlines = [(MAX_DURATION, self._started + limits.call_s)]
        if self._connected_at is None:
            deadlines.append((NEVER_CONNECTED, self._started + limits.connect_s))
        elif not self._speaking:
            deadlines.append((SILENCE, self._quiet_since + limits.silence_s))
        return deadlines
