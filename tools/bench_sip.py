"""``bench sip`` and ``bench capacity``: how many concurrent calls one worker process carries
with its audio on time, and the CPU each call costs.

The worker under test is a process of its own (tools/bench_sip_worker.py), so its CPU can be
read, running the agent server's own call path (``agent.server.app.make_app`` and
``start_call``: VAD, smart-turn, STT, policy, guard, TTS, records), or pipecat's stock
pipeline for comparison, on stub models (``infra/stub_server.py``, one process for the
whole run). sipp places the calls over our SIP user agent and RTP engine
(tools/bench_sip_callers.py) and streams the caller's voice as RTP; the agent's outgoing
packets are paced by ``RtpSession``, which keeps a histogram of how late each one left.

Calls start at ``CALL_RATE`` per second and each is held long enough that all ``n`` are up
together for ``SETTLE_S`` plus ``hold_s``; lateness and CPU are counted over the ``hold_s``
window only, the worker reading its own histograms and CPU when it opens and when the first
call ends (what came before is reported as the ramp-up).

One run decides nothing (tools/bench_sip_runs.py): each step is run ``runs`` times, each
run a fresh worker, the variants' runs interleaved so that the machine's other work falls
on all of them alike; a step holds when it passed in the required share of its runs, and a
variant stops after ``MAX_FAILED_STEPS`` steps that did not hold. The reports are written
by tools/bench_sip_report.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from agent.runtime.embedded import (
    ModelServers,
    ServerProcess,
    ServerStartError,
    free_port,
)
from telephony.carriers.media_stream import CARRIER_SAMPLE_RATE
from tools.bench import _write_report
from tools.bench_profile import PROFILE_ENV, PROFILER_ENV, py_spy, summarize
from tools.bench_sip_callers import (
    CALL_RATE,
    SIPP_SCENARIO,
    caller_audio,
    caller_on_file,
    caller_words,
    phrased_counter,
    sipp_calls,
)
from tools.bench_sip_report import capacity_report, percent, sip_report
from tools.bench_sip_runs import LIMIT_S, Run, Step, StepRuns, Variant
from tools.bench_sip_worker import SERVICE_PID_ENV, SETTLE_S, BenchError

logger = logging.getLogger(__name__)

WORKER_START_TIMEOUT_S = 60.0
#: After the last call ended: the worker flushes its records and writes the result.
WORKER_EXIT_TIMEOUT_S = 30.0
PROJECT_ROOT = Path(__file__).resolve().parents[1]
#: Runs of each step, unless told otherwise.
DEFAULT_RUNS = 5
#: A variant stops after this many steps that did not hold: more calls will not do better.
MAX_FAILED_STEPS = 2

#: ``bench sip``: the agent's CPU default (the policy's templates) on our SIP stack.
SIP_VARIANTS = (
    Variant(
        "sip",
        about="the agent's call path with its CPU default (`LLM_MODE=templates`: the "
        "policy's texts, no LLM) on our SIP user agent and RTP engine",
    ),
)
#: ``bench capacity``: the same work on the agent's pipeline and pipecat's stock one, and
#: the agent's as production runs it.
PIPELINE_VARIANTS = (
    Variant(
        "ours",
        env=(("LLM_MODE", "phrase"), ("LLM_SPECULATION", "false")),
        about="the agent's call path (`start_call`) in phrase mode (`LLM_MODE=phrase`), the "
        "LLM asked once for a reply it may phrase (here every answer after the caller's "
        "first: the counter-offer), at the turn's end (`LLM_SPECULATION=false`), as the "
        "stock pipeline asks it",
    ),
    Variant(
        "plain",
        pipeline="plain",
        about="pipecat's stock voice pipeline (`plain_pipeline`): pipecat's VAD processor on "
        "the same VAD, its context aggregators, its turn tracking and OpenAI LLM service "
        "(the stub's chat completions, every turn, the caller's first too), our STT and "
        "TTS clients (the stubs speak their protocols), nothing else",
    ),
    Variant(
        "production",
        env=(("LLM_MODE", "phrase"), ("LLM_SPECULATION", "true")),
        about="the agent's call path as the production overlay sets it "
        "(infra/k8s/overlays/gpu-production): phrase mode with speculation, the LLM asked "
        "at the transcript, before the turn is committed, and again if the words change",
    ),
)


def _launch_worker(
    name: str,
    port: int,
    args: list[str],
    env: dict[str, str],
    workdir: Path,
    cpus: set[int] | None = None,
    profile: Path | None = None,
) -> ServerProcess:
    """``python -m tools.bench_sip_worker`` with ``env`` on top of ours, output to its log, on
    ``cpus`` (None: wherever the kernel puts it), sampled by py-spy over its window into
    ``profile`` when given. No death signal: if the bench dies, the worker's own
    ``--timeout`` ends it."""
    log_path = workdir / f"{name}.log"
    command = [
        sys.executable, "-m", "tools.bench_sip_worker", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "WARNING", *args,
    ]  # fmt: skip
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    if profile is not None:
        spy = py_spy()
        if spy is None:
            raise BenchError("py-spy is not installed (pip install '.[dev]')")
        # The worker samples itself over its window only (tools.bench_sip_worker).
        full_env.update({PROFILER_ENV: spy, PROFILE_ENV: str(profile)})
    full_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
    )
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=PROJECT_ROOT,
            start_new_session=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
    return ServerProcess(name, process, f"http://127.0.0.1:{port}", log_path)


@dataclasses.dataclass
class _Bench:
    """The steps of one bench: its workers' settings, where they write, the caller's cycle."""

    workdir: Path
    env: dict[str, str]
    #: The stub models' log: its access lines count the LLM requests of each run.
    stub_log: Path
    hold_s: float
    cycle_s: float
    cpus: set[int] | None

    async def measure(
        self, variant: Variant, calls: int, run: int, profile: Path | None = None
    ) -> Step:
        """A fresh worker carrying ``calls`` calls; every call lasts long enough that all
        of them are up together for ``hold_s`` (the ramp at CALL_RATE comes on top)."""
        call_s = self.hold_s + SETTLE_S + (calls - 1) / CALL_RATE
        timeout_s = call_s + 2 * calls / CALL_RATE + 30
        name = f"{variant.name}-{calls}-{run}"
        result = self.workdir / f"{name}.json"
        port = free_port()
        llm_before = _llm_requests(self.stub_log)
        worker = _launch_worker(
            f"worker-{name}",
            port,
            ["--pipeline", variant.pipeline, "--calls", str(calls), "--result", str(result),
             "--timeout", str(timeout_s)],
            {**self.env, **dict(variant.env), "SIP_PORT": str(port)},
            self.workdir,
            self.cpus,
            profile,
        )  # fmt: skip
        try:
            await worker.wait_healthy(WORKER_START_TIMEOUT_S)
            await sipp_calls(port, calls, call_s, self.workdir)
            await asyncio.wait_for(asyncio.to_thread(worker.process.wait), WORKER_EXIT_TIMEOUT_S)
        except (TimeoutError, BenchError, ServerStartError, aiohttp.ClientError) as e:
            raise BenchError(f"{name}: {e}\n{worker.log_tail()}") from None
        finally:
            await worker.stop()
        data = json.loads(result.read_text()) if result.exists() else {"error": "no result"}
        if "error" in data:
            raise BenchError(f"{name}: {data['error']}\n{worker.log_tail()}")
        llm = _llm_requests(self.stub_log) - llm_before
        return Step.from_json(variant.name, data, self.cycle_s, run, llm)

    async def attempt(self, variant: Variant, calls: int, run: int) -> Step:
        """One run of a step; one that fails to measure is a failed run, and says why."""
        try:
            step = await self.measure(variant, calls, run)
        except BenchError as e:
            _show(f"  [{variant.name}] {calls} calls, run {run}: not measured: {e}", True)
            return Step.unmeasured(variant.name, calls, run, str(e).splitlines()[0])
        _show(
            f"  [{variant.name}] {calls} calls, run {run}: {step.window.lateness.count} "
            f"packets, {percent(step.window.within)} within {LIMIT_S * 1000:.0f} ms, "
            f"{len(step.answers_ms)}/{step.lines} lines answered, "
            f"{step.cpu_per_call:.0f} core-ms per call-s, worker's core "
            f"{step.core_percent:.0f}% busy"
        )
        return step

    async def stepping(
        self, variants: Sequence[Variant], steps: Sequence[int], runs: int, load: list[float]
    ) -> list[Step]:
        """Every step ``runs`` times, the variants interleaved run by run, each variant
        until MAX_FAILED_STEPS of its steps did not hold."""
        results: list[Step] = []
        failed: Counter[str] = Counter()
        reference: dict[str, float] = {}  # the lightest step's answer p95, by variant
        for calls in steps:
            live = [v for v in variants if failed[v.name] < MAX_FAILED_STEPS]
            for run in range(1, runs + 1):
                for variant in live:
                    load.append(os.getloadavg()[0])
                    step = await self.attempt(variant, calls, run)
                    step.reference_ms = reference.get(variant.name)
                    results.append(step)
            for variant in live:
                these = [s for s in results if s.variant == variant.name and s.calls == calls]
                group = StepRuns(variant.name, calls, these)
                reference.setdefault(variant.name, group.answer_p95_ms())
                failed[variant.name] += not group.held
        return results


def _llm_requests(stub_log: Path) -> int:
    """The chat completions the stub LLM has answered so far (its access log's lines)."""
    with stub_log.open(errors="replace") as log:
        return sum('"POST /v1/chat/completions ' in line for line in log)


async def _run(
    variants: Sequence[Variant],
    steps: Sequence[int],
    runs: int,
    hold_s: float,
    worker_cpus: set[int] | None,
    profile_calls: int | None = None,
) -> Run:
    """The steps, then each variant under py-spy with ``profile_calls`` calls if given."""
    profiles: dict[str, tuple[Counter[str], int]] = {}
    load: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-sip-") as tmp:
        workdir = Path(tmp)
        audio = caller_audio()
        (workdir / "caller.ulaw").write_bytes(audio)
        (workdir / "bench_call.xml").write_text(SIPP_SCENARIO)
        database_url = f"sqlite:///{workdir / 'bench.db'}"
        await asyncio.to_thread(caller_on_file, database_url, workdir)
        async with await _models(workdir) as models:
            smart_turn = next(s for s in models.servers if s.name == "smart-turn")
            env = {
                "STT_URL": models.stt_url,
                "LLM_URL": models.llm_url,
                "TTS_URL": models.tts_url,
                "SMART_TURN_URL": models.smart_turn_url or "",
                SERVICE_PID_ENV: str(smart_turn.process.pid),
                "DATABASE_URL": database_url,
                "SIP_HOST": "127.0.0.1",
                "TTS_FALLBACK": "none",
                "LLM_MODE": "templates",
                # The worker must not turn calls away (503) before the criterion does.
                "MAX_CALLS": str(max([*steps, profile_calls or 0])),
            }
            cycle_s = len(audio) / CARRIER_SAMPLE_RATE
            bench = _Bench(workdir, env, workdir / "stub.log", hold_s, cycle_s, worker_cpus)
            results = await bench.stepping(variants, steps, runs, load)
            if all(step.error is not None for step in results):
                raise BenchError("no run could be measured (see above)")
            for variant in variants if profile_calls else ():
                raw = workdir / f"profile-{variant.name}.txt"
                await bench.measure(variant, profile_calls or 0, 1, raw)
                profiles[variant.name] = summarize(raw.read_text())
                _show(f"  [{variant.name}] profiled with {profile_calls} calls")
    realtime = all(step.realtime for step in results if step.error is None)
    return Run(results, cycle_s, profiles, realtime, load, runs)


async def _models(log_dir: Path) -> ModelServers:
    """The stub models and the host's smart-turn service, logging to ``log_dir``: the stub
    STT hears the caller's words (``caller_words``) in every turn, the stub LLM answers with
    the counter-offer in its own words (``phrased_counter``). The smart-turn service is a
    real model, shared by the host's workers as in production, so it runs here with the
    stub models, off the worker's core, at their priority; its CPU is measured apart."""
    args = {
        "stub": ["--transcript", caller_words(), "--reply", phrased_counter()],
        "smart-turn": ["--nice", "0"],
    }
    return await ModelServers.start(stub=True, smart_turn=True, log_dir=log_dir, args=args)


def _show(text: str, error: bool = False) -> None:
    """The bench's progress, tables and errors, on the terminal."""
    print(text, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


def _measure(
    variants: Sequence[Variant],
    steps: Sequence[int],
    runs: int,
    hold_s: float,
    worker_cpus: set[int] | None,
    profile_calls: int | None = None,
) -> Run | int:
    """The arguments checked, then the steps run; an exit status when either fails."""
    import shutil

    if not steps or any(n < 1 for n in steps) or list(steps) != sorted(set(steps)):
        _show(f"steps must be increasing positive call counts like 1,2,4,8, got {steps}", True)
        return 2
    if runs < 1:
        _show(f"runs must be at least 1, got {runs}", True)
        return 2
    if hold_s < 1:
        _show(f"the hold must be at least 1 s (~50 packets per call), got {hold_s:g}", True)
        return 2
    if shutil.which("sipp") is None:
        _show("sipp must be installed (Debian: apt-get install sip-tester)", True)
        return 2
    logging.getLogger("agent.runtime.embedded").setLevel(logging.WARNING)
    _show(
        f"stepping {', '.join(map(str, steps))} concurrent calls, {runs} run(s) each, "
        f"{hold_s:g} s each ..."
    )
    try:
        return asyncio.run(_run(variants, steps, runs, hold_s, worker_cpus, profile_calls))
    except BenchError as e:
        _show(f"bench failed: {e}", True)
        return 1


def _command(name: str, steps: Sequence[int], runs: int, hold_s: float) -> str:
    return (
        f"python -m agent bench {name} --steps {','.join(map(str, steps))} --runs {runs} "
        f"--hold {hold_s:g}"
    )


def run_sip_bench(
    output: str, steps: Sequence[int], hold_s: float, runs: int = DEFAULT_RUNS
) -> int:
    """``python -m agent bench sip``: the steps on our SIP stack, the tables, the report."""
    measured = _measure(SIP_VARIANTS, steps, runs, hold_s, None)
    if isinstance(measured, int):
        return measured
    command = _command("sip", steps, runs, hold_s)
    report, shown = sip_report(measured, command, SIP_VARIANTS, hold_s)
    _show("")
    _show(shown)
    return _write_report(output, report)


def run_capacity_bench(
    output: str,
    steps: Sequence[int],
    hold_s: float,
    runs: int = DEFAULT_RUNS,
    profile_calls: int | None = None,
    baseline: str | None = None,
) -> int:
    """``python -m agent bench capacity``: calls per core, the agent's pipeline vs pipecat's.

    The worker runs on one core of its own (the first this process may use), so the calls
    it carries are the calls per core; the stub models, sipp and this process keep to the
    other cores. All variants run on the same SIP stack, the same stub models and the same
    caller audio. With ``profile_calls``, one more worker per variant carries that many
    calls under py-spy (``tools.bench_profile``).
    """
    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        _show("bench capacity needs two cores: one for the worker, one for the callers", True)
        return 2
    worker_core = min(cores)
    # This process, and the stub server and sipp it starts, keep off the worker's core.
    os.sched_setaffinity(0, cores - {worker_core})
    try:
        measured = _measure(PIPELINE_VARIANTS, steps, runs, hold_s, {worker_core}, profile_calls)
    finally:
        os.sched_setaffinity(0, cores)
    if isinstance(measured, int):
        return measured
    command = _command("capacity", steps, runs, hold_s) + (
        f" --profile {profile_calls}" if profile_calls else ""
    )
    report, shown = capacity_report(
        measured, command, PIPELINE_VARIANTS, hold_s, worker_core, profile_calls, baseline
    )
    _show("")
    _show(shown)
    return _write_report(output, report)
