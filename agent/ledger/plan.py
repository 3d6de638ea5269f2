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
figure, is exact for independent normally distributed stages, and is applied to
every configuration the same way. An option with a median and no figure at the
percentile (a declared median: a talk's one number, the GPU check's p50) has an
unknown tail, not a zero one: its configurations' predictions leave that tail out
and are lower bounds, shown as such ("≥"), and such a configuration under the
target *may* meet it, apart from those known to. Its
weak spot is dependence: stages that share a loaded CPU are slow together, and
then the truth moves toward the pessimistic bound, so a configuration that
passes only under the root-sum-square is worth measuring end to end. STT is
counted in full from the VAD's stop, as the response is measured.

**The cost** of a configuration is priced by :func:`agent.ledger.pricebook.price_call`
on a copy of the book whose one profile places each model stage as the options
say: compute price per hour / 60 / concurrent calls per stage, the line by the
transport's rate, an API TTS by its characters per minute. Planned from the
database (``--from-db``, ``agent.ledger.production``), the production turns are one
more measured profile, and each configuration is priced for one minute of those
calls' use: a stage the calls' cost lines counted is priced by that use (audio
seconds, tokens) where the option's price book profile has throughputs.

Agent stages and colocation: ``bench turn`` measures endpointing and our
overhead twice, with the models on the worker's own cores (the CPU default)
and with the models behind URLs (instant stubs). A configuration with any
model option measured on the worker's cores (``colocated``) takes the first;
every other configuration the second.

The markdown is ``agent.ledger.plan_report``'s, the command line ``agent.ledger.plan_command``'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

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
from agent.ledger.production import Production
from agent.ledger.stage_profiles import (
    AGENT_STAGES,
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
from agent.ledger.throughput import DECLARED, Throughput

logger = logging.getLogger(__name__)

_REPO = Path(__file__).resolve().parents[2]
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
    meets: bool  # predicted at or under the target, every tail known
    #: The stages whose tail is unknown: the predictions are lower bounds.
    tail_unknown: tuple[str, ...] = ()
    #: Under the target by its lower bound, some tail unknown: meets if those tails fit.
    may_meet: bool = False

    @property
    def usd_per_minute(self) -> float:
        return self.cost.per_minute_usd or 0.0

    @property
    def declared_stages(self) -> tuple[str, ...]:
        return tuple(s for s, o in self.options.items() if o.declared)

    @property
    def declared_prices(self) -> tuple[str, ...]:
        """The stages priced on a declared figure (a throughput the book states, a share
        of a call minute)."""
        return tuple(
            dict.fromkeys(
                line.component
                for line in self.cost.lines
                if line.basis == DECLARED and line.component in MODEL_STAGES
            )
        )

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
    #: Under the target by a lower bound, some tail unknown: cheapest first.
    possible: tuple[Configuration, ...] = ()
    #: The calls the configurations are priced for (``--from-db``), None: a call minute.
    production: Production | None = None

    @property
    def cheapest(self) -> Configuration | None:
        return self.passing[0] if self.passing else None

    @property
    def cheapest_possible(self) -> Configuration | None:
        return self.possible[0] if self.possible else None

    @property
    def fastest(self) -> Configuration | None:
        return min(self.passing, key=lambda c: (c.predicted_ms, c.usd_per_minute), default=None)


def predict(options: Sequence[StageOption], q: float) -> tuple[float, float, float]:
    """(p50, root-sum-square prediction at ``q``, sum of the ``q`` figures) of a serial chain.

    An option whose ``q`` figure is unknown (:func:`unknown_tails`) adds its median and
    no tail: the two predictions are then lower bounds, never a zero tail taken as known.
    """
    medians = math.fsum(o.p50 for o in options)
    tails = [o.at(q) for o in options]
    excess = [max(0.0, t - o.p50) for t, o in zip(tails, options, strict=True) if t is not None]
    rss = medians + math.sqrt(math.fsum(e * e for e in excess))
    coinciding = math.fsum(o.p50 if t is None else t for t, o in zip(tails, options, strict=True))
    return medians, rss, coinciding


def unknown_tails(options: Sequence[StageOption], q: float) -> tuple[str, ...]:
    """The stages whose figure at ``q`` is unknown: a declared median, a GPU check's p50."""
    return tuple(o.stage for o in options if o.at(q) is None)


def resolve(
    option: StageOption, book: PriceBook, *, by_use: bool = False
) -> StagePlacement | Placement:
    """The option's price-book placement (a StagePlacement), or its API placement.

    ``by_use``: keep the book profile's throughputs, at its target utilization and the
    option's cost multiple, so the stage is priced by what the calls used of it; else
    (or for a placement the book gives only as calls per unit) per call minute.
    """
    placement = option.placement
    assert placement is not None
    if placement.api is not None:
        return placement
    if placement.price_book_profile is not None:
        base = book.profile(placement.price_book_profile)[option.stage]
        throughput: Mapping[str, Throughput] = {}
        if by_use:
            used = book.deployment(placement.price_book_profile).target_utilization
            throughput = {
                key: dataclasses.replace(t, per_s=t.per_s * used / placement.cost_multiple)
                for key, t in base.throughput.items()
            }
        return StagePlacement(
            base.compute,
            base.concurrent_calls / placement.cost_multiple,
            MappingProxyType(throughput),
        )
    assert placement.compute is not None and placement.concurrent_calls is not None
    if placement.compute not in book.compute_usd_per_hour:
        known = ", ".join(sorted(book.compute_usd_per_hour))
        raise ValueError(f"compute class {placement.compute!r} is not in the price book ({known})")
    return StagePlacement(placement.compute, placement.concurrent_calls)


def price_configuration(
    book: PriceBook,
    options: Mapping[str, StageOption],
    transport: str,
    production: Production | None = None,
) -> CallCost:
    """One minute of a call on these model options, priced by :func:`price_call`: a call
    minute, or (``production``) one minute of those calls' use, each stage the calls
    counted priced by use where the option's placement has throughputs."""
    compute = dict(book.compute_usd_per_hour)
    stages: dict[str, StagePlacement] = {}
    characters = 0.0
    for stage in MODEL_STAGES:
        by_use = production is not None and production.counted(stage)
        resolved = resolve(options[stage], book, by_use=by_use)
        if isinstance(resolved, Placement):
            compute[_API_COMPUTE] = 0.0
            stages[stage] = StagePlacement(_API_COMPUTE, 1.0)
            spoken = production.characters_per_minute() if production is not None else None
            characters += spoken if spoken is not None else resolved.characters_per_minute or 0.0
        else:
            stages[stage] = resolved
    candidate = dataclasses.replace(
        book,
        compute_usd_per_hour=MappingProxyType(compute),
        profiles=MappingProxyType({"candidate": MappingProxyType(stages)}),
        deployments=MappingProxyType({}),
    )
    usage = (
        production.minute_usage(transport) if production is not None else CallUsage(transport, 60.0)
    )
    usage = dataclasses.replace(
        usage, fallback_tts_characters=usage.fallback_tts_characters + round(characters)
    )
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
    production: Production | None = None,
) -> PlanResult:
    """Every configuration of the profiles' options, predicted and priced (for a call
    minute, or for one minute of ``production``'s use)."""
    if not 0.5 <= q < 1:
        raise ValueError(f"the percentile must be at least 50 and below 100, got {q * 100:g}")
    if target_ms <= 0:
        raise ValueError(f"the target must be positive, got {target_ms:g} ms")
    book.telephony_rate(transport)  # an unknown transport is an error before anything else
    usable, excluded = _usable_options(profiles, book)
    configurations, skipped = _configurations(usable, book, q, target_ms, transport, production)
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
    possible = sorted(
        (c for c in configurations if c.may_meet),
        key=lambda c: (c.usd_per_minute, c.predicted_ms),
    )
    failing = sorted(
        (c for c in configurations if not (c.meets or c.may_meet)),
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
        possible=tuple(possible),
        production=production,
    )


def _usable_options(
    profiles: Sequence[Profile], book: PriceBook
) -> tuple[dict[str, list[StageOption]], list[Excluded]]:
    """The profiles' options by stage, those that can be priced, and the rest with the
    reason; an error when a stage the response needs has none."""
    usable: dict[str, list[StageOption]] = {s: [] for s in STAGES}
    excluded: list[Excluded] = []
    for profile in profiles:
        for option in profile.options:
            reason = _unusable(option, book)
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
                f"no usable {stage} option in the profiles"
                + (f" ({why})" if why else f": add one ({hint})")
            )
    return usable, excluded


def _configurations(
    usable: Mapping[str, Sequence[StageOption]],
    book: PriceBook,
    q: float,
    target_ms: float,
    transport: str,
    production: Production | None,
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
        cost = price_configuration(
            book, {"stt": stt, "llm": llm, "tts": tts}, transport, production
        )
        for overhead, endpoint in itertools.product(overheads, endpoints):
            chain = [stt, llm, tts, overhead]
            p50, predicted, coinciding = predict(chain, q)
            unknown = unknown_tails(chain, q)
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
                    meets=predicted <= target_ms and not unknown,
                    tail_unknown=unknown,
                    may_meet=predicted <= target_ms and bool(unknown),
                )
            )
    return configurations, skipped


def _unusable(option: StageOption, book: PriceBook) -> str:
    if option.placement is None:
        return ""
    try:
        resolve(option, book)
    except ValueError as exc:
        return f"cannot be priced: {exc}"
    return ""


# -- for the dashboard and the command line ------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """The chosen configuration's predicted figures, for the dashboard: the cheapest that
    meets the target, else the cheapest that may (``tail_unknown`` names the stages whose
    tail is unknown, and ``predicted_ms`` is then a lower bound)."""

    label: str
    target_ms: float
    percentile: float  # e.g. 95
    p50_ms: float
    predicted_ms: float  # response latency at the percentile
    usd_per_minute: float
    declared_stages: tuple[str, ...]  # empty: every figure measured
    price_book_version: str
    transport: str
    tail_unknown: tuple[str, ...] = ()


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
    production: Profile | None = None,
    usage: Production | None = None,
) -> PlanResult:
    """Load the profiles and the price book, and plan, with ``production``'s profile beside
    them and priced for ``usage``'s calls where given. Raises ProfileError or ValueError."""
    directory = Path(profiles_dir) if profiles_dir is not None else DEFAULT_PROFILES
    profiles = load_profiles(directory)
    if production is not None:
        profiles = [_agent_stages_from(production, p) for p in profiles] + [production]
    book = PriceBook.load(price_book)
    return plan(
        profiles,
        book,
        target_ms=target_ms,
        q=q,
        transport=transport,
        book_path=str(price_book or _display(DEFAULT_PRICE_BOOK)),
        notes=_gpu_note(directory),
        production=usage,
    )


def _agent_stages_from(production: Profile, profile: Profile) -> Profile:
    """``profile`` less the agent stages (endpointing, overhead) that production measured
    with its models placed alike: the calls we had are the better measure of our own part."""
    measured = {(o.stage, o.colocated) for o in production.options if o.stage in AGENT_STAGES}
    kept = tuple(o for o in profile.options if (o.stage, o.colocated) not in measured)
    return dataclasses.replace(profile, options=kept)


def chosen_configuration(
    target_ms: float = 300.0,
    *,
    percentile: float = 95.0,
    profiles_dir: str | Path | None = None,
    price_book: str | Path | None = None,
    transport: str = DEFAULT_TRANSPORT,
) -> Prediction | None:
    """The cheapest configuration that meets ``target_ms``, else the cheapest that may
    (some tail unknown, marked), or None when none does.

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
    chosen = result.cheapest or result.cheapest_possible
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
        tail_unknown=chosen.tail_unknown,
    )


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(_REPO))
    except ValueError:
        return str(path)
