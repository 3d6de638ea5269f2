"""Read the calls we actually had for the planner (``python -m agent plan --from-db``).

The calls that started in a window and ended, their turns' latency parts and their cost
lines' quantities and compute, as ``agent.ledger.production.Production``. A database the
agent never migrated holds no calls: it reads as empty, and the planner says so.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import Engine, Row
from sqlalchemy.pool import NullPool

from agent.config import Settings
from agent.ledger import latency
from agent.ledger.production import USAGE_LINES, Production, TurnLatency
from agent.store.database import check_database, create_engine_for
from agent.store.tables import Call, CostLine, Turn

logger = logging.getLogger(__name__)


def read_production(settings: Settings, since: datetime, until: datetime) -> Production:
    """What ``DATABASE_URL`` holds of the calls started in ``[since, until)``; a
    ``ConfigError`` when it cannot be reached."""
    check_database(settings.database_url)
    engine = create_engine_for(settings.database_url, poolclass=NullPool)
    try:
        return production(
            engine,
            since,
            until,
            price_profile=settings.price_profile,
            colocated=settings.embedded_models,
        )
    finally:
        engine.dispose()


def production(
    engine: Engine, since: datetime, until: datetime, *, price_profile: str, colocated: bool
) -> Production:
    """The window's ended calls, turns and cost lines on ``engine``."""
    empty = Production(since, until, price_profile, colocated)
    if not inspect(engine).has_table(Call.__tablename__):
        logger.info("no calls table: the database was never migrated")
        return empty
    window = (
        Call.started_at >= since,
        Call.started_at < until,
        Call.duration_s.is_not(None),
    )
    with engine.connect() as connection:
        calls = connection.execute(
            select(Call.id, Call.transport, Call.duration_s).where(*window)
        ).all()
        if not calls:
            return empty
        turns = connection.execute(
            select(
                Turn.latency_definition,
                Call.stt_model,
                Call.llm_model,
                Call.tts_voice,
                Turn.endpointing_ms,
                Turn.stt_ms,
                Turn.llm_ttft_ms,
                Turn.tts_ttfb_ms,
                Turn.response_ms,
                Turn.voice_to_voice_ms,
            )
            .join(Call, Turn.call_id == Call.id)
            .where(*window)
            .order_by(Turn.call_id, Turn.number)
        ).all()
        characters = connection.execute(
            select(func.coalesce(func.sum(Turn.tts_characters), 0))
            .join(Call, Turn.call_id == Call.id)
            .where(*window)
        ).scalar_one()
        lines = connection.execute(
            select(
                CostLine.call_id,
                CostLine.component,
                CostLine.unit,
                CostLine.quantity,
                CostLine.compute_s,
            )
            .join(Call, CostLine.call_id == Call.id)
            .where(*window)
        ).all()
    minutes = {call.id: (call.duration_s or 0.0) / 60.0 for call in calls}
    used, compute = _used(lines, minutes)
    current = [t for t in turns if t.latency_definition == latency.DEFINITION]
    return Production(
        since,
        until,
        price_profile,
        colocated,
        calls=len(calls),
        minutes=sum(minutes.values()),
        transports=dict(Counter(call.transport for call in calls)),
        # the selected columns after the definition are TurnLatency's fields, in order
        turns=tuple(TurnLatency(*tuple(t)[1:]) for t in current),
        legacy_turns=len(turns) - len(current),
        tts_characters=int(characters or 0),
        used=used,
        compute_s=compute,
    )


def _used(
    lines: Sequence[Row[str, str, str, float, float | None]], minutes: Mapping[str, float]
) -> tuple[dict[tuple[str, str], tuple[float, float]], dict[str, float]]:
    """Each usage line's quantity with the minutes of the calls that have it, and each
    component's compute seconds."""
    used: dict[tuple[str, str], tuple[float, float]] = {}
    compute: dict[str, float] = defaultdict(float)
    for line in lines:
        key = (line.component, line.unit)
        if key in USAGE_LINES:
            quantity, counted = used.get(key, (0.0, 0.0))
            used[key] = (quantity + line.quantity, counted + minutes[line.call_id])
        compute[line.component] += line.compute_s or 0.0
    return used, dict(compute)
