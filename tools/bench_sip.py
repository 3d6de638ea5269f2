"""``bench sip``: how many concurrent calls one worker process carries with its audio on time.

The worker under test is a process of its own, so its CPU can be read, running the agent
server's own call path (``agent.server.app.make_app`` and ``start_call``: VAD, smart-turn, STT,
policy, guard, TTS, records) on stub models (``infra/stub_server.py``, one process for the
whole run). It carries ``n`` calls at once for each step, on one of two transports:

- **sip**: our SIP user agent and RTP engine (``telephony/``). sipp places the calls and
  streams the caller's voice as RTP; the agent's outgoing packets are paced by
  ``RtpSession``, which keeps a histogram of how late each one left.
- **websocket** (the baseline): pipecat's ``FastAPIWebsocketTransport`` with its
  ``TwilioFrameSerializer`` (G.711 8 kHz in JSON media events, the way pipecat serves
  carrier media streams) under uvicorn. Clients in the bench process stream the same voice.
  pipecat keeps no lateness figures, so the worker's output transport is a subclass that
  times each 20 ms chunk against pipecat's own send clock (see ``_MeteredOutput``).

Calls start at ``CALL_RATE`` per second and each is held long enough that all ``n`` are up
together for ``SETTLE_S`` plus ``hold_s``; lateness and CPU are counted over the ``hold_s``
window only, the worker reading its own histograms and ``time.process_time()`` when it
opens and when the first call ends (what came before is reported as the ramp-up). Each
step is a fresh worker; stepping stops at the first step where fewer than ``TARGET`` of
the packets left within ``LIMIT_S`` of their schedule.

The worker is tools/bench_sip_worker.py, the callers tools/bench_sip_callers.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from agent.ledger.quantiles import percentile
from agent.runtime.embedded import ModelServers, ServerProcess, ServerStartError, free_port
from telephony.carriers.media_stream import CARRIER_SAMPLE_RATE
from telephony.rtp.sender import MAX_UNDERRUN_SLOTS, LatenessHistogram
from tools.bench import _machine, _write_report
from tools.bench_profile import py_spy, summarize
from tools.bench_profile import table as profile_table
from tools.bench_sip_callers import (
    CALL_RATE,
    CALLER_LINE,
    SIPP_SCENARIO,
    caller_audio,
    sipp_calls,
    websocket_calls,
)
from tools.bench_sip_worker import PIPELINES, SETTLE_S, TRANSPORTS, BenchError

logger = logging.getLogger(__name__)

#: py-spy's samples per second in a profiled step.
PROFILE_RATE = 200
#: The acceptance criterion: this share of outgoing packets leaves within LIMIT_S.
LIMIT_S = 0.005
TARGET = 0.999
#: A step's answers may be this much slower (p95) than with the run's fewest calls.
ANSWER_SLACK_MS = 100.0
WORKER_START_TIMEOUT_S = 60.0
#: After the last call ended: the worker flushes its records and writes the result.
WORKER_EXIT_TIMEOUT_S = 30.0
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Packets:
    """Outgoing packets of all calls over a stretch of time: their lateness, the slots
    skipped, and the slots sent as silence because the agent's audio came too late."""

    lateness: LatenessHistogram
    skipped: int
    underruns: int = 0

    @classmethod
    def from_counts(
        cls, counts: list[int], skipped: int, max_s: float, underruns: int = 0
    ) -> Packets:
        # max_s: the calls' worst over their whole life, so only ≥100 ms shows it.
        return cls(LatenessHistogram.from_counts(counts, max_s), skipped, underruns)

    @property
    def within(self) -> float:
        """Share that left within LIMIT_S carrying the audio due: a slot the RTP sender
        skipped, or sent as silence in an underrun, counts as late."""
        sent = self.lateness.count
        if not sent + self.skipped:
            return 0.0
        on_time = self.lateness.fraction_within(LIMIT_S) * sent - self.underruns
        return max(0.0, on_time) / (sent + self.skipped)


@dataclasses.dataclass(frozen=True)
class Variant:
    """What one series of steps runs: a pipeline on a transport, named in the table."""

    name: str
    transport: str
    pipeline: str = "ours"


#: ``bench sip``: the agent's pipeline on our SIP stack and on pipecat's websocket transport.
TRANSPORT_VARIANTS = tuple(Variant(t, t) for t in TRANSPORTS)
#: ``bench capacity``: the agent's pipeline and pipecat's stock one, both on our SIP stack.
PIPELINE_VARIANTS = tuple(Variant(p, "sip", p) for p in PIPELINES)


@dataclasses.dataclass
class Step:
    """One step: ``calls`` carried at once; the window's packets, answers and CPU, the
    ramp-up's packets."""

    variant: str
    calls: int
    window_s: float
    cpu_s: float
    machine_cpu_s: float
    core_cpu_s: float
    window: Packets
    ramp: Packets
    #: None where they are not timed (the websocket transport).
    answers_ms: list[float] | None
    #: The caller's lines in the window, each owed an answer (calls x whole cycles).
    lines: int
    #: Whether the worker's RTP sender had real-time priority.
    realtime: bool = False
    #: The answer p95 of the variant's lightest step in the run (None: this is that step).
    reference_ms: float | None = None

    @classmethod
    def from_json(cls, variant: str, data: dict[str, Any], cycle_s: float) -> Step:
        return cls(
            variant,
            data["calls"],
            data["window_s"],
            data["cpu_s"],
            data["machine_cpu_s"],
            data["core_cpu_s"],
            Packets.from_counts(data["counts"], data["skipped"], data["max_s"], data["underruns"]),
            Packets.from_counts(
                data["ramp_counts"], data["ramp_skipped"], data["max_s"], data["ramp_underruns"]
            ),
            data["answers_ms"],
            data["calls"] * int(data["window_s"] / cycle_s),
            data.get("realtime", False),
        )

    @property
    def answer_p95_ms(self) -> float:
        """The answers' p95, a line left unanswered counting as never answered (inf);
        nan where answers are not timed."""
        if self.answers_ms is None:
            return math.nan
        missing = max(0, self.lines - len(self.answers_ms))
        values = [*self.answers_ms, *[math.inf] * missing]
        return percentile(values, 0.95) if values else math.inf

    @property
    def passed(self) -> bool:
        """Its packets on time with their audio, and its answers (where timed) as quick
        as the lightest step's but for ANSWER_SLACK_MS."""
        on_time = self.window.lateness.count > 0 and self.window.within >= TARGET
        if self.answers_ms is None:
            return on_time
        reference = self.answer_p95_ms if self.reference_ms is None else self.reference_ms
        return on_time and self.answer_p95_ms <= reference + ANSWER_SLACK_MS

    @property
    def answered(self) -> str:
        """Answers against lines owed, for the table ("–": not timed)."""
        return "–" if self.answers_ms is None else f"{len(self.answers_ms)}/{self.lines}"

    @property
    def cpu_percent(self) -> float:
        """The worker's CPU over the window, in % of one core."""
        return 100 * self.cpu_s / self.window_s

    @property
    def core_percent(self) -> float:
        """How busy the worker's cores were over the window (all processes on them), in %
        of one core."""
        return 100 * self.core_cpu_s / self.window_s


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
    ``cpus`` (None: wherever the kernel puts it), under py-spy writing ``profile`` when
    given. No death signal: if the bench dies, the worker's own ``--timeout`` ends it."""
    log_path = workdir / f"{name}.log"
    command = [
        sys.executable, "-m", "tools.bench_sip_worker", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "WARNING", *args,
    ]  # fmt: skip
    if profile is not None:
        spy = py_spy()
        if spy is None:
            raise BenchError("py-spy is not installed (pip install '.[dev]')")
        sampler = [spy, "record", "--threads", "--subprocesses", "--nonblocking", "--format", "raw"]
        command = [*sampler, "--rate", str(PROFILE_RATE), "--output", str(profile), "--", *command]
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
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


async def _step(
    variant: Variant,
    calls: int,
    hold_s: float,
    workdir: Path,
    env: dict[str, str],
    audio: bytes,
    cpus: set[int] | None = None,
    profile: Path | None = None,
) -> Step:
    """A fresh worker carrying ``calls`` calls; every call lasts long enough that all of
    them are up together for ``hold_s`` (the ramp at CALL_RATE comes on top)."""
    call_s = hold_s + SETTLE_S + (calls - 1) / CALL_RATE
    timeout_s = call_s + 2 * calls / CALL_RATE + 30
    result = workdir / f"{variant.name}-{calls}.json"
    port = free_port()
    sip = variant.transport == "sip"
    worker = _launch_worker(
        f"worker-{variant.name}-{calls}",
        port,
        ["--transport", variant.transport, "--pipeline", variant.pipeline,
         "--calls", str(calls), "--result", str(result), "--timeout", str(timeout_s)],
        dict(env, SIP_PORT=str(port)) if sip else env,
        workdir,
        cpus,
        profile,
    )  # fmt: skip
    try:
        await worker.wait_healthy(WORKER_START_TIMEOUT_S)
        if sip:
            await sipp_calls(port, calls, call_s, workdir)
        else:
            await websocket_calls(port, calls, call_s, audio)
        await asyncio.wait_for(asyncio.to_thread(worker.process.wait), WORKER_EXIT_TIMEOUT_S)
    except (TimeoutError, BenchError, ServerStartError, aiohttp.ClientError) as e:
        raise BenchError(f"{variant.name}, {calls} calls: {e}\n{worker.log_tail()}") from None
    finally:
        await worker.stop()
    data = json.loads(result.read_text()) if result.exists() else {"error": "no result"}
    if "error" in data:
        raise BenchError(f"{variant.name}, {calls} calls: {data['error']}\n{worker.log_tail()}")
    return Step.from_json(variant.name, data, len(audio) / CARRIER_SAMPLE_RATE)


def _percent(share: float) -> str:
    """Rounded down, so that a step below TARGET never shows as meeting it."""
    return f"{math.floor(share * 10000 + 1e-6) / 100:.2f}%"


def _ms(seconds: float) -> str:
    top = LatenessHistogram.BUCKETS * LatenessHistogram.BUCKET_S
    return f"≥{top * 1000:.0f}" if seconds >= top else f"{seconds * 1000:.1f}"


def table(steps: Sequence[Step], column: str = "transport") -> str:
    """Markdown table: one row per variant (``column`` names them) and step."""
    cores = os.cpu_count() or 1
    rows = [
        f"| {column} | calls | packets | underruns | p50 ms | p99 ms | p99.9 ms | within 5 ms "
        "| answered | answer p50 ms | answer p95 ms | worker CPU % | worker's core CPU % "
        f"| all CPU % (of {100 * cores}) | ramp-up: within 5 ms | ramp-up: max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        h = s.window.lateness
        mark = "" if s.passed else " ✗"
        p50 = f"{percentile(s.answers_ms, 0.5):.0f}" if s.answers_ms else "–"
        rows.append(
            f"| {s.variant} | {s.calls} | {h.count} | {s.window.underruns} "
            f"| {_ms(h.percentile(50))} | {_ms(h.percentile(99))} | {_ms(h.percentile(99.9))} "
            f"| {_percent(s.window.within)}{mark} | {s.answered} | {p50} "
            f"| {_answer_ms(s.answer_p95_ms)} "
            f"| {s.cpu_percent:.0f} | {s.core_percent:.0f} "
            f"| {100 * s.machine_cpu_s / s.window_s:.0f} | {_percent(s.ramp.within)} "
            f"| {_ms(s.ramp.lateness.percentile(100))} |"
        )
    return "\n".join(rows)


def _answer_ms(ms: float) -> str:
    return "–" if math.isnan(ms) else "∞" if math.isinf(ms) else f"{ms:.0f}"


def carried(steps: Sequence[Step], variant: str) -> int:
    """The most calls ``variant`` carried in a step that met the criterion (0: none)."""
    return max((s.calls for s in steps if s.variant == variant and s.passed), default=0)


def _carried(steps: Sequence[Step], variant: str) -> str:
    n = carried(steps, variant)
    return str(n) if n else "none of the steps"


@dataclasses.dataclass
class Run:
    """What a bench measured: the steps, the caller's cycle, the profiles by variant."""

    steps: list[Step]
    cycle_s: float
    profiles: dict[str, tuple[Counter[str], int]]
    #: Whether the workers' RTP senders had real-time priority (all of them).
    realtime: bool


async def _run(
    variants: Sequence[Variant],
    steps: Sequence[int],
    hold_s: float,
    worker_cpus: set[int] | None,
    profile_calls: int | None = None,
) -> Run:
    """Each variant, step by step, then under py-spy with ``profile_calls`` calls if given."""
    results: list[Step] = []
    profiles: dict[str, tuple[Counter[str], int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sip-") as tmp:
        workdir = Path(tmp)
        audio = caller_audio()
        (workdir / "caller.ulaw").write_bytes(audio)
        (workdir / "bench_call.xml").write_text(SIPP_SCENARIO)
        async with await ModelServers.start(stub=True, log_dir=workdir) as stub:
            env = {
                "STT_URL": stub.stt_url,
                "LLM_URL": stub.llm_url,
                "TTS_URL": stub.tts_url,
                "DATABASE_URL": f"sqlite:///{workdir / 'bench.db'}",
                "SIP_HOST": "127.0.0.1",
                "TTS_FALLBACK": "none",
                "LLM_MODE": "templates",
                # The worker must not turn calls away (503) before the criterion does.
                "MAX_CALLS": str(max([*steps, profile_calls or 0])),
            }
            for variant in variants:
                lightest: Step | None = None
                for calls in steps:
                    step = await _step(variant, calls, hold_s, workdir, env, audio, worker_cpus)
                    if lightest is None:
                        lightest = step
                    else:
                        step.reference_ms = lightest.answer_p95_ms
                    results.append(step)
                    _show(
                        f"  [{variant.name}] {calls} calls: {step.window.lateness.count} "
                        f"packets, {_percent(step.window.within)} within "
                        f"{LIMIT_S * 1000:.0f} ms, {step.answered} lines answered, answer p95 "
                        f"{_answer_ms(step.answer_p95_ms)} ms, worker's "
                        f"core {step.core_percent:.0f}% busy"
                    )
                    if not step.passed:
                        break
                if profile_calls:
                    raw = workdir / f"profile-{variant.name}.txt"
                    args = (variant, profile_calls, hold_s, workdir, env, audio, worker_cpus, raw)
                    await _step(*args)
                    profiles[variant.name] = summarize(raw.read_text())
                    _show(f"  [{variant.name}] profiled with {profile_calls} calls")
    realtime = all(step.realtime for step in results)
    return Run(results, len(audio) / CARRIER_SAMPLE_RATE, profiles, realtime)


def _show(text: str, error: bool = False) -> None:
    """The bench's progress, table and errors, on the terminal."""
    print(text, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


def _measure(
    variants: Sequence[Variant],
    steps: Sequence[int],
    hold_s: float,
    worker_cpus: set[int] | None,
    profile_calls: int | None = None,
) -> Run | int:
    """The arguments checked, then the steps run; an exit status when either fails."""
    import shutil

    if not steps or any(n < 1 for n in steps) or list(steps) != sorted(set(steps)):
        _show(f"steps must be increasing positive call counts like 1,2,4,8, got {steps}", True)
        return 2
    if hold_s < 1:
        _show(f"the hold must be at least 1 s (~50 packets per call), got {hold_s:g}", True)
        return 2
    if shutil.which("sipp") is None:
        _show("sipp must be installed (Debian: apt-get install sip-tester)", True)
        return 2
    logging.getLogger("agent.runtime.embedded").setLevel(logging.WARNING)
    _show(f"stepping {', '.join(map(str, steps))} concurrent calls, {hold_s:g} s each ...")
    try:
        return asyncio.run(_run(variants, steps, hold_s, worker_cpus, profile_calls))
    except BenchError as e:
        _show(f"bench failed: {e}", True)
        return 1


def _criterion() -> str:
    """What a step must meet, as the reports say it."""
    return (
        f"a step passes when at least {TARGET:.1%} of the agent's outgoing 20 ms packets "
        f"left within {LIMIT_S * 1000:.0f} ms of their schedule carrying the audio that was "
        "due (a slot skipped after a stall, or sent as silence because the agent's audio "
        "came late, an *underrun*, counts as late), and its answers were no more than "
        f"{ANSWER_SLACK_MS:.0f} ms slower (p95) than with the run's fewest calls, a caller "
        "line left unanswered counting as never answered"
    )


def _columns() -> str:
    """The table's columns, as the reports explain them."""
    return (
        "*packets*: every packet the agent sent in the window; *underruns*: slots sent as "
        "silence inside the agent's speech because its audio came too late (the sender "
        f"counts a silence of at most {MAX_UNDERRUN_SLOTS} slots that ends in more audio); "
        "*p50/p99/p99.9 ms*: lateness, the send against the packet's absolute deadline; "
        "*answered*: the agent's answers in the window against the caller's lines in it "
        "(whole cycles); *answer ms*: from the caller's last voiced packet received to the "
        "first packet of the agent's answer handed to the sender (`_TimedSession`: the same "
        "measure for every pipeline, endpointing included); *worker CPU %*: the worker "
        "process's CPU time over the window, in % of one core; *worker's core CPU %*: how "
        "busy the worker's core(s) were, its sender and smart-turn processes included; "
        "*all CPU %*: every process on the machine; *ramp-up*: everything before the window "
        "(calls arriving, their greetings)."
    )


def run_sip_bench(output: str, steps: Sequence[int], hold_s: float) -> int:
    """``python -m agent bench sip``: the steps on both transports, the table, the report."""
    measured = _measure(TRANSPORT_VARIANTS, steps, hold_s, None)
    if isinstance(measured, int):
        return measured
    results, cycle_s = measured.steps, measured.cycle_s
    text = table(results)
    _show("")
    _show(text)
    command = f"python -m agent bench sip --steps {','.join(map(str, steps))} --hold {hold_s:g}"
    report = "\n".join(
        [
            "# SIP: concurrent calls one worker carries with its outgoing audio on time",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with `{command}`.",
            "",
            f"**Criterion**: {_criterion()}; stub models. "
            f"**Carried**: {_carried(results, 'sip')} on SIP, "
            f"{_carried(results, 'websocket')} on the websocket baseline. Stepping stops at "
            "the first step that fails (✗).",
            "",
            "One worker process runs the agent server's own call path (`make_app`, "
            "`start_call`: VAD, smart-turn, STT, policy, guard, TTS, call records in SQLite) "
            "on the instant stub models (one `infra/stub_server.py` process for the run); "
            f"each step is a fresh worker. Calls arrive at {CALL_RATE} per second; once all "
            f"are up the worker waits {SETTLE_S:g} s, then measures until the first call ends "
            f"({hold_s:g} s). *ramp-up* is everything before that window: calls arriving, "
            f'their greetings. The caller says "{CALLER_LINE}" every {cycle_s:.1f} s (Piper, '
            'looped); the agent greets, then answers every turn (the stub STT hears "yes that '
            'is me", the policy asks for the date of birth again); the stub TTS says each text '
            "it is sent as a 0.3 s tone.",
            "",
            f"- **sip**: {TRANSPORTS['sip']}, each call streaming the caller's voice as RTP. "
            "The agent's packets, a continuous 50 a second per call (silence included), leave "
            "from the worker's RTP sender process, which counts them (`telephony/rtp/sender.py`).",
            f"- **websocket** (the baseline): {TRANSPORTS['websocket']}, under uvicorn in "
            "the worker, 20 ms chunks; the callers are clients in the bench process "
            "streaming the same voice as Twilio media events. *packets*: the audio chunks "
            "pipecat wrote, only while the agent speaks (it sends nothing in silence), so far "
            "fewer: p99.9 of a few hundred is their maximum, and below 1,000 packets a single "
            "late one fails the criterion. Lateness: the chunk's write against pipecat's own "
            "send clock (the end of its sleep after the chunk before, or at once when it found "
            "itself behind), counted for chunks already queued when the one before left; the "
            "first chunk of each utterance counts as on time, and no underrun is counted; "
            "answers are not timed (the criterion is the packets'). pipecat runs one chunk "
            "ahead of real time, RTP none.",
            "",
            _columns(),
            "",
            text,
            "",
        ]
    )
    return _write_report(output, report)


def _profiles_section(measured: Run, profile_calls: int | None) -> list[str]:
    """The report's lines on where each pipeline's worker spent its CPU (shown as well)."""
    profiled = [
        line
        for name, (parts, total) in measured.profiles.items()
        for line in (f"**{name}**, {profile_calls} calls:", "", profile_table(parts, total), "")
    ]
    if not profiled:
        return []
    _show("")
    _show("\n".join(profiled))
    return [
        "## Where the worker's CPU goes",
        "",
        f"One more worker per pipeline carried {profile_calls} calls under py-spy "
        "(`py-spy record --threads --subprocesses --nonblocking --rate "
        f"{PROFILE_RATE}`), the samples of the worker and its helper processes summed by "
        "part of the path (`tools/bench_profile.py`: each sample of the event loop counts "
        "for the innermost frame of its stack that belongs to a part; the RTP sender's and "
        "the smart-turn model's count whole; the waits are idle and left out).",
        "",
        *profiled,
    ]


def run_capacity_bench(
    output: str,
    steps: Sequence[int],
    hold_s: float,
    profile_calls: int | None = None,
    baseline: str | None = None,
) -> int:
    """``python -m agent bench capacity``: calls per core, the agent's pipeline vs pipecat's.

    The worker runs on one core of its own (the first this process may use), so the calls
    it carries are the calls per core; the stub models, sipp and this process share the
    other cores, so they do not take the worker's time. Both pipelines run on the same SIP
    stack, the same stub models and the same caller audio; only what is between the
    transport's input and output differs (``plain_pipeline``). With ``profile_calls``,
    one more worker per pipeline carries that many calls under py-spy
    (``tools.bench_profile``).
    """
    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        _show("bench capacity needs two cores: one for the worker, one for the callers", True)
        return 2
    worker_core = min(cores)
    # This process, and the stub server and sipp it starts, keep off the worker's core.
    os.sched_setaffinity(0, cores - {worker_core})
    try:
        measured = _measure(PIPELINE_VARIANTS, steps, hold_s, {worker_core}, profile_calls)
    finally:
        os.sched_setaffinity(0, cores)
    if isinstance(measured, int):
        return measured
    results, cycle_s = measured.steps, measured.cycle_s
    text = table(results, column="pipeline")
    _show("")
    _show(text)
    ours, plain = carried(results, "ours"), carried(results, "plain")
    command = (
        f"python -m agent bench capacity --steps {','.join(map(str, steps))} --hold {hold_s:g}"
        + (f" --profile {profile_calls}" if profile_calls else "")
    )
    profiled = _profiles_section(measured, profile_calls)
    report = "\n".join(
        [
            "# Calls per core: the agent's pipeline vs pipecat's stock pipeline",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with `{command}`.",
            "",
            f"**Calls per core** (the most calls one worker on one core carried; {_criterion()}): "
            f"**{ours}** for the agent's pipeline, **{plain}** for pipecat's stock pipeline on "
            "the same transport. Stepping stops at the first step that fails (✗); the true "
            "figure lies between the last step passed and that one.",
            "",
            f"The worker process is pinned to core {worker_core}, and its helper processes "
            "with it (the RTP sender, the smart-turn model); the stub models (one "
            "`infra/stub_server.py`), sipp and the bench share the other core(s). Each step is "
            f"a fresh worker. sipp places the calls at {CALL_RATE} per second over our SIP "
            "user agent and RTP engine, each streaming the caller's voice as RTP: "
            f'"{CALLER_LINE}" every {cycle_s:.1f} s (Piper, looped), a line far more often '
            f"than a real caller's. Once all are up the worker waits {SETTLE_S:g} s, then "
            f"measures until the first call ends ({hold_s:g} s). The RTP sender ran with "
            f"{'real-time priority' if measured.realtime else 'ordinary priority'}.",
            "",
            f"- **ours**: {PIPELINES['ours']}: VAD, smart-turn v3, STT, the conversation "
            "policy, the output guard, the recording taps, TTS, the turn ledger and the "
            "call records in SQLite; replies are the policy's templates (`LLM_MODE=templates`).",
            f"- **plain**: {PIPELINES['plain']}: pipecat's VAD processor on the same VAD, its "
            "default turn strategies, its context aggregators and OpenAI LLM service (the "
            "stub's chat completions, every turn), our STT and TTS clients (the stubs speak "
            "their protocols); nothing else.",
            "",
            _columns(),
            "",
            text,
            "",
            *([baseline, ""] if baseline else []),
            *profiled,
        ]
    )
    return _write_report(output, report)
