"""``bench sip`` and ``bench capacity``: short runs write complete, sane reports.

No timing is asserted: on a shared CI machine the figures are whatever they are; the
test checks that they were measured (packets counted, CPU read) and reported. The runs
are as short as the bench allows (one step of one or two calls, a 2-3 s hold).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from telephony.rtp.sender import LatenessHistogram
from tools.bench_sip import run_capacity_bench, run_sip_bench
from tools.bench_sip_runs import Packets
from tools.bench_sip_worker import _tree_cpu_s, _window

COLUMNS = (
    "transport",
    "calls",
    "run",
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


def _rows(report: str, section: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the body rows of the first table after ``section``."""
    lines = report.split(section, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[start:end]]
    return split[0], split[2:]


@pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")
def test_a_short_run_reports_every_run_and_each_step(tmp_path):
    output = tmp_path / "sip.md"

    assert run_sip_bench(str(output), [2], 2, runs=2) == 0

    report = output.read_text()
    header, rows = _rows(report, "## Every run")
    for column in COLUMNS:
        assert any(cell.startswith(column) for cell in header), (column, header)
    assert [(row[0], row[2]) for row in rows] == [("sip", "1"), ("sip", "2")]
    for row in rows:
        cells = dict(zip(header, row, strict=True))
        assert cells["calls"] == "2"
        assert int(cells["packets"]) > 0, row
        assert 0 <= float(cells["within 5 ms"].rstrip("%✗ ")) <= 100
        assert int(cells["worker CPU %"]) > 0, row
    header, rows = _rows(report, "## Each step over its runs")
    cells = dict(zip(header, rows[0], strict=True))
    assert cells["runs passed"].endswith("/2")
    assert float(cells["CPU per call: core-ms per call-s, mean [95 % interval]"].split()[0]) > 0
    assert "python -m agent bench sip --steps 2 --runs 2 --hold 2" in report
    assert "**Carried**" in report and "rests on 2 run(s)" in report
    assert "load average" in report


@pytest.mark.parametrize(
    ("steps", "hold_s"), [([], 5.0), ([0, 1], 5.0), ([4, 2], 5.0), ([2, 2], 5.0), ([1], 0.5)]
)
def test_bad_arguments_are_refused_before_anything_starts(tmp_path, steps, hold_s, capsys):
    output = tmp_path / "sip.md"

    assert run_sip_bench(str(output), steps, hold_s, runs=1) == 2

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


@pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_capacity_compares_the_pipelines_and_profiles_them(tmp_path):
    output = tmp_path / "capacity.md"

    assert run_capacity_bench(str(output), [1], 2, runs=1, profile_calls=1) == 0

    report = output.read_text()
    header, rows = _rows(report, "## Every run")
    assert header[0] == "pipeline"
    assert [row[0] for row in rows] == ["ours", "plain", "production"]
    for row in rows:
        cells = dict(zip(header, row, strict=True))
        assert int(cells["packets"]) > 0, row  # each pipeline's calls were carried
    header, rows = _rows(report, "**Calls per core**")
    assert header[:2] == ["pipeline", "calls carried"]
    assert [row[0] for row in rows] == ["ours", "plain", "production"]
    header, rows = _rows(report, "## Each step over its runs")
    llm = {row[0]: float(row[header.index("LLM requests per answer")]) for row in rows}
    assert llm["plain"] > 0  # the stock pipeline asks the stub LLM, as counted at the stub
    assert "python -m agent bench capacity --steps 1 --runs 1 --hold 2 --profile 1" in report
    # The profiles found each worker busy on the per-frame path in its window (a short
    # one: which other parts it caught is chance).
    assert report.count("| pipecat frame hops (queues, observers, metrics) |") == 3
    assert os.sched_getaffinity(0) == set(range(os.cpu_count() or 1))  # given back


def test_the_cpu_of_a_call_counts_the_workers_helper_processes():
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    before, own = _tree_cpu_s(), time.process_time()
    helper = subprocess.Popen([sys.executable, "-c", busy + "\ninput()"], stdin=subprocess.PIPE)
    try:
        for _ in range(50):  # the helper's 0.3 s, counted while it lives
            children = _tree_cpu_s() - before - (time.process_time() - own)
            if children >= 0.25:
                break
            time.sleep(0.1)
        assert children >= 0.25
        assert _tree_cpu_s(helper.pid) >= 0.25  # its own, as a root
    finally:
        helper.communicate(b"\n", timeout=10)
