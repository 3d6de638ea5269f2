"""``bench smart-turn``: an end-of-turn decision's latency with many calls asking at once.

Each simulated call is a thread that asks the worker's smart-turn service
(``agent.pipeline.smart_turn``) for a decision on a caller's turn (Piper-spoken lines,
their audio as the analyzer hands it over), waits for it, and asks again, as many times
as ``--decisions``: every call deciding back to back, the worst case of many calls whose
callers stop speaking together. The same load runs *one at a time* (``max_batch`` 1:
each decision its own run of the model, as before the batching) and *batched* (the
decisions waiting together share a run, at most 64). The clock runs from the call asking
to its answer, the helper process's queue included.

Run: ``python -m agent bench smart-turn --calls 1,8,32,64``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from agent.ledger.quantiles import percentile
from agent.pipeline import smart_turn
from agent.pipeline.smart_turn import MAX_BATCH, Decisions
from tools.bench import _machine, _write_report

RATE = 16000
LINES = (
    "Yes, this is Jordan Smith.",
    "I can pay two hundred dollars on Friday.",
    "I can pay two hundred dollars and",
    "My date of birth is March fifth, nineteen eighty.",
)


@dataclass(frozen=True)
class Run:
    """One configuration at one load: every decision's latency, and the wall time."""

    calls: int
    max_batch: int
    latencies_ms: list[float]
    wall_s: float

    @property
    def per_second(self) -> float:
        return len(self.latencies_ms) / self.wall_s


def turns() -> list[np.ndarray]:
    """The callers' turns, float32 at 16 kHz as the analyzer holds them."""
    from tools.simulate import CallerVoice

    voice = CallerVoice(RATE)
    return [
        np.frombuffer(voice.say(line), dtype=np.int16).astype(np.float32) / 32768 for line in LINES
    ]


def measure(audios: Sequence[np.ndarray], calls: int, decisions: int, max_batch: int) -> Run:
    """``calls`` threads each asking ``decisions`` times, back to back."""
    service = Decisions(max_batch=max_batch)

    def call(index: int) -> list[float]:
        taken = []
        for n in range(decisions):
            audio = audios[(index + n) % len(audios)]
            started = time.perf_counter()
            service.decide(audio, RATE)
            taken.append((time.perf_counter() - started) * 1000)
        return taken

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=calls) as pool:
        latencies = [ms for taken in pool.map(call, range(calls)) for ms in taken]
    return Run(calls, max_batch, latencies, time.perf_counter() - started)


def table(runs: Sequence[Run]) -> str:
    lines = [
        "| calls | mode | decisions | p50 ms | p95 ms | max ms | decisions / s |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        mode = "one at a time" if run.max_batch == 1 else f"batched (<= {run.max_batch})"
        ms = run.latencies_ms
        lines.append(
            f"| {run.calls} | {mode} | {len(ms)} | {percentile(ms, 0.5):.0f} | "
            f"{percentile(ms, 0.95):.0f} | {max(ms):.0f} | {run.per_second:.1f} |"
        )
    return "\n".join(lines)


def run_smart_turn_bench(loads: Sequence[int], decisions: int, output: str) -> int:
    audios = turns()
    smart_turn.warm_up(RATE)
    runs = []
    for calls in loads:
        for max_batch in (1, MAX_BATCH):
            print(f"{calls} calls, max batch {max_batch} ...", flush=True)
            runs.append(measure(audios, calls, decisions, max_batch))
    smart_turn.shutdown()
    text = table(runs)
    print(text)
    command = (
        f"python -m agent bench smart-turn --calls {','.join(map(str, loads))} "
        f"--decisions {decisions}"
    )
    report = "\n".join(
        [
            "# Smart-turn: one batched service for all of a worker's calls",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`{command}`; pipecat's smart-turn v3.2 CPU model, one ONNX session in the "
            "worker's helper process (`agent.pipeline.smart_turn`, `SCHED_IDLE`).",
            "",
            (__doc__ or "").split("\n\n")[1].replace("\n", " ").replace("``", "`"),
            "",
            text,
            "",
            "One run per row, on a machine shared with other work: the spread between runs "
            "is 10-20 %.",
            "",
        ]
    )
    return _write_report(output, report)


def add_smart_turn_parser(benches: Any) -> None:
    """``bench smart-turn``: its options."""
    parser = benches.add_parser(
        "smart-turn",
        help="the end-of-turn decision's latency with every call's decisions batched into one "
        "ONNX session run, against one at a time, at several numbers of concurrent calls",
    )
    parser.add_argument(
        "--calls", default="1,8,32,64", help="comma-separated numbers of concurrent calls"
    )
    parser.add_argument("--decisions", type=int, default=5, help="decisions per call (>= 1)")
    parser.add_argument(
        "--output", default="docs/benchmarks/smart-turn.md", help="where to write the results"
    )
