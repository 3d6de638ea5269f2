"""``bench soak``: one worker holds its full load of SIP calls for a long time, with churn.

The worker is a process of its own running the agent server's call path (``make_app``: the
SIP user agent, RTP, the pipeline, records in a real SQLite file) on stub models
(``infra/stub_server.py``, one process): the soak measures the plumbing, not the models. It
runs with ``MAX_CALLS`` set to the calls held and a short ``RTP_TIMEOUT_S`` (below).

The callers are this process: each call is its own ``SipEndpoint`` (our UA, as a UAC,
``SipEndpoint.invite`` as the dialer uses it) on its own UDP port, with a small RTP sender
of the caller's voice (``_CallerMedia``, the UA's media factory). Each of ``calls`` slots
places call after call from a seeded plan (``churn_plan``): calls of random length ended
by a BYE, RTP stopping a moment before the BYE, calls abandoned (RTP and signalling just
stop: the endpoint's socket closes without a BYE, so the worker must end the call on its
RTP inactivity timeout and its BYE goes unanswered), and calls cancelled at once (CANCEL
right behind the INVITE). Our own UA rather than sipp: one call per endpoint makes every
kind a few lines (sipp would need a scenario per kind, branches for a CANCEL that loses the
race, and cannot be seeded), and each call's outcome is known, so it can be found in the
worker's database (by the caller's number).

The worker's open descriptors, sockets and RSS are read from ``/proc``, its asyncio tasks
from ``/metrics`` (``agent_asyncio_tasks``), each time with the worker idle: after the
warm-up, once its calls have ended (*start*), and after the churn and the drain (*end*).
The late packets are the worker's RTP sender's lateness histograms of all calls, folded as
each call's session closes (``MeteredSession``), as ``bench sip`` reads them.

The worker is tools/bench_soak_worker.py, the callers and their plan
tools/bench_soak_callers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from agent.config import Settings
from telephony.rtp.sender import LatenessHistogram
from tools.bench_soak_callers import (
    CALL_S,
    FIRST_S,
    KINDS,
    RETRY_S,
    RTP_TIMEOUT_S,
    SIP_HOST,
    WEIGHTS,
    Callers,
    Tally,
    churn_plan,
)
from tools.bench_soak_worker import SoakError

if TYPE_CHECKING:  # the supervisor's process handle, imported when a soak runs only
    from agent.runtime.embedded import ServerProcess

#: A SIP transaction's timeout (64 T1): an abandoned caller's BYE waits this long.
SIP_TIMEOUT_S = 32.0
#: Warm-up: every slot holds one call this long, ended by a BYE.
WARMUP_S = 4.0
#: After the churn: how long the calls may take to end and the worker to settle.
DRAIN_S = RTP_TIMEOUT_S + SIP_TIMEOUT_S + 20.0
#: Growth from start to end (both idle) that still passes: a pooled connection opened, a
#: timer's task that happened to be running.
FD_TOLERANCE = 3
TASK_TOLERANCE = 2
PROGRESS_S = 60.0
#: The worker keeps each ended call 5 min for the console (``LiveCalls``): RSS grows until
#: then, so its steady growth is read from the progress samples after this.
STEADY_S = 600.0
WORKER_START_TIMEOUT_S = 90.0
LIMIT_S = 0.005


def per_hour(start: float, end: float, seconds: float) -> float:
    """Growth from ``start`` to ``end`` over ``seconds``, scaled to an hour."""
    return 0.0 if seconds <= 0 else (end - start) * 3600.0 / seconds


# --- reading the worker -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sample:
    """The worker process at one moment."""

    at: float
    fds: int
    sockets: int
    tasks: int
    rss_kib: int
    live_calls: int

    @property
    def rss_mib(self) -> float:
        return self.rss_kib / 1024


def read_proc(pid: int) -> tuple[int, int, int]:
    """Open descriptors, of which sockets, and VmRSS (KiB) of process ``pid`` (Linux)."""
    fds = sockets = 0
    fd_dir = Path(f"/proc/{pid}/fd")
    for entry in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / entry)
        except OSError:
            continue  # closed meanwhile
        fds += 1
        sockets += target.startswith("socket:")
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return fds, sockets, rss


def metric(exposition: str, name: str) -> float:
    """A sample's value from a Prometheus text exposition (nan when absent)."""
    for line in exposition.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return math.nan


class Worker:
    """The worker process, its HTTP port and database, and what can be read of it."""

    def __init__(self, process: ServerProcess, http: aiohttp.ClientSession, db: Path) -> None:
        self.process = process
        self.http = http
        self.db = db

    @property
    def pid(self) -> int:
        return self.process.process.pid

    async def sample(self) -> Sample:
        if self.process.process.poll() is not None:
            raise SoakError(f"the worker exited ({self.process.process.returncode})")
        async with self.http.get(f"{self.process.base_url}/metrics") as response:
            text = await response.text()
        fds, sockets, rss = read_proc(self.pid)
        tasks = metric(text, "agent_asyncio_tasks")
        if math.isnan(tasks):
            raise SoakError("the worker's /metrics has no agent_asyncio_tasks")
        live = int(metric(text, "agent_live_calls"))
        return Sample(time.monotonic(), fds, sockets, int(tasks), rss, live)

    async def rtp(self) -> dict[str, Any]:
        async with self.http.get(f"{self.process.base_url}/soak/rtp") as response:
            data: dict[str, Any] = await response.json()
            return data

    def rows(self) -> list[tuple[str | None, str | None, str | None]]:
        """Every call row: its number, end time and end reason."""
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10) as db:
            return list(db.execute("SELECT number, ended_at, end_reason FROM calls"))


def _digits(number: str | None) -> str:
    return "".join(c for c in number or "" if c.isdigit())[-10:]


@dataclasses.dataclass
class Soak:
    """What a soak measured."""

    calls: int
    minutes: float
    seed: int
    tally: Tally
    start: Sample
    end: Sample
    #: Calls in the worker's database: ended (an end time and reason) and by end reason.
    rows: int
    rows_ended: int
    end_reasons: Counter[str]
    #: Calls still without an end after the drain (database rows, and the worker's own count).
    left_active: int
    #: Answered calls not in the database, or not ended there.
    missing: list[str]
    #: Calls answered despite the CANCEL, BYEd at once, that have no row in the database.
    unrecorded_cancels: int
    #: Abandoned calls the worker ended other than by its RTP timeout.
    abandoned_otherwise: int
    rtp: dict[str, Any]
    most_fds: int
    most_rss_kib: int
    #: RSS (KiB) in the progress samples once the ended calls kept for the console have
    #: begun to go (``STEADY_S`` on): the first and the last, and seconds between them.
    steady_rss: tuple[int, int, float] | None = None

    @property
    def hours(self) -> float:
        return (self.end.at - self.start.at) / 3600.0

    def growth(self, field: str) -> float:
        return per_hour(
            getattr(self.start, field), getattr(self.end, field), self.end.at - self.start.at
        )

    @property
    def lateness(self) -> LatenessHistogram:
        return LatenessHistogram.from_counts(self.rtp["counts"], self.rtp["max_s"])

    def failures(self) -> list[str]:
        """Why the soak fails (empty: it passes)."""
        out = []
        if self.left_active:
            out.append(f"{self.left_active} call(s) left active after the drain")
        if self.missing:
            out.append(
                f"{len(self.missing)} answered call(s) not ended in the database: "
                + ", ".join(self.missing)
            )
        if self.end.fds - self.start.fds > FD_TOLERANCE:
            out.append(f"open descriptors grew by {self.end.fds - self.start.fds}")
        if self.end.tasks - self.start.tasks > TASK_TOLERANCE:
            out.append(f"asyncio tasks grew by {self.end.tasks - self.start.tasks}")
        if not self.tally.answered:
            out.append("no call was answered")
        return out

    def _steady_rows(self) -> list[str]:
        if self.steady_rss is None:
            return []
        first, last, seconds = self.steady_rss
        return [
            f"| RSS MiB from {STEADY_S / 60:g} min on (busy) | {first / 1024:.1f} "
            f"| {last / 1024:.1f} | {per_hour(first, last, seconds) / 1024:+.1f} | |"
        ]

    def table(self) -> str:
        t, s, e = self.tally, self.start, self.end
        h = self.lateness
        sent = h.count + self.rtp["skipped"]
        on_time = round(h.fraction_within(LIMIT_S) * h.count)
        within = (on_time - self.rtp["underruns"]) / sent if sent else 0.0
        p50, p99, p999 = (1000 * h.percentile(p) for p in (50, 99, 99.9))
        rows = [
            "| calls | count |",
            "|---|---:|",
            f"| placed | {t.placed} |",
            f"| answered | {t.answered} |",
            f"| cancelled before the answer (487) | {t.cancelled} |",
            f"| cancel beaten by the answer (200, then BYE at once) | {t.ended['cancel']} |",
            f"| of which with no row in the database | {self.unrecorded_cancels} |",
            f"| refused (503, the worker still full) | {t.refused} |",
            f"| failed otherwise | {t.failed} |",
            f"| ended by the caller's BYE | {t.ended['bye']} |",
            f"| RTP stopped, then the caller's BYE | {t.ended['rtp_stop_bye']} |",
            f"| abandoned (no RTP, no BYE) | {t.ended['abandon']} |",
            f"| hung up by the agent first | {t.ended['agent']} |",
            f"| in the worker's database | {self.rows} |",
            f"| ended there (end time and reason) | {self.rows_ended} |",
            f"| **left active after the drain** | **{self.left_active}** |",
            f"| answered but not ended in the database | {len(self.missing)} |",
            f"| abandoned but not ended by the RTP timeout | {self.abandoned_otherwise} |",
            "",
            "End reasons: "
            + ", ".join(f"{r} {n}" for r, n in sorted(self.end_reasons.items()))
            + ".",
            "",
            "| worker (idle) | start | end | growth per hour | most during the run |",
            "|---|---:|---:|---:|---:|",
            f"| open descriptors | {s.fds} | {e.fds} | {self.growth('fds'):+.1f} "
            f"| {self.most_fds} |",
            f"| of which sockets | {s.sockets} | {e.sockets} | {self.growth('sockets'):+.1f} | |",
            f"| asyncio tasks | {s.tasks} | {e.tasks} | {self.growth('tasks'):+.1f} | |",
            f"| RSS MiB | {s.rss_mib:.1f} | {e.rss_mib:.1f} | "
            f"{self.growth('rss_kib') / 1024:+.1f} | {self.most_rss_kib / 1024:.1f} |",
            *self._steady_rows(),
            "",
            "| agent's RTP packets | |",
            "|---|---:|",
            f"| sent (all calls) | {h.count} |",
            f"| within {LIMIT_S * 1000:.0f} ms of schedule | {100 * within:.3f}% |",
            f"| later than {LIMIT_S * 1000:.0f} ms | {h.count - on_time} |",
            f"| p50 / p99 / p99.9 ms | {p50:.1f} / {p99:.1f} / {p999:.1f} |",
            f"| max ms | {1000 * h.max_s:.1f} |",
            f"| slots skipped / underruns | {self.rtp['skipped']} / {self.rtp['underruns']} |",
            f"| received by the callers | {t.packets_in} |",
        ]
        return "\n".join(rows)


# --- the run ------------------------------------------------------------------------------


def _show(text: str, error: bool = False) -> None:
    print(text, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


async def _idle(
    worker: Worker,
    callers: Callers,
    within_s: float,
    settled: Callable[[Sample], bool] = lambda _: True,
) -> Sample:
    """The worker once it carries no call and ``settled`` holds (or after ``within_s``)."""
    deadline = time.monotonic() + within_s
    while True:
        sample = await worker.sample()
        if (sample.live_calls == 0 and callers.in_flight == 0 and settled(sample)) or (
            time.monotonic() > deadline
        ):
            return sample
        await asyncio.sleep(1.0)


async def _progress(
    worker: Worker, callers: Callers, started: float, every_s: float, peaks: list[Sample]
) -> None:
    while True:
        await asyncio.sleep(every_s)
        sample = await worker.sample()
        peaks.append(sample)
        _show(
            f"  {(time.monotonic() - started) / 60:5.1f} min: {callers.tally.placed} calls "
            f"placed, {sample.live_calls} active, {sample.fds} fds ({sample.sockets} sockets), "
            f"{sample.tasks} tasks, RSS {sample.rss_mib:.1f} MiB"
        )


async def run_soak(calls: int, minutes: float, seed: int, progress_s: float = PROGRESS_S) -> Soak:
    """Start the stub models and the worker, warm up, churn for ``minutes``, drain, read."""
    from agent.runtime.embedded import ModelServers, ServerProcess, ServerStartError, free_port
    from tools.bench_sip_callers import caller_audio

    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        workdir = Path(tmp)
        audio = caller_audio()
        async with await ModelServers.start(stub=True, log_dir=workdir) as stub:
            port, sip_port = free_port(), _free_udp_port()
            db = workdir / "soak.db"
            env = {
                "STT_URL": stub.stt_url,
                "LLM_URL": stub.llm_url,
                "TTS_URL": stub.tts_url,
                "DATABASE_URL": f"sqlite:///{db}",
                "SIP_PORT": str(sip_port),
                "SIP_HOST": SIP_HOST,
                "MAX_CALLS": str(calls),
                "RTP_TIMEOUT_S": f"{RTP_TIMEOUT_S:g}",
                "TTS_FALLBACK": "none",
                "LLM_MODE": "templates",
                "RECORDING_STORE": "off",
                "WORKER_ID": "soak",
            }
            process = ServerProcess.launch(
                "worker",
                "tools.bench_soak_worker",
                port=port,
                log_dir=workdir,
                args=["--log-level", "WARNING"],
                env=env,
            )
            try:
                await process.wait_healthy(WORKER_START_TIMEOUT_S)
                async with aiohttp.ClientSession() as http:
                    worker = Worker(process, http, db)
                    return await _soak(worker, calls, minutes, seed, audio, sip_port, progress_s)
            except (ServerStartError, aiohttp.ClientError, OSError, sqlite3.Error) as e:
                raise SoakError(f"{e}\n{process.log_tail()}") from None
            except SoakError as e:
                raise SoakError(f"{e}\n{process.log_tail()}") from None
            finally:
                await process.stop()


async def _soak(
    worker: Worker,
    calls: int,
    minutes: float,
    seed: int,
    audio: bytes,
    sip_port: int,
    progress_s: float,
) -> Soak:
    callers = Callers(sip_port, audio, churn_plan(seed))
    _show(f"warming up: {calls} calls of {WARMUP_S:g} s ...")
    await callers.warm_up(calls, WARMUP_S)
    start = await _idle(worker, callers, DRAIN_S)
    _show(
        f"start (idle): {start.fds} fds ({start.sockets} sockets), {start.tasks} tasks, "
        f"RSS {start.rss_mib:.1f} MiB; churning {calls} calls for {minutes:g} min ..."
    )
    peaks: list[Sample] = [start]
    monitor = asyncio.create_task(_progress(worker, callers, start.at, progress_s, peaks))
    churn = asyncio.create_task(callers.run(calls))
    try:
        done, _ = await asyncio.wait({churn, monitor}, timeout=minutes * 60.0)
        for task in done:
            task.result()  # a failure of either ends the soak
        callers.stopping.set()
        await asyncio.wait_for(churn, DRAIN_S)
    finally:
        callers.stopping.set()
        monitor.cancel()
        churn.cancel()
        await asyncio.gather(monitor, churn, return_exceptions=True)
    _show(f"churn over after {callers.tally.placed} calls; draining (up to {DRAIN_S:g} s) ...")

    def back(sample: Sample) -> bool:
        return sample.fds <= start.fds and sample.tasks <= start.tasks

    end = await _idle(worker, callers, DRAIN_S, back)
    rows = await asyncio.to_thread(worker.rows)
    rtp = await worker.rtp()
    return _assess(calls, minutes, seed, callers.tally, start, end, rows, rtp, peaks)


def _assess(
    calls: int,
    minutes: float,
    seed: int,
    tally: Tally,
    start: Sample,
    end: Sample,
    rows: list[tuple[str | None, str | None, str | None]],
    rtp: dict[str, Any],
    peaks: list[Sample],
) -> Soak:
    by_number = {_digits(number): (ended, reason) for number, ended, reason in rows}
    ended_rows = [r for r in rows if r[1] is not None and r[2]]
    unrecorded = [n for n, ended in tally.numbers.items() if _digits(n) not in by_number]
    # A call BYEd the moment it is answered (the answer beat the CANCEL) is not held: the
    # worker may end it before it starts the conversation, and then writes no row.
    missing = [
        f"{n} ({ended})"
        for n, ended in tally.numbers.items()
        if ended != "cancel" and not all(by_number.get(_digits(n), (None, None)))
    ]
    abandoned_otherwise = sum(
        ended == "abandon" and by_number.get(_digits(n), (None, None))[1] != "media_timeout"
        for n, ended in tally.numbers.items()
    )
    left = sum(r[1] is None for r in rows)
    return Soak(
        calls=calls,
        minutes=minutes,
        seed=seed,
        tally=tally,
        start=start,
        end=end,
        rows=len(rows),
        rows_ended=len(ended_rows),
        end_reasons=Counter(r[2] or "none" for r in rows),
        left_active=max(left, end.live_calls),
        missing=missing,
        unrecorded_cancels=sum(tally.numbers[n] == "cancel" for n in unrecorded),
        abandoned_otherwise=abandoned_otherwise,
        rtp=rtp,
        most_fds=max(s.fds for s in [*peaks, end]),
        most_rss_kib=max(s.rss_kib for s in [*peaks, end]),
        steady_rss=steady_rss(start, peaks),
    )


def steady_rss(start: Sample, samples: list[Sample]) -> tuple[int, int, float] | None:
    """RSS of the first and the last of ``samples`` taken ``STEADY_S`` or more after
    ``start``, and the seconds between them (None: fewer than two such)."""
    steady = [s for s in samples if s.at - start.at >= STEADY_S]
    if len(steady) < 2:
        return None
    return steady[0].rss_kib, steady[-1].rss_kib, steady[-1].at - steady[0].at


def _free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((SIP_HOST, 0))
        return int(probe.getsockname()[1])


def report(soak: Soak, command: str, machine: str, when: datetime) -> str:
    """docs/benchmarks/soak.md."""
    verdict = "; ".join(soak.failures()) or "passed"
    return "\n".join(
        [
            "# Soak: one worker at full load, with churn, for a long time",
            "",
            f"Measured {when:%Y-%m-%d %H:%M} UTC on {machine} with `{command}`.",
            "",
            f"**Verdict**: {verdict}. The command exits non-zero when a call is left active "
            "after the drain, an answered call is not ended in the database, or the worker's "
            f"open descriptors grew by more than {FD_TOLERANCE} or its asyncio tasks by more "
            f"than {TASK_TOLERANCE} from start to end.",
            "",
            "One worker process runs the agent server's call path (`make_app`: our SIP user "
            "agent, RTP and its sender process, the pipeline with VAD, smart-turn, STT, "
            "policy, guard, TTS, and the call records in a real SQLite file) on the instant "
            "stub models (one `infra/stub_server.py` process): the soak measures the "
            "plumbing, not the models. It runs with `MAX_CALLS` "
            f"= {soak.calls} and `RTP_TIMEOUT_S` = {RTP_TIMEOUT_S:g} (30 by default), so "
            "that abandoned calls end within seconds.",
            "",
            f"The bench holds {soak.calls} calls at once for {soak.minutes:g} min, each slot "
            f"placing call after call from a plan seeded with {soak.seed}: held "
            f"{CALL_S[0]:g} to {CALL_S[1]:g} s with the caller speaking all along (Piper's "
            '"Yes, speaking." looped, as in `bench sip`), then '
            + ", ".join(f"*{k}* ({v}, {WEIGHTS[k]:.0%})" for k, v in KINDS.items())
            + f". The plan's first calls are one of each kind, held at most {FIRST_S:g} s. "
            "Each call is its own `SipEndpoint` (our UA as the caller, on its own UDP port; "
            "sipp would need a scenario per kind, cannot be seeded, and would not say which "
            "call went which way) with a small RTP sender: an abandoned call's socket closes "
            "without a BYE, so the worker must find the silence (`media_timeout`) and its BYE "
            "goes unanswered (32 s of retransmissions). A slot waits out an abandoned call's "
            "timeout before its next call; a 503 (the worker frees a place when the call's "
            "task has ended, a moment after the BYE's 200, so the slot's next INVITE may find "
            f"it still full) is tried again after {RETRY_S:g} s, and counts among the placed.",
            "",
            "How to read the calls: the agent answers at once (it does not let the phone "
            "ring), so a CANCEL is before the answer only when it arrives with the INVITE: "
            "the bench sends it in the same turn of its loop, and which the worker handles "
            "first is a race; when the 200 wins the caller ACKs and BYEs at once (*cancel "
            "beaten*). Such a call, ended before the worker started its conversation, may "
            "have no row in the database (a known gap, counted, not a failure). The agent "
            "also ends calls itself (the policy's end: `agent_ended`) when a call is held "
            "long enough; those count as *hung up by the agent first*, and an abandoned call "
            "the agent was ending anyway within the RTP timeout as *not ended by the RTP "
            "timeout*.",
            "",
            "*start* is read after a warm-up (one call per slot, ended by a BYE) once the "
            "worker is idle again; *end* after the churn, once its calls have ended and the "
            f"worker is back to its start figures or {DRAIN_S:g} s have passed (the drain). "
            "Both are idle, so like is compared with like: a call's sockets, tasks and "
            "buffers do not count unless they outlive it. Open descriptors from "
            "`/proc/PID/fd` (*sockets*: those that are sockets), RSS from `/proc/PID/status` "
            "(VmRSS), asyncio tasks from the worker's `/metrics` (`agent_asyncio_tasks`). "
            "*growth per hour* is (end − start) over the time between them, scaled. RSS "
            "grows at first: the worker keeps each ended call for the console for 5 min "
            "(`LiveCalls`), so it levels off after that, and its steady growth is read from "
            f"the progress samples (calls up) from {STEADY_S / 60:g} min on; descriptors and "
            "tasks must not grow. "
            "The calls are read from the worker's database (by the caller's number); the "
            "agent's RTP packets from its sender's lateness histograms, each call's added as "
            "its session closes.",
            "",
            soak.table(),
            "",
        ]
    )


def add_soak_parser(benches: Any) -> None:
    """``python -m agent bench soak``."""
    parser = benches.add_parser(
        "soak",
        help="one worker holds its MAX_CALLS SIP calls with churn (BYE, RTP stopped, "
        "abandoned, cancelled) for a long time; calls left active, descriptor, task and "
        "RSS growth, late packets (stub models; exits 1 on a leak)",
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to churn")
    parser.add_argument("--calls", type=int, help="calls held at once (default: MAX_CALLS, else 4)")
    parser.add_argument("--seed", type=int, default=19, help="the churn plan's seed")
    parser.add_argument("--output", default="docs/benchmarks/soak.md", help="where to write")


def run_soak_command(args: argparse.Namespace, settings: Settings | None = None) -> int:
    """The command line's side: check the arguments, run, write; 1 when the soak fails."""
    from tools.bench import _machine, _write_report

    calls = args.calls if args.calls is not None else (settings.max_calls if settings else 4)
    if calls < 1 or not args.minutes > 0:
        _show("--calls must be at least 1 and --minutes above 0", True)
        return 2
    if not Path("/proc/self/fd").is_dir():
        _show("bench soak reads /proc: Linux only", True)
        return 2
    for name in ("agent.runtime.embedded", "telephony"):  # the callers' calls: one line each
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        soak = asyncio.run(run_soak(calls, args.minutes, args.seed))
    except SoakError as e:
        _show(f"bench soak failed: {e}", True)
        return 1
    text = soak.table()
    _show("")
    _show(text)
    command = (
        f"python -m agent bench soak --minutes {args.minutes:g} --calls {calls} --seed {args.seed}"
    )
    _write_report(args.output, report(soak, command, _machine(), datetime.now(UTC)))
    failures = soak.failures()
    for failure in failures:
        _show(f"FAILED: {failure}", True)
    return 1 if failures else 0
