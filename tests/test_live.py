"""The registry of a worker's calls: admission, draining, and listeners."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agent.live import LiveCall, LiveCalls
from telephony.line import LineBusy


def _live(call_id: str) -> LiveCall:
    return LiveCall(call=SimpleNamespace(id=call_id, policy=None))  # type: ignore[arg-type]


async def test_admission_stops_at_capacity_and_reopens_when_a_call_ends() -> None:
    calls = LiveCalls(capacity=2)
    for call_id in ("a", "b"):
        calls.admit()
        calls.add(_live(call_id))
    assert calls.active == 2 and not calls.accepting
    with pytest.raises(LineBusy, match="full"):
        calls.admit()
    calls.ended("a")
    assert calls.active == 1 and calls.accepting
    calls.admit()


async def test_drain_returns_when_the_last_call_ends() -> None:
    calls = LiveCalls()
    calls.add(_live("a"))
    calls.add(_live("b"))
    draining = asyncio.create_task(calls.drain(timeout_s=30))
    await asyncio.sleep(0)
    with pytest.raises(LineBusy, match="shutting down"):
        calls.admit()
    calls.ended("a")
    await asyncio.sleep(0)
    assert not draining.done()
    calls.ended("b")
    assert await asyncio.wait_for(draining, 1) == 0


async def test_drain_gives_up_at_its_deadline_and_a_second_keeps_it() -> None:
    calls = LiveCalls()
    calls.add(_live("a"))
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
    calls.add(live)
    calls.ended("a")
    lines = [queue.get_nowait(), queue.get_nowait()]
    assert lines == [{"speaker": "caller", "text": "hello"}, None]
