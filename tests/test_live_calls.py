"""The registry of a worker's calls: admission, draining, and listeners."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agent.pipeline.live_calls import LiveCall, LiveCalls
from telephony.line import LineBusy


def _live(call_id: str) -> LiveCall:
    return LiveCall(call=SimpleNamespace(id=call_id, policy=None))  # type: ignore[arg-type]


def _started(calls: LiveCalls, call_id: str) -> None:
    calls.add(_live(call_id), calls.reserve())


async def test_admission_stops_at_capacity_and_reopens_when_a_call_ends() -> None:
    calls = LiveCalls(capacity=2)
    for call_id in ("a", "b"):
        _started(calls, call_id)
    assert calls.active == 2 and not calls.accepting
    with pytest.raises(LineBusy, match="full"):
        calls.reserve()
    calls.ended("a")
    assert calls.active == 1 and calls.accepting
    _started(calls, "c")


async def test_a_reserved_place_counts_until_its_call_takes_it_or_it_is_released() -> None:
    calls = LiveCalls(capacity=2)
    answering = calls.reserve()
    with calls.reserve():  # a call being answered: its place is taken from the start
        assert calls.active == 2 and not calls.accepting
        with pytest.raises(LineBusy, match="full"):
            calls.reserve()
    assert calls.active == 1  # left the block without a call: released
    calls.add(_live("a"), answering)
    answering.release()  # the call has the place now: nothing to release
    assert calls.active == 1 and [live.call.id for live in calls.in_progress()] == ["a"]
    with pytest.raises(RuntimeError, match="reserved"):
        calls.add(_live("b"), answering)  # one place, one call
    calls.ended("a")
    assert calls.active == 0


async def test_drain_waits_for_a_call_being_answered() -> None:
    calls = LiveCalls()
    reservation = calls.reserve()
    draining = asyncio.create_task(calls.drain(timeout_s=30))
    await asyncio.sleep(0)
    assert not draining.done()
    reservation.release()  # e.g. cancelled while ringing
    assert await asyncio.wait_for(draining, 1) == 0


async def test_drain_returns_when_the_last_call_ends() -> None:
    calls = LiveCalls()
    _started(calls, "a")
    _started(calls, "b")
    draining = asyncio.create_task(calls.drain(timeout_s=30))
    await asyncio.sleep(0)
    with pytest.raises(LineBusy, match="shutting down"):
        calls.reserve()
    calls.ended("a")
    await asyncio.sleep(0)
    assert not draining.done()
    calls.ended("b")
    assert await asyncio.wait_for(draining, 1) == 0


async def test_drain_gives_up_at_its_deadline_and_a_second_keeps_it() -> None:
    calls = LiveCalls()
    _started(calls, "a")
    assert await calls.drain(timeout_s=0.05) == 1
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await calls.drain(timeout_s=30) == 1
    assert loop.time() - started < 1


async def test_listeners_get_each_line_then_the_end() -> None:
    live = _live("a")
    queue: asyncio.Queue[dict[str, str] | None] = asyncio.Queue()
    live.listeners.add(queue)
    live.publish("caller", "hello")
    calls = LiveCalls()
    calls.add(live, calls.reserve())
    calls.ended("a")
    lines = [queue.get_nowait(), queue.get_nowait()]
    assert lines == [{"speaker": "caller", "text": "hello"}, None]
