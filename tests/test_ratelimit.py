"""The login brake's parts (agent.console.ratelimit); over HTTP in tests/test_console_auth.py."""

from __future__ import annotations

import datetime as dt

from agent.console.ratelimit import Backoff, LoginLimits, LoginThrottle, Throttle

START = dt.datetime(2026, 12, 9, 9, 0, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)
BACKOFF = Backoff(free=2, first=10 * SECOND, longest=60 * SECOND, memory=dt.timedelta(hours=1))


def test_the_wait_doubles_after_the_free_failures_up_to_the_longest() -> None:
    waits = [BACKOFF.wait(n).total_seconds() for n in range(8)]
    assert waits == [0, 0, 10, 20, 40, 60, 60, 60]
    assert BACKOFF.wait(10**6) == 60 * SECOND  # no overflow, however many


def test_a_key_waits_from_its_last_failure_and_is_forgotten_after_memory() -> None:
    throttle = Throttle(BACKOFF)
    for _ in range(3):
        throttle.failed("k", START)
    assert throttle.retry_after("k", START) == 20
    assert throttle.retry_after("k", START + 15 * SECOND) == 5
    assert throttle.retry_after("k", START + 20 * SECOND) is None
    assert throttle.retry_after("other", START) is None
    throttle.forgive("k")
    assert throttle.retry_after("k", START) == 10
    assert throttle.retry_after("k", START + dt.timedelta(hours=1)) is None
    throttle.failed("k", START + dt.timedelta(hours=1))  # counts from nothing again
    assert throttle.retry_after("k", START + dt.timedelta(hours=1)) is None


def test_past_max_keys_the_key_that_failed_longest_ago_goes() -> None:
    throttle = Throttle(Backoff(free=1, first=10 * SECOND, longest=10 * SECOND), max_keys=2)
    for n, key in enumerate(("a", "b", "a", "c")):
        throttle.failed(key, START + n * SECOND)
    now = START + 3 * SECOND
    assert throttle.retry_after("b", now) is None  # dropped for c
    assert throttle.retry_after("a", now) == 9 and throttle.retry_after("c", now) == 10


def test_an_address_the_account_logged_in_from_is_spared_the_account_brake() -> None:
    limits = LoginLimits(account=Backoff(free=1, first=60 * SECOND, longest=60 * SECOND))
    throttle = LoginThrottle(limits)
    throttle.failed("ann", "home", START)
    throttle.succeeded("ann", "home", START)
    throttle.failed("ann", "attacker", START)
    assert throttle.retry_after("ann", "elsewhere", START) == 60
    assert throttle.retry_after("ann", "home", START) is None
    later = START + limits.known_for
    throttle.failed("ann", "attacker", later)
    assert throttle.retry_after("ann", "home", later) == 60  # not lately: not spared
