"""The dashboard's figures: cost per minute, latency percentiles, fallback share, collection KPIs.

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

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.ledger.latency import DEFINITION, RESPONSE_TARGET_MS, VOICE_TO_VOICE_TARGET_MS
from agent.ledger.quantiles import percentile
from agent.store.tables import Call, CostLine, Promise, PromiseStatus, Turn

#: Who was reached when no person answered (``calls.party``); None is unknown, not a person.
NOT_A_PERSON = frozenset({"voicemail", "no_answer", "busy", "fax", "machine"})
RIGHT_PARTY = "right_party"
FALLBACK = "tts_fallback"
TTS = "tts"


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

    @property
    def usd_per_minute(self) -> float | None:
        """The range's cost per connected minute."""
        minutes = sum(d.minutes for d in self.cost)
        return sum(d.cost_usd for d in self.cost) / minutes if minutes else None

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
        return result


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


def cost_by_day(engine: Engine, start: dt.date, end: dt.date) -> list[DayCost]:
    """Total cost over total connected minutes for each day with calls, and each component's.

    Minutes are ``calls.duration_s``; cost is the sum of the calls' cost lines (so the
    components add up to the total). Calls without a duration (still active) are left out.
    """
    with Session(engine) as session:
        calls = session.execute(
            select(Call.id, Call.started_at, Call.duration_s).where(
                _in_range(start, end), Call.duration_s.is_not(None)
            )
        ).all()
        lines = session.execute(
            select(CostLine.call_id, CostLine.component, CostLine.amount_usd)
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
    for line in lines:
        amounts[day_of[line.call_id]][line.component].append(line.amount_usd)
    result = []
    for day in sorted(count):
        minutes = seconds[day] / 60.0
        components = {name: math.fsum(values) for name, values in amounts[day].items()}
        total = math.fsum(components.values())
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
            )
        )
    return result


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


def figures(engine: Engine, start: dt.date, end: dt.date, target_usd_per_minute: float) -> Figures:
    """All of the dashboard's figures for ``start`` to ``end`` (UTC days, inclusive)."""
    _bounds(start, end)
    return Figures(
        start=start,
        end=end,
        target_usd_per_minute=target_usd_per_minute,
        latency_target_ms=RESPONSE_TARGET_MS,
        voice_to_voice_target_ms=VOICE_TO_VOICE_TARGET_MS,
        cost=cost_by_day(engine, start, end),
        latency=latency_by_day(engine, start, end),
        kpis=[*collection_kpis(engine, start, end), fallback_share(engine, start, end)],
        response_p95_ms=response_percentile(engine, start, end, 0.95),
    )


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
    order = ["telephony", "stt", "llm", "tts", "tts_fallback"]
    seen = {name for day in days for name in day.by_component}
    return [n for n in order if n in seen] + sorted(seen - set(order))
