"""Where ``bench calls`` works, and the call list as it was before migration 0004.

On PostgreSQL a schema of its own (chosen through the connection's ``search_path``),
migrated and dropped at the end; on SQLite the file the URL names, cleaned of the bench's
rows. ``before_0004`` puts back 0003's indexes and the list's old query for the *before*
measurement.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Engine,
    Select,
    delete,
    exists,
    func,
    inspect,
    or_,
    select,
    text,
)
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateIndex

from agent.console import pages
from agent.console.calls import (
    PAGE_SIZE,
    CallFilter,
    CallRow,
    call_flagged,
    encode_cursor,
    midnight_utc,
)
from agent.store.database import create_engine_for, normalise_url
from agent.store.tables import (
    AuditEntry,
    Call,
    CallEvent,
    Consumer,
    ContactAttempt,
    Debt,
    User,
    UserSession,
)
from tools.bench_console_seed import REF_PREFIX, SCENARIO, table_of

logger = logging.getLogger(__name__)

USER_PREFIX = "bench-operator-"
#: Indexes migration 0004 added (and the call_events one that came with the list's work):
#: dropped for the "before" measurement, created again after it.
NEW_INDEXES = (
    "ix_calls_started_at",
    "ix_calls_disposition_started_at",
    "ix_calls_campaign_started_at",
    "ix_calls_number",
    "ix_call_events_kind_call_id",
)
#: The index 0003 had in ix_calls_started_at's place.
OLD_STARTED_AT = "CREATE INDEX ix_calls_started_at ON calls (started_at)"


class BenchRefused(Exception):
    """The benchmark will not run here (a database with calls, an odd schema name...)."""


def _with_search_path(url: URL, schema: str) -> URL:
    options = url.query.get("options")
    option = f"-csearch_path={schema}"
    if isinstance(options, str):
        option = f"{options} {option}"
    return url.update_query_dict({"options": option})


def _calls_in(url: URL, reuse: bool, where: str, instead: str) -> int:
    """How many calls ``url`` holds; ``BenchRefused`` if any, unless ``reuse``: the benchmark
    never mixes its rows with real ones."""
    engine = create_engine_for(url, poolclass=NullPool)
    try:
        found = 0
        if inspect(engine).has_table("calls"):
            with engine.connect() as connection:
                found = int(connection.scalar(select(func.count()).select_from(Call)) or 0)
    finally:
        engine.dispose()
    if found and not reuse:
        raise BenchRefused(
            f"{where} already holds {found} calls: pass --reuse to measure them, or {instead}"
        )
    return found


@contextmanager
def bench_database(url: str, schema: str, reuse: bool, keep: bool) -> Iterator[tuple[URL, int]]:
    """The URL the benchmark works on and how many calls it already holds.

    PostgreSQL: a schema of its own, created if missing and dropped afterwards
    unless ``keep``. SQLite: the file; a file the run created is removed
    afterwards unless ``keep``, one it found is cleaned of the benchmark's rows.
    Calls already there are refused unless ``reuse``.
    """
    parsed = normalise_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if not re.fullmatch(r"bench[a-z0-9_]{0,50}", schema):
            raise BenchRefused(f"schema {schema!r}: use a name of its own, starting with 'bench'")
        admin = create_engine_for(parsed, poolclass=NullPool)
        try:
            with admin.begin() as connection:
                connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            target = _with_search_path(parsed, schema)
            found = _calls_in(target, reuse, f"schema {schema}", "drop the schema")
            try:
                yield target, found
            finally:
                if not keep:
                    logger.info("dropping schema %s", schema)
                    with admin.begin() as connection:
                        connection.execute(text("SET LOCAL lock_timeout = '10s'"))
                        connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        finally:
            admin.dispose()
        return
    if backend != "sqlite":
        raise BenchRefused(f"unsupported database {backend!r}: PostgreSQL or SQLite")
    database = parsed.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        raise BenchRefused("SQLite: name a file (sqlite:///path/to/bench.db)")
    path = Path(database).expanduser()
    existed = path.exists()
    found = _calls_in(parsed, reuse, str(path), "name a new file") if existed else 0
    try:
        yield parsed, found
    finally:
        if not keep:
            if not existed:
                logger.info("removing %s", path)
                for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                    leftover.unlink(missing_ok=True)
            else:
                _delete_seeded(parsed)


def _delete_seeded(url: URL) -> None:
    """Remove the benchmark's rows from a SQLite file it did not create."""
    engine = create_engine_for(url, poolclass=NullPool)
    try:
        if not inspect(engine).has_table("calls"):
            return
        with engine.begin() as connection:
            users = select(User.id).where(User.username.startswith(USER_PREFIX))
            connection.execute(delete(AuditEntry).where(AuditEntry.user_id.in_(users)))
            connection.execute(delete(UserSession).where(UserSession.user_id.in_(users)))
            connection.execute(delete(User).where(User.username.startswith(USER_PREFIX)))
            connection.execute(delete(Call).where(Call.scenario == SCENARIO))
            connection.execute(delete(Consumer).where(Consumer.external_ref.startswith(REF_PREFIX)))
        logger.info("removed the benchmark's rows from %s", url.database)
    finally:
        engine.dispose()


def legacy_call_query(f: CallFilter, limit: int = PAGE_SIZE) -> Select[Any]:
    """The list's query before 0004: the number through the call's first contact attempt.

    (The campaign filter did not exist; it is applied the same way as now, on an
    unindexed column.)
    """
    number = (
        select(ContactAttempt.number)
        .where(ContactAttempt.call_id == Call.id)
        .order_by(ContactAttempt.id)
        .limit(1)
        .scalar_subquery()
    )
    query = (
        select(
            Call.id,
            Call.started_at,
            Call.transport,
            Call.direction,
            Call.disposition,
            Call.duration_s,
            Call.cost_usd,
            Call.debt_id,
            number.label("number"),
            Consumer.name,
            call_flagged().label("flagged"),
        )
        .outerjoin(Debt, Debt.id == Call.debt_id)
        .outerjoin(Consumer, Consumer.id == Debt.consumer_id)
    )
    if f.number:
        query = query.where(
            exists().where(
                ContactAttempt.call_id == Call.id,
                ContactAttempt.number.endswith(f.number, autoescape=True),
            )
        )
    if f.name:
        query = query.where(Consumer.name.icontains(f.name, autoescape=True))
    if f.disposition:
        query = query.where(Call.disposition == f.disposition)
    if f.campaign:
        query = query.where(Call.campaign == f.campaign)
    if f.transport:
        query = query.where(Call.transport == f.transport)
    if f.flagged:
        query = query.where(call_flagged())
    if f.date_from:
        query = query.where(Call.started_at >= midnight_utc(f.date_from))
    if f.date_to:
        query = query.where(Call.started_at < midnight_utc(f.date_to + dt.timedelta(days=1)))
    if f.before:
        at, call_id = f.before
        query = query.where(Call.started_at <= at, or_(Call.started_at < at, Call.id < call_id))
    return query.order_by(Call.started_at.desc(), Call.id.desc()).limit(limit)


def legacy_find_calls(
    engine: Engine, f: CallFilter, limit: int = PAGE_SIZE
) -> tuple[list[CallRow], str | None]:
    """``find_calls`` before 0004: one query, ``legacy_call_query``."""
    with Session(engine) as session:
        rows = [
            CallRow(
                id=r.id,
                started_at=r.started_at,
                transport=r.transport,
                direction=r.direction,
                disposition=r.disposition,
                duration_s=r.duration_s,
                cost_usd=r.cost_usd,
                consumer=r.name,
                number=r.number,
                flagged=bool(r.flagged),
                debt_id=r.debt_id,
            )
            for r in session.execute(legacy_call_query(f, limit + 1))
        ]
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor(rows[-1].started_at, rows[-1].id) if more and rows else None
    return rows, cursor


@contextmanager
def before_0004(engine: Engine) -> Iterator[None]:
    """0003's indexes and query for the duration; the current ones again afterwards."""
    present = {ix["name"] for ix in inspect(engine).get_indexes("calls")} | {
        ix["name"] for ix in inspect(engine).get_indexes("call_events")
    }
    dropped = [name for name in NEW_INDEXES if name in present]
    with engine.begin() as connection:
        for name in dropped:
            connection.execute(text(f"DROP INDEX {name}"))
        connection.execute(text(OLD_STARTED_AT))
    current = pages.find_calls
    pages.find_calls = legacy_find_calls  # what the page calls, looked up at each request
    try:
        yield
    finally:
        pages.find_calls = current
        indexes = {
            str(ix.name): ix for ix in (*table_of(Call).indexes, *table_of(CallEvent).indexes)
        }
        with engine.begin() as connection:
            connection.execute(text("DROP INDEX ix_calls_started_at"))
            for name in dropped:
                connection.execute(CreateIndex(indexes[name]))
