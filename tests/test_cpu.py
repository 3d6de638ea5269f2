"""The worker's CPU shared out among its calls, on a scripted clock."""

import pytest

from agent.ledger.cpu import WorkerCpu


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_cpu_spent_while_calls_overlap_is_split_among_them() -> None:
    clock = Clock()
    meter = WorkerCpu(clock)
    clock.now += 5.0  # before any call: idle, charged to no call
    meter.started("a")
    clock.now += 1.0  # a alone
    meter.started("b")
    clock.now += 2.0  # a and b
    assert meter.active == 2
    assert meter.ended("a") == pytest.approx(2.0)
    clock.now += 0.5  # b alone
    assert meter.ended("b") == pytest.approx(1.5)
    assert meter.active == 0


def test_a_call_never_started_here_is_charged_nothing() -> None:
    meter = WorkerCpu(Clock())
    assert meter.ended("unknown") == 0.0


def test_the_process_meter_reads_real_cpu_time() -> None:
    meter = WorkerCpu()
    meter.started("busy")
    sum(i * i for i in range(200_000))
    assert meter.ended("busy") > 0
