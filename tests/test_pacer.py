"""The pacer thread: every stream's slots in order, removal, a failing or stalling stream."""

from __future__ import annotations

import sys
import threading
import time

from telephony.pacer import SWITCH_INTERVAL_S, Pacer


class Stream:
    def __init__(self, stall_at: int | None = None, fail: bool = False) -> None:
        self.slots: list[int] = []
        self.threads: set[str] = set()
        self.stall_at, self.fail = stall_at, fail
        self.enough = threading.Event()

    def send_slot(self, slot: int, late_s: float) -> None:
        self.slots.append(slot)
        self.threads.add(threading.current_thread().name)
        if len(self.slots) >= 5:
            self.enough.set()
        if slot == self.stall_at:
            time.sleep(0.2)  # ten 20 ms slots: past a catch-up of 3
        if self.fail:
            raise RuntimeError("a broken stream")


def test_streams_get_their_slots_in_order_on_the_pacer_thread() -> None:
    pacer = Pacer("test-pacer")
    a, b = Stream(), Stream()
    schedules = [pacer.add(stream, 0.005, max_catch_up=100) for stream in (a, b)]

    assert a.enough.wait(2) and b.enough.wait(2)
    for schedule in schedules:
        pacer.remove(schedule)

    assert a.slots[:5] == [0, 1, 2, 3, 4] and b.slots[:5] == [0, 1, 2, 3, 4]
    assert a.threads == b.threads == {"test-pacer"}
    assert sys.getswitchinterval() <= SWITCH_INTERVAL_S


def test_a_removed_stream_gets_no_more_slots() -> None:
    pacer = Pacer()
    stream = Stream()
    schedule = pacer.add(stream, 0.005, max_catch_up=100)
    assert stream.enough.wait(2)

    pacer.remove(schedule)
    time.sleep(0.02)  # a slot under way may finish
    seen = len(stream.slots)
    time.sleep(0.05)

    assert len(stream.slots) == seen


def test_a_failing_stream_keeps_its_schedule_and_spoils_no_other() -> None:
    pacer = Pacer()
    broken, fine = Stream(fail=True), Stream()
    schedules = [pacer.add(s, 0.005, max_catch_up=100) for s in (broken, fine)]

    assert broken.enough.wait(2) and fine.enough.wait(2)
    assert schedules[0].failures >= 5 and schedules[1].failures == 0
    for schedule in schedules:
        pacer.remove(schedule)


def test_far_behind_it_skips_ahead_instead_of_bursting() -> None:
    pacer = Pacer()
    stream = Stream(stall_at=2)
    schedule = pacer.add(stream, 0.02, max_catch_up=3)
    deadline = time.monotonic() + 2
    while len(stream.slots) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    pacer.remove(schedule)

    assert stream.slots[:3] == [0, 1, 2]
    assert stream.slots[3] >= 2 + 10  # the slots the stall took were skipped
