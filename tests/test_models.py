"""agent.store.tables on SQLite and PostgreSQL: what the schema promises the console."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import IntegrityError, StatementError
from sqlalchemy.orm import Session

from agent.store.tables import (
    Call,
    CallEvent,
    CallStatus,
    Consumer,
    ContactAttempt,
    CostLine,
    Debt,
    Phone,
    Promise,
    Turn,
)

T0 = dt.datetime(2026, 12, 2, 15, 0, 0, tzinfo=dt.UTC)


def add_call(session: Session, call_id: str = "c" * 32, **fields: object) -> Call:
    fields.setdefault("started_at", T0)
    call = Call(id=call_id, transport="sip", direction="outbound", **fields)
    session.add(call)
    return call


def test_a_new_call_is_active(db_engine: Engine) -> None:
    with Session(db_engine) as session, session.begin():
        add_call(session)
    with Session(db_engine) as session:
        assert session.get_one(Call, "c" * 32).status == CallStatus.ACTIVE == "active"


def test_turns_come_in_order_and_events_by_time(db_engine: Engine) -> None:
    with Session(db_engine) as session, session.begin():
        add_call(session)
        for number in (3, 1, 2):
            session.add(Turn(call_id="c" * 32, number=number))
        for seconds, kind in ((5, "mini_miranda"), (1, "ai_disclosure")):
            session.add(
                CallEvent(call_id="c" * 32, at=T0 + dt.timedelta(seconds=seconds), kind=kind)
            )
    with Session(db_engine) as session:
        call = session.get_one(Call, "c" * 32)
        assert [t.number for t in call.turns] == [1, 2, 3]
        assert [e.kind for e in call.events] == ["ai_disclosure", "mini_miranda"]
        assert call.events[0].detail == {}
        assert call.turns[0].interrupted is False


def test_turn_numbers_are_unique_per_call(db_engine: Engine) -> None:
    with Session(db_engine) as session, session.begin():
        add_call(session)
        add_call(session, "d" * 32)
        session.add_all(
            [Turn(call_id="c" * 32, number=1), Turn(call_id="d" * 32, number=1)]
        )  # the same number on another call is fine
    with pytest.raises(IntegrityError), Session(db_engine) as session, session.begin():
        session.add(Turn(call_id="c" * 32, number=1))


def test_deleting_a_call_deletes_its_rows_in_the_database(db_engine: Engine) -> None:
    """ON DELETE CASCADE is the database's, so a bulk delete (retention) cleans up too."""
    with Session(db_engine) as session, session.begin():
        add_call(session)
        session.add(Turn(call_id="c" * 32, number=1))
        session.add(CallEvent(call_id="c" * 32, at=T0, kind="greeting", detail={"a": [1, 2]}))
        session.add(
            CostLine(
                call_id="c" * 32,
                component="stt",
                quantity=1.0,
                unit="call_minute",
                unit_price_usd=0.001,
                amount_usd=0.001,
                price_book_version="2026-12-01",
            )
        )
    with db_engine.begin() as connection:
        connection.execute(delete(Call))
    with Session(db_engine) as session:
        for model in (Turn, CallEvent, CostLine):
            assert session.scalar(select(func.count()).select_from(model)) == 0


def test_times_are_utc_aware_on_every_backend(db_engine: Engine) -> None:
    eastern = dt.timezone(dt.timedelta(hours=-5))
    with Session(db_engine) as session, session.begin():
        add_call(session, started_at=T0.astimezone(eastern), ended_at=T0 + dt.timedelta(minutes=1))
    with Session(db_engine) as session:
        call = session.get_one(Call, "c" * 32)
        assert call.started_at == T0
        assert call.started_at.utcoffset() == dt.timedelta(0)
        assert call.ended_at is not None and call.ended_at.tzinfo == dt.UTC
        # Range queries compare instants, not strings in different zones.
        found = session.scalars(select(Call.id).where(Call.started_at >= T0)).all()
        assert found == ["c" * 32]


def test_naive_times_are_refused(db_engine: Engine) -> None:
    with pytest.raises(StatementError, match="naive datetime"):
        with Session(db_engine) as session, session.begin():
            add_call(session, started_at=dt.datetime(2026, 12, 2, 15, 0))


# -- the portfolio and the contact ledger --------------------------------------


def add_consumer(session: Session, ref: str = "C-1", account_ref: str = "A-1") -> Consumer:
    consumer = Consumer(
        external_ref=ref,
        name="Maria Alvarez",
        address="12 Beacon St",
        state="MA",
        city="Boston",
        time_zone="America/New_York",
    )
    consumer.phones = [Phone(number="+16175550142", kind="personal")]
    consumer.debts = [
        Debt(
            account_ref=account_ref,
            creditor="Acme Card Services",
            balance_cents=123456,
            statute_status="within",
            tenant_type="third_party_collector",
            max_discount_pct=30.0,
            min_installment_cents=5000,
            max_term_months=12,
        )
    ]
    session.add(consumer)
    session.flush()
    return consumer


def test_a_new_consumer_has_no_suppressions(db_engine: Engine) -> None:
    with Session(db_engine) as session, session.begin():
        add_consumer(session)
    with Session(db_engine) as session:
        consumer = session.scalars(select(Consumer)).one()
        assert (consumer.inconvenient, consumer.workplace_forbids_calls) == ([], False)
        phone, debt = consumer.phones[0], consumer.debts[0]
        assert (phone.wrong_number, phone.opted_out_at, phone.consent_source) == (False, None, None)
        assert not (debt.disputed or debt.cease_requested or debt.bankrupt or debt.deceased)


def test_portfolio_keys_are_unique(db_engine: Engine) -> None:
    with Session(db_engine) as session, session.begin():
        add_consumer(session)
    with pytest.raises(IntegrityError), Session(db_engine) as session, session.begin():
        add_consumer(session, ref="C-1", account_ref="A-2")
    with pytest.raises(IntegrityError), Session(db_engine) as session, session.begin():
        add_consumer(session, ref="C-2", account_ref="A-1")
    with pytest.raises(IntegrityError), Session(db_engine) as session, session.begin():
        consumer = session.scalars(select(Consumer)).one()
        consumer.phones.append(Phone(number="+16175550142", kind="work"))


@pytest.mark.parametrize(
    ("model", "column", "value"),
    [(Phone, "kind", "mobile"), (Debt, "statute_status", "expired"), (Debt, "balance_cents", -1)],
)
def test_the_database_refuses_values_outside_the_domain(
    db_engine: Engine, model: type[Phone | Debt], column: str, value: object
) -> None:
    with Session(db_engine) as session, session.begin():
        add_consumer(session)
    with pytest.raises(IntegrityError), Session(db_engine) as session, session.begin():
        row = session.scalars(select(model)).one()
        setattr(row, column, value)


def test_a_call_records_its_debt_party_disposition_and_promise(db_engine: Engine) -> None:
    with Session(db_engine) as session, session.begin():
        debt = add_consumer(session).debts[0]
        add_call(
            session,
            debt_id=debt.id,
            party="right_party",
            disposition="promise_to_pay",
            verified_at=T0 + dt.timedelta(seconds=20),
        )
        session.add(
            Promise(
                call_id="c" * 32,
                debt_id=debt.id,
                amount_cents=5000,
                due_date=dt.date(2026, 12, 15),
                method="pay_link",
                created_at=T0,
            )
        )
    with Session(db_engine) as session:
        call = session.get_one(Call, "c" * 32)
        assert (call.party, call.disposition) == ("right_party", "promise_to_pay")
        assert call.verified_at == T0 + dt.timedelta(seconds=20)
        promise = session.scalars(select(Promise)).one()
        assert (promise.status, promise.due_date, promise.debt_id) == (
            "open",
            dt.date(2026, 12, 15),
            call.debt_id,
        )


def test_deleting_a_consumer_deletes_their_ledger_but_keeps_the_calls(db_engine: Engine) -> None:
    """Erasure removes the person's rows; the call record stays, unlinked from the debt."""
    with Session(db_engine) as session, session.begin():
        consumer = add_consumer(session)
        debt = consumer.debts[0]
        add_call(session, debt_id=debt.id)
        session.flush()
        session.add(
            ContactAttempt(
                debt_id=debt.id,
                consumer_id=consumer.id,
                phone_id=consumer.phones[0].id,
                number="+16175550142",
                at=T0,
                call_id="c" * 32,
                decided_by="allowed",
            )
        )
    with db_engine.begin() as connection:
        connection.execute(delete(Consumer))
    with Session(db_engine) as session:
        for model in (Phone, Debt, ContactAttempt):
            assert session.scalar(select(func.count()).select_from(model)) == 0
        assert session.get_one(Call, "c" * 32).debt_id is None
