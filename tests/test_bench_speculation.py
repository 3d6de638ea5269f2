"""``bench speculation``: a short run writes a complete report; bad arguments are refused.

No timing is asserted: the figures are whatever the machine gives; the test checks that
every cell was measured and reported."""

from __future__ import annotations

from tools.bench_speculation import GAPS_MS, run_speculation_bench


def test_a_short_run_reports_every_gap_both_ways(tmp_path):
    output = tmp_path / "speculation.md"

    assert run_speculation_bench(5, 50.0, str(output)) == 0

    report = output.read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| gap ms | asked at the commit p50")
    assert [int(row.split("|")[1]) for row in rows[1:]] == list(GAPS_MS)
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(cell.lstrip("-").isdigit() for cell in cells), row
    assert "python -m agent bench speculation --turns 5 --llm-ms 50" in report


def test_bad_arguments_are_refused_before_anything_runs(tmp_path, capsys):
    output = tmp_path / "speculation.md"
    assert run_speculation_bench(2, 100.0, str(output)) == 2
    assert run_speculation_bench(20, -1.0, str(output)) == 2
    assert not output.exists()
    assert "must be" in capsys.readouterr().err
