"""``bench smart-turn``: its load and its table."""

import argparse

import numpy as np
import pytest

from agent.config import Settings
from agent.pipeline import smart_turn
from tools.bench_smart_turn import Run, measure, table
from tools.cli import run


def test_every_call_gets_every_decision_timed() -> None:
    audios = [np.zeros(16000, dtype=np.float32), np.full(8000, 0.01, dtype=np.float32)]
    try:
        run = measure(audios, calls=6, decisions=3, max_batch=4)
    finally:
        smart_turn.shutdown()
    assert run.calls == 6 and len(run.latencies_ms) == 18
    assert all(ms > 0 for ms in run.latencies_ms)
    assert run.per_second == pytest.approx(18 / run.wall_s)


def test_the_table_has_a_row_per_run() -> None:
    runs = [Run(8, 1, [10.0, 20.0, 30.0], 1.0), Run(8, 64, [5.0, 6.0], 0.5)]
    rows = table(runs).splitlines()
    assert rows[2] == "| 8 | one at a time | 3 | 20 | 30 | 30 | 3.0 |"
    assert rows[3].startswith("| 8 | batched (<= 64) | 2 |")


def test_bad_loads_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for calls, decisions in (("8,many", 5), ("0", 5), ("8", 0)):
        args = argparse.Namespace(
            command="bench", bench="smart-turn", calls=calls, decisions=decisions, output="x.md"
        )
        assert run(args, Settings()) == 2
        assert "--calls must be positive integers" in capsys.readouterr().err
