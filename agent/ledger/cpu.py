"""The worker's CPU time, shared out among the calls it carried.

The calls of a worker run on one event loop, so no call's CPU time can be read on its own.
The process's CPU time (every thread: the loop, VAD and smart-turn, the store's writer) is
read whenever a call starts or ends, and what was spent since the last reading is split
equally among the calls active over that interval. Each call is thus charged a fair share,
the shares add up to what the process spent while it had calls, and the cost is two clock
readings per call, nothing on the audio path. Time spent with no call active (start-up,
idle) is charged to no call: it is the provisioned cost's part.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class WorkerCpu:
    """Charges the process's CPU time to the calls active while it was spent."""

    def __init__(self, clock: Callable[[], float] = time.process_time) -> None:
        self._clock = clock
        self._last = clock()
        self._charged: dict[str, float] = {}

    def _accrue(self) -> None:
        now = self._clock()
        spent, self._last = now - self._last, now
        if self._charged and spent > 0:
            share = spent / len(self._charged)
            for call_id in self._charged:
                self._charged[call_id] += share

    def started(self, call_id: str) -> None:
        """A call began: from now on it shares the CPU spent."""
        self._accrue()
        self._charged.setdefault(call_id, 0.0)

    def ended(self, call_id: str) -> float:
        """A call ended: its share of the CPU seconds spent while it was active (0.0 for a
        call never started here)."""
        self._accrue()
        return self._charged.pop(call_id, 0.0)

    @property
    def active(self) -> int:
        """Calls being charged now."""
        return len(self._charged)


#: The process's meter: CPU time is the process's, so there is one.
WORKER_CPU = WorkerCpu()
