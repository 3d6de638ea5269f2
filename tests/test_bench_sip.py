"""``bench sip`` and ``bench capacity``: short runs write complete, sane reports.

No timing is asserted: on a shared CI machine the figures are whatever they are; the
test checks that they were measured (packets counted, CPU read) and reported.
"""

from __future__ import annotations

import os
import shutil

import pytest

from telephony.rtp.sender import LatenessHistogram
from tools.bench_sip import ANSWER_SLACK_MS, Packets, Step, run_capacity_bench, run_sip_bench
from tools.bench_sip_worker import _window

COLUMNS = (
    "transport",
    "calls",
    "packets",
    "underruns",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "within 5 ms",
    "answered",
    "answer p50 ms",
    "answer p95 ms",
    "worker CPU %",
    "worker's core CPU %",
    "all CPU %",
    "ramp-up: within 5 ms",
    "ramp-up: max ms",
)


def _rows(report: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the body rows of the report's table."""
    lines = [line for line in report.splitlines() if line.startswith("| ")]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return split[0], split[1:]


@pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")
def test_a_short_run_reports_both_transports(tmp_path):
    output = tmp_path / "sip.md"

    assert run_sip_bench(str(output), [2], 3) == 0

    report = output.read_text()
    header, rows = _rows(report)
    for column in COLUMNS:
        assert any(cell.startswith(column) for cell in header), (column, header)
    assert [row[0] for row in rows] == ["sip", "websocket"]
    for row in rows:
        cells = dict(zip(header, row, strict=True))
        assert cells["calls"] == "2"
        assert int(cells["packets"]) > 0, row
        assert 0 <= float(cells["within 5 ms"].rstrip("%✗ ")) <= 100
        assert int(cells["worker CPU %"]) > 0, row
    assert "python -m agent bench sip --steps 2 --hold 3" in report
    assert "**Carried**" in report


@pytest.mark.parametrize(
    ("steps", "hold_s"), [([], 5.0), ([0, 1], 5.0), ([4, 2], 5.0), ([2, 2], 5.0), ([1], 0.5)]
)
def test_bad_arguments_are_refused_before_anything_starts(tmp_path, steps, hold_s, capsys):
    output = tmp_path / "sip.md"

    assert run_sip_bench(str(output), steps, hold_s) == 2

    assert not output.exists()
    assert "must" in capsys.readouterr().err


def test_the_window_is_the_difference_of_two_snapshots_and_skipped_slots_are_late():
    buckets = LatenessHistogram.BUCKETS + 1
    before = [([1] + [0] * (buckets - 1), 0, 0, [400.0])]
    after = [
        ([5] + [0] * 59 + [2] + [0] * (buckets - 61), 1, 1, [400.0, 420.0]),
        ([3] + [0] * (buckets - 1), 0, 0, [380.0]),
    ]

    counts, skipped, underruns, answers = _window(before, after)

    assert counts[0] == 4 + 3 and counts[60] == 2 and sum(counts) == 9
    assert skipped == 1 and underruns == 1
    assert answers == [420.0, 380.0]  # the answers given in the window
    packets = Packets.from_counts(counts, skipped, max_s=0.006, underruns=underruns)
    # 7 of 9 sent within 5 ms, one of them silence where audio was due, and the skipped
    # slot counts among the late: 6 of 10.
    assert packets.within == pytest.approx(0.6)


def step(answers_ms, lines, reference_ms=None, within_5ms=True):
    counts = [1000 if within_5ms else 0] + [0] * LatenessHistogram.BUCKETS
    packets = Packets.from_counts(counts, 0, 0.001)
    cpu = (20.0, 1.0, 2.0, 1.0)  # window, worker, machine, core
    return Step("ours", 4, *cpu, packets, packets, answers_ms, lines, reference_ms=reference_ms)


def test_a_step_passes_with_its_answers_close_to_the_lightest_steps():
    lightest = step([400.0] * 19 + [450.0], 20)
    assert lightest.answer_p95_ms == 400.0 and lightest.passed

    assert step([300.0] * 20, 20, reference_ms=400.0).passed
    assert step([400.0 + ANSWER_SLACK_MS] * 20, 20, reference_ms=400.0).passed
    assert not step([401.0 + ANSWER_SLACK_MS] * 20, 20, reference_ms=400.0).passed
    assert not step([300.0] * 20, 20, reference_ms=400.0, within_5ms=False).passed


def test_a_line_left_unanswered_counts_as_never_answered():
    assert step([300.0] * 19, 20).answer_p95_ms == 300.0  # one in twenty: the top 5%
    slow = step([300.0] * 18, 20, reference_ms=300.0)
    assert slow.answer_p95_ms == float("inf") and not slow.passed
    assert step([], 0).answer_p95_ms == float("inf")


@pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_capacity_compares_both_pipelines_and_profiles_them(tmp_path):
    output = tmp_path / "capacity.md"

    assert run_capacity_bench(str(output), [1], 3, profile_calls=1) == 0

    report = output.read_text()
    header, rows = _rows(report)
    assert header[0] == "pipeline"
    assert [row[0] for row in rows if len(row) == len(header)] == ["ours", "plain"]
    for row in rows[:2]:
        cells = dict(zip(header, row, strict=True))
        assert int(cells["packets"]) > 0, row  # each pipeline's calls were carried
    assert "**Calls per core**" in report
    assert "python -m agent bench capacity --steps 1 --hold 3 --profile 1" in report
    # Both profiles found the worker busy on the per-frame path.
    assert report.count("| pipecat frame hops (queues, observers, metrics) |") == 2
    assert report.count("| RTP in (socket, jitter buffer, G.711 decode) |") == 2
    assert os.sched_getaffinity(0) == set(range(os.cpu_count() or 1))  # given back


def test_where_answers_are_not_timed_the_packets_decide():
    untimed = step(None, 20, reference_ms=400.0)
    assert untimed.passed and untimed.answered == "–"
    assert not step(None, 20, within_5ms=False).passed
