"""``bench calls``: the console's call list at 100,000 calls, end to end through HTTP.

The benchmark seeds its own data and never mixes with real data. On PostgreSQL
it works in a schema of its own (``bench_calls``, chosen through the
connection's ``search_path``), migrated with ``agent.store.database.upgrade`` and
dropped at the end (``--keep`` keeps it; ``--reuse`` measures what a kept run
left instead of refusing). On SQLite it works in the file the URL names; a file
that already holds calls is refused unless ``--reuse``. Seeding is bulk: COPY
through psycopg on PostgreSQL, ``executemany`` on SQLite.

Each case is a ``GET /console?...`` from an operator logged in through the
login form, to the real console pages (``setup_auth`` + ``add_console_pages``)
served on a loopback port, timed from sending the request to the last byte of
the page, ``repetitions`` times after a warm-up. Every case is measured twice in
the same run: *before*, with migration 0003's indexes and the number read
through the call's contact attempt (the list as it was), and *after*, the
current schema and query.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import random
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
from aiohttp import web
from sqlalchemy import (
    Engine,
    Select,
    Table,
    delete,
    exists,
    func,
    insert,
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
from agent.console.auth import setup_auth
from agent.console.pages import (
    PAGE_SIZE,
    CallFilter,
    CallRow,
    _flagged,
    _midnight,
    add_console_pages,
    call_query,
    debts_query,
    look_up,
    numbers_query,
)
from agent.console.users import Users
from agent.ledger.quantiles import percentile
from agent.ledger.records import FLAG_KINDS
from agent.store.database import check_database, create_engine_for, normalise_url, upgrade
from agent.store.tables import (
    AuditEntry,
    Call,
    CallEvent,
    Consumer,
    ContactAttempt,
    CostLine,
    Debt,
    Phone,
    Turn,
    User,
    UserSession,
)

logger = logging.getLogger(__name__)

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_SCHEMA = "bench_calls"
DEFAULT_OUTPUT = "docs/benchmarks/calls.md"
#: The list must answer within this at 100,000 calls (issue 6).
TARGET_MS = 200.0
#: What marks the benchmark's own rows, so a SQLite file can be cleaned of them.
SCENARIO = "bench-calls"
REF_PREFIX = "bench-"
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
SEED_CHUNK = 10_000
WARMUP = 3


class BenchRefused(Exception):
    """The benchmark will not run here (a database with calls, an odd schema name...)."""


@dataclass(frozen=True)
class Case:
    """One call-list request: a label and its query string."""

    name: str
    query: Mapping[str, str]


@dataclass
class CaseResult:
    case: Case
    #: Calls on the page, after and before (they differ where the number is an inbound
    #: caller's: before 0004 it was not stored).
    rows: int = 0
    rows_before: int = 0
    before_ms: list[float] = field(default_factory=list)
    after_ms: list[float] = field(default_factory=list)


@dataclass
class BenchResult:
    calls: int
    backend: str
    server_version: str
    repetitions: int
    seeded: bool
    seed_s: float
    counts: dict[str, int]
    results: list[CaseResult]
    #: EXPLAIN output per (phase, case name), when asked for.
    plans: dict[tuple[str, str], str] = field(default_factory=dict)
    #: The machine's 1-minute load average when the timing started and when it ended.
    load: tuple[float, float] = (0.0, 0.0)


# -- the database it works in ------------------------------------------------------


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


# -- seeding ---------------------------------------------------------------------

FIRST_NAMES = (
    "James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara "
    "Richard Susan Joseph Jessica Thomas Sarah Charles Karen Christopher Lisa Daniel Nancy "
    "Matthew Betty Anthony Sandra Mark Margaret Donald Ashley Steven Kimberly Andrew Emily "
    "Paul Donna Joshua Michelle Kenneth Carol Kevin Amanda Brian Melissa George Deborah "
    "Timothy Stephanie Ronald Rebecca Jason Sharon Edward Laura Jeffrey Cynthia Ryan Dorothy "
    "Jacob Amy Gary Kathleen Nicholas Angela Eric Shirley Jonathan Brenda Stephen Emma Larry "
    "Anna Justin Pamela Scott Nicole Brandon Samantha Benjamin Katherine Samuel Christine "
    "Gregory Helen Alexander Debra Patrick Rachel Frank Carolyn Raymond Janet Jack Maria "
    "Dennis Catherine Jerry Heather Tyler Diane Aaron Olivia Jose Julie Adam Joyce Nathan "
    "Victoria Henry Ruth Zachary Virginia Douglas Lauren Peter Kelly Kyle Christina Noah "
    "Joan Ethan Evelyn Jeremy Judith Walter Andrea Christian Hannah Keith Megan Roger Cheryl"
).split()
LAST_NAMES = (
    "Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez "
    "Lopez Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson "
    "White Harris Sanchez Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott "
    "Torres Nguyen Hill Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell Carter "
    "Roberts Gomez Phillips Evans Turner Diaz Parker Cruz Edwards Collins Reyes Stewart "
    "Morris Morales Murphy Cook Rogers Gutierrez Ortiz Morgan Cooper Peterson Bailey Reed "
    "Kelly Howard Ramos Kim Cox Ward Richardson Watson Brooks Chavez Wood James Bennett Gray "
    "Mendoza Ruiz Hughes Price Alvarez Castillo Sanders Patel Myers Long Ross Foster Jimenez "
    "Powell Jenkins Perry Russell Sullivan Bell Coleman Butler Henderson Barnes Gonzales "
    "Fisher Vasquez Simmons Romero Jordan Patterson Alexander Hamilton Graham Reynolds "
    "Griffin Wallace Moreno West Cole Hayes Bryant Herrera Gibson Ellis Tran Medina Aguilar "
    "Stevens Murray Ford Castro Marshall Owens Harrison Fernandez McDonald Woods Washington "
    "Kennedy Wells Vargas Henry Chen Freeman Webb Tucker Guzman Burns Crawford Olson Simpson"
).split()
PLACES = (
    ("IL", "Springfield", "America/Chicago", "217"),
    ("TX", "Austin", "America/Chicago", "512"),
    ("CA", "Fresno", "America/Los_Angeles", "559"),
    ("NY", "Albany", "America/New_York", "518"),
    ("FL", "Tampa", "America/New_York", "813"),
    ("MA", "Worcester", "America/New_York", "508"),
    ("AZ", "Phoenix", "America/Phoenix", "602"),
    ("WA", "Spokane", "America/Los_Angeles", "509"),
    ("GA", "Macon", "America/New_York", "478"),
    ("CO", "Denver", "America/Denver", "303"),
)
#: Dispositions with their rough share of calls (voicemail and no commitment dominate).
DISPOSITION_WEIGHTS = {
    "voicemail_lcm_left": 30,
    "no_commitment": 20,
    "hung_up_before_verify": 12,
    "refused": 8,
    "promise_to_pay": 8,
    "callback_requested": 5,
    "payment_plan": 4,
    "wrong_number": 4,
    "hardship": 2.5,
    "dispute": 1.5,
    "escalated_to_human": 1,
    "attorney": 0.5,
    "bankruptcy": 0.3,
    "deceased": 0.2,
}
#: The share of calls with a compliance flag event.
FLAGGED_SHARE = 0.015
#: The share of calls whose turns and cost lines are seeded (the rest have none).
DETAILED_SHARE = 0.1
DAYS = 90
CAMPAIGNS = 12


@dataclass(frozen=True)
class _Person:
    consumer_id: int
    debt_ids: tuple[int, ...]
    phones: tuple[tuple[int, str], ...]


def _write(connection: Any, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (all with the same keys): COPY on PostgreSQL, executemany elsewhere."""
    if not rows:
        return
    if connection.dialect.name != "postgresql":
        connection.execute(insert(table), list(rows))
        return
    columns = list(rows[0])
    raw = connection.connection.dbapi_connection
    with raw.cursor() as cursor:
        with cursor.copy(f"COPY {table.name} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(
                    [json.dumps(v) if isinstance(v, dict | list) else v for v in row.values()]
                )


def _table(model: Any) -> Table:
    return cast(Table, model.__table__)


def _next_id(connection: Any, table: Table) -> int:
    return int(connection.scalar(select(func.coalesce(func.max(table.c.id), 0))) or 0) + 1


def _campaign_names(now: dt.datetime) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """Campaigns over the window, each running three weeks, starting a week apart."""
    start = now - dt.timedelta(days=DAYS)
    names = []
    for i in range(CAMPAIGNS):
        begins = start + dt.timedelta(days=7 * i)
        kind = ("early-stage", "late-stage", "settlement", "reactivation")[i % 4]
        names.append((f"{begins:%Y-%m}-{kind}-{i + 1:02d}", begins, begins + dt.timedelta(days=21)))
    return names


def seed(engine: Engine, calls: int, now: dt.datetime, rng: random.Random) -> dict[str, int]:
    """Insert ``calls`` calls over the ``DAYS`` days before ``now``, with their consumers."""
    tables = {m.__tablename__: _table(m) for m in (Consumer, Phone, Debt, Call)}
    counts: dict[str, int] = {}
    with engine.begin() as connection:
        consumer_id = _next_id(connection, tables["consumers"])
        phone_id = _next_id(connection, tables["phones"])
        debt_id = _next_id(connection, tables["debts"])
    people: list[_Person] = []
    consumers, phones, debts = [], [], []
    used_numbers: set[str] = set()
    for _ in range(max(10, calls // 5)):
        state, city, zone, area = rng.choice(PLACES)
        consumers.append(
            {
                "id": consumer_id,
                "external_ref": f"{REF_PREFIX}c{consumer_id}",
                "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
                "date_of_birth": dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(18_000)),
                "address": f"{rng.randrange(1, 9999)} Main St, {city}",
                "state": state,
                "city": city,
                "time_zone": zone,
                "inconvenient": [],
                "workplace_forbids_calls": False,
            }
        )
        own_phones = []
        for kind in ("personal", "work")[: 1 + (rng.random() < 0.3)]:
            while True:
                number = f"+1{area if rng.random() < 0.7 else rng.randrange(201, 990)}"
                number += f"{rng.randrange(10**7):07d}"
                if number not in used_numbers:
                    used_numbers.add(number)
                    break
            phones.append(
                {
                    "id": phone_id,
                    "consumer_id": consumer_id,
                    "number": number,
                    "kind": kind,
                    "consent_source": "creditor_provided",
                    "wrong_number": False,
                }
            )
            own_phones.append((phone_id, number))
            phone_id += 1
        own_debts = []
        for _ in range(1 + (rng.random() < 0.2)):
            debts.append(
                {
                    "id": debt_id,
                    "consumer_id": consumer_id,
                    "account_ref": f"{REF_PREFIX}a{debt_id}",
                    "account_last4": f"{rng.randrange(10_000):04d}",
                    "creditor": rng.choice(("First Example Bank", "Acme Card", "Metro Medical")),
                    "balance_cents": rng.randrange(5_000, 2_000_000),
                    "statute_status": "within" if rng.random() < 0.9 else "time_barred",
                    "tenant_type": "third_party_collector",
                    "max_discount_pct": 20.0,
                    "min_installment_cents": 2_500,
                    "max_term_months": 12,
                    "disputed": False,
                    "cease_requested": False,
                    "bankrupt": False,
                    "deceased": False,
                }
            )
            own_debts.append(debt_id)
            debt_id += 1
        people.append(_Person(consumer_id, tuple(own_debts), tuple(own_phones)))
        consumer_id += 1
    with engine.begin() as connection:
        _write(connection, tables["consumers"], consumers)
        _write(connection, tables["phones"], phones)
        _write(connection, tables["debts"], debts)
    counts.update(consumers=len(consumers), phones=len(phones), debts=len(debts))
    logger.info("seeded %d consumers, %d phones, %d debts", len(consumers), len(phones), len(debts))
    campaigns = _campaign_names(now)
    dispositions, weights = list(DISPOSITION_WEIGHTS), list(DISPOSITION_WEIGHTS.values())
    for name in ("calls", "contact_attempts", "call_events", "turns", "cost_lines"):
        counts.setdefault(name, 0)
    done = 0
    while done < calls:
        chunk = _calls_chunk(
            rng, min(SEED_CHUNK, calls - done), now, people, campaigns, dispositions, weights
        )
        with engine.begin() as connection:
            for model in (Call, ContactAttempt, CallEvent, Turn, CostLine):
                rows = chunk[model.__tablename__]
                _write(connection, _table(model), rows)
                counts[model.__tablename__] += len(rows)
        done += len(chunk["calls"])
        logger.info("seeded %d/%d calls", done, calls)
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            for name in ("consumers", "phones", "debts"):
                connection.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                        f"(SELECT max(id) FROM {name}))"
                    )
                )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            # What autovacuum would have done by the time a table holds this much.
            connection.execute(text("VACUUM ANALYZE"))
    return counts


def _calls_chunk(
    rng: random.Random,
    n: int,
    now: dt.datetime,
    people: Sequence[_Person],
    campaigns: Sequence[tuple[str, dt.datetime, dt.datetime]],
    dispositions: Sequence[str],
    weights: Sequence[float],
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {
        "calls": [],
        "contact_attempts": [],
        "call_events": [],
        "turns": [],
        "cost_lines": [],
    }
    window = DAYS * 86_400
    for disposition in rng.choices(dispositions, weights, k=n):
        started = now - dt.timedelta(seconds=rng.uniform(0, window))
        started = started.replace(microsecond=0)
        call_id = f"{rng.getrandbits(128):032x}"
        person = rng.choice(people)
        outbound = rng.random() < 0.85
        debt: int | None = rng.choice(person.debt_ids)
        phone_id, number = rng.choice(person.phones)
        campaign = None
        if outbound:
            running = [name for name, a, b in campaigns if a <= started < b]
            campaign = rng.choice(running) if running else None
        elif rng.random() < 0.2:
            # A caller the agent could not match to an account.
            debt, number = None, f"+1{rng.randrange(201, 990)}{rng.randrange(10**7):07d}"
        voicemail = disposition == "voicemail_lcm_left"
        short = voicemail or disposition in ("hung_up_before_verify", "wrong_number")
        duration = rng.uniform(15, 50) if short else rng.uniform(60, 420)
        party = {
            "voicemail_lcm_left": "voicemail",
            "wrong_number": "wrong_number",
            "hung_up_before_verify": "unverified",
            "attorney": "attorney",
        }.get(disposition, "right_party")
        out["calls"].append(
            {
                "id": call_id,
                "transport": "sip" if rng.random() < 0.9 else "webrtc",
                "direction": "outbound" if outbound else "inbound",
                "scenario": SCENARIO,
                "status": "ended",
                "started_at": started,
                "ended_at": started + dt.timedelta(seconds=duration),
                "duration_s": round(duration, 1),
                "end_reason": "agent_hangup" if rng.random() < 0.7 else "caller_hangup",
                "prompt_version": "collections-v3",
                "price_book_version": "2026-11",
                "cost_usd": round(duration / 60 * 0.021, 4),
                "cost_per_minute_usd": 0.021,
                "debt_id": debt,
                "party": party,
                "disposition": disposition,
                "verified_at": None if short else started + dt.timedelta(seconds=20),
                "number": number,
                "campaign": campaign,
            }
        )
        if outbound and debt is not None:
            out["contact_attempts"].append(
                {
                    "debt_id": debt,
                    "consumer_id": person.consumer_id,
                    "phone_id": phone_id,
                    "number": number,
                    "at": started,
                    "outcome": "voicemail" if voicemail else "answered",
                    "counts": True,
                    "call_id": call_id,
                    "decided_by": "bench",
                }
            )
        kinds: list[tuple[float, str, dict[str, Any]]] = [
            (1, "ai_disclosure", {}),
            (2, "recording_notice", {}),
        ]
        if not short:
            kinds += [(20, "verification", {"method": "date_of_birth"}), (25, "mini_miranda", {})]
        if disposition == "callback_requested":
            day = (started + dt.timedelta(days=rng.randrange(1, 8))).date().isoformat()
            kinds.append((duration - 10, "callback_requested", {"date": day}))
        if rng.random() < FLAGGED_SHARE:
            kinds.append((duration / 2, rng.choice(FLAG_KINDS), {"text": "(redacted)"}))
        kinds.append((duration, "disposition", {"disposition": disposition}))
        for offset, kind, detail in kinds:
            out["call_events"].append(
                {
                    "call_id": call_id,
                    "at": started + dt.timedelta(seconds=offset),
                    "kind": kind,
                    "detail": detail,
                }
            )
        if rng.random() < DETAILED_SHARE:
            _detail(out, rng, call_id, started, duration)
    return out


def _detail(
    out: dict[str, list[dict[str, Any]]],
    rng: random.Random,
    call_id: str,
    started: dt.datetime,
    duration: float,
) -> None:
    """Turns with latency parts and the cost lines, as a priced call has."""
    for number in range(max(1, int(duration // 20))):
        at = started + dt.timedelta(seconds=20 * number)
        parts = {
            "endpointing_ms": None if number == 0 else rng.uniform(300, 700),
            "stt_ms": None if number == 0 else rng.uniform(60, 200),
            "llm_ttft_ms": rng.uniform(120, 400),
            "tts_ttfb_ms": rng.uniform(60, 150),
            "transport_out_ms": rng.uniform(10, 40),
        }
        response = sum(v for k, v in parts.items() if k != "endpointing_ms" and v is not None)
        out["turns"].append(
            {
                "call_id": call_id,
                "number": number,
                "started_at": None if number == 0 else at,
                "ended_at": at + dt.timedelta(seconds=8),
                "user_text": None if number == 0 else "I can pay some of it on Friday.",
                "agent_text": "Thank you. Can you confirm your date of birth?",
                "interrupted": rng.random() < 0.05,
                **parts,
                "response_ms": response,
                "voice_to_voice_ms": None
                if number == 0
                else response + (parts["endpointing_ms"] or 0.0),
            }
        )
    minutes = duration / 60
    for component, unit, price in (
        ("telephony", "minute", 0.0085),
        ("stt", "call_minute", 0.004),
        ("llm", "call_minute", 0.006),
        ("tts", "call_minute", 0.0025),
        ("tts_fallback", "1k_characters", 0.03),
    ):
        quantity = 0.0 if component == "tts_fallback" else minutes
        out["cost_lines"].append(
            {
                "call_id": call_id,
                "component": component,
                "quantity": quantity,
                "unit": unit,
                "unit_price_usd": price,
                "amount_usd": quantity * price,
                "price_book_version": "2026-11",
            }
        )


# -- the cases -------------------------------------------------------------------


def cases(engine: Engine) -> list[Case]:
    """The requests timed, their values taken from the data (so ``--reuse`` works too)."""
    with engine.connect() as connection:
        total = int(connection.scalar(select(func.count()).select_from(Call)) or 0)
        if total == 0:
            raise BenchRefused("no calls to measure")
        newest, oldest = connection.execute(
            select(func.max(Call.started_at), func.min(Call.started_at))
        ).one()

        def nth(column: Any, n: int, *where: Any) -> Any:
            return connection.scalar(
                select(column).where(*where).order_by(Call.id).offset(n).limit(1)
            )

        number = nth(Call.number, total // 2, Call.number.is_not(None)) or "+10000000000"
        name = (
            connection.scalar(
                select(Consumer.name)
                .join(Debt, Debt.consumer_id == Consumer.id)
                .join(Call, Call.debt_id == Debt.id)
                .order_by(Call.id)
                .offset(total // 3)
                .limit(1)
            )
            or "smith"
        )
        campaign = nth(Call.campaign, total // 4, Call.campaign.is_not(None)) or "none"
        deep = connection.execute(
            select(Call.started_at, Call.id)
            .order_by(Call.started_at.desc(), Call.id.desc())
            .offset(int(total * 0.8))
            .limit(1)
        ).one()
    # SQLite hands back naive datetimes from aggregates; they are UTC.
    newest, oldest = (v if v.tzinfo else v.replace(tzinfo=dt.UTC) for v in (newest, oldest))
    middle = (oldest + (newest - oldest) / 2).date()
    week = {"from": middle.isoformat(), "to": (middle + dt.timedelta(days=6)).isoformat()}
    cursor = pages._encode_cursor(deep.started_at, deep.id)
    return [
        Case("newest page", {}),
        Case("number: last 4 digits", {"number": number[-4:]}),
        Case("number: all digits", {"number": number.lstrip("+")}),
        Case("consumer name", {"name": name.lower()}),
        Case("disposition: common", {"disposition": "no_commitment"}),
        Case("disposition: rare", {"disposition": "dispute"}),
        Case("campaign", {"campaign": campaign}),
        Case("compliance flag", {"flagged": "1"}),
        Case("date range: 7 days", week),
        Case("deep page (cursor at 80%)", {"before": cursor}),
        Case("rare disposition, deep page", {"disposition": "dispute", "before": cursor}),
        Case("flag and 7 days", {"flagged": "1", **week}),
    ]


# -- before: the list as it was -----------------------------------------------------


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
            _flagged().label("flagged"),
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
        query = query.where(_flagged())
    if f.date_from:
        query = query.where(Call.started_at >= _midnight(f.date_from))
    if f.date_to:
        query = query.where(Call.started_at < _midnight(f.date_to + dt.timedelta(days=1)))
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
    cursor = pages._encode_cursor(rows[-1].started_at, rows[-1].id) if more and rows else None
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
        indexes = {str(ix.name): ix for ix in (*_table(Call).indexes, *_table(CallEvent).indexes)}
        with engine.begin() as connection:
            connection.execute(text("DROP INDEX ix_calls_started_at"))
            for name in dropped:
                connection.execute(CreateIndex(indexes[name]))


# -- timing ------------------------------------------------------------------------


async def _log_in(http: aiohttp.ClientSession, username: str, password: str) -> None:
    async with http.get("/login") as form:
        found = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    if found is None:
        raise RuntimeError("the login form has no CSRF token")
    data = {"username": username, "password": password, "csrf_token": found.group(1)}
    async with http.post("/login", data=data, allow_redirects=False) as done:
        if done.status not in (302, 303):
            raise RuntimeError(f"login failed: {done.status} {await done.text()}")


async def _time_cases(
    engine: Engine,
    todo: Sequence[Case],
    repetitions: int,
    username: str,
    password: str,
) -> list[tuple[int, list[float]]]:
    """(calls on the page, milliseconds per request) for each case, through HTTP."""
    app = web.Application()
    setup_auth(app, engine, secure_cookies=False)
    add_console_pages(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
    out = []
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", cookie_jar=jar) as http:
            await _log_in(http, username, password)
            for case in todo:
                times, body = [], ""
                for i in range(WARMUP + repetitions):
                    t0 = time.perf_counter()
                    async with http.get("/console", params=dict(case.query)) as response:
                        body = await response.text()
                        if response.status != 200:
                            raise RuntimeError(f"{case.name}: {response.status}")
                    if i >= WARMUP:
                        times.append((time.perf_counter() - t0) * 1000)
                out.append((body.count('<tr data-call="'), times))
                logger.info(
                    "  %s: p50 %.1f ms", case.name, percentile(times, 0.5) if times else 0.0
                )
    finally:
        await runner.cleanup()
    return out


def _plan(connection: Any, statement: Select[Any]) -> str:
    compiled = statement.compile(
        dialect=connection.dialect, compile_kwargs={"render_postcompile": True}
    )
    if connection.dialect.name == "postgresql":
        sql = f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {compiled}"
        params: Any = compiled.params
    else:
        sql = f"EXPLAIN QUERY PLAN {compiled}"
        params = tuple(
            value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(" ")
            if isinstance(value, dt.datetime)
            else value
            for value in (compiled.params[name] for name in compiled.positiontup or ())
        )
    rows = connection.exec_driver_sql(sql, params).all()
    return "\n".join(" | ".join(str(c) for c in row) for row in rows)


def explain(engine: Engine, f: CallFilter, legacy: bool = False) -> str:
    """The plans of the list's queries for ``f`` (PostgreSQL: EXPLAIN ANALYZE, BUFFERS)."""
    with engine.connect() as connection:
        if legacy:
            return _plan(connection, legacy_call_query(f, PAGE_SIZE + 1))
        plans = []
        if f.number:
            plans.append(_plan(connection, numbers_query(f.number)))
        if f.name:
            plans.append(_plan(connection, debts_query(f.name)))
        found = look_up(connection, f)
        if found is not None:
            plans.append(_plan(connection, call_query(f, PAGE_SIZE + 1, found)))
    return "\n\n".join(plans)


def _server_version(engine: Engine) -> str:
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            version = str(connection.scalar(text("SHOW server_version")))
        return f"PostgreSQL {version.split()[0]}"
    return f"SQLite {sqlite3.sqlite_version}"


def run_calls_bench(
    calls: int = 100_000,
    database_url: str = DEFAULT_DATABASE_URL,
    repetitions: int = 20,
    *,
    schema: str = DEFAULT_SCHEMA,
    reuse: bool = False,
    keep: bool = False,
    with_plans: bool = False,
    seed_value: int = 6,
) -> BenchResult:
    """Seed (unless reusing), then time every case before and after 0004's indexes."""
    with bench_database(database_url, schema, reuse, keep) as (url, found):
        upgrade(url)
        engine = create_engine_for(url)
        try:
            t0 = time.perf_counter()
            counts: dict[str, int] = {}
            if not found:
                logger.info("seeding %d calls", calls)
                now = dt.datetime.now(dt.UTC).replace(microsecond=0)
                counts = seed(engine, calls, now, random.Random(seed_value))
            seed_s = time.perf_counter() - t0
            with engine.connect() as connection:
                for model in (Call, CallEvent, ContactAttempt, Consumer, Debt, Turn, CostLine):
                    counts[model.__tablename__] = int(
                        connection.scalar(select(func.count()).select_from(model)) or 0
                    )
            todo = cases(engine)
            results = [CaseResult(case) for case in todo]
            username, password = f"{USER_PREFIX}{secrets.token_hex(4)}", secrets.token_urlsafe(18)
            Users(engine).add(username, password, "operator")
            plans: dict[tuple[str, str], str] = {}
            load_start = os.getloadavg()[0]
            for phase in ("before", "after"):
                logger.info("timing %d cases, %s", len(todo), phase)
                with before_0004(engine) if phase == "before" else _nothing():
                    timed = asyncio.run(_time_cases(engine, todo, repetitions, username, password))
                    if with_plans:
                        for case in todo:
                            f = CallFilter.from_query(case.query)
                            plans[(phase, case.name)] = explain(engine, f, phase == "before")
                for result, (rows, times) in zip(results, timed, strict=True):
                    if phase == "before":
                        result.before_ms, result.rows_before = times, rows
                    else:
                        result.after_ms, result.rows = times, rows
            return BenchResult(
                calls=counts["calls"],
                backend=engine.dialect.name,
                server_version=_server_version(engine),
                repetitions=repetitions,
                seeded=not found,
                seed_s=seed_s,
                load=(load_start, os.getloadavg()[0]),
                counts=counts,
                results=results,
                plans=plans,
            )
        finally:
            engine.dispose()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# -- reporting ---------------------------------------------------------------------


def _query_text(case: Case) -> str:
    shown = {k: (v[:10] + "…" if k == "before" else v) for k, v in case.query.items()}
    return "`" + ("&".join(f"{k}={v}" for k, v in shown.items()) or "(none)") + "`"


def table(result: BenchResult) -> str:
    lines = [
        "| case | query | calls shown | before p50 | before p95 | before max "
        "| after p50 | after p95 | after max |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result.results:
        shown = str(r.rows) if r.rows == r.rows_before else f"{r.rows} (before: {r.rows_before})"
        cells = [r.case.name, _query_text(r.case), shown]
        for times in (r.before_ms, r.after_ms):
            cells += [f"{percentile(times, q):.1f}" for q in (0.5, 0.95, 1.0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(result: BenchResult) -> str:
    """One sentence: the slowest p95 after, against the target."""
    slowest = max(result.results, key=lambda r: percentile(r.after_ms, 0.95))
    p95 = percentile(slowest.after_ms, 0.95)
    worst_max = max(max(r.after_ms) for r in result.results)
    over = [r for r in result.results if percentile(r.after_ms, 0.95) > TARGET_MS]
    if not over:
        return (
            f"At {result.calls:,} calls every case answers within the {TARGET_MS:.0f} ms target: "
            f"the slowest p95 is {p95:.1f} ms ({slowest.case.name}), the slowest single "
            f"request {worst_max:.1f} ms."
        )
    names = ", ".join(r.case.name for r in over)
    return (
        f"At {result.calls:,} calls {len(over)} case(s) miss the {TARGET_MS:.0f} ms target "
        f"at p95: {names} (slowest p95 {p95:.1f} ms, {slowest.case.name})."
    )


def report(result: BenchResult, command: str) -> str:
    from tools.bench import _machine  # it imports the pipeline: not at the parser's start

    counts = result.counts
    data = ", ".join(
        f"{counts.get(name, 0):,} {label}"
        for name, label in (
            ("calls", "calls"),
            ("consumers", "consumers"),
            ("debts", "debts"),
            ("contact_attempts", "contact attempts"),
            ("call_events", "call events"),
            ("turns", "turns"),
            ("cost_lines", "cost lines"),
        )
    )
    return "\n".join(
        [
            "# The console's call list at scale",
            "",
            f"`{command}` on {_machine()}, {result.server_version}, "
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d}.",
            "",
            f"Data: {data}, spread over {DAYS} days (85% outbound with a contact attempt and "
            f"a campaign, {FLAGGED_SHARE:.1%} with a compliance flag event, turns and cost lines "
            f"for {DETAILED_SHARE:.0%} of calls)"
            + (
                ", seeded by the run"
                + (
                    " and then `VACUUM ANALYZE`d, as autovacuum would have done by then."
                    if result.backend == "postgresql"
                    else " (no `ANALYZE`: SQLite plans without statistics unless told)."
                )
                if result.seeded
                else ", left by an earlier run (--reuse)."
            ),
            "",
            f"Each case is `GET /console?...` by an operator logged in through the login form, to "
            "the real console pages served on a loopback port (aiohttp client and server in one "
            "process): the time from sending the request to the last byte of the page, "
            f"{result.repetitions} requests after {WARMUP} warm-up ones. *before*: migration "
            "0003's indexes (`ix_calls_started_at` on `started_at` alone, nothing on "
            "disposition, campaign, number or event kind) and the list's query as it was: the "
            "number read through the call's contact attempt (so an inbound caller is not found: "
            "*calls shown (before: n)*), the number and the name checked in the one query. "
            "*after*: the current schema and `agent.console.pages.find_calls`. Both in the same "
            "run, on the same data. "
            f"Milliseconds. The machine's load average (1 min) was {result.load[0]:.1f} when "
            f"the timing started and {result.load[1]:.1f} when it ended.",
            "",
            table(result),
            "",
            verdict(result),
            "",
            "Which index or query each case uses, and what still grows with the table: "
            'docs/console.md, "The call list".',
            "",
        ]
    )


def write_report(path: str, text_: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text_)
    logger.info("wrote %s", target)


# -- the command -------------------------------------------------------------------


def add_calls_parser(benches: Any) -> None:
    """``python -m agent bench calls``."""
    parser = benches.add_parser(
        "calls",
        help="the console's call list, p50/p95/max per filter through HTTP, on seeded calls "
        "(PostgreSQL schema bench_calls, dropped afterwards), before and after 0004's indexes",
    )
    parser.add_argument("--calls", type=int, default=100_000, help="calls to seed (>= 100)")
    parser.add_argument(
        "--database-url",
        help="where (default: $DATABASE_URL, else the local PostgreSQL test database); "
        "PostgreSQL: the run works in its own schema",
    )
    parser.add_argument(
        "--schema", default=DEFAULT_SCHEMA, help="PostgreSQL schema of the run (bench...)"
    )
    parser.add_argument(
        "--repetitions", type=int, default=20, help="timed requests per case (>= 1)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="measure the calls already there (a --keep run's)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the seeded data afterwards")
    parser.add_argument("--explain", action="store_true", help="also print each case's query plan")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="where to write the results")


def run_calls_command(args: argparse.Namespace) -> tuple[int, str]:
    """The command line's side: (exit status, what to print: the table, or why not)."""
    if args.calls < 100 or args.repetitions < 1:
        return 2, "--calls must be at least 100 and --repetitions at least 1"
    url = args.database_url or os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    check_database(url)  # a dead or unparsable URL: one line, exit 2 (agent.__main__)
    try:
        result = run_calls_bench(
            args.calls,
            url,
            args.repetitions,
            schema=args.schema,
            reuse=args.reuse,
            keep=args.keep,
            with_plans=args.explain,
        )
    except BenchRefused as e:
        return 2, f"bench calls: {e}"
    command = f"python -m agent bench calls --calls {args.calls}"
    if args.repetitions != 20:
        command += f" --repetitions {args.repetitions}"
    write_report(args.output, report(result, command))
    plans = [f"-- {phase}: {name}\n{plan}\n" for (phase, name), plan in result.plans.items()]
    return 0, "\n".join([*plans, table(result), "", verdict(result), "", f"wrote {args.output}"])
