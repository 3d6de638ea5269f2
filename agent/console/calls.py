"""What the operator's pages show, read from the store: calls found, one call, the queues.

The queries and the view models behind ``agent.console.pages`` (the HTML) and
``agent.console.api`` (the JSON): the call list's filter, its keyset cursor
and the two-step look-up that keeps a number or name filter fast; one call
with its consumer, promises and contact ledger; the work queues. Nothing here
renders or knows of a request. See docs/console.md, "Operator pages".
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import Connection, Engine, Select, exists, or_, select
from sqlalchemy.orm import Session, selectinload

from agent.campaigns import Ledger, contact_ledger
from agent.console import query as q
from agent.console.query import QueryError
from agent.ledger.records import CALL_ID_LENGTH, FLAG_KINDS
from agent.store.tables import (
    Call,
    CallEvent,
    Consumer,
    Debt,
    Promise,
    PromiseStatus,
)

PAGE_SIZE = 50
#: The dispositions the policy ends calls with (agent/conversation/policy.py), offered in the
#: filter.
DISPOSITIONS = (
    "promise_to_pay",
    "payment_plan",
    "callback_requested",
    "dispute",
    "escalated_to_human",
    "refused",
    "no_commitment",
    "hardship",
    "bankruptcy",
    "deceased",
    "attorney",
    "wrong_number",
    "hung_up_before_verify",
    "verification_failed",
    "stop_calling",
    "cease_requested",
    "voicemail_lcm_left",
    "voicemail_no_message",
)
#: E.164 numbers have at most 15 digits.
MAX_NUMBER_DIGITS = 15


# -- the call list ---------------------------------------------------------------


@dataclass(frozen=True)
class CallFilter:
    """What the call list is narrowed to, read from the query string."""

    number: str = ""
    name: str = ""
    disposition: str = ""
    transport: str = ""
    flagged: bool = False
    #: Handed to a person (a transfer or a follow-up): the escalations queue.
    handed_off: bool = False
    #: Its debt is disputed and its verification not yet sent (or the call has no debt).
    dispute_pending: bool = False
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    #: Keyset cursor: the (started_at, id) of the last row of the previous page.
    before: tuple[dt.datetime, str] | None = None
    #: The campaign an outbound call was dialled for, exactly.
    campaign: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> CallFilter:
        """The filter ``query`` asks for; ``QueryError`` naming the first bad parameter."""
        number_text = q.text(query, "number", 32)
        number = re.sub(r"[^0-9]", "", number_text)
        if number_text and not 1 <= len(number) <= MAX_NUMBER_DIGITS:
            raise QueryError(f"number must hold 1 to {MAX_NUMBER_DIGITS} digits")
        disposition = q.text(query, "disposition", 64)
        if disposition and disposition not in DISPOSITIONS:
            raise QueryError(
                f"unknown disposition {q.shown(disposition)}: one of {', '.join(DISPOSITIONS)}"
            )
        start, end = q.day(query, "from"), q.day(query, "to")
        if start and end and end < start:
            raise QueryError(f"to={end} is before from={start}")
        before = q.text(query, "before", 100)
        return cls(
            number=number,
            name=q.text(query, "name", 200),
            disposition=disposition,
            transport=q.text(query, "transport", 32),
            flagged=q.flag(query, "flagged"),
            date_from=start,
            date_to=end,
            before=_cursor(before) if before else None,
            campaign=q.text(query, "campaign", 128),
        )

    def query_string(self, **changes: str) -> str:
        params = {
            "number": self.number,
            "name": self.name,
            "disposition": self.disposition,
            "campaign": self.campaign,
            "transport": self.transport,
            "flagged": "1" if self.flagged else "",
            "from": self.date_from.isoformat() if self.date_from else "",
            "to": self.date_to.isoformat() if self.date_to else "",
        }
        params.update(changes)
        return urlencode({k: v for k, v in params.items() if v})


def _cursor(value: str) -> tuple[dt.datetime, str]:
    """The ``before`` of an "Older" link: ``<started_at ISO 8601>~<call id>``."""
    wrong = QueryError("before must be the cursor of an Older link (started_at~call id)")
    at, sep, call_id = value.rpartition("~")
    if not sep or not at or not call_id or len(call_id) > CALL_ID_LENGTH:
        raise wrong
    try:
        when = dt.datetime.fromisoformat(at)
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        when = when.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise wrong from None
    return when, call_id


def encode_cursor(at: dt.datetime, call_id: str) -> str:
    return f"{at.astimezone(dt.UTC).isoformat()}~{call_id}"


@dataclass(frozen=True)
class CallRow:
    id: str
    started_at: dt.datetime
    transport: str
    direction: str
    disposition: str | None
    duration_s: float | None
    cost_usd: float | None
    consumer: str | None
    number: str | None
    flagged: bool
    debt_id: int | None = None
    campaign: str | None = None


def _number_of_call() -> Any:
    """The call's number: ``calls.number``, the caller id inbound, the number dialled outbound."""
    return Call.number


def call_flagged() -> Any:
    return exists().where(CallEvent.call_id == Call.id, CallEvent.kind.in_(FLAG_KINDS))


def _handed_off() -> Any:
    """The policy handed the call to a person, whatever its disposition (a bankruptcy, a
    death, hardship: C8); calls stored before the ``handoff`` event by their disposition."""
    return or_(
        Call.disposition == "escalated_to_human",
        exists().where(CallEvent.call_id == Call.id, CallEvent.kind == "handoff"),
    )


#: A number or name filter is first looked up (the numbers ending in the digits, the debts
#: of the consumers so named); at most this many are then matched by value. Past it the
#: filter is checked on each call walked newest first: it is common, so that ends soon.
MAX_MATCHES = 500


@dataclass(frozen=True)
class Lookups:
    """What ``look_up`` found for the filters no index answers directly; None: not looked up."""

    numbers: tuple[str, ...] | None = None
    debt_ids: tuple[int, ...] | None = None


def numbers_query(digits: str) -> Select[Any]:
    """The distinct numbers ending in ``digits`` (at most ``MAX_MATCHES`` + 1).

    A suffix cannot use a B-tree as a range, but ``ix_calls_number`` is far
    narrower than ``calls``: this is answered by scanning the index alone.
    """
    return (
        select(Call.number)
        .where(Call.number.endswith(digits, autoescape=True))
        .distinct()
        .limit(MAX_MATCHES + 1)
    )


def debts_query(name: str) -> Select[Any]:
    """The debts of the consumers whose name holds ``name`` (at most ``MAX_MATCHES`` + 1)."""
    return (
        select(Debt.id)
        .join(Consumer, Consumer.id == Debt.consumer_id)
        .where(Consumer.name.icontains(name, autoescape=True))
        .limit(MAX_MATCHES + 1)
    )


def look_up(connection: Session | Connection, f: CallFilter) -> Lookups | None:
    """The number and name filters' matches, for ``call_query``; None when nothing can match."""
    numbers = debt_ids = None
    if f.number:
        numbers = tuple(str(n) for n in connection.scalars(numbers_query(f.number)))
        if not numbers:
            return None
    if f.name:
        debt_ids = tuple(int(i) for i in connection.scalars(debts_query(f.name)))
        if not debt_ids:
            return None
    return Lookups(
        numbers if numbers is not None and len(numbers) <= MAX_MATCHES else None,
        debt_ids if debt_ids is not None and len(debt_ids) <= MAX_MATCHES else None,
    )


def call_query(f: CallFilter, limit: int = PAGE_SIZE, found: Lookups | None = None) -> Select[Any]:
    """The call list's query: ``limit`` calls matching ``f``, newest first (see find_calls).

    ``found``: what ``look_up`` found, matched by value (``ix_calls_number``,
    ``ix_calls_debt_id``); without it, or past ``MAX_MATCHES``, the number's
    suffix and the consumer's name are checked on every call walked.
    """
    found = found or Lookups()
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
            Call.campaign,
            _number_of_call().label("number"),
            Consumer.name,
            call_flagged().label("flagged"),
        )
        .outerjoin(Debt, Debt.id == Call.debt_id)
        .outerjoin(Consumer, Consumer.id == Debt.consumer_id)
    )
    if f.number and found.numbers is not None:
        query = query.where(_number_of_call().in_(found.numbers))
    elif f.number:
        query = query.where(_number_of_call().endswith(f.number, autoescape=True))
    if f.name and found.debt_ids is not None:
        query = query.where(Call.debt_id.in_(found.debt_ids))
    elif f.name:
        query = query.where(Consumer.name.icontains(f.name, autoescape=True))
    if f.disposition:
        query = query.where(Call.disposition == f.disposition)
    if f.campaign:
        query = query.where(Call.campaign == f.campaign)
    if f.transport:
        query = query.where(Call.transport == f.transport)
    if f.flagged:
        query = query.where(call_flagged())
    if f.handed_off:
        query = query.where(_handed_off())
    if f.dispute_pending:
        query = query.where(or_(Debt.id.is_(None), Debt.disputed.is_(True)))
    if f.date_from:
        query = query.where(Call.started_at >= midnight_utc(f.date_from))
    if f.date_to:
        query = query.where(Call.started_at < midnight_utc(f.date_to + dt.timedelta(days=1)))
    if f.before:
        at, call_id = f.before
        # The plain ``started_at <= at`` lets the planner range-scan ix_calls_started_at.
        query = query.where(Call.started_at <= at, or_(Call.started_at < at, Call.id < call_id))
    return query.order_by(Call.started_at.desc(), Call.id.desc()).limit(limit)


def find_calls(
    engine: Engine, f: CallFilter, limit: int = PAGE_SIZE
) -> tuple[list[CallRow], str | None]:
    """A page of calls, newest first, and the cursor of the next page (None at the end).

    A number or name filter is two queries: what matches it (``look_up``),
    then the calls of those. In one query the planner must guess how common
    the suffix or the name is: SQLite (no statistics) and PostgreSQL's generic
    plan for a prepared statement (psycopg prepares one after five runs) guess
    common, walk every call newest first and check each: seconds at 100,000.
    """
    with Session(engine) as session:
        found = look_up(session, f)
        if found is None:
            return [], None
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
                campaign=r.campaign,
            )
            for r in session.execute(call_query(f, limit + 1, found))
        ]
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor(rows[-1].started_at, rows[-1].id) if more and rows else None
    return rows, cursor


def midnight_utc(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


# -- one call --------------------------------------------------------------------


@dataclass(frozen=True)
class CallView:
    """What the call page shows, loaded in one session."""

    call: Call
    consumer: Consumer | None
    number: str | None
    promises: list[Any]
    #: The debt's contact ledger now (attempts used, next allowed call), if it has a debt.
    ledger: Ledger | None


def load_call(engine: Engine, call_id: str, at: dt.datetime) -> CallView:
    with Session(engine, expire_on_commit=False) as session:
        call = session.scalar(
            select(Call)
            .where(Call.id == call_id)
            .options(
                selectinload(Call.turns), selectinload(Call.events), selectinload(Call.cost_lines)
            )
        )
        if call is None:
            raise LookupError(call_id)
        consumer, ledger = None, None
        if call.debt_id is not None:
            debt = session.get(Debt, call.debt_id)
            consumer = debt.consumer if debt is not None else None
            if debt is not None:
                ledger = contact_ledger(session, debt.id, at)
        number = call.number
        promises = list(
            session.scalars(select(Promise).where(Promise.call_id == call_id).order_by(Promise.id))
        )
        session.expunge_all()
    return CallView(call, consumer, number, promises, ledger)


# -- queues ----------------------------------------------------------------------


@dataclass(frozen=True)
class QueueItem:
    row: CallRow
    note: str = ""


@dataclass(frozen=True)
class Queues:
    disputes: list[CallRow]
    callbacks: list[QueueItem]
    escalations: list[CallRow]
    broken: list[tuple[Promise, str, str]]


def _by_disposition(engine: Engine, disposition: str, limit: int) -> list[CallRow]:
    rows, _ = find_calls(engine, CallFilter(disposition=disposition), limit)
    return rows


def _stored_day(value: object) -> dt.date | None:
    """A date an event stored (a callback's), or None when it holds none."""
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        return None


def load_queues(engine: Engine, today: dt.date, limit: int = PAGE_SIZE) -> Queues:
    disputes, _ = find_calls(engine, CallFilter(disposition="dispute", dispute_pending=True), limit)
    escalations, _ = find_calls(engine, CallFilter(handed_off=True), limit)
    callbacks: list[QueueItem] = []
    with Session(engine) as session:
        # A callback is due on its requested date, until a later call on the same debt.
        for row in _by_disposition(engine, "callback_requested", 4 * limit):
            wanted = session.scalar(
                select(CallEvent.detail)
                .where(CallEvent.call_id == row.id, CallEvent.kind == "callback_requested")
                .order_by(CallEvent.at.desc())
                .limit(1)
            )
            day = _stored_day(wanted.get("date")) if isinstance(wanted, dict) else None
            if day is not None and day > today:
                continue
            if row.debt_id is not None and session.scalar(
                select(
                    exists().where(Call.debt_id == row.debt_id, Call.started_at > row.started_at)
                )
            ):
                continue
            note = f"asked for {day.isoformat()}" if day else "no date given"
            callbacks.append(QueueItem(row, note))
            if len(callbacks) >= limit:
                break
        broken = [
            (promise, name, ref)
            for promise, name, ref in session.execute(
                select(Promise, Consumer.name, Debt.account_ref)
                .join(Debt, Debt.id == Promise.debt_id)
                .join(Consumer, Consumer.id == Debt.consumer_id)
                .where(
                    Promise.due_date < today,
                    Promise.status.in_((PromiseStatus.OPEN.value, PromiseStatus.BROKEN.value)),
                )
                .order_by(Promise.due_date, Promise.id)
                .limit(limit)
            )
        ]
        session.expunge_all()
    return Queues(disputes, callbacks, escalations, broken)
