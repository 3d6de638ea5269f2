"""The seeded calls of ``bench calls``: a console's worth of history, written in bulk.

Consumers, debts, numbers, campaigns and calls over ``DAYS`` days, with the dispositions,
compliance flags and details in the shares a busy collections line has; COPY through
psycopg on PostgreSQL, ``executemany`` on SQLite. Every row is marked (``SCENARIO``,
``REF_PREFIX``) so the bench's rows are never mistaken for real ones.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    Engine,
    Table,
    func,
    insert,
    select,
    text,
)

from agent.ledger.records import FLAG_KINDS
from agent.store.tables import (
    Call,
    CallEvent,
    Consumer,
    ContactAttempt,
    CostLine,
    Debt,
    Phone,
    Turn,
)

logger = logging.getLogger(__name__)

#: What marks the benchmark's own rows, so a SQLite file can be cleaned of them.
SCENARIO = "bench-calls"
REF_PREFIX = "bench-"
SEED_CHUNK = 10_000


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


def table_of(model: Any) -> Table:
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
    people, counts = _seed_people(engine, rng, max(10, calls // 5))
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
                _write(connection, table_of(model), rows)
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


def _seed_people(
    engine: Engine, rng: random.Random, count: int
) -> tuple[list[_Person], dict[str, int]]:
    """``count`` consumers with their numbers and debts, written; the rows counted."""
    tables = {m.__tablename__: table_of(m) for m in (Consumer, Phone, Debt)}
    with engine.begin() as connection:
        ids = {name: _next_id(connection, table) for name, table in tables.items()}
    people: list[_Person] = []
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in tables}
    used_numbers: set[str] = set()
    for _ in range(count):
        state, city, zone, area = rng.choice(PLACES)
        consumer_id = ids["consumers"]
        rows["consumers"].append(
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
            number = _new_number(rng, area, used_numbers)
            rows["phones"].append(
                {
                    "id": ids["phones"],
                    "consumer_id": consumer_id,
                    "number": number,
                    "kind": kind,
                    "consent_source": "creditor_provided",
                    "wrong_number": False,
                }
            )
            own_phones.append((ids["phones"], number))
            ids["phones"] += 1
        own_debts = []
        for _ in range(1 + (rng.random() < 0.2)):
            rows["debts"].append(_debt_row(rng, ids["debts"], consumer_id))
            own_debts.append(ids["debts"])
            ids["debts"] += 1
        people.append(_Person(consumer_id, tuple(own_debts), tuple(own_phones)))
        ids["consumers"] += 1
    with engine.begin() as connection:
        for name, table in tables.items():
            _write(connection, table, rows[name])
    counts = {name: len(rows[name]) for name in tables}
    logger.info("seeded %(consumers)d consumers, %(phones)d phones, %(debts)d debts", counts)
    return people, counts


def _new_number(rng: random.Random, area: str, used: set[str]) -> str:
    """A number not yet given out: mostly in the consumer's area code."""
    while True:
        number = f"+1{area if rng.random() < 0.7 else rng.randrange(201, 990)}"
        number += f"{rng.randrange(10**7):07d}"
        if number not in used:
            used.add(number)
            return number


def _debt_row(rng: random.Random, debt_id: int, consumer_id: int) -> dict[str, Any]:
    return {
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


def _calls_chunk(
    rng: random.Random,
    n: int,
    now: dt.datetime,
    people: Sequence[_Person],
    campaigns: Sequence[tuple[str, dt.datetime, dt.datetime]],
    dispositions: Sequence[str],
    weights: Sequence[float],
) -> dict[str, list[dict[str, Any]]]:
    """``n`` calls at random over the window, each with its contact attempt (outbound),
    its events and, for a share of them, its turns and cost lines: rows by table."""
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
        call, duration = _call_row(
            rng, started.replace(microsecond=0), disposition, people, campaigns, out
        )
        _events(out, rng, call, duration)
        if rng.random() < DETAILED_SHARE:
            _detail(out, rng, call["id"], call["started_at"], duration)
    return out


#: The party a disposition implies; any other is the right party.
_PARTIES = {
    "voicemail_lcm_left": "voicemail",
    "wrong_number": "wrong_number",
    "hung_up_before_verify": "unverified",
    "attorney": "attorney",
}
_SHORT = ("voicemail_lcm_left", "hung_up_before_verify", "wrong_number")


def _call_row(
    rng: random.Random,
    started: dt.datetime,
    disposition: str,
    people: Sequence[_Person],
    campaigns: Sequence[tuple[str, dt.datetime, dt.datetime]],
    out: dict[str, list[dict[str, Any]]],
) -> tuple[dict[str, Any], float]:
    """One call's row (added to ``out``, with its contact attempt when it was dialled) and
    its duration unrounded."""
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
    short = disposition in _SHORT
    duration = rng.uniform(15, 50) if short else rng.uniform(60, 420)
    call = {
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
        "party": _PARTIES.get(disposition, "right_party"),
        "disposition": disposition,
        "verified_at": None if short else started + dt.timedelta(seconds=20),
        "number": number,
        "campaign": campaign,
    }
    out["calls"].append(call)
    if outbound and debt is not None:
        out["contact_attempts"].append(
            {
                "debt_id": debt,
                "consumer_id": person.consumer_id,
                "phone_id": phone_id,
                "number": number,
                "at": started,
                "outcome": "voicemail" if disposition == "voicemail_lcm_left" else "answered",
                "counts": True,
                "call_id": call_id,
                "decided_by": "bench",
            }
        )
    return call, duration


def _events(
    out: dict[str, list[dict[str, Any]]],
    rng: random.Random,
    call: dict[str, Any],
    duration: float,
) -> None:
    """The call's events: disclosures, verification, a callback asked, a flag now and then."""
    started, disposition = call["started_at"], call["disposition"]
    kinds: list[tuple[float, str, dict[str, Any]]] = [
        (1, "ai_disclosure", {}),
        (2, "recording_notice", {}),
    ]
    if disposition not in _SHORT:
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
                "call_id": call["id"],
                "at": started + dt.timedelta(seconds=offset),
                "kind": kind,
                "detail": detail,
            }
        )


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
