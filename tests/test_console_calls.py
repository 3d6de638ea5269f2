"""What the operator's pages read (agent.console.calls): the filter, the pages of calls, one
call and the queues, on SQLite and PostgreSQL, without a server."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from agent.console.calls import (
    MAX_NUMBER_DIGITS,
    CallFilter,
    encode_cursor,
    find_calls,
    load_call,
    load_queues,
    look_up,
)
from agent.console.query import QueryError
from agent.store.tables import Call, CallEvent, Debt, Phone, Promise
from tests.console import add_consumer

#: The data's clock, fixed: the queues' "today" is the day after the last call.
START = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
TODAY = dt.date(2026, 12, 1)


def _call(
    session: Session, call_id: str, debt: Debt, phone: Phone, at: dt.datetime, disposition: str
) -> None:
    session.add(
        Call(
            id=call_id,
            transport="sip",
            direction="outbound",
            number=phone.number,
            status="ended",
            started_at=at,
            ended_at=at + dt.timedelta(seconds=60),
            duration_s=60.0,
            debt_id=debt.id,
            disposition=disposition,
        )
    )
    session.flush()


@pytest.fixture
def calls(db_engine: Engine) -> Engine:
    """Five calls to Jordan (...0142), two to Maria (...9876), an hour apart, newest last."""
    with Session(db_engine) as session, session.begin():
        jordan, jordan_phone = add_consumer(session, "c1", "Jordan Smith", "+16175550142")
        maria, maria_phone = add_consumer(session, "c2", "Maria Lopez", "+13125559876")
        maria.disputed = True  # m0's verification is not sent yet
        for i in range(5):
            _call(session, f"j{i}", jordan, jordan_phone, START + dt.timedelta(hours=i), "refused")
        _call(session, "m0", maria, maria_phone, START + dt.timedelta(hours=5), "dispute")
        _call(
            session, "m1", maria, maria_phone, START + dt.timedelta(hours=6), "callback_requested"
        )
        session.add(
            CallEvent(
                call_id="m1",
                at=START + dt.timedelta(hours=6),
                kind="callback_requested",
                detail={"date": "2026-11-30"},
            )
        )
        session.add(
            Promise(
                call_id="j4",
                debt_id=jordan.id,
                amount_cents=10_000,
                due_date=dt.date(2026, 11, 25),
                method="card",
                created_at=START + dt.timedelta(hours=4),
            )
        )
    return db_engine


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"number": "1" * (MAX_NUMBER_DIGITS + 1)}, "number must hold"),
        ({"number": "abc"}, "number must hold"),
        ({"disposition": "paid"}, "unknown disposition"),
        ({"from": "2026-12-02", "to": "2026-12-01"}, "is before from"),
        ({"before": "yesterday"}, "before must be the cursor"),
        ({"before": "not a time~c1"}, "before must be the cursor"),
    ],
)
def test_a_filter_refuses_bad_input_by_its_name(query: dict[str, str], message: str) -> None:
    with pytest.raises(QueryError, match=message):
        CallFilter.from_query(query)


def test_the_cursor_reads_back_in_utc_and_the_query_string_keeps_the_filter() -> None:
    at = dt.datetime(2026, 11, 20, 4, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    f = CallFilter.from_query({"number": "(617) 555-0142", "before": encode_cursor(at, "c-1")})
    assert f.number == "6175550142"
    assert f.before == (dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC), "c-1")
    assert f.query_string(before="x") == "number=6175550142&before=x"


def test_pages_cover_every_call_once_newest_first(calls: Engine) -> None:
    seen: list[str] = []
    f = CallFilter()
    while True:
        rows, cursor = find_calls(calls, f, limit=3)
        seen += [row.id for row in rows]
        if cursor is None:
            break
        f = CallFilter.from_query({"before": cursor})
    assert seen == ["m1", "m0", "j4", "j3", "j2", "j1", "j0"]


def test_the_number_and_name_filters_are_looked_up_first(calls: Engine) -> None:
    rows, cursor = find_calls(calls, CallFilter(number="0142"))
    assert [row.id for row in rows] == ["j4", "j3", "j2", "j1", "j0"] and cursor is None
    assert {row.number for row in rows} == {"+16175550142"}
    rows, _ = find_calls(calls, CallFilter(name="lOpEz"))
    assert [row.id for row in rows] == ["m1", "m0"]
    assert find_calls(calls, CallFilter(name="lopez", number="0142")) == ([], None)
    with Session(calls) as session:
        assert look_up(session, CallFilter(number="9999")) is None  # nothing can match
        found = look_up(session, CallFilter(number="0142"))
    assert found is not None and found.numbers == ("+16175550142",)


def test_one_call_has_its_consumer_promises_and_ledger(calls: Engine) -> None:
    view = load_call(calls, "j4", START + dt.timedelta(days=1))
    assert view.consumer is not None and view.consumer.name == "Jordan Smith"
    assert [p.amount_cents for p in view.promises] == [10_000]
    assert view.number == "+16175550142"
    # No contact attempt was recorded with these calls: the ledger counts none.
    assert view.ledger is not None and view.ledger.attempts_used_7d == 0
    with pytest.raises(LookupError):
        load_call(calls, "no-such-call", START)


def test_the_queues(calls: Engine) -> None:
    queues = load_queues(calls, TODAY)
    assert [row.id for row in queues.disputes] == ["m0"]
    assert [(item.row.id, item.note) for item in queues.callbacks] == [
        ("m1", "asked for 2026-11-30")
    ]
    assert [promise.call_id for promise, _, _ in queues.broken] == ["j4"]
    # A callback asked for a later day is not due yet.
    assert load_queues(calls, dt.date(2026, 11, 29)).callbacks == []
