"""The 20 ms clock of every outgoing RTP stream: a heap of absolute deadlines.

It is driven by the one thread of the RTP sender process (``telephony.rtp.sender``), which
waits for ``wait_s()`` or a message from the worker, whichever comes first, then calls
``run_due()``. Deadlines are absolute (``start + n * period``) so lateness never
accumulates; a stream that fell far behind (the machine stalled) skips ahead rather than
bursting the missed packets at the far end's jitter buffer.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Protocol

logger = logging.getLogger(__name__)


class Paced(Protocol):
    """What the pacer drives: one slot's packet, given how late it comes."""

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
    """The schedules of one sending thread, earliest deadline first."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Schedule]] = []
        self._order = itertools.count()

    def add(
        self, stream: Paced, period_s: float, max_catch_up: int, start: float | None = None
    ) -> Schedule:
        """Schedule ``stream``: its first slot is due at ``start`` (monotonic; default now)."""
        schedule = Schedule(
            stream, time.monotonic() if start is None else start, period_s, max_catch_up
        )
        self._push(schedule)
        return schedule

    def remove(self, schedule: Schedule) -> None:
        """No slot of ``schedule`` is sent after this."""
        schedule.active = False

    def wait_s(self) -> float | None:
        """Seconds until the next slot is due (0: due now; None: nothing scheduled)."""
        heap = self._heap
        while heap and not heap[0][2].active:
            heapq.heappop(heap)
        if not heap:
            return None
        return max(0.0, heap[0][0] - time.monotonic())

    def run_due(self) -> int:
        """Send every slot due by now, earliest first; how many were sent."""
        sent = 0
        heap = self._heap
        while heap:
            deadline, _, schedule = heap[0]
            if not schedule.active:
                heapq.heappop(heap)
                continue
            now = time.monotonic()
            if deadline > now:
                break
            heapq.heappop(heap)
            self._send(schedule, now - deadline)
            sent += 1
            schedule.slot += 1
            if schedule.active:
                self._push(schedule)
        return sent

    def _push(self, schedule: Schedule) -> None:
        heapq.heappush(self._heap, (schedule.deadline, next(self._order), schedule))

    @staticmethod
    def _send(schedule: Schedule, late: float) -> None:
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
