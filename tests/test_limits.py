"""agent.pipeline.limits: which limit a call has passed, on a clock the test moves."""

from __future__ import annotations

import math

import pytest

from agent.config import ConfigError, Settings
from agent.pipeline.limits import MAX_DURATION, NEVER_CONNECTED, SILENCE, Limits, LimitWatch

LIMITS = Limits(connect_s=10.0, call_s=1800.0, silence_s=60.0)


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_line_that_never_connects_passes_the_connect_timeout(clock: Clock) -> None:
    watch = LimitWatch(LIMITS, clock)
    assert watch.wait_s() == 10.0
    clock.advance(9.9)
    assert watch.passed() is None
    clock.advance(0.1)
    assert watch.passed() == NEVER_CONNECTED and not watch.connected


def test_once_connected_the_connect_timeout_is_off_and_silence_counts(clock: Clock) -> None:
    watch = LimitWatch(LIMITS, clock)
    clock.advance(4)
    watch.connect()
    clock.advance(30)
    assert watch.passed() is None and watch.connected
    assert watch.wait_s() == 30.0  # silence counts from the connection
    clock.advance(30)
    assert watch.passed() == SILENCE


def test_speech_on_either_side_holds_the_silence_off(clock: Clock) -> None:
    watch = LimitWatch(LIMITS, clock)
    watch.connect()
    clock.advance(50)
    watch.speaking("agent", True)
    clock.advance(100)  # a long greeting: nobody is silent
    assert watch.passed() is None
    watch.speaking("caller", True)  # the caller cuts in
    watch.speaking("agent", False)
    clock.advance(100)
    assert watch.passed() is None
    watch.speaking("caller", False)
    clock.advance(59)
    assert watch.passed() is None and watch.wait_s() == 1.0
    clock.advance(1)
    assert watch.passed() == SILENCE


def test_what_brings_a_deadline_nearer_wakes_the_waiter(clock: Clock) -> None:
    # Whoever waits while someone speaks waits for the call's maximum: once both have
    # stopped, it is woken to learn of the silence deadline, much nearer.
    watch = LimitWatch(LIMITS, clock)
    watch.connect()
    assert watch.changed.is_set()
    watch.changed.clear()
    watch.speaking("caller", True)
    assert not watch.changed.is_set() and watch.wait_s() == 1800.0
    watch.speaking("agent", True)
    watch.speaking("caller", False)  # the agent still speaks: no silence yet
    assert not watch.changed.is_set()
    watch.speaking("agent", False)
    assert watch.changed.is_set() and watch.wait_s() == 60.0


def test_a_stop_without_a_start_changes_nothing(clock: Clock) -> None:
    watch = LimitWatch(LIMITS, clock)
    watch.connect()
    clock.advance(59)
    watch.speaking("caller", False)
    clock.advance(1)
    assert watch.passed() == SILENCE


def test_no_call_outlasts_its_maximum(clock: Clock) -> None:
    watch = LimitWatch(LIMITS, clock)
    watch.connect()
    watch.speaking("caller", True)  # however long anyone talks
    clock.advance(1799)
    assert watch.passed() is None and watch.wait_s() == 1.0
    clock.advance(1)
    assert watch.passed() == MAX_DURATION


def test_the_earliest_limit_passed_is_the_one_named(clock: Clock) -> None:
    watch = LimitWatch(Limits(connect_s=10.0, call_s=5.0, silence_s=60.0), clock)
    clock.advance(20)  # both passed: the call's maximum came first
    assert watch.passed() == MAX_DURATION


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_limits_are_positive_seconds(bad: float) -> None:
    with pytest.raises(ValueError, match="call_s must be a positive number"):
        Limits(connect_s=10.0, call_s=bad, silence_s=60.0)


def test_the_limits_settings() -> None:
    defaults = Settings.from_env({}, dotenv=False)
    assert (defaults.connect_timeout_s, defaults.max_call_s, defaults.max_silence_s) == (
        10.0,
        1800.0,
        60.0,
    )
    env = {"CONNECT_TIMEOUT_S": "3", "MAX_CALL_S": "600", "MAX_SILENCE_S": "20.5"}
    settings = Settings.from_env(env, dotenv=False)
    assert (settings.connect_timeout_s, settings.max_call_s, settings.max_silence_s) == (
        3.0,
        600.0,
        20.5,
    )
    for name in env:
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: "0"}, dotenv=False)
