"""``bench turn``'s baseline: an earlier report shown beside a new run."""

import pytest

from tools.bench import baseline_section

REPORT = """# Turn latency: CPU default and stub models

Measured 2026-12-03 15:10 UTC on 2 cores with `python -m agent bench turn --turns 20`.

| part (ms) | cpu p50 | cpu p95 |
|---|---:|---:|
| response | 44 | 108 |

Turns measured: cpu: 20 turns.

## Before: an older section

| part (ms) | cpu p50 | cpu p95 |
|---|---:|---:|
| response | 334 | 715 |
"""


def test_the_baseline_is_the_reports_measured_line_and_first_table() -> None:
    section = baseline_section(REPORT)

    assert section.startswith("## Before")
    assert "Measured 2026-12-03 15:10 UTC" in section
    assert "| response | 44 | 108 |" in section
    assert "Turns measured: cpu: 20 turns." in section
    assert "334" not in section  # the report's own history is not carried along


@pytest.mark.parametrize("text", ["", "# some other report\n\n| a | b |\n"])
def test_a_file_that_is_no_turn_report_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a `bench turn` report"):
        baseline_section(text)
