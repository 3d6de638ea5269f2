"""What ``bench sip`` and ``bench capacity`` measured: each run of a step, and a step's runs
summed up.

One run decides nothing: a single late packet in one run of 20 s fails the criterion, and
the machine's other work comes and goes. So every step is run several times, each run a
fresh worker, and a step *holds* when it passed in at least ``PASS_SHARE`` of its runs (4 of
5); the figure least sensitive to noise, the CPU a call costs, is given as the mean of the
runs with its 95 % interval.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from agent.ledger.quantiles import percentile
from telephony.rtp.sender import LatenessHistogram

#: The acceptance criterion: this share of outgoing packets leaves within LIMIT_S.
LIMIT_S = 0.005
TARGET = 0.999
#: A step's answers may be this much slower (p95) than with the run's fewest calls.
ANSWER_SLACK_MS = 100.0
#: A step holds when it passed in at least this share of its runs: 4 of 5, 3 of 3.
PASS_SHARE = 0.8
#: Student's t, two-sided 95 %, by degrees of freedom (runs - 1); beyond the table, 1.96.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def required_passes(runs: int, share: float = PASS_SHARE) -> int:
    """How many of ``runs`` runs a step must pass to hold (at least one)."""
    if runs < 1:
        raise ValueError(f"a step needs at least one run, got {runs}")
    if not 0 < share <= 1:
        raise ValueError(f"the share of runs to pass must be in (0, 1], got {share}")
    return max(1, math.ceil(share * runs - 1e-9))


def holds(passed: Sequence[bool]) -> bool:
    """Whether a step with these runs' outcomes passed in the required share of them."""
    return sum(passed) >= required_passes(len(passed))


def highest_held(held: dict[int, bool]) -> int:
    """The most calls of a step that held (0: none did)."""
    return max((calls for calls, ok in held.items() if ok), default=0)


@dataclasses.dataclass(frozen=True)
class Interval:
    """A mean and its two-sided 95 % interval (Student's t over the runs)."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        """The interval of ``values``' mean: a single value's is the value itself (nan wide)."""
        if not values:
            raise ValueError("an interval needs at least one value")
        mean = statistics.fmean(values)
        if len(values) == 1:
            return cls(mean, math.nan, math.nan)
        t = _T95[len(values) - 2] if len(values) - 1 <= len(_T95) else 1.96
        half = t * statistics.stdev(values) / math.sqrt(len(values))
        return cls(mean, mean - half, mean + half)

    def __str__(self) -> str:
        if math.isnan(self.low):
            return f"{self.mean:.0f} (one run)"
        return f"{self.mean:.0f} [{self.low:.0f}, {self.high:.0f}]"


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

    @classmethod
    def none(cls) -> Packets:
        return cls(LatenessHistogram(), 0)

    @property
    def within(self) -> float:
        """Share that left within LIMIT_S carrying the audio due: a slot the RTP sender
        skipped, or sent as silence in an underrun, counts as late."""
        sent = self.lateness.count
        if not sent + self.skipped:
            return 0.0
        on_time = self.lateness.fraction_within(LIMIT_S) * sent - self.underruns
        return max(0.0, on_time) / (sent + self.skipped)


@dataclasses.dataclass
class Step:
    """One run of a step: ``calls`` carried at once by a fresh worker; the window's
    packets, answers and CPU, the ramp-up's packets (or why it could not be measured)."""

    variant: str
    calls: int
    window_s: float
    #: The worker process's CPU, and its helper process's (the RTP sender).
    cpu_s: float
    machine_cpu_s: float
    core_cpu_s: float
    window: Packets
    ramp: Packets
    answers_ms: list[float]
    #: The caller's lines in the window, each owed an answer (calls x whole cycles).
    lines: int
    #: Whether the worker's RTP sender had real-time priority.
    realtime: bool = False
    #: The answer p95 of the variant's lightest step (None: this is that step).
    reference_ms: float | None = None
    #: Which run of the step this is, from 1.
    run: int = 1
    #: Why the run could not be measured (a failed run); None when it was.
    error: str | None = None
    #: The agent's answers over the calls' whole life, and the LLM requests they made.
    answers_all: int = 0
    llm_requests: int = 0
    #: The host's smart-turn service's CPU over the window (the bench's calls alone use it).
    service_cpu_s: float = 0.0

    @classmethod
    def from_json(
        cls, variant: str, data: dict[str, Any], cycle_s: float, run: int, llm_requests: int
    ) -> Step:
        return cls(
            variant,
            data["calls"],
            data["window_s"],
            data["tree_cpu_s"],
            data["machine_cpu_s"],
            data["core_cpu_s"],
            Packets.from_counts(data["counts"], data["skipped"], data["max_s"], data["underruns"]),
            Packets.from_counts(
                data["ramp_counts"], data["ramp_skipped"], data["max_s"], data["ramp_underruns"]
            ),
            data["answers_ms"],
            data["calls"] * int(data["window_s"] / cycle_s),
            data.get("realtime", False),
            run=run,
            answers_all=data["answers_all"],
            llm_requests=llm_requests,
            service_cpu_s=data.get("service_cpu_s", 0.0),
        )

    @classmethod
    def unmeasured(cls, variant: str, calls: int, run: int, error: str) -> Step:
        """A run that failed before it measured anything: it counts as not passed."""
        empty = Packets.none()
        return cls(variant, calls, 0.0, 0.0, 0.0, 0.0, empty, empty, [], 0, run=run, error=error)

    @property
    def answer_p95_ms(self) -> float:
        """The answers' p95, a line left unanswered counting as never answered (inf)."""
        missing = max(0, self.lines - len(self.answers_ms))
        values = [*self.answers_ms, *[math.inf] * missing]
        return percentile(values, 0.95) if values else math.inf

    @property
    def on_time(self) -> bool:
        """Its packets left on time with their audio (TARGET of them within LIMIT_S)."""
        return self.window.lateness.count > 0 and self.window.within >= TARGET

    @property
    def answered_in_time(self) -> bool:
        """Its answers were as quick as the lightest step's but for ANSWER_SLACK_MS."""
        reference = self.answer_p95_ms if self.reference_ms is None else self.reference_ms
        return self.answer_p95_ms <= reference + ANSWER_SLACK_MS

    @property
    def passed(self) -> bool:
        """Measured, its packets on time and its answers in time."""
        return self.error is None and self.on_time and self.answered_in_time

    @property
    def cpu_per_call(self) -> float:
        """Core-milliseconds the worker and its helpers spent per call-second."""
        return 1000 * self.cpu_s / (self.calls * self.window_s)

    @property
    def service_cpu_per_call(self) -> float:
        """Core-milliseconds the smart-turn service spent per call-second."""
        return 1000 * self.service_cpu_s / (self.calls * self.window_s)

    @property
    def cpu_percent(self) -> float:
        """The worker's CPU (with its helpers) over the window, in % of one core."""
        return 100 * self.cpu_s / self.window_s

    @property
    def core_percent(self) -> float:
        """How busy the worker's cores were over the window (all processes on them)."""
        return 100 * self.core_cpu_s / self.window_s


@dataclasses.dataclass
class StepRuns:
    """A step's runs for one variant, summed up."""

    variant: str
    calls: int
    runs: list[Step]

    @classmethod
    def group(cls, steps: Sequence[Step]) -> list[StepRuns]:
        """``steps`` by variant and call count, in the order they first appear."""
        groups: dict[tuple[str, int], StepRuns] = {}
        for step in steps:
            key = (step.variant, step.calls)
            groups.setdefault(key, cls(step.variant, step.calls, [])).runs.append(step)
        return list(groups.values())

    @property
    def measured(self) -> list[Step]:
        return [run for run in self.runs if run.error is None]

    @property
    def passes(self) -> int:
        return sum(run.passed for run in self.runs)

    def failures(self) -> str:
        """Why the runs that failed did: how many on their packets, their answers, or
        not measured at all (a run may fail on both of the first two)."""
        reasons = {
            "packets": sum(not r.on_time for r in self.measured),
            "answers": sum(not r.answered_in_time for r in self.measured),
            "not measured": len(self.runs) - len(self.measured),
        }
        return ", ".join(f"{what} {n}" for what, n in reasons.items() if n) or "–"

    @property
    def held(self) -> bool:
        return holds([run.passed for run in self.runs])

    @property
    def required(self) -> int:
        return required_passes(len(self.runs))

    def within(self) -> tuple[float, float]:
        """The share of packets on time: median and worst over the measured runs."""
        values = [run.window.within for run in self.measured] or [0.0]
        return statistics.median(values), min(values)

    def p999_s(self) -> tuple[float, float]:
        """The p99.9 lateness: median and worst over the measured runs."""
        values = [run.window.lateness.percentile(99.9) for run in self.measured] or [math.nan]
        return statistics.median(values), max(values)

    def answer_p95_ms(self) -> float:
        """The median of the runs' answer p95 (inf: none measured)."""
        values = [run.answer_p95_ms for run in self.measured]
        return statistics.median(values) if values else math.inf

    def cpu_per_call(self) -> Interval | None:
        """Core-ms per call-second, mean and 95 % interval over the measured runs."""
        values = [run.cpu_per_call for run in self.measured]
        return Interval.of(values) if values else None

    def service_cpu_per_call(self) -> Interval | None:
        """The smart-turn service's core-ms per call-second, as ``cpu_per_call``."""
        values = [run.service_cpu_per_call for run in self.measured]
        return Interval.of(values) if values else None

    def llm_per_answer(self) -> float:
        """LLM requests per answer of the agent, all runs together (nan: no answer)."""
        answers = sum(run.answers_all for run in self.measured)
        return sum(run.llm_requests for run in self.measured) / answers if answers else math.nan

    def core_percent(self) -> float:
        values = [run.core_percent for run in self.measured]
        return statistics.median(values) if values else math.nan


def calls_per_core(groups: Sequence[StepRuns], variant: str) -> StepRuns | None:
    """The variant's step with the most calls that held (None: none did)."""
    mine = {group.calls: group for group in groups if group.variant == variant}
    best = highest_held({calls: group.held for calls, group in mine.items()})
    return mine.get(best)


@dataclasses.dataclass(frozen=True)
class Variant:
    """What one series of steps runs: a pipeline, with the worker's settings on top of the
    bench's, named in the tables."""

    name: str
    pipeline: str = "ours"
    env: tuple[tuple[str, str], ...] = ()
    #: What it is, as the report says it.
    about: str = ""


@dataclasses.dataclass
class Run:
    """What a bench measured: every run of every step, the caller's cycle, the profiles by
    variant, and the machine's load while it ran."""

    steps: list[Step]
    cycle_s: float
    profiles: dict[str, tuple[Counter[str], int]]
    #: Whether the workers' RTP senders had real-time priority (all of them).
    realtime: bool
    #: The 1-minute load average as each worker started.
    load: list[float]
    #: Runs of each step.
    runs: int
