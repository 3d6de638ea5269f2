"""A model service's availability: a circuit breaker that keeps it out and probes it back.

A fallback adapter (``agent.pipeline.tts_fallback``; an STT or LLM adapter would use it
the same way) holds one breaker per service it can skip. The breaker outlives calls: one
is shared by all calls of the process, so a service that failed ``threshold`` times in a
row is skipped by every call at once instead of each call paying the failures again.
While it is open a background task runs a probe every ``probe_interval_s`` until one
succeeds and closes it. A probe belongs to a call (it speaks through that call's
connections), so calls attach theirs while they run and the latest attached is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

#: A small request to the service: whether it answered well.
Probe = Callable[[], Awaitable[bool]]


class CircuitBreaker:
    """Opens after ``threshold`` consecutive failures; a background probe closes it."""

    def __init__(self, *, threshold: int = 3, probe_interval_s: float = 5.0) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        if probe_interval_s < 0:
            raise ValueError("probe_interval_s must not be negative")
        self.threshold = threshold
        self.probe_interval_s = probe_interval_s
        self.failures = 0
        self._probes: list[Probe] = []
        self._probe_task: asyncio.Task[None] | None = None

    @property
    def open(self) -> bool:
        return self.failures >= self.threshold

    def succeeded(self) -> None:
        self.failures = 0

    def failed(self) -> bool:
        """Count a failure; True for the one that opens the breaker (the probing starts)."""
        self.failures += 1
        if self.open and (self._probe_task is None or self._probe_task.done()):
            self._probe_task = asyncio.create_task(self._probe_until_healthy())
        return self.failures == self.threshold

    def attach(self, probe: Probe) -> None:
        """Let ``probe`` (a running call's) check the service while the breaker is open."""
        self._probes.append(probe)

    def detach(self, probe: Probe) -> None:
        """The call of ``probe`` has ended: its connections can no longer check anything."""
        if probe in self._probes:
            self._probes.remove(probe)

    async def _probe_until_healthy(self) -> None:
        while self.open:
            await asyncio.sleep(self.probe_interval_s)
            if not self._probes:
                continue  # no call running to probe through; the next one attaches
            try:
                healthy = await self._probes[-1]()
            except Exception:
                logger.exception("probe crashed")
                healthy = False
            if healthy:
                logger.info("probe succeeded after %d failures: breaker closed", self.failures)
                self.succeeded()

    async def close(self) -> None:
        """Stop the probing (the process is shutting down)."""
        if self._probe_task is not None:
            self._probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe_task
            self._probe_task = None
