"""The dashboard's figures: cost per minute, latency percentiles, fallback share, collection KPIs.

Cost is shown two ways (docs/pricing.md): *attributed*, the calls' cost lines (each call's
use at the book's unit prices), and *provisioned*, what the deployment's compute cost that
day whether used or idle, plus the metered lines, over the day's connected minutes. A day's
utilization per stage is the compute the servers reported over the device time provisioned.

Pure functions of the database (SQLAlchemy 2, the same on SQLite and
PostgreSQL) over a range of UTC days, inclusive at both ends. A call belongs to
the day it started (``calls.started_at``, UTC), and so do its turns, cost lines
and promises. Rows are fetched for the range and grouped by day in Python:
SQLite has no portable date truncation nor percentile function, so the
percentiles are computed here from the day's turns (nearest rank). That is fine
for the volumes of today; past a few hundred thousand turns a day it wants
PostgreSQL's ``percentile_cont`` or a rollup table. See docs/dashboard.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.ledger.latency import DEFINITION, RESPONSE_TARGET_MS, VOICE_TO_VOICE_TARGET_MS
from agent.ledger.pricebook import SELF_HOSTED_STAGES, WORKER, PriceBook
from agent.ledger.quantiles import percentile
from agent.ledger.throughput import DECLARED
from agent.store.tables import Call, CostLine, Promise, PromiseStatus, Turn

#: Who was reached when no person answered (``calls.party``); None is unknown, not a person.
NOT_A_PERSON = frozenset({"voicemail", "no_answer", "busy", "fax", "machine"})
RIGHT_PARTY = "right_party"
FALLBACK = "tts_fallback"
TTS = "tts"
#: Components billed by the vendor per unit used: paid as used, never provisioned.
METERED = ("telephony", FALLBACK)
#: The campaign the forecast is for when none is named (accounts dialled once each).
DEFAULT_ACCOUNTS = 1000
#: The stages whose utilization is shown: the models' and the worker's.
UTILIZED = (*SELF_HOSTED_STAGES, WORKER)


@dataclass(frozen=True)
class Provisioning:
    """What the running deployment profile provisions a day (the price book's figures)."""

    profile: str
    usd_per_day: float
    #: Device seconds a day per stage (the worker: CPU seconds).
    seconds_per_day: dict[str, float]

    @classmethod
    def of(cls, book: PriceBook, profile: str) -> Provisioning:
        return cls(
            profile,
            book.provisioned_usd_per_day(profile),
            {stage: book.provisioned_seconds_per_day(profile, stage) for stage in UTILIZED},
        )


@dataclass(frozen=True)
class Kpi:
    """A ratio with what it is a ratio of; ``value`` is None when the denominator is 0 or the
    data do not exist, and ``note`` says why."""

    name: str
    numerator: float | None
    denominator: float | None
    value: float | None
    note: str | None = None


@dataclass(frozen=True)
class DayCost:
    day: dt.date
    calls: int
    minutes: float
    cost_usd: float
    #: cost_usd / minutes; None on a day without connected minutes.
    usd_per_minute: float | None
    #: Each component's $/minute (telephony, stt, llm, tts, tts_fallback).
    by_component: dict[str, float | None] = field(default_factory=dict)
    #: tts_fallback cost over all TTS cost that day; None without TTS cost.
    fallback_share: float | None = None
    #: The part of ``cost_usd`` whose unit prices rest on declared figures.
    declared_usd: float = 0.0
    #: What the day really cost: provisioned compute plus the metered lines (None: unknown).
    provisioned_usd: float | None = None
    provisioned_usd_per_minute: float | None = None
    #: Per stage, reported compute over provisioned device time (None: nothing to divide).
    utilization: dict[str, float | None] = field(default_factory=dict)
    #: The worker's CPU seconds per call (None: no call measured it).
    worker_cpu_s_per_call: float | None = None


@dataclass(frozen=True)
class DayLatency:
    day: dt.date
    turns: int
    response_p50_ms: float | None
    response_p95_ms: float | None
    voice_to_voice_p50_ms: float | None
    voice_to_voice_p95_ms: float | None


@dataclass(frozen=True)
class Figures:
    """Everything the dashboard and ``/api/kpis`` show, for one range of days."""

    start: dt.date
    end: dt.date
    target_usd_per_minute: float
    #: The response target (agent.ledger.latency), the line the latency chart draws.
    latency_target_ms: float
    voice_to_voice_target_ms: float
    cost: list[DayCost]
    latency: list[DayLatency]
    kpis: list[Kpi]
    #: p95 of ``response_ms`` over every turn of the range (not a day's), current
    #: definition only.
    response_p95_ms: float | None = None

    #: The deployment profile the provisioned figures are for (None: not known).
    profile: str | None = None
    forecast: Forecast | None = None
    #: What the owner pays per result: cost per dollar promised.
    owner_kpis: list[Kpi] = field(default_factory=list)

    @property
    def minutes(self) -> float:
        return sum(d.minutes for d in self.cost)

    @property
    def usd_per_minute(self) -> float | None:
        """The range's attributed cost per connected minute."""
        return _ratio(sum(d.cost_usd for d in self.cost), self.minutes)

    @property
    def provisioned_usd_per_minute(self) -> float | None:
        """The range's provisioned cost per connected minute (days with calls)."""
        if any(d.provisioned_usd is None for d in self.cost):
            return None
        return _ratio(math.fsum(d.provisioned_usd or 0.0 for d in self.cost), self.minutes)

    @property
    def declared_share(self) -> float | None:
        """The share of the range's attributed cost that rests on declared figures."""
        return _ratio(sum(d.declared_usd for d in self.cost), sum(d.cost_usd for d in self.cost))

    def to_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            if isinstance(value, dt.date):
                return value.isoformat()
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            if isinstance(value, list):
                return [plain(v) for v in value]
            return value

        result: dict[str, Any] = plain(asdict(self))
        result["usd_per_minute"] = self.usd_per_minute
        result["provisioned_usd_per_minute"] = self.provisioned_usd_per_minute
        result["declared_share"] = self.declared_share
        return result


@dataclass(frozen=True)
class Forecast:
    """What a campaign of ``accounts`` would cost at the range's measured rates."""

    accounts: int
    #: Calls that connected (a duration over zero) per call placed, over the range.
    connect_rate: float | None
    #: Mean connected minutes of a connected call.
    minutes_per_connect: float | None
    expected_minutes: float | None
    attributed_usd: float | None
    provisioned_usd: float | None


def _bounds(start: dt.date, end: dt.date) -> tuple[dt.datetime, dt.datetime]:
    if end < start:
        raise ValueError(f"the range ends ({end}) before it starts ({start})")
    low = dt.datetime.combine(start, dt.time(), dt.UTC)
    high = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(), dt.UTC)
    return low, high


def _in_range(start: dt.date, end: dt.date) -> Any:
    low, high = _bounds(start, end)
    return (Call.started_at >= low) & (Call.started_at < high)


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def cost_by_day(
    engine: Engine, start: dt.date, end: dt.date, provisioning: Provisioning | None = None
) -> list[DayCost]:
    """Total cost over total connected minutes for each day with calls, and each component's.

    Minutes are ``calls.duration_s``; cost is the sum of the calls' cost lines (so the
    components add up to the total). Calls without a duration (still active) are left out.
    With ``provisioning``, each day also gets what the deployment cost it and its
    utilization (a day with no call is not shown, and its idle cost not counted).
    """
    with Session(engine) as session:
        calls = session.execute(
            select(Call.id, Call.started_at, Call.duration_s).where(
                _in_range(start, end), Call.duration_s.is_not(None)
            )
        ).all()
        lines = session.execute(
            select(
                CostLine.call_id,
                CostLine.component,
                CostLine.amount_usd,
                CostLine.basis,
                CostLine.compute_s,
            )
            .join(Call, Call.id == CostLine.call_id)
            .where(_in_range(start, end), Call.duration_s.is_not(None))
        ).all()
    day_of = {row.id: row.started_at.date() for row in calls}
    seconds: dict[dt.date, float] = defaultdict(float)
    count: dict[dt.date, int] = defaultdict(int)
    for row in calls:
        seconds[day_of[row.id]] += row.duration_s or 0.0
        count[day_of[row.id]] += 1
    amounts: dict[dt.date, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    declared: dict[dt.date, list[float]] = defaultdict(list)
    compute: dict[dt.date, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in lines:
        day = day_of[line.call_id]
        amounts[day][line.component].append(line.amount_usd)
        if line.basis == DECLARED:
            declared[day].append(line.amount_usd)
        if line.compute_s is not None:
            compute[day][line.component].append(line.compute_s)
    result = []
    for day in sorted(count):
        minutes = seconds[day] / 60.0
        components = {name: math.fsum(values) for name, values in amounts[day].items()}
        total = math.fsum(components.values())
        used = {name: math.fsum(values) for name, values in compute[day].items()}
        provisioned, utilization = _provisioned(provisioning, components, used)
        result.append(
            DayCost(
                day=day,
                calls=count[day],
                minutes=minutes,
                cost_usd=total,
                usd_per_minute=_ratio(total, minutes),
                by_component={
                    name: _ratio(amount, minutes) for name, amount in sorted(components.items())
                },
                fallback_share=_ratio(
                    components.get(FALLBACK, 0.0),
                    components.get(TTS, 0.0) + components.get(FALLBACK, 0.0),
                ),
                declared_usd=math.fsum(declared[day]),
                provisioned_usd=provisioned,
                provisioned_usd_per_minute=None
                if provisioned is None
                else _ratio(provisioned, minutes),
                utilization=utilization,
                worker_cpu_s_per_call=_ratio(used[WORKER], count[day]) if WORKER in used else None,
            )
        )
    return result


def _provisioned(
    provisioning: Provisioning | None, components: dict[str, float], used: dict[str, float]
) -> tuple[float | None, dict[str, float | None]]:
    """A day's provisioned cost (compute plus the metered lines) and utilization per stage."""
    if provisioning is None:
        return None, {}
    metered = math.fsum(components.get(name, 0.0) for name in METERED)
    utilization = {
        stage: _ratio(used[stage], provisioning.seconds_per_day[stage]) if stage in used else None
        for stage in UTILIZED
    }
    return provisioning.usd_per_day + metered, utilization


def latency_by_day(engine: Engine, start: dt.date, end: dt.date) -> list[DayLatency]:
    """p50 and p95 of ``response_ms`` and ``voice_to_voice_ms`` over each day's turns.

    The response is read only from turns of the current definition (agent.ledger.latency): a
    legacy turn's response left the STT and end-of-turn waits out.
    """
    with Session(engine) as session:
        rows = session.execute(
            select(
                Call.started_at,
                Turn.response_ms,
                Turn.voice_to_voice_ms,
                Turn.latency_definition,
            )
            .join(Call, Call.id == Turn.call_id)
            .where(_in_range(start, end))
        ).all()
    response: dict[dt.date, list[float]] = defaultdict(list)
    v2v: dict[dt.date, list[float]] = defaultdict(list)
    turns: dict[dt.date, int] = defaultdict(int)
    for row in rows:
        day = row.started_at.date()
        turns[day] += 1
        if row.response_ms is not None and row.latency_definition == DEFINITION:
            response[day].append(row.response_ms)
        if row.voice_to_voice_ms is not None:
            v2v[day].append(row.voice_to_voice_ms)
    return [
        DayLatency(
            day=day,
            turns=turns[day],
            response_p50_ms=_percentile(response[day], 0.5),
            response_p95_ms=_percentile(response[day], 0.95),
            voice_to_voice_p50_ms=_percentile(v2v[day], 0.5),
            voice_to_voice_p95_ms=_percentile(v2v[day], 0.95),
        )
        for day in sorted(turns)
    ]


def fallback_share(engine: Engine, start: dt.date, end: dt.date) -> Kpi:
    """The fallback TTS's share of all TTS cost (``tts_fallback`` over ``tts`` + it).

    By cost, because that is what both lines have: the primary TTS is priced by the call
    minute, the fallback by the character, so characters are known only for the fallback.
    """
    with Session(engine) as session:
        rows = session.execute(
            select(CostLine.component, CostLine.amount_usd)
            .join(Call, Call.id == CostLine.call_id)
            .where(_in_range(start, end), CostLine.component.in_((TTS, FALLBACK)))
        ).all()
    fallback = math.fsum(r.amount_usd for r in rows if r.component == FALLBACK)
    total = math.fsum(r.amount_usd for r in rows)
    return Kpi(
        "fallback_tts_cost_share",
        fallback,
        total,
        _ratio(fallback, total),
        None if total else "no TTS cost in the range",
    )


def collection_kpis(engine: Engine, start: dt.date, end: dt.date) -> list[Kpi]:
    """Right-party contact, promise-to-pay, kept-promise rates and cost per promise."""
    with Session(engine) as session:
        parties = session.execute(select(Call.party).where(_in_range(start, end))).scalars().all()
        statuses = (
            session.execute(
                select(Promise.status)
                .join(Call, Call.id == Promise.call_id)
                .where(_in_range(start, end))
            )
            .scalars()
            .all()
        )
        costs = (
            session.execute(
                select(CostLine.amount_usd)
                .join(Call, Call.id == CostLine.call_id)
                .where(_in_range(start, end))
            )
            .scalars()
            .all()
        )
    answered = sum(1 for p in parties if p is not None and p not in NOT_A_PERSON)
    right_party = sum(1 for p in parties if p == RIGHT_PARTY)
    promises = len(statuses)
    resolved = [s for s in statuses if s != PromiseStatus.OPEN.value]
    kept = sum(1 for s in resolved if s == PromiseStatus.KEPT.value)
    cost = math.fsum(costs)
    kpis = [
        Kpi(
            "right_party_contact_rate",
            right_party,
            answered,
            _ratio(right_party, answered),
            None if answered else "no call answered by a person",
        ),
        Kpi(
            "promise_to_pay_rate",
            promises,
            right_party,
            _ratio(promises, right_party),
            None if right_party else "no right-party contact",
        ),
    ]
    if resolved:
        kpis.append(Kpi("kept_promise_rate", kept, len(resolved), kept / len(resolved)))
    else:
        kpis.append(
            Kpi(
                "kept_promise_rate",
                None,
                None,
                None,
                "no payment data: no promise in the range has been marked kept, broken or "
                "partial (nothing feeds payments into promises.status yet)",
            )
        )
    kpis.append(
        Kpi(
            "cost_per_promise_usd",
            cost,
            promises,
            _ratio(cost, promises),
            None if promises else "no promise in the range",
        )
    )
    return kpis


def promised_dollar_kpi(engine: Engine, start: dt.date, end: dt.date) -> Kpi:
    """The range's attributed cost per dollar promised on its calls."""
    with Session(engine) as session:
        cents = session.execute(
            select(Promise.amount_cents)
            .join(Call, Call.id == Promise.call_id)
            .where(_in_range(start, end))
        ).scalars()
        dollars = sum(cents) / 100.0
        cost = math.fsum(
            session.execute(
                select(CostLine.amount_usd)
                .join(Call, Call.id == CostLine.call_id)
                .where(_in_range(start, end))
            ).scalars()
        )
    return Kpi(
        "cost_per_promised_dollar_usd",
        cost,
        dollars,
        _ratio(cost, dollars),
        None if dollars else "no amount promised in the range",
    )


def forecast(
    engine: Engine, start: dt.date, end: dt.date, accounts: int, figures: Figures
) -> Forecast:
    """A campaign dialling ``accounts`` once each, at the range's connect rate, minutes per
    connected call and $/min (attributed and provisioned)."""
    if accounts < 0:
        raise ValueError(f"accounts must not be negative, got {accounts}")
    with Session(engine) as session:
        durations = (
            session.execute(
                select(Call.duration_s).where(
                    _in_range(start, end),
                    Call.direction == "outbound",
                    Call.duration_s.is_not(None),
                )
            )
            .scalars()
            .all()
        )
    connected = [d / 60.0 for d in durations if d and d > 0]
    rate = _ratio(len(connected), len(durations))
    per_connect = _ratio(math.fsum(connected), len(connected))
    minutes = None if rate is None or per_connect is None else accounts * rate * per_connect

    def at(usd_per_minute: float | None) -> float | None:
        return None if minutes is None or usd_per_minute is None else minutes * usd_per_minute

    return Forecast(
        accounts,
        rate,
        per_connect,
        minutes,
        at(figures.usd_per_minute),
        at(figures.provisioned_usd_per_minute),
    )


def figures(
    engine: Engine,
    start: dt.date,
    end: dt.date,
    target_usd_per_minute: float,
    provisioning: Provisioning | None = None,
    accounts: int = DEFAULT_ACCOUNTS,
) -> Figures:
    """All of the dashboard's figures for ``start`` to ``end`` (UTC days, inclusive), with
    the forecast of a campaign dialling ``accounts``."""
    _bounds(start, end)
    result = Figures(
        start=start,
        end=end,
        target_usd_per_minute=target_usd_per_minute,
        latency_target_ms=RESPONSE_TARGET_MS,
        voice_to_voice_target_ms=VOICE_TO_VOICE_TARGET_MS,
        cost=cost_by_day(engine, start, end, provisioning),
        latency=latency_by_day(engine, start, end),
        kpis=[*collection_kpis(engine, start, end), fallback_share(engine, start, end)],
        response_p95_ms=response_percentile(engine, start, end, 0.95),
        profile=provisioning.profile if provisioning is not None else None,
        owner_kpis=[promised_dollar_kpi(engine, start, end)],
    )
    return dataclasses.replace(result, forecast=forecast(engine, start, end, accounts, result))


def response_percentile(engine: Engine, start: dt.date, end: dt.date, q: float) -> float | None:
    """The ``q`` quantile of ``response_ms`` over every turn of the range (current definition)."""
    with Session(engine) as session:
        values = session.scalars(
            select(Turn.response_ms)
            .join(Call, Call.id == Turn.call_id)
            .where(
                _in_range(start, end),
                Turn.response_ms.is_not(None),
                Turn.latency_definition == DEFINITION,
            )
        ).all()
    return _percentile([v for v in values if v is not None], q)


def components(days: Iterable[DayCost]) -> list[str]:
    """The cost components seen on any of ``days``, in a stable order."""
    order = ["telephony", "stt", "llm", "tts", "tts_fallback", WORKER]
    seen = {name for day in days for name in day.by_component}
    return [n for n in order if n in seen] + sorted(seen - set(order))
