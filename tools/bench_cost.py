"""``python -m agent bench cost``: what simulated calls on the embedded default used and cost.

N simulated calls (the built-in scenarios in turn, so quiet and talkative callers both come)
run on the embedded CPU models and are priced by the running price book as any call is.
The table gives, per component, the calls' usage, its unit price and basis, the attributed
$/min, the provisioned $/min over the bench's wall time (the profile's compute for as long
as the calls took, idle included: the utilization this bench achieves), the old constant
price per call minute for the same calls, and the throughput the servers' own compute
reports imply beside the one the book prices with. It also times the accounting's work on
the per-frame path against the worker's CPU per call (it must stay under 1 %).

It writes those throughputs as a stage profile (``--profile``, by default
``agent/ledger/profiles/cost.json`` for the report in docs/benchmarks/): per stage whose
servers reported compute, the throughput, with the calls' turns' latency for that stage
as its samples (so the planner reads it as any measured option). The price book names it,
``{ measured = "cost", concurrency = 1 }``, so a rerun reprices the next book version.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
import timeit
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pipecat.frames.frames import MetricsFrame, TTSAudioRawFrame
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.config import Settings
from agent.ledger.cpu import WorkerCpu
from agent.ledger.pricebook import SELF_HOSTED_STAGES, WORKER, CostLineItem, PriceBook
from agent.ledger.records import TurnRecord
from agent.ledger.stage_profiles import (
    profile_document,
    profile_path_for,
    stage_option,
    write_profile,
)
from agent.pipeline.turns import CallProcessors, TurnLedger
from agent.pipeline.usage import ComputeUsageMetricsData

#: The frame the TTS sends down per chunk on the embedded default (pipecat's 20 ms at 16 kHz).
FRAME_S = 0.02
#: The components in the table's order.
COMPONENTS = ("telephony", *SELF_HOSTED_STAGES, "tts_fallback", WORKER)
#: Each stage's throughput key, and the usage line it is measured from.
MEASURED_FROM = {
    "stt": ("audio_s_per_s", "audio_second"),
    "llm": ("completion_tokens_per_s", "1k_completion_tokens"),
    "tts": ("audio_s_per_s", "audio_second"),
}
#: Each stage's latency part of a turn: the samples of its profile option.
LATENCY_PART = {"stt": "stt_ms", "llm": "llm_ttft_ms", "tts": "tts_ttfb_ms"}


def add_cost_parser(benches: Any) -> None:
    """``python -m agent bench cost``."""
    parser = benches.add_parser(
        "cost",
        help="simulated calls on the embedded default: per component the usage, unit cost, "
        "attributed and provisioned $/min beside the old constant price, and the "
        "accounting's overhead per frame",
    )
    parser.add_argument("--calls", type=int, default=4, help="simulated calls (>= 1)")
    parser.add_argument("--output", default="docs/benchmarks/cost.md", help="where to write")
    parser.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="where to write the measured throughputs as a stage profile (default: "
        "agent/ledger/profiles/cost.json for a report in docs/benchmarks/, else "
        "profiles/cost.json beside it)",
    )


def run_cost_command(args: argparse.Namespace, settings: Settings) -> int:
    """Check the arguments, run the calls, print and write the report; 2 for bad ones."""
    from tools.bench import _machine, _write_report

    if args.calls < 1:
        print("--calls must be at least 1")
        return 2
    book = PriceBook.load(settings.price_book)
    started = time.monotonic()
    calls, models = asyncio.run(_simulate(settings, args.calls))
    wall_s = time.monotonic() - started
    bench = CostBench(book, settings.price_profile, calls, wall_s)
    overhead = accounting_overhead(
        bench.worker_cpu_s_per_call(),
        frames_per_call=bench.quantity["tts", "audio_second"] / len(calls) / FRAME_S,
        reports_per_call=60.0 * bench.minutes / len(calls),  # one a second: an upper bound
    )
    machine = _machine()
    report = bench.report(overhead, machine, args.calls)
    print(report)
    _write_report(args.output, report)
    profile = bench.stage_profile(
        models, machine, f"python -m agent bench cost --calls {args.calls}"
    )
    path = write_profile(profile, args.profile or profile_path_for(args.output))
    print(f"wrote {path}")
    return 0


@dataclass
class PricedCall:
    minutes: float
    lines: list[CostLineItem] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)


async def _simulate(settings: Settings, count: int) -> tuple[list[PricedCall], dict[str, str]]:
    """The calls, priced, and the models that served them, by stage."""
    from agent.conversation.scenarios import builtin_scenarios
    from agent.runtime.context import AgentRuntime
    from tools.simulate import CallerVoice, simulate_call

    scenarios = list(builtin_scenarios().values())
    priced: list[PricedCall] = []
    async with AgentRuntime(settings) as ctx:
        voice = CallerVoice(settings.audio_in_sample_rate)
        for n in range(count):
            scenario = scenarios[n % len(scenarios)]
            summary = (await simulate_call(ctx, scenario, voice)).summary
            if summary.cost is None:
                raise RuntimeError(f"call {summary.call_id} was not priced (see its cost_error)")
            priced.append(PricedCall(summary.duration_s / 60.0, summary.cost.lines, summary.turns))
            print(
                f"  call {n + 1}/{count} ({scenario.name}): {summary.duration_s:.1f} s, "
                f"${summary.cost.total_usd:.5f}",
                flush=True,
            )
        models = {
            "stt": ctx.models.stt_model or "STT",
            "llm": settings.llm_model,
            "tts": ctx.models.tts_voice or "TTS",
        }
    return priced, models


class CostBench:
    """The calls' lines summed per component and unit, and what they imply."""

    def __init__(self, book: PriceBook, profile: str, calls: list[PricedCall], wall_s: float):
        self.book, self.profile, self.calls, self.wall_s = book, profile, calls, wall_s
        self.minutes = math.fsum(call.minutes for call in calls)
        self.quantity: dict[tuple[str, str], float] = defaultdict(float)
        self.amount: dict[tuple[str, str], float] = defaultdict(float)
        self.compute: dict[str, float] = defaultdict(float)
        self.line: dict[tuple[str, str], CostLineItem] = {}
        for call in calls:
            for line in call.lines:
                key = (line.component, line.unit)
                self.quantity[key] += line.quantity
                self.amount[key] += line.amount_usd
                self.compute[line.component] += line.compute_s or 0.0
                self.line[key] = line

    def worker_cpu_s_per_call(self) -> float:
        return self.quantity[WORKER, "cpu_second"] / len(self.calls)

    def provisioned_usd_per_minute(self, component: str) -> float | None:
        """The component's provisioned compute over the bench's wall time, per call minute
        (the metered components: what they billed)."""
        deployment = self.book.deployment(self.profile)
        hours = self.wall_s / 3600.0
        if component in SELF_HOSTED_STAGES:
            placement = self.book.profile(self.profile)[component]
            cost = self.book.compute_usd_per_hour[placement.compute] * placement.units * hours
        elif component == WORKER and deployment.worker is not None:
            worker = deployment.worker
            cost = self.book.compute_usd_per_hour[worker.compute] * worker.units * hours
        else:
            cost = sum(a for (c, _), a in self.amount.items() if c == component)
        return cost / self.minutes if self.minutes else None

    def old_usd_per_minute(self, component: str) -> float | None:
        """The price per connected minute the book charged before usage was priced."""
        if component in SELF_HOSTED_STAGES:
            return self.book.per_call_minute(self.profile, component)
        if component == WORKER:
            return None  # the worker was not priced at all
        return self.provisioned_usd_per_minute(component)  # metered: unchanged

    def utilization(self, component: str) -> float | None:
        if component not in (*SELF_HOSTED_STAGES, WORKER):
            return None
        seconds = self.book.provisioned_seconds_per_day(self.profile, component) / 86_400
        return self.compute[component] / (seconds * self.wall_s) if seconds else None

    def measured_throughput(self, stage: str) -> float | None:
        """Work per second of the stage's compute, from what its servers reported."""
        _, unit = MEASURED_FROM[stage]
        scale = 1000.0 if unit.startswith("1k_") else 1.0
        compute = self.compute[stage]
        return self.quantity[stage, unit] * scale / compute if compute else None

    def stage_profile(self, models: dict[str, str], machine: str, command: str) -> dict[str, Any]:
        """The stages whose throughput the servers' compute measured, as a stage profile:
        the throughput, and the turns' latency for the stage as its samples."""
        options = []
        for stage in SELF_HOSTED_STAGES:
            rate = self.measured_throughput(stage)
            part = LATENCY_PART[stage]
            samples = [
                v for c in self.calls for t in c.turns if (v := getattr(t, part)) is not None
            ]
            if rate is None or not samples:
                continue  # nothing measured (the templates send the LLM no request)
            key, unit = MEASURED_FROM[stage]
            options.append(
                stage_option(
                    stage,
                    f"{models[stage]} ({self.profile}), simulated calls",
                    samples_ms=samples,
                    placement={"price_book_profile": self.profile},
                    concurrency=1,
                    colocated=True,
                    throughput={key: round(rate, 3)},
                    note=f"{key}: the calls' {unit}s over the compute seconds the server "
                    f"reported; latency: {part} per turn, one call at a time",
                )
            )
        return profile_document(
            "cost",
            options,
            command=command,
            machine=machine,
            report="docs/benchmarks/cost.md",
            note=f"{len(self.calls)} calls, one at a time, {self.minutes:.2f} connected minutes",
        )

    def rows(self) -> list[str]:
        rows = [
            "| component | usage | unit price | basis | attributed $/min | provisioned $/min"
            " | utilization | old $/min |",
            "|---|---:|---:|---|---:|---:|---:|---:|",
        ]
        for component in COMPONENTS:
            keys = [key for key in self.line if key[0] == component]
            usage = "<br>".join(f"{self.quantity[k]:.3f} {k[1]}" for k in keys) or "–"
            price = "<br>".join(f"${self.line[k].unit_price_usd:.3g}" for k in keys) or "–"
            basis = "<br>".join(self.line[k].basis for k in keys) or "–"
            attributed = math.fsum(self.amount[k] for k in keys) / self.minutes
            rows.append(
                f"| {component} | {usage} | {price} | {basis} | ${attributed:.5f} | "
                f"{_usd(self.provisioned_usd_per_minute(component))} | "
                f"{_pct(self.utilization(component))} | "
                f"{_usd(self.old_usd_per_minute(component))} |"
            )
        total = math.fsum(self.amount.values()) / self.minutes
        provisioned = math.fsum(self.provisioned_usd_per_minute(c) or 0.0 for c in COMPONENTS)
        old = math.fsum(self.old_usd_per_minute(c) or 0.0 for c in COMPONENTS)
        rows.append(
            f"| **total** | {self.minutes:.2f} min | | | **${total:.5f}** | "
            f"**${provisioned:.5f}** | | **${old:.5f}** |"
        )
        return rows

    def throughput_rows(self) -> list[str]:
        rows = [
            "| stage | priced with | basis | implied by the servers' compute |",
            "|---|---:|---|---:|",
        ]
        for stage in SELF_HOSTED_STAGES:
            key, _ = MEASURED_FROM[stage]
            placement = self.book.profile(self.profile)[stage]
            given = placement.throughput.get(key)
            measured = self.measured_throughput(stage)
            rows.append(
                f"| {stage} {key} | {given.per_s if given else '–'} | "
                f"{given.basis if given else 'per call minute'} | "
                f"{'–' if measured is None else f'{measured:.1f}'} |"
            )
        return rows

    def report(self, overhead: Overhead, machine: str, count: int) -> str:
        return "\n".join(
            [
                "# Cost of simulated calls on the embedded default",
                "",
                f"`python -m agent bench cost --calls {count}` on {machine}; price book "
                f"{self.book.version}, profile `{self.profile}`; {count} calls, "
                f"{self.minutes:.2f} connected minutes in {self.wall_s:.0f} s of wall time.",
                "",
                "*attributed*: the calls' cost lines (use x unit price, the unit price at the "
                "profile's target utilization); *provisioned*: the profile's compute for the "
                "bench's wall time, idle included, per connected minute (one call at a time, so "
                "the utilization column is what it achieved); *old*: the price per connected "
                "minute of the book before usage was priced (the worker was not priced). "
                "Declared unit prices rest on a throughput the book states (docs/pricing.md).",
                "",
                *self.rows(),
                "",
                "What the book prices with, and what the servers' reported compute implies "
                "(units of work per second of compute):",
                "",
                *self.throughput_rows(),
                "",
                overhead.sentence(),
                "",
            ]
        )


@dataclass(frozen=True)
class Overhead:
    per_frame_s: float
    frames_per_call: float
    per_metrics_s: float
    metrics_per_call: float
    per_call_event_s: float
    worker_cpu_s_per_call: float

    @property
    def per_call_s(self) -> float:
        return (
            self.per_frame_s * self.frames_per_call
            + self.per_metrics_s * self.metrics_per_call
            + 2 * self.per_call_event_s
        )

    @property
    def share(self) -> float:
        return (
            self.per_call_s / self.worker_cpu_s_per_call if self.worker_cpu_s_per_call else math.inf
        )

    def sentence(self) -> str:
        return (
            f"Accounting overhead: {self.per_frame_s * 1e9:.0f} ns per audio frame (the TTS "
            f"client's audio count), {self.per_metrics_s * 1e6:.1f} µs per usage report "
            f"(the turn ledger), {self.per_call_event_s * 1e6:.1f} µs per CPU reading; "
            f"{self.per_call_s * 1e3:.3f} ms per call over {self.frames_per_call:.0f} frames "
            f"and {self.metrics_per_call:.0f} reports, {100 * self.share:.4f} % of the "
            f"worker's {self.worker_cpu_s_per_call:.2f} CPU s per call "
            f"({'under' if self.share < 0.01 else 'OVER'} the 1 % budget)."
        )


def accounting_overhead(
    worker_cpu_s_per_call: float, *, frames_per_call: float, reports_per_call: float
) -> Overhead:
    """Time the accounting's own work: per audio frame (what the TTS client adds up), per
    usage report (what the turn ledger adds up), per CPU reading (two a call)."""
    from agent.pipeline.tts import _seconds

    frame = TTSAudioRawFrame(b"\0" * 640, 16000, 1)
    loops = 200_000
    per_frame = timeit.timeit(lambda: _seconds(frame), number=loops) / loops

    processor = FrameProcessor()
    ledger = TurnLedger(
        "b" * 32,
        CallProcessors(stt=processor, thinkers=(processor,), tts=processor, output=processor),
        sink=lambda record: None,
    )
    report = MetricsFrame(data=[ComputeUsageMetricsData(processor="x", stage="stt", value=0.1)])
    pushed = FramePushed(
        source=processor,
        destination=processor,
        frame=report,
        direction=FrameDirection.DOWNSTREAM,
        timestamp=0,
        first_push=True,
    )
    loop = asyncio.new_event_loop()
    try:
        started = time.perf_counter()
        for _ in range(20_000):
            loop.run_until_complete(ledger.on_push_frame(pushed))
        per_metrics = (time.perf_counter() - started) / 20_000
    finally:
        loop.close()

    meter = WorkerCpu()

    def call() -> None:
        meter.started("c")
        meter.ended("c")

    per_event = timeit.timeit(call, number=20_000) / 40_000
    return Overhead(
        per_frame,
        frames_per_call,
        per_metrics,
        reports_per_call,
        per_event,
        worker_cpu_s_per_call,
    )


def _usd(value: float | None) -> str:
    return "–" if value is None else f"${value:.5f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f} %"
