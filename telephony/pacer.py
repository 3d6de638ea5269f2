"""One thread that wakes every call's RTP sender on its 20 ms schedule.

An asyncio task per call paced by ``asyncio.sleep`` sends a packet as late as the event
loop is busy when its deadline comes, and the loop is busy with every call's pipeline:
with stub models two calls on a worker already pushed the worst packets past 5 ms. Here
the senders' deadlines live on a heap in a thread of their own, which sleeps in the
kernel and only needs the GIL for the few microseconds a packet takes to build.

A thread waiting for the GIL gets it within the interpreter's switch interval (5 ms by
default, as long as the whole budget), so starting the pacer lowers it to
``SWITCH_INTERVAL_S``; the loop thread pays a little in more frequent GIL hand-offs, only
while the pacer wants it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Protocol

logger = logging.getLogger(__name__)

#: The interpreter's GIL switch interval while a pacer runs (seconds).
SWITCH_INTERVAL_S = 0.0005


class Paced(Protocol):
    """What the pacer drives: one slot's packet, given how late its wake-up came."""

    def send_slot(self, slot: int, late_s: float) -> None:
        """Send slot ``slot`` (a jump from the last one means slots were skipped)."""


@dataclass(eq=False)
class Schedule:
    """A stream on the pacer: slot ``n`` is due at ``start + n * period_s``."""

    stream: Paced
    start: float
    period_s: float
    max_catch_up: int
    slot: int = 0
    active: bool = True
    #: Slots whose ``send_slot`` raised (the first is logged with its traceback).
    failures: int = 0

    @property
    def deadline(self) -> float:
        return self.start + self.slot * self.period_s


class Pacer:
    """A heap of schedules and the daemon thread that serves them (started on first use)."""

    def __init__(self, name: str = "rtp-pacer") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, Schedule]] = []
        self._order = itertools.count()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, stream: Paced, period_s: float, max_catch_up: int) -> Schedule:
        """Schedule ``stream``: its first slot is due now."""
        schedule = Schedule(stream, time.monotonic(), period_s, max_catch_up)
        with self._lock:
            heapq.heappush(self._heap, (schedule.deadline, next(self._order), schedule))
            if self._thread is None:
                if sys.getswitchinterval() > SWITCH_INTERVAL_S:
                    sys.setswitchinterval(SWITCH_INTERVAL_S)
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._wake.set()
        return schedule

    def remove(self, schedule: Schedule) -> None:
        """No slot of ``schedule`` starts after this returns (one may be finishing)."""
        with self._lock:
            schedule.active = False

    def _next(self) -> tuple[Schedule | None, float | None]:
        """The schedule due now, or how long until the next one is (None: none at all)."""
        with self._lock:
            while self._heap and not self._heap[0][2].active:
                heapq.heappop(self._heap)
            if not self._heap:
                return None, None
            deadline, _, schedule = self._heap[0]
            wait = deadline - time.monotonic()
            if wait > 0:
                return None, wait
            heapq.heappop(self._heap)
            return schedule, None

    def _run(self) -> None:
        while True:
            self._wake.clear()
            schedule, wait = self._next()
            if schedule is None:
                self._wake.wait(wait)
                continue
            late = time.monotonic() - schedule.deadline
            if late > schedule.max_catch_up * schedule.period_s:
                # Far behind (the machine stalled): skip ahead rather than burst.
                skip = int(late / schedule.period_s)
                schedule.slot += skip
                late -= skip * schedule.period_s
            try:
                schedule.stream.send_slot(schedule.slot, late)
            except Exception:
                schedule.failures += 1
                if schedule.failures == 1:  # not 50 tracebacks a second
                    logger.exception("a paced stream failed; it stays scheduled")
            schedule.slot += 1
            with self._lock:
                if schedule.active:
                    heapq.heappush(self._heap, (schedule.deadline, next(self._order), schedule))


#: The pacer every RTP session of this process shares.
PACER = Pacer()
