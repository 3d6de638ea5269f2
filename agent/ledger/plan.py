"""The SLA/cost planner: which serving configuration meets a latency target at the lowest cost.

``python -m agent plan --target-ms 300`` reads the stage profiles the benchmarks
write (``agent/ledger/profiles/*.json``) and the price book, combines one
option per stage into every end-to-end configuration, predicts each one's
response latency at a percentile, prices a conversation minute, and lists the
configurations that meet the target, cheapest first: the "grid search hell" of
the debt-collection talk, answered from measurements (it chose a 120 ms LLM
over an 80 ms one that cost twice as much, because 120 ms still met 300 ms). The
profiles' format, and their reading and writing, is ``agent.ledger.stage_profiles``.

**The prediction.** A turn's response latency (``agent.ledger.latency``: the VAD's stop
to the first audio frame sent, what the talk's 290 ms counts) is taken as the
serial sum of STT final, LLM first token, TTS first byte and the agent's own
overhead (end-of-turn decision, frame hops, policy, guard, transport out).
Endpointing (the VAD's silence before its stop) is not in the response target
(the talk leaves it out too) and is shown beside it as voice-to-voice. The
percentile ``q`` of the sum is predicted as

    sum of the stage medians + sqrt(sum over stages of (p_q - p50)^2)

(medians add; tail excesses add in quadrature). Why this and not the others:
the sum of the stage p95s assumes every stage has its bad turn at once, which
independent servers do not (it is printed alongside as the pessimistic bound,
"if tails coincide"); a Monte Carlo over per-stage samples would be better
still but only benchmarks that keep samples have them, and declared figures
and the GPU check's medians never do, so it could not be applied to every
option alike. The root-sum-square needs only a median and the percentile's
figure, which every usable option has, is exact for independent normally
distributed stages, and is applied to every configuration the same way. Its
weak spot is dependence: stages that share a loaded CPU are slow together, and
then the truth moves toward the pessimistic bound, so a configuration that
passes only under the root-sum-square is worth measuring end to end. STT is
counted in full from the VAD's stop, as the response is measured.

**The cost** of a configuration is priced by :func:`agent.ledger.pricebook.price_call`
on a copy of the book whose one profile places each model stage as the options
say: compute price per hour / 60 / concurrent calls per stage, the line by the
transport's rate, an API TTS by its characters per minute.

Agent stages and colocation: ``bench turn`` measures endpointing and our
overhead twice, with the models on the worker's own cores (the CPU default)
and with the models behind URLs (instant stubs). A configuration with any
model option measured on the worker's cores (``colocated``) takes the first;
every other configuration the second.

Library code logs; :func:`run_plan_command` returns what the command line prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agent.ledger.latency import MEANINGS, RESPONSE, VOICE_TO_VOICE_TARGET_MS
from agent.ledger.pricebook import (
    DEFAULT_PATH as DEFAULT_PRICE_BOOK,
)
from agent.ledger.pricebook import (
    CallCost,
    CallUsage,
    PriceBook,
    StagePlacement,
    price_call,
)
from agent.ledger.stage_profiles import (
    DEFAULT_PROFILES,
    MODEL_STAGES,
    REPORTS,
    STAGES,
    Placement,
    Profile,
    ProfileError,
    StageOption,
    load_profiles,
    percentile_key,
)

logger = logging.getLogger(__name__)

_REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = "docs/benchmarks/plan.md"
DEFAULT_TRANSPORT = "sip"
#: A compute class for an API stage in the candidate book: zero dollars per hour, so
#: its price is the per-character line only.
_API_COMPUTE = "(api: priced per character)"


# -- planning ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Configuration:
    """One end-to-end configuration: an option per stage, its predicted latency and its cost."""

    options: Mapping[str, StageOption]
    p50_ms: float
    predicted_ms: float  # at the plan's percentile, root-sum-square of the tails
    coinciding_ms: float  # at the plan's percentile, every stage's tail at once
    voice_to_voice_ms: float | None  # predicted_ms's method with endpointing added
    cost: CallCost
    meets: bool

    @property
    def usd_per_minute(self) -> float:
        return self.cost.per_minute_usd or 0.0

    @property
    def declared_stages(self) -> tuple[str, ...]:
        return tuple(s for s, o in self.options.items() if o.declared)

    def stage_usd_per_minute(self, stage: str) -> float:
        parts = (stage, "tts_fallback") if stage == "tts" else (stage,)
        return math.fsum(line.amount_usd for line in self.cost.lines if line.component in parts)

    @property
    def label(self) -> str:
        return "; ".join(f"{s}: {self.options[s].label}" for s in MODEL_STAGES)


@dataclass(frozen=True)
class Excluded:
    option: StageOption
    reason: str


@dataclass(frozen=True)
class PlanResult:
    """Every configuration the profiles allow, split by whether it meets the target."""

    target_ms: float
    q: float
    transport: str
    book: PriceBook
    book_path: str
    profiles: tuple[Profile, ...]
    usable: Mapping[str, tuple[StageOption, ...]]
    excluded: tuple[Excluded, ...]
    passing: tuple[Configuration, ...]  # cheapest first
    failing: tuple[Configuration, ...]  # fastest first
    notes: tuple[str, ...] = ()

    @property
    def cheapest(self) -> Configuration | None:
        return self.passing[0] if self.passing else None

    @property
    def fastest(self) -> Configuration | None:
        return min(self.passing, key=lambda c: (c.predicted_ms, c.usd_per_minute), default=None)


def predict(options: Sequence[StageOption], q: float) -> tuple[float, float, float]:
    """(p50, root-sum-square prediction at ``q``, sum of the ``q`` figures) of a serial chain."""
    medians = math.fsum(o.p50 for o in options)
    tails = []
    for o in options:
        tail = o.at(q)
        if tail is None:
            raise ValueError(f"{o.stage} {o.label!r} has no {percentile_key(q)}")
        tails.append(tail)
    excess = [max(0.0, t - o.p50) for t, o in zip(tails, options, strict=True)]
    rss = medians + math.sqrt(math.fsum(e * e for e in excess))
    return medians, rss, math.fsum(tails)


def _resolve(option: StageOption, book: PriceBook) -> StagePlacement | Placement:
    """The option's price-book placement (a StagePlacement), or its API placement."""
    placement = option.placement
    assert placement is not None
    if placement.api is not None:
        return placement
    if placement.price_book_profile is not None:
        base = book.profile(placement.price_book_profile)[option.stage]
        return StagePlacement(base.compute, base.concurrent_calls / placement.cost_multiple)
    assert placement.compute is not None and placement.concurrent_calls is not None
    if placement.compute not in book.compute_usd_per_hour:
        known = ", ".join(sorted(book.compute_usd_per_hour))
        raise ValueError(f"compute class {placement.compute!r} is not in the price book ({known})")
    return StagePlacement(placement.compute, placement.concurrent_calls)


def price_configuration(
    book: PriceBook, options: Mapping[str, StageOption], transport: str
) -> CallCost:
    """One minute of a call on these model options, priced by :func:`price_call`."""
    compute = dict(book.compute_usd_per_hour)
    stages: dict[str, StagePlacement] = {}
    characters = 0.0
    for stage in MODEL_STAGES:
        resolved = _resolve(options[stage], book)
        if isinstance(resolved, Placement):
            compute[_API_COMPUTE] = 0.0
            stages[stage] = StagePlacement(_API_COMPUTE, 1.0)
            characters += resolved.characters_per_minute or 0.0
        else:
            stages[stage] = resolved
    candidate = dataclasses.replace(
        book,
        compute_usd_per_hour=MappingProxyType(compute),
        profiles=MappingProxyType({"candidate": MappingProxyType(stages)}),
    )
    usage = CallUsage(transport, 60.0, fallback_tts_characters=round(characters))
    return price_call(candidate, "candidate", usage)


def plan(
    profiles: Sequence[Profile],
    book: PriceBook,
    *,
    target_ms: float = 300.0,
    q: float = 0.95,
    transport: str = DEFAULT_TRANSPORT,
    book_path: str = "",
    notes: Sequence[str] = (),
) -> PlanResult:
    """Every configuration of the profiles' options, predicted and priced."""
    if not 0.5 <= q < 1:
        raise ValueError(f"the percentile must be at least 50 and below 100, got {q * 100:g}")
    if target_ms <= 0:
        raise ValueError(f"the target must be positive, got {target_ms:g} ms")
    book.telephony_rate(transport)  # an unknown transport is an error before anything else
    usable, excluded = _usable_options(profiles, book, q)
    configurations, skipped = _configurations(usable, book, q, target_ms, transport)
    notes = list(notes)
    if skipped:
        notes.append(
            f"{skipped} combinations left out: no overhead was measured with the models placed "
            "as theirs are (on the agent worker's cores or not); `python -m agent bench turn` "
            "measures both"
        )
    if not configurations:
        raise ProfileError(
            "no configuration can be formed: no overhead profile matches where the model "
            "options run (colocated or not); run python -m agent bench turn"
        )
    passing = sorted(
        (c for c in configurations if c.meets), key=lambda c: (c.usd_per_minute, c.predicted_ms)
    )
    failing = sorted(
        (c for c in configurations if not c.meets),
        key=lambda c: (c.predicted_ms, c.usd_per_minute),
    )
    logger.debug(
        "%d configurations, %d meet %g ms at %s",
        len(configurations),
        len(passing),
        target_ms,
        percentile_key(q),
    )
    return PlanResult(
        target_ms=target_ms,
        q=q,
        transport=transport,
        book=book,
        book_path=book_path,
        profiles=tuple(profiles),
        usable=MappingProxyType({s: tuple(v) for s, v in usable.items()}),
        excluded=tuple(excluded),
        passing=tuple(passing),
        failing=tuple(failing),
        notes=tuple(notes),
    )


def _usable_options(
    profiles: Sequence[Profile], book: PriceBook, q: float
) -> tuple[dict[str, list[StageOption]], list[Excluded]]:
    """The profiles' options by stage, those that can be predicted at ``q`` and priced, and
    the rest with the reason; an error when a stage the response needs has none."""
    usable: dict[str, list[StageOption]] = {s: [] for s in STAGES}
    excluded: list[Excluded] = []
    for profile in profiles:
        for option in profile.options:
            reason = _unusable(option, book, q)
            if reason:
                excluded.append(Excluded(option, reason))
            else:
                usable[option.stage].append(option)
    for stage in (*MODEL_STAGES, "overhead"):
        if not usable[stage]:
            why = "; ".join(
                f"{e.option.label} ({e.option.profile}): {e.reason}"
                for e in excluded
                if e.option.stage == stage
            )
            hint = (
                "python -m agent bench turn"
                if stage == "overhead"
                else "a benchmark or a declared profile"
            )
            raise ProfileError(
                f"no usable {stage} option at {percentile_key(q)} in the profiles"
                + (f" ({why})" if why else f": add one ({hint})")
            )
    return usable, excluded


def _configurations(
    usable: Mapping[str, Sequence[StageOption]],
    book: PriceBook,
    q: float,
    target_ms: float,
    transport: str,
) -> tuple[list[Configuration], int]:
    """Every combination of the usable options, predicted and priced, and how many model
    combinations were left out for want of an overhead measured with their placement."""
    configurations = []
    skipped = 0
    for stt, llm, tts in itertools.product(*(usable[s] for s in MODEL_STAGES)):
        colocated = stt.colocated or llm.colocated or tts.colocated
        overheads = [o for o in usable["overhead"] if o.colocated == colocated]
        if not overheads:
            skipped += 1  # no overhead measured with the models placed like this
            continue
        endpoints: list[StageOption | None] = [
            o for o in usable["endpointing"] if o.colocated == colocated
        ] or [None]
        cost = price_configuration(book, {"stt": stt, "llm": llm, "tts": tts}, transport)
        for overhead, endpoint in itertools.product(overheads, endpoints):
            chain = [stt, llm, tts, overhead]
            p50, predicted, coinciding = predict(chain, q)
            v2v = predict([endpoint, *chain], q)[1] if endpoint is not None else None
            chosen = {"stt": stt, "llm": llm, "tts": tts, "overhead": overhead}
            if endpoint is not None:
                chosen["endpointing"] = endpoint
            configurations.append(
                Configuration(
                    options=MappingProxyType(chosen),
                    p50_ms=p50,
                    predicted_ms=predicted,
                    coinciding_ms=coinciding,
                    voice_to_voice_ms=v2v,
                    cost=cost,
                    meets=predicted <= target_ms,
                )
            )
    return configurations, skipped


def _unusable(option: StageOption, book: PriceBook, q: float) -> str:
    if option.at(q) is None:
        have = ", ".join(sorted(option.latency_ms))
        return f"no {percentile_key(q)} (has {have}, no samples): not measured, so not assumed"
    if option.placement is None:
        return ""
    try:
        _resolve(option, book)
    except ValueError as exc:
        return f"cannot be priced: {exc}"
    return ""


# -- the report --------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _usd(value: float) -> str:
    return f"${value:.4f}"


def _evidence(c: Configuration) -> str:
    declared = c.declared_stages
    if not declared:
        return "measured"
    return "**declared, not measured**: " + ", ".join(declared)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(result: PlanResult, *, command: str = "", now: datetime | None = None) -> str:
    """The plan as markdown: the passing table, the trade, the misses, the inputs."""
    key = percentile_key(result.q)
    book = result.book
    line_rate = book.telephony_rate(result.transport)
    out = [
        f"# Serving plan: configurations that meet {result.target_ms:g} ms at {key}",
        "",
        f"Planned {(now or datetime.now(UTC)):%Y-%m-%d %H:%M} UTC"
        + (f" with `{command}`" if command else "")
        + f"; price book {book.version} ({result.book_path or 'infra/pricebook.toml'}), "
        f"transport {result.transport} (line {_usd(line_rate)}/min), "
        f"cost target {_usd(book.target_usd_per_minute)}/min.",
        "",
        f"*{key} ms*: predicted response latency ({MEANINGS[RESPONSE]}) "
        f"= sum of the stage p50s (stt, llm, tts, our overhead) + root-sum-square of their "
        f"{key} - p50 excesses; *if tails coincide*: the sum of the stage {key}s, the "
        "pessimistic bound; *v2v*: the same prediction with endpointing added, voice-to-voice "
        f"(target {VOICE_TO_VOICE_TARGET_MS:.0f} ms). STT is counted in full from the VAD's "
        "stop. *$/min*: one "
        "connected minute, all in (line + each model stage's compute share or API "
        "characters); the agent worker's own CPU is not in the price book. Method: "
        "agent/ledger/plan.py.",
        "",
    ]
    passing, cheapest, fastest = result.passing, result.cheapest, result.fastest
    header = (
        f"| # | stt | llm | tts | p50 ms | {key} ms | if tails coincide ms | v2v {key} ms | "
        "$/min | vs {} | evidence |"
    )
    rule = "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|"
    if cheapest is not None and fastest is not None:
        out += [f"## {len(passing)} of {_total(result)} configurations meet the target", ""]
        out += [header.format("cheapest"), rule]
        for i, c in enumerate(passing, 1):
            out.append(_row(str(i), c, cheapest))
        spare = result.target_ms - cheapest.predicted_ms
        out += [
            "",
            f"**Cheapest that meets {result.target_ms:g} ms**: {_cell(cheapest.label)}: "
            f"{key} {cheapest.predicted_ms:.0f} ms ({spare:.0f} ms to spare), "
            f"{_usd(cheapest.usd_per_minute)}/min"
            + (f" ({_evidence(cheapest)})" if cheapest.declared_stages else "")
            + ".",
        ]
        if fastest is not cheapest:
            ratio = fastest.usd_per_minute / cheapest.usd_per_minute
            out.append(
                f"**Fastest**: {_cell(fastest.label)}: {key} {fastest.predicted_ms:.0f} ms, "
                f"{_usd(fastest.usd_per_minute)}/min: {ratio:.2f}x the cost for "
                f"{cheapest.predicted_ms - fastest.predicted_ms:.0f} ms less, under a target "
                "the cheapest already meets."
            )
        out += ["", *_trade(result, cheapest)]
    else:
        out += [
            f"## Nothing meets {result.target_ms:g} ms at {key}",
            "",
            f"None of the {_total(result)} configurations is predicted at or under the target.",
            "",
        ]
    misses = result.failing[:5]
    if misses:
        best = cheapest or misses[0]
        out += [
            "## The closest that miss",
            "",
            header.format("cheapest" if cheapest else "fastest"),
            rule,
            *(_row("-", c, best) for c in misses),
            "",
        ]
    out += _inputs(result)
    return "\n".join(out).rstrip() + "\n"


def _total(result: PlanResult) -> int:
    return len(result.passing) + len(result.failing)


def _row(rank: str, c: Configuration, base: Configuration) -> str:
    o = c.options
    return (
        f"| {rank} | {_cell(o['stt'].label)} | {_cell(o['llm'].label)} | "
        f"{_cell(o['tts'].label)} | {c.p50_ms:.0f} | {c.predicted_ms:.0f} | "
        f"{c.coinciding_ms:.0f} | {_ms(c.voice_to_voice_ms)} | {_usd(c.usd_per_minute)} | "
        f"{c.usd_per_minute / base.usd_per_minute:.2f}x | {_evidence(c)} |"
    )


def _trade(result: PlanResult, cheapest: Configuration) -> list[str]:
    """From the cheapest: each faster option of one stage, the other stages kept."""
    key = percentile_key(result.q)
    everything = [*result.passing, *result.failing]
    rows = []
    for stage in MODEL_STAGES:
        mine = cheapest.options[stage]
        mine_q = mine.at(result.q) or 0.0
        for c in everything:
            other = c.options[stage]
            if other is mine or (other.at(result.q) or 0.0) >= mine_q:
                continue
            same_rest = all(
                c.options.get(s) is cheapest.options.get(s) for s in STAGES if s != stage
            )
            if not same_rest:
                continue
            stage_cost = c.stage_usd_per_minute(stage)
            base_cost = cheapest.stage_usd_per_minute(stage)
            stage_ratio = f"{stage_cost / base_cost:.2f}x" if base_cost > 0 else "-"
            rows.append(
                f"| {stage} | {_cell(other.label)} | {_ms(other.at(result.q))} vs "
                f"{_ms(mine_q)} | {c.predicted_ms:.0f} | {'yes' if c.meets else 'no'} | "
                f"{_usd(stage_cost)} ({stage_ratio}) | {_usd(c.usd_per_minute)} | "
                f"{c.usd_per_minute / cheapest.usd_per_minute:.2f}x |"
            )
    if not rows:
        return ["No faster option of any one stage exists beside the cheapest's.", ""]
    return [
        "## The trade: a faster option of one stage, the rest as in the cheapest",
        "",
        f"| stage | faster option | stage {key} ms | turn {key} ms | meets | "
        "stage $/min (vs cheapest's) | all in $/min | vs cheapest |",
        "|---|---|---:|---:|---|---:|---:|---:|",
        *rows,
        "",
        "Paying for a faster stage buys latency the target does not ask for: the talk's "
        "choice of a 120 ms LLM over an 80 ms one at twice the cost.",
        "",
    ]


def _inputs(result: PlanResult) -> list[str]:
    key = percentile_key(result.q)
    book = result.book
    out = [
        "## Inputs",
        "",
        "Profiles read:",
        "",
    ]
    for p in result.profiles:
        how = f"`{p.command}`" if p.command else "written by hand"
        if p.note:
            how += f"; {p.note}"
        when = f", {p.measured_at}" if p.measured_at else ""
        where = f" on {p.machine}" if p.machine else ""
        out.append(f"- `{Path(p.path).name}` ({p.source}{when}{where}): {how}")
    out += [
        "",
        "Stage options used (model stages priced per call minute by the price book):",
        "",
        f"| stage | option | source | n | p50 ms | {key} ms | placement | $/call-min | note |",
        "|---|---|---|---:|---:|---:|---|---:|---|",
    ]
    for stage in STAGES:
        for o in result.usable[stage]:
            price = "-"
            if o.placement is not None:
                price = _usd(_stage_price(o, result.book))
            place = o.placement.describe() if o.placement else "agent worker"
            if o.colocated:
                place += " (on the worker's cores)"
            source = "**declared**" if o.declared else "measured"
            out.append(
                f"| {stage} | {_cell(o.label)} | {source} | {o.samples or '-'} | "
                f"{o.p50:.0f} | {_ms(o.at(result.q))} | {_cell(place)} | {price} | "
                f"{_cell(o.note)} |"
            )
    if result.excluded:
        out += ["", "Not used:", ""]
        out += [
            f"- {e.option.stage}: {_cell(e.option.label)} (`{e.option.profile}`): {e.reason}"
            for e in result.excluded
        ]
    if result.notes:
        out += ["", *(f"- {n}" for n in result.notes)]
    out += [
        "",
        f"Price book {book.version}: compute "
        + ", ".join(f"{k} ${v:.2f}/h" for k, v in book.compute_usd_per_hour.items())
        + f"; API TTS ${book.fallback_tts_usd_per_1k_characters:g} per 1,000 characters.",
        "",
    ]
    return out


def _stage_price(option: StageOption, book: PriceBook) -> float:
    resolved = _resolve(option, book)
    if isinstance(resolved, Placement):
        chars = resolved.characters_per_minute or 0.0
        return chars / 1000.0 * book.fallback_tts_usd_per_1k_characters
    return book.compute_usd_per_hour[resolved.compute] / 60.0 / resolved.concurrent_calls


# -- for the dashboard and the command line ------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """The chosen (cheapest passing) configuration's predicted figures, for the dashboard."""

    label: str
    target_ms: float
    percentile: float  # e.g. 95
    p50_ms: float
    predicted_ms: float  # response latency at the percentile
    usd_per_minute: float
    declared_stages: tuple[str, ...]  # empty: every figure measured
    price_book_version: str
    transport: str


def _gpu_note(directory: Path) -> list[str]:
    shipped = directory.resolve() == DEFAULT_PROFILES
    gpu_md = (REPORTS if shipped else directory.parent) / "gpu.md"
    if gpu_md.exists() and not (directory / "gpu.json").exists():
        note = (
            f"{gpu_md} exists but {directory / 'gpu.json'} does not: its GPU figures are not "
            f"used (`python -m tools.gpu_profile REPORT --out {_display(directory / 'gpu.json')}`)."
        )
        logger.warning("%s", note)
        return [note]
    return []


def plan_from_files(
    target_ms: float = 300.0,
    *,
    q: float = 0.95,
    profiles_dir: str | Path | None = None,
    price_book: str | Path | None = None,
    transport: str = DEFAULT_TRANSPORT,
) -> PlanResult:
    """Load the profiles and the price book, and plan. Raises ProfileError or ValueError."""
    directory = Path(profiles_dir) if profiles_dir is not None else DEFAULT_PROFILES
    profiles = load_profiles(directory)
    book = PriceBook.load(price_book)
    return plan(
        profiles,
        book,
        target_ms=target_ms,
        q=q,
        transport=transport,
        book_path=str(price_book or _display(DEFAULT_PRICE_BOOK)),
        notes=_gpu_note(directory),
    )


def chosen_configuration(
    target_ms: float = 300.0,
    *,
    percentile: float = 95.0,
    profiles_dir: str | Path | None = None,
    price_book: str | Path | None = None,
    transport: str = DEFAULT_TRANSPORT,
) -> Prediction | None:
    """The cheapest configuration that meets ``target_ms``, or None when none does.

    Raises :class:`ProfileError` (or ValueError for a bad price book) when the
    inputs cannot be read: the caller decides whether to show that or nothing.
    """
    result = plan_from_files(
        target_ms,
        q=percentile / 100,
        profiles_dir=profiles_dir,
        price_book=price_book,
        transport=transport,
    )
    chosen = result.cheapest
    if chosen is None:
        return None
    return Prediction(
        label=chosen.label,
        target_ms=target_ms,
        percentile=percentile,
        p50_ms=chosen.p50_ms,
        predicted_ms=chosen.predicted_ms,
        usd_per_minute=chosen.usd_per_minute,
        declared_stages=chosen.declared_stages,
        price_book_version=result.book.version,
        transport=transport,
    )


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(_REPO))
    except ValueError:
        return str(path)


def add_plan_parser(commands: Any) -> None:
    """``python -m agent plan``."""
    parser = commands.add_parser(
        "plan",
        help="the serving configurations that meet a latency target at a percentile, "
        "cheapest first, from the benchmarks' stage profiles and the price book",
        description="Combine the stage options of the profiles (agent/ledger/profiles/*.json, "
        "written by the benchmarks; declared figures are marked as such) into end-to-end "
        "configurations, predict each one's response latency and price a minute, and list "
        "those that meet the target, cheapest first. Exits 1 when none does, 2 on bad input.",
    )
    parser.add_argument(
        "--target-ms", type=float, default=300.0, help="response latency target (default 300)"
    )
    parser.add_argument(
        "--percentile",
        type=float,
        default=95.0,
        help="the percentile the target applies to, 50 <= P < 100 (default 95)",
    )
    parser.add_argument(
        "--profiles",
        type=Path,
        default=None,
        metavar="DIR",
        help="the profiles' directory (default agent/ledger/profiles)",
    )
    parser.add_argument(
        "--price-book",
        type=Path,
        default=None,
        metavar="PATH",
        help="the price book (default infra/pricebook.toml)",
    )
    parser.add_argument(
        "--transport",
        default=DEFAULT_TRANSPORT,
        help=f"the line the minutes are priced on (default {DEFAULT_TRANSPORT})",
    )
    parser.add_argument(
        "--output", metavar="FILE", help=f"also write the plan as markdown (e.g. {DEFAULT_OUTPUT})"
    )


def run_plan_command(args: argparse.Namespace) -> tuple[int, str]:
    """The command line's side: (exit status, what to print)."""
    try:
        result = plan_from_files(
            args.target_ms,
            q=args.percentile / 100,
            profiles_dir=args.profiles,
            price_book=args.price_book,
            transport=args.transport,
        )
    except (ProfileError, ValueError, OSError) as exc:
        return 2, f"cannot plan: {exc}"
    command = f"python -m agent plan --target-ms {args.target_ms:g}"
    if args.percentile != 95:
        command += f" --percentile {args.percentile:g}"
    if args.profiles is not None:
        command += f" --profiles {args.profiles}"
    if args.price_book is not None:
        command += f" --price-book {args.price_book}"
    if args.transport != DEFAULT_TRANSPORT:
        command += f" --transport {args.transport}"
    if args.output:
        command += f" --output {args.output}"
    text = render(result, command=command)
    if args.output:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        text += f"\nwrote {path}\n"
    if result.cheapest is None:
        best = result.failing[0]
        text += (
            f"\nnothing meets {result.target_ms:g} ms at {percentile_key(result.q)}: the "
            f"fastest configuration is predicted at {best.predicted_ms:.0f} ms "
            f"({best.label})\n"
        )
        return 1, text
    return 0, text
