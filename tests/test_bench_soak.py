"""``bench soak``: a short soak in CI (no call left active, nothing leaked, every kind of
churn seen) and the pure parts (the plan from a seed, growth per hour, the verdict).

No timing is asserted: on a shared CI machine the figures are whatever they are.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from collections import Counter
from datetime import UTC, datetime

import pytest

from telephony.rtp.sender import LatenessHistogram
from tools.bench_soak import (
    FD_TOLERANCE,
    STEADY_S,
    TASK_TOLERANCE,
    Sample,
    Soak,
    metric,
    per_hour,
    report,
    run_soak,
    run_soak_command,
    steady_rss,
)
from tools.bench_soak_callers import CALL_S, FIRST_S, KINDS, RTP_STOP_S, Tally, churn_plan


def test_the_plan_is_the_seeds_and_starts_with_one_call_of_each_kind():
    first = list(itertools.islice(churn_plan(7), 200))

    assert first == list(itertools.islice(churn_plan(7), 200))
    assert first != list(itertools.islice(churn_plan(8), 200))
    assert {call.kind for call in first[: len(KINDS)]} == set(KINDS)
    assert [call.index for call in first] == list(range(200))
    assert len({call.number for call in first}) == 200  # each call found by its number
    assert all(CALL_S[0] <= call.hold_s <= CALL_S[1] for call in first)
    assert all(call.hold_s <= FIRST_S for call in first[: len(KINDS)])
    assert all(RTP_STOP_S[0] <= call.rtp_stop_s <= RTP_STOP_S[1] for call in first)
    kinds = Counter(call.kind for call in first)
    assert kinds["bye"] > kinds["cancel"] > 0  # drawn by weight


def test_growth_is_scaled_to_an_hour():
    assert per_hour(100, 110, 1800) == 20.0
    assert per_hour(100, 97, 900) == -12.0
    assert per_hour(5, 5, 60) == 0.0
    assert per_hour(5, 9, 0) == 0.0  # no time between them: no rate


def test_a_metric_is_read_from_the_exposition():
    text = (
        "# HELP agent_asyncio_tasks Tasks\n# TYPE agent_asyncio_tasks gauge\n"
        "agent_asyncio_tasks 17.0\nagent_live_calls 2.0\n"
    )
    assert metric(text, "agent_asyncio_tasks") == 17.0
    assert metric(text, "agent_live_calls") == 2.0
    assert metric(text, "agent_nothing") != metric(text, "agent_nothing")  # nan


def _sample(at: float, fds: int, tasks: int, rss_kib: int = 100_000) -> Sample:
    return Sample(at, fds, fds - 10, tasks, rss_kib, 0)


def _soak(end_fds: int = 40, end_tasks: int = 12, left: int = 0, missing: int = 0) -> Soak:
    tally = Tally(placed=10, answered=8, cancelled=2)
    tally.ended.update(bye=4, rtp_stop_bye=2, abandon=2)
    counts = [90] + [0] * 59 + [10] + [0] * (LatenessHistogram.BUCKETS - 60)
    return Soak(
        calls=2,
        minutes=30,
        seed=19,
        tally=tally,
        start=_sample(0.0, 40, 12, 100_000),
        end=_sample(1800.0, end_fds, end_tasks, 110_240),
        rows=10,
        rows_ended=10 - left,
        end_reasons=Counter(caller_hung_up=8, media_timeout=2),
        left_active=left,
        missing=[f"+1202000000{i} (bye)" for i in range(missing)],
        abandoned_otherwise=0,
        unrecorded_cancels=0,
        rtp={"counts": counts, "max_s": 0.0065, "skipped": 0, "underruns": 0, "sessions": 10},
        most_fds=60,
        most_rss_kib=120_000,
    )


def test_the_verdict_fails_on_calls_left_or_descriptors_and_tasks_grown():
    assert _soak().failures() == []
    assert _soak(end_fds=40 + FD_TOLERANCE, end_tasks=12 + TASK_TOLERANCE).failures() == []
    assert "descriptors grew by" in _soak(end_fds=41 + FD_TOLERANCE).failures()[0]
    assert "tasks grew by" in _soak(end_tasks=13 + TASK_TOLERANCE).failures()[0]
    assert "left active" in _soak(left=1).failures()[0]
    assert "not ended in the database" in _soak(missing=1).failures()[0]


def test_the_report_shows_the_growth_per_hour_and_the_late_packets():
    soak = _soak(end_fds=43)
    text = report(soak, "python -m agent bench soak", "2 cores", datetime(2026, 1, 2, tzinfo=UTC))

    assert "| open descriptors | 40 | 43 | +6.0 | 60 |" in text
    assert "| RSS MiB | 97.7 | 107.7 | +20.0 | 117.2 |" in text
    assert "| later than 5 ms | 10 |" in text
    assert "**Verdict**: passed" in text
    assert "Measured 2026-01-02 00:00 UTC on 2 cores" in text


def test_the_steady_rss_is_read_once_the_kept_calls_have_begun_to_go():
    start = _sample(0.0, 40, 3, 100_000)
    samples = [_sample(60.0 * m, 40, 90, 100_000 + 1000 * min(m, 6)) for m in range(1, 31)]

    assert steady_rss(start, samples) == (106_000, 106_000, 1800.0 - STEADY_S)
    assert steady_rss(start, samples[:6]) is None  # one sample at 6 min: no rate
    soak = _soak()
    soak.steady_rss = (102_400, 103_424, 1800.0)
    row = f"| RSS MiB from {STEADY_S / 60:g} min on (busy) | 100.0 | 101.0 | +2.0 | |"
    assert row in soak.table()


@pytest.mark.parametrize(("calls", "minutes"), [(0, 1.0), (2, 0.0), (2, -1.0)])
def test_bad_arguments_are_refused_before_anything_starts(tmp_path, calls, minutes, capsys):
    output = tmp_path / "soak.md"
    args = argparse.Namespace(calls=calls, minutes=minutes, seed=1, output=str(output))

    assert run_soak_command(args) == 2

    assert not output.exists()
    assert "must" in capsys.readouterr().err


def test_a_short_soak_ends_every_call_and_leaks_nothing(tmp_path):
    soak = asyncio.run(run_soak(calls=2, minutes=1.0, seed=19, progress_s=20.0))

    tally = soak.tally
    assert soak.left_active == 0
    assert soak.missing == []  # every answered call has its end in the database
    assert soak.rows == soak.rows_ended
    assert soak.failures() == []  # descriptors and tasks back where they were
    assert tally.ended["bye"] >= 1 and tally.ended["rtp_stop_bye"] >= 1
    # The worker ends an abandoned call on its RTP timeout (unless the agent was hanging
    # up anyway within those seconds).
    assert tally.ended["abandon"] >= 1 and soak.end_reasons["media_timeout"] >= 1
    # A CANCEL right behind the INVITE: a 487, or the answer won the race (then a BYE).
    assert tally.cancelled + tally.ended["cancel"] >= 1
    assert soak.lateness.count > 0 and tally.packets_in > 0
    text = report(soak, "python -m agent bench soak --minutes 1", "here", datetime.now(UTC))
    assert "**left active after the drain** | **0**" in text
