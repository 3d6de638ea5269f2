"""The pacer: every stream's slots in order on its deadlines, removal, a failing or stalling
stream."""

from __future__ import annotations

import time

from telephony.rtp.pacer import Pacer, Schedule


class Stream:
    def __init__(self, stall_at: int | None = None, fail: bool = False) -> None:
        self.slots: list[int] = []
        self.sent_at: list[float] = []
        self.stall_at, self.fail = stall_at, fail

    def send_slot(self, slot: int, late_s: float) -> None:
        self.slots.append(slot)
        self.sent_at.append(time.monotonic())
        if slot == self.stall_at:
            time.sleep(0.2)  # ten 20 ms slots: past a catch-up of 3
        if self.fail:
            raise RuntimeError("a broken stream")


def drive(pacer: Pacer, until: float) -> None:
    """What the sender's loop does, without messages: wait for the next slot, send it."""
    while (now := time.monotonic()) < until:
        wait = pacer.wait_s()
        time.sleep(min(until - now, 0.05 if wait is None else wait))
        pacer.run_due()


def test_streams_get_their_slots_in_order_on_their_deadlines() -> None:
    pacer = Pacer()
    start = time.monotonic()
    a, b = Stream(), Stream()
    schedules = [pacer.add(s, 0.005, max_catch_up=100, start=start) for s in (a, b)]

    drive(pacer, start + 0.0275)

    assert a.slots == b.slots and a.slots[:6] == [0, 1, 2, 3, 4, 5]  # more on a slow machine
    for stream in (a, b):
        assert all(t >= start + i * 0.005 for i, t in enumerate(stream.sent_at))
    assert [s.slot for s in schedules] == [len(a.slots)] * 2


def test_nothing_scheduled_means_no_deadline() -> None:
    pacer = Pacer()
    assert pacer.wait_s() is None
    schedule = pacer.add(Stream(), 0.02, max_catch_up=3, start=time.monotonic() + 1)
    wait = pacer.wait_s()
    assert wait is not None and 0.9 < wait <= 1
    assert pacer.run_due() == 0

    pacer.remove(schedule)
    assert pacer.wait_s() is None


def test_a_removed_stream_gets_no_more_slots() -> None:
    pacer = Pacer()
    kept, removed = Stream(), Stream()
    pacer.add(kept, 0.005, max_catch_up=100)
    schedule = pacer.add(removed, 0.005, max_catch_up=100)
    drive(pacer, time.monotonic() + 0.012)
    seen = len(removed.slots)

    pacer.remove(schedule)
    drive(pacer, time.monotonic() + 0.03)

    assert len(removed.slots) == seen and len(kept.slots) > seen + 3


def test_a_failing_stream_keeps_its_schedule_and_spoils_no_other() -> None:
    pacer = Pacer()
    broken, fine = Stream(fail=True), Stream()
    schedules: list[Schedule] = [pacer.add(s, 0.005, max_catch_up=100) for s in (broken, fine)]

    drive(pacer, time.monotonic() + 0.03)

    assert len(broken.slots) >= 5 and len(fine.slots) >= 5
    assert schedules[0].failures == len(broken.slots) and schedules[1].failures == 0


def test_far_behind_it_skips_ahead_instead_of_bursting() -> None:
    pacer = Pacer()
    stream = Stream(stall_at=2)
    pacer.add(stream, 0.02, max_catch_up=3)

    drive(pacer, time.monotonic() + 0.3)

    assert stream.slots[:3] == [0, 1, 2]
    assert stream.slots[3] >= 2 + 10  # the slots the stall took were skipped
    assert stream.slots[3:] == list(range(stream.slots[3], stream.slots[-1] + 1))
