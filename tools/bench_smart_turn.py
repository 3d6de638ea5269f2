"""``bench smart-turn``: an end-of-turn decision's latency with many calls asking at once.

Each simulated call is a thread that asks for a decision on a caller's turn (Piper-spoken
lines, their audio as the analyzer hands it over), waits for it, and asks again, as many
times as ``--decisions``: every call deciding back to back, the worst case of many calls
whose callers stop speaking together. The same load runs three ways: *in process* (the
service's batcher and model called directly in this process: the per-worker model as it
was, with no transport, the baseline), and through the host's smart-turn service
(``infra/smart_turn_server.py``, a child process, as the agent starts it) over the
workers' client (``agent.pipeline.smart_turn``), *one at a time* (``--max-batch 1``: each
decision its own run of the model) and *batched* (the decisions waiting together share a
run, at most 64). The clock runs from the call asking to its answer, the service's queue
included; *late* counts the answers slower than the analyzer's deadline, which it would
have taken as "incomplete" (the turn then ends by its fallback silence). The CPU columns
are this process's (the calls': in a worker, the client's cost) and the service's.

Run: ``python -m agent bench smart-turn --calls 1,8,32,64``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np

from agent.config import Settings
from agent.ledger.quantiles import percentile
from agent.pipeline.smart_turn import INCOMPLETE, SmartTurnClient, deadline_for
from agent.runtime.embedded import SMART_TURN_SERVER, ServerProcess
from infra.smart_turn_server import DEVICES, MAX_BATCH, Decisions, SmartTurnModel
from tools.bench import _machine, _write_report

RATE = 16000
LINES = (
    "Yes, this is Jordan Smith.",
    "I can pay two hundred dollars on Friday.",
    "I can pay two hundred dollars and",
    "My date of birth is March fifth, nineteen eighty.",
)
IN_PROCESS = "in process (baseline)"
ONE_AT_A_TIME = "service, one at a time"
BATCHED = f"service, batched (<= {MAX_BATCH})"
#: The service's client waits this long here: every answer is timed, however late.
NO_DEADLINE_S = 600.0

Decide = Callable[[np.ndarray, int], dict[str, Any]]


@dataclass(frozen=True)
class Run:
    """One way at one load: every decision's latency, the wall time and the CPU spent."""

    calls: int
    mode: str
    latencies_ms: list[float]
    wall_s: float
    client_cpu_s: float = 0.0
    service_cpu_s: float | None = None

    @property
    def per_second(self) -> float:
        return len(self.latencies_ms) / self.wall_s

    def late(self, deadline_s: float) -> int:
        return sum(ms > deadline_s * 1000 for ms in self.latencies_ms)


def turns() -> list[np.ndarray]:
    """The callers' turns, float32 at 16 kHz as the analyzer holds them."""
    from tools.simulate import CallerVoice

    voice = CallerVoice(RATE)
    return [
        np.frombuffer(voice.say(line), dtype=np.int16).astype(np.float32) / 32768 for line in LINES
    ]


def process_cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used, all its threads (Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    decide: Decide,
    audios: Sequence[np.ndarray],
    calls: int,
    decisions: int,
    mode: str,
    service_pid: int | None = None,
) -> Run:
    """``calls`` threads each asking ``decisions`` times, back to back."""

    def call(index: int) -> list[float]:
        taken = []
        for n in range(decisions):
            audio = audios[(index + n) % len(audios)]
            started = time.perf_counter()
            answer = decide(audio, RATE)
            taken.append((time.perf_counter() - started) * 1000)
            if answer == INCOMPLETE:
                raise RuntimeError(f"{mode}: the service gave no decision (see the log above)")
        return taken

    service_cpu = process_cpu_s(service_pid) if service_pid else 0.0
    client_cpu = time.process_time()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=calls) as pool:
        latencies = [ms for taken in pool.map(call, range(calls)) for ms in taken]
    wall_s = time.perf_counter() - started
    return Run(
        calls,
        mode,
        latencies,
        wall_s,
        time.process_time() - client_cpu,
        process_cpu_s(service_pid) - service_cpu if service_pid else None,
    )


@contextmanager
def in_process(model: SmartTurnModel) -> Iterator[Decide]:
    """The service's batcher and model on an event loop of this process: no transport."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="in-process", daemon=True)
    thread.start()
    decisions = Decisions(model.predict, MAX_BATCH)

    def decide(audio: np.ndarray, rate: int) -> dict[str, Any]:
        return asyncio.run_coroutine_threadsafe(decisions.decide(audio, rate), loop).result()

    try:
        yield decide
    finally:
        decisions.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@contextmanager
def service(max_batch: int, device: str, log_dir: Path) -> Iterator[tuple[Decide, int]]:
    """The smart-turn service as the agent starts it, and a worker's client of it."""
    ((name, module),) = SMART_TURN_SERVER.items()
    # At the baseline's priority: on a machine shared with other work, the agent's nice 10
    # would measure that work, not the service (on a quiet host they are the same).
    args = ["--max-batch", str(max_batch), "--device", device, "--nice", "0"]
    server = ServerProcess.launch(name, module, log_dir=log_dir, args=args)
    client = SmartTurnClient(f"{server.base_url}/v1/end-of-turn", NO_DEADLINE_S)
    try:
        asyncio.run(server.wait_healthy(120))
        yield client.decide, server.process.pid
    finally:
        client.close()
        asyncio.run(server.stop())


def table(runs: Sequence[Run], deadline_s: float) -> str:
    lines = [
        f"| calls | mode | decisions | p50 ms | p95 ms | max ms | late (> {deadline_s:g} s) "
        "| decisions / s | calls' CPU ms / decision | service's CPU ms / decision |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        ms = run.latencies_ms
        service = "-" if run.service_cpu_s is None else f"{run.service_cpu_s * 1000 / len(ms):.1f}"
        lines.append(
            f"| {run.calls} | {run.mode} | {len(ms)} | {percentile(ms, 0.5):.0f} | "
            f"{percentile(ms, 0.95):.0f} | {max(ms):.0f} | "
            f"{100 * run.late(deadline_s) / len(ms):.0f} % | {run.per_second:.1f} | "
            f"{run.client_cpu_s * 1000 / len(ms):.1f} | {service} |"
        )
    return "\n".join(lines)


def run_smart_turn_bench(
    loads: Sequence[int], decisions: int, output: str, device: str, settings: Settings
) -> int:
    audios = turns()
    deadline_s = deadline_for(settings.turn_fallback_secs, settings.vad_stop_secs)
    runs: list[Run] = []

    def each_load(decide: Decide, mode: str, pid: int | None = None) -> None:
        decide(audios[0], RATE)  # the first run's cost, and a connection open
        for calls in loads:
            print(f"{calls} calls, {mode} ...", flush=True)
            runs.append(measure(decide, audios, calls, decisions, mode, pid))

    with in_process(SmartTurnModel()) as decide:
        each_load(decide, IN_PROCESS)
    with TemporaryDirectory(prefix="bench-smart-turn-") as logs:
        for max_batch, mode in ((1, ONE_AT_A_TIME), (MAX_BATCH, BATCHED)):
            with service(max_batch, device, Path(logs)) as (decide, pid):
                each_load(decide, mode, pid)
    runs.sort(key=lambda run: run.calls)  # stable: each load's modes in the order above
    text = table(runs, deadline_s)
    print(text)
    command = (
        f"python -m agent bench smart-turn --calls {','.join(map(str, loads))} "
        f"--decisions {decisions}" + (f" --device {device}" if device != "cpu" else "")
    )
    report = "\n".join(
        [
            "# Smart-turn: one batched service for all of a host's calls",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`{command}`; pipecat's smart-turn v3.2 model, one ONNX session ({device}) in "
            "the host's smart-turn service (`infra/smart_turn_server.py`, here at nice 0 "
            "like the baseline: the agent starts it at nice 10, which on a quiet host is "
            "the same), asked over the workers' client (`agent.pipeline.smart_turn`, "
            "keep-alive HTTP, 16-bit PCM); the baseline runs the same batcher and model "
            "in the bench's own process.",
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
        help="the end-of-turn decision's latency through the host's smart-turn service, "
        "batched and one at a time, against the model in process, at several numbers of "
        "concurrent calls",
    )
    parser.add_argument(
        "--calls", default="1,8,32,64", help="comma-separated numbers of concurrent calls"
    )
    parser.add_argument("--decisions", type=int, default=5, help="decisions per call (>= 1)")
    parser.add_argument(
        "--device",
        default="cpu",
        choices=DEVICES,
        help="the service's ONNX Runtime device (cuda needs onnxruntime-gpu)",
    )
    parser.add_argument(
        "--output", default="docs/benchmarks/smart-turn.md", help="where to write the results"
    )
