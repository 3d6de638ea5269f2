"""``bench smart-turn``: its load and its table."""

import argparse

import numpy as np
import pytest

from agent.config import Settings
from tools.bench_smart_turn import Run, in_process, measure, table
from tools.cli import run


class Model:
    """A stand-in for the model: every turn complete."""

    def predict(self, audios: list[np.ndarray], rates: list[int]) -> list[dict[str, object]]:
        return [{"prediction": 1, "probability": 0.9}] * len(audios)


def test_every_call_gets_every_decision_timed() -> None:
    audios = [np.zeros(16000, dtype=np.float32), np.full(8000, 0.01, dtype=np.float32)]
    with in_process(Model()) as decide:  # type: ignore[arg-type]
        result = measure(decide, audios, calls=6, decisions=3, mode="in process")
    assert result.calls == 6 and len(result.latencies_ms) == 18
    assert all(ms > 0 for ms in result.latencies_ms)
    assert result.per_second == pytest.approx(18 / result.wall_s)
    assert result.service_cpu_s is None


def test_the_table_has_a_row_per_run() -> None:
    runs = [
        Run(8, "service, one at a time", [10.0, 20.0, 800.0], 1.0, 0.03, 0.3),
        Run(8, "in process (baseline)", [5.0, 6.0], 0.5, 0.1),
    ]
    rows = table(runs, 0.7).splitlines()
    assert "late (> 0.7 s)" in rows[0]
    assert (
        rows[2] == "| 8 | service, one at a time | 3 | 20 | 800 | 800 | 33 % | 3.0 | 10.0 | 100.0 |"
    )
    assert rows[3] == "| 8 | in process (baseline) | 2 | 5 | 6 | 6 | 0 % | 4.0 | 50.0 | - |"


def test_bad_loads_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for calls, decisions in (("8,many", 5), ("0", 5), ("8", 0)):
        args = argparse.Namespace(
            command="bench",
            bench="smart-turn",
            calls=calls,
            decisions=decisions,
            device="cpu",
            output="x.md",
        )
        assert run(args, Settings()) == 2
        assert "--calls must be positive integers" in capsys.readouterr().err
