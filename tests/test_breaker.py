"""The circuit breaker on its own: when it opens, which probe it runs, when it closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agent.pipeline.breaker import CircuitBreaker


class Service:
    """A probe target that is down until told otherwise, counting the probes it got."""

    def __init__(self) -> None:
        self.healthy = False
        self.probes = 0

    async def probe(self) -> bool:
        self.probes += 1
        return self.healthy


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


async def test_it_opens_on_the_kth_failure_in_a_row_only():
    breaker = CircuitBreaker(threshold=3, probe_interval_s=3600)
    assert not breaker.failed() and not breaker.failed()
    breaker.succeeded()  # a success in between: the count starts over
    assert [breaker.failed() for _ in range(4)] == [False, False, True, False]
    assert breaker.open
    await breaker.close()


async def test_the_latest_attached_probe_closes_it_once_the_service_answers():
    breaker = CircuitBreaker(threshold=1, probe_interval_s=0.005)
    ended, running = Service(), Service()
    breaker.attach(ended.probe)
    breaker.attach(running.probe)
    breaker.detach(ended.probe)  # its call ended
    assert breaker.failed()
    await until(lambda: running.probes >= 3)
    assert breaker.open
    running.healthy = True
    await until(lambda: not breaker.open)
    assert ended.probes == 0 and breaker.failures == 0
    await breaker.close()


async def test_with_no_call_attached_it_waits_for_one():
    breaker = CircuitBreaker(threshold=1, probe_interval_s=0.005)
    breaker.failed()
    await asyncio.sleep(0.03)
    assert breaker.open
    service = Service()
    service.healthy = True
    breaker.attach(service.probe)
    await until(lambda: not breaker.open)
    assert service.probes == 1
    await breaker.close()


async def test_a_crashing_probe_keeps_it_open():
    breaker = CircuitBreaker(threshold=1, probe_interval_s=0.005)
    calls = 0

    async def crash() -> bool:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    breaker.attach(crash)
    breaker.failed()
    await until(lambda: calls >= 2)
    assert breaker.open
    await breaker.close()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="threshold"):
        CircuitBreaker(threshold=0)
    with pytest.raises(ValueError, match="probe_interval_s"):
        CircuitBreaker(probe_interval_s=-1)
