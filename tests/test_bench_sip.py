"""``bench sip`` and ``bench capacity``: short runs write complete, sane reports.

No timing is asserted: on a shared CI machine the figures are whatever they are; the
test checks that they were measured (packets counted, CPU read) and reported.
"""

from __future__ import annotations

import os
import shutil

import pytest

from agent.bench_sip import Packets, _window, run_capacity_bench, run_sip_bench
from telephony.rtp import LatenessHistogram

COLUMNS = (
    "transport",
    "calls",
    "packets",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "within 5 ms",
    "worker CPU %",
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
    before = [([1] + [0] * (buckets - 1), 0)]
    after = [([5] + [0] * 59 + [2] + [0] * (buckets - 61), 1), ([3] + [0] * (buckets - 1), 0)]

    counts, skipped = _window(before, after)

    assert counts[0] == 4 + 3 and counts[60] == 2 and sum(counts) == 9
    assert skipped == 1
    packets = Packets.from_counts(counts, skipped, max_s=0.006)
    # 7 of 9 sent within 5 ms, and the skipped slot counts among the late: 7 of 10.
    assert packets.within == pytest.approx(0.7)


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
    assert report.count("| RTP out (pacer thread) |") == 2
    assert report.count("| VAD |") == 2
    assert os.sched_getaffinity(0) == set(range(os.cpu_count() or 1))  # given back
