"""agent.campaigns.predial on SQLite and PostgreSQL: each test is named after the rule it guards."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from agent.campaigns.contact_history import (
    apply_signal,
    counts_towards_caps,
    record_call,
    record_callback_consent,
    record_conversation,
    record_dispute_verified,
    record_outcome,
    record_third_party,
)
from agent.campaigns.contact_rules import CONTACT_CAPS, InconvenientWindow, consumer_time_zone
from agent.campaigns.portfolio import import_portfolio
from agent.campaigns.predial import Decision, DialRequest, check, contact_ledger, reserve_attempt
from agent.store.tables import Call, Consumer, ContactAttempt, Debt, Phone

NEW_YORK = ZoneInfo("America/New_York")
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
#: Wednesday 2 December 2026, 10:00 in New York, 07:00 in Seattle.
T = dt.datetime(2026, 12, 2, 15, 0, tzinfo=dt.UTC)
NYC_CELL = "+12125550100"
NYC_WORK = "+12125550177"
SEATTLE_CELL = "+12065550117"


def local(year: int, month: int, day: int, hour: int, minute: int = 0) -> dt.datetime:
    """A New York wall-clock time, as the aware datetime the gate is given."""
    return dt.datetime(year, month, day, hour, minute, tzinfo=NEW_YORK)


@dataclass(frozen=True)
class Account:
    consumer_id: int
    debt_id: int


def open_account(
    engine: Engine,
    *,
    ref: str = "C1",
    state: str = "NY",
    time_zone: str = "America/New_York",
    phones: Sequence[tuple[str, str, str | None]] = ((NYC_CELL, "personal", "creditor_provided"),),
    tenant_type: str = "third_party_collector",
    debts: int = 1,
    **consumer: Any,
) -> Account:
    """A consumer with phones and ``debts`` debts; returns the first debt."""
    with Session(engine) as session, session.begin():
        person = Consumer(
            external_ref=ref,
            name="Jordan Smith",
            date_of_birth=dt.date(1980, 5, 17),
            address="1 Main St",
            state=state,
            city="Somewhere",
            time_zone=time_zone,
            **consumer,
        )
        person.phones = [
            Phone(
                number=number,
                kind=kind,
                consent_source=source,
                consent_date=dt.date(2025, 3, 1) if source else None,
            )
            for number, kind, source in phones
        ]
        person.debts = [
            Debt(
                account_ref=f"{ref}-A{n}",
                account_last4="4321",
                creditor="Acme Bank",
                balance_cents=123456,
                statute_status="within",
                tenant_type=tenant_type,
                max_discount_pct=30.0,
                min_installment_cents=2500,
                max_term_months=12,
            )
            for n in range(debts)
        ]
        session.add(person)
        session.flush()
        return Account(person.id, person.debts[0].id)


def add_attempts(
    engine: Engine,
    account: Account,
    times: Iterable[dt.datetime],
    number: str = NYC_CELL,
    debt_id: int | None = None,
) -> None:
    """Counted attempts made earlier (history the gate must count)."""
    with Session(engine) as session, session.begin():
        phone = session.scalars(
            select(Phone).where(Phone.consumer_id == account.consumer_id, Phone.number == number)
        ).one()
        for at in times:
            session.add(
                ContactAttempt(
                    debt_id=debt_id or account.debt_id,
                    consumer_id=account.consumer_id,
                    phone_id=phone.id,
                    number=number,
                    at=at,
                    outcome="no_answer",
                    counts=True,
                    decided_by="history",
                )
            )


def ask(engine: Engine, account: Account, at: dt.datetime, number: str = NYC_CELL) -> Decision:
    with Session(engine) as session:
        return check(session, DialRequest(account.debt_id, number, at))


def counted_attempts(engine: Engine, account: Account) -> int:
    with Session(engine) as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(ContactAttempt)
                .where(ContactAttempt.debt_id == account.debt_id, ContactAttempt.counts.is_(True))
            )
            or 0
        )


# -- D4: calling hours -------------------------------------------------------


def test_d4_0759_local_is_denied_and_0800_allowed(db_engine: Engine) -> None:
    account = open_account(db_engine)
    early = ask(db_engine, account, local(2026, 12, 2, 7, 59))
    assert (early.allowed, early.rule) == (False, "D4")
    assert "07:59 in America/New_York" in early.reason
    assert early.next_allowed_at == local(2026, 12, 2, 8, 0)
    assert ask(db_engine, account, local(2026, 12, 2, 8, 0)).allowed


def test_d4_2059_local_is_allowed_and_2101_denied(db_engine: Engine) -> None:
    account = open_account(db_engine)
    assert ask(db_engine, account, local(2026, 12, 2, 20, 59)).allowed
    late = ask(db_engine, account, local(2026, 12, 2, 21, 1))
    assert (late.allowed, late.rule) == (False, "D4")
    assert late.next_allowed_at == local(2026, 12, 3, 8, 0)


def test_d4_spring_forward_day_uses_daylight_time(db_engine: Engine) -> None:
    """2026-03-08: New York moves to EDT (UTC-4) at 02:00; a fixed UTC-5 would be wrong."""
    account = open_account(db_engine)
    utc = dt.UTC
    assert not ask(db_engine, account, dt.datetime(2026, 3, 8, 11, 59, tzinfo=utc)).allowed
    assert ask(db_engine, account, dt.datetime(2026, 3, 8, 12, 0, tzinfo=utc)).allowed  # 08:00
    assert ask(db_engine, account, dt.datetime(2026, 3, 9, 0, 59, tzinfo=utc)).allowed  # 20:59
    assert not ask(db_engine, account, dt.datetime(2026, 3, 9, 1, 1, tzinfo=utc)).allowed
    # Denied the evening before the change, the next morning is 08:00 EDT, not EST.
    evening = ask(db_engine, account, dt.datetime(2026, 3, 8, 2, 30, tzinfo=utc))
    assert evening.next_allowed_at == dt.datetime(2026, 3, 8, 12, 0, tzinfo=utc)


def test_d4_fall_back_day_uses_standard_time(db_engine: Engine) -> None:
    """2026-11-01: New York returns to EST (UTC-5) at 02:00."""
    account = open_account(db_engine)
    utc = dt.UTC
    assert not ask(db_engine, account, dt.datetime(2026, 11, 1, 12, 30, tzinfo=utc)).allowed
    assert ask(db_engine, account, dt.datetime(2026, 11, 1, 13, 0, tzinfo=utc)).allowed  # 08:00
    assert ask(db_engine, account, dt.datetime(2026, 11, 2, 1, 59, tzinfo=utc)).allowed  # 20:59
    assert not ask(db_engine, account, dt.datetime(2026, 11, 2, 2, 1, tzinfo=utc)).allowed


def test_d4_area_code_zone_and_address_zone_must_both_be_in_the_window(db_engine: Engine) -> None:
    """A Seattle (206) cell, a New York address: 08:00-21:00 in both zones."""
    account = open_account(db_engine, phones=[(SEATTLE_CELL, "personal", "creditor_provided")])
    # 10:00 in New York but 07:00 in Seattle.
    morning = ask(db_engine, account, T, SEATTLE_CELL)
    assert (morning.allowed, morning.rule) == (False, "D4")
    assert "America/Los_Angeles (area code 206)" in morning.reason
    assert morning.next_allowed_at == T + HOUR  # 08:00 in Seattle
    assert ask(db_engine, account, T + HOUR, SEATTLE_CELL).allowed
    # 20:59 in New York (17:59 in Seattle) is fine, 21:01 is not.
    assert ask(db_engine, account, local(2026, 12, 2, 20, 59), SEATTLE_CELL).allowed
    evening = ask(db_engine, account, local(2026, 12, 2, 21, 1), SEATTLE_CELL)
    assert (evening.rule, evening.next_allowed_at) == ("D4", T + DAY + HOUR)
    assert "America/New_York (the address)" in evening.reason


def test_d4_unknown_address_zone_is_denied(db_engine: Engine) -> None:
    account = open_account(db_engine, time_zone="Mars/Olympus_Mons")
    decision = ask(db_engine, account, T)
    assert (decision.allowed, decision.rule, decision.next_allowed_at) == (False, "D4", None)
    assert "Mars/Olympus_Mons" in decision.reason


# -- D1, D3: the federal cap and what counts -------------------------------


def test_d1_eighth_attempt_in_seven_days_is_denied(db_engine: Engine) -> None:
    account = open_account(db_engine)
    first = T - 6 * DAY  # Thursday 10:00 New York
    add_attempts(db_engine, account, [first + n * DAY for n in range(6)])
    assert ask(db_engine, account, T + HOUR).allowed  # the seventh
    add_attempts(db_engine, account, [T + HOUR])
    eighth = ask(db_engine, account, T + 2 * HOUR)
    assert (eighth.allowed, eighth.rule) == (False, "D1")
    assert "7 counted attempts on this debt in the 7 days before 2026-12-02 17:00 UTC" in (
        eighth.reason
    )
    assert "(limit 7" in eighth.reason
    # The oldest attempt leaves the window seven days after it was made.
    assert eighth.next_allowed_at == first + 7 * DAY
    assert ask(db_engine, account, first + 7 * DAY).allowed


def test_d1_attempts_older_than_seven_days_do_not_count(db_engine: Engine) -> None:
    account = open_account(db_engine)
    add_attempts(db_engine, account, [T - 7 * DAY - n * HOUR for n in range(10)])
    assert ask(db_engine, account, T).allowed


def test_d1_counts_each_debt_separately(db_engine: Engine) -> None:
    account = open_account(db_engine, debts=2)
    with Session(db_engine) as session:
        other = session.scalars(
            select(Debt.id).where(
                Debt.consumer_id == account.consumer_id, Debt.id != account.debt_id
            )
        ).one()
    add_attempts(db_engine, account, [T - n * HOUR for n in range(1, 8)], debt_id=other)
    assert ask(db_engine, account, T).allowed


def test_d1_attempts_stamped_after_the_request_count_too(db_engine: Engine) -> None:
    """A dialer whose clock runs behind must not slip an eighth attempt into the window."""
    account = open_account(db_engine)
    add_attempts(db_engine, account, [T - n * HOUR for n in range(1, 7)] + [T])
    assert ask(db_engine, account, T - dt.timedelta(seconds=30)).rule == "D1"


def test_d3_busy_and_not_in_service_do_not_count(db_engine: Engine) -> None:
    account = open_account(db_engine)
    ids = []
    for n in range(7):
        decision = reserve_attempt(db_engine, DialRequest(account.debt_id, NYC_CELL, T - n * DAY))
        assert decision.allowed and decision.attempt_id is not None
        ids.append(decision.attempt_id)
    assert ask(db_engine, account, T + HOUR).rule == "D1"

    assert record_outcome(db_engine, ids[0], "busy") is False
    assert ask(db_engine, account, T + HOUR).allowed
    assert record_outcome(db_engine, ids[1], "not_in_service") is False
    assert counted_attempts(db_engine, account) == 5


def test_d3_what_counts() -> None:
    assert {o for o in ("answered", "no_answer", "voicemail", "dialing") if counts_towards_caps(o)}
    assert not any(
        counts_towards_caps(o) for o in ("busy", "not_in_service", "attorney", "consented_callback")
    )
    assert all(counts_towards_caps(o) for o in ("answered", "no_answer", "voicemail", "dialing"))
    with pytest.raises(ValueError):
        counts_towards_caps("probably_fine")


def test_d3_outcome_links_the_call_and_attorney_calls_do_not_count(db_engine: Engine) -> None:
    account = open_account(db_engine)
    decision = reserve_attempt(db_engine, DialRequest(account.debt_id, NYC_CELL, T))
    assert decision.attempt_id is not None
    with Session(db_engine) as session, session.begin():
        session.add(Call(id="c" * 32, transport="sip", direction="outbound", started_at=T))
    assert record_outcome(db_engine, decision.attempt_id, "attorney", call_id="c" * 32) is False
    with Session(db_engine) as session:
        attempt = session.get_one(ContactAttempt, decision.attempt_id)
        assert (attempt.outcome, attempt.counts, attempt.call_id) == ("attorney", False, "c" * 32)
        assert attempt.decided_by.startswith("allowed: D1 attempt 1 of 7")
    with pytest.raises(LookupError):
        record_outcome(db_engine, decision.attempt_id + 1000, "answered")


# -- D2: seven days after a conversation -------------------------------------


def test_d2_call_on_day_d_plus_6_is_denied_and_d_plus_7_allowed(db_engine: Engine) -> None:
    """The conversation's day is the consumer's: 20:30 on Dec 1 in New York is Dec 2 in UTC."""
    account = open_account(db_engine)
    record_conversation(db_engine, account.debt_id, local(2026, 12, 1, 20, 30))
    day_6 = ask(db_engine, account, local(2026, 12, 7, 10, 0))
    assert (day_6.allowed, day_6.rule) == (False, "D2")
    assert "2026-12-01" in day_6.reason
    assert day_6.next_allowed_at == local(2026, 12, 8, 8, 0)  # midnight, then calling hours
    assert ask(db_engine, account, local(2026, 12, 8, 8, 0)).allowed


def test_d2_the_latest_conversation_counts(db_engine: Engine) -> None:
    account = open_account(db_engine)
    record_conversation(db_engine, account.debt_id, local(2026, 12, 1, 10))
    record_conversation(db_engine, account.debt_id, local(2026, 11, 20, 10))  # older: ignored
    with Session(db_engine) as session:
        ledger = contact_ledger(session, account.debt_id, local(2026, 12, 2, 10))
    assert ledger.last_conversation_at == local(2026, 12, 1, 10)
    assert ledger.next_allowed_at == local(2026, 12, 8, 8)


# -- D5: inconvenient times and places ---------------------------------------


def test_d5_stated_inconvenient_time_is_denied(db_engine: Engine) -> None:
    account = open_account(db_engine)
    apply_signal(
        db_engine,
        account.debt_id,
        "inconvenient_time",
        at=T,
        window={"weekday": None, "start": "09:00", "end": "17:00"},
    )
    decision = ask(db_engine, account, local(2026, 12, 2, 10))
    assert (decision.allowed, decision.rule) == (False, "D5")
    assert "every day 09:00-17:00" in decision.reason
    assert decision.next_allowed_at == local(2026, 12, 2, 17)
    assert ask(db_engine, account, local(2026, 12, 2, 8, 30)).allowed


def test_d5_weekday_window_applies_on_that_day_only(db_engine: Engine) -> None:
    account = open_account(
        db_engine, inconvenient=[{"weekday": 2, "start": "08:00", "end": "12:00"}]
    )
    assert ask(db_engine, account, local(2026, 12, 2, 10)).rule == "D5"  # a Wednesday
    assert ask(db_engine, account, local(2026, 12, 3, 10)).allowed  # Thursday


def test_d5_window_across_midnight_and_whole_day() -> None:
    night = InconvenientWindow.from_json({"weekday": 4, "start": "20:00", "end": "09:00"})
    assert night.covers(local(2026, 12, 4, 20, 30))  # Friday evening
    assert night.covers(local(2026, 12, 5, 8, 59))  # Saturday morning
    assert not night.covers(local(2026, 12, 5, 9, 0))
    assert not night.covers(local(2026, 12, 4, 8, 30))  # Friday morning: Thursday's night is fine
    sunday = InconvenientWindow.from_json({"weekday": 6, "start": "00:00", "end": "00:00"})
    assert sunday.covers(local(2026, 12, 6, 15)) and not sunday.covers(local(2026, 12, 7, 15))
    for bad in ({"weekday": 7, "start": "09:00", "end": "10:00"}, {"start": "9am", "end": "10"}):
        with pytest.raises(ValueError):
            InconvenientWindow.from_json(bad)


def test_d5_unreadable_inconvenient_entry_is_denied(db_engine: Engine) -> None:
    account = open_account(db_engine, inconvenient=[{"weekday": "sometimes"}])
    decision = ask(db_engine, account, T)
    assert (decision.rule, decision.next_allowed_at) == ("D5", None)


def test_d5_workplace_that_forbids_calls(db_engine: Engine) -> None:
    account = open_account(
        db_engine,
        phones=[
            (NYC_CELL, "personal", "creditor_provided"),
            (NYC_WORK, "work", "creditor_provided"),
        ],
    )
    assert ask(db_engine, account, T, NYC_WORK).allowed
    apply_signal(db_engine, account.debt_id, "workplace_forbids_calls", at=T)
    work = ask(db_engine, account, T, NYC_WORK)
    assert (work.allowed, work.rule, work.next_allowed_at) == (False, "D5", None)
    assert ask(db_engine, account, T, NYC_CELL).allowed


# -- D6, D7, D9: suppressions ------------------------------------------------


def test_d6_known_attorney_is_denied(db_engine: Engine) -> None:
    account = open_account(db_engine, attorney_name="Pat Lawyer, Esq.")
    decision = ask(db_engine, account, T)
    assert (decision.allowed, decision.rule, decision.next_allowed_at) == (False, "D6", None)
    assert "Pat Lawyer" in decision.reason


def test_d6_attorney_named_on_a_call_is_denied(db_engine: Engine) -> None:
    account = open_account(db_engine)
    apply_signal(db_engine, account.debt_id, "attorney", at=T)
    assert ask(db_engine, account, T).rule == "D6"


def test_d7_cease_request_stops_every_call_on_the_debt(db_engine: Engine) -> None:
    account = open_account(db_engine, debts=2)
    apply_signal(db_engine, account.debt_id, "cease", at=T)
    decision = ask(db_engine, account, T)
    assert (decision.allowed, decision.rule) == (False, "D7")
    with Session(db_engine) as session:
        other = session.scalars(select(Debt).where(Debt.id != account.debt_id)).one()
        # The cease request is for that debt; the other one may still be collected.
        assert check(session, DialRequest(other.id, NYC_CELL, T)).allowed


def test_d7_stop_calling_opts_out_every_number(db_engine: Engine) -> None:
    account = open_account(
        db_engine,
        phones=[
            (NYC_CELL, "personal", "creditor_provided"),
            (NYC_WORK, "work", "creditor_provided"),
        ],
    )
    apply_signal(db_engine, account.debt_id, "stop_calling", number=NYC_CELL, at=T)
    for number in (NYC_CELL, NYC_WORK):
        decision = ask(db_engine, account, T + DAY, number)
        assert (decision.allowed, decision.rule) == (False, "D7")
        assert "stop calling on 2026-12-02" in decision.reason
    with Session(db_engine) as session:
        ledger = contact_ledger(session, account.debt_id, T + DAY)
    assert ledger.next_allowed_at is None


@pytest.mark.parametrize(
    ("signal", "words"),
    [
        ("bankruptcy", "bankruptcy"),
        ("deceased", "deceased"),
        ("dispute", "disputed"),
        ("wrong_number", "wrong number"),
    ],
)
def test_d9_suppressions(db_engine: Engine, signal: str, words: str) -> None:
    account = open_account(db_engine)
    assert ask(db_engine, account, T).allowed
    apply_signal(db_engine, account.debt_id, signal, number=NYC_CELL, at=T)
    decision = ask(db_engine, account, T + HOUR)
    assert (decision.allowed, decision.rule, decision.next_allowed_at) == (False, "D9", None)
    assert words in decision.reason


def test_d9_bankruptcy_and_death_suppress_every_debt_of_the_consumer(db_engine: Engine) -> None:
    account = open_account(db_engine, debts=2)
    apply_signal(db_engine, account.debt_id, "deceased", at=T)
    with Session(db_engine) as session:
        assert all(debt.deceased for debt in session.scalars(select(Debt)))


def test_d9_a_dispute_lifts_once_its_verification_is_sent(db_engine: Engine) -> None:
    """Disputed-pending-verification: suppressed until the verification is sent, then the
    debt may be called again; a later dispute suppresses it again."""
    account = open_account(db_engine)
    apply_signal(db_engine, account.debt_id, "dispute", at=T)
    assert ask(db_engine, account, T + DAY).rule == "D9"
    assert record_dispute_verified(db_engine, account.debt_id, T + DAY) is True
    assert ask(db_engine, account, T + 2 * DAY).allowed
    assert record_dispute_verified(db_engine, account.debt_id, T + DAY) is False
    apply_signal(db_engine, account.debt_id, "dispute", partial=True, at=T + 3 * DAY)
    assert ask(db_engine, account, T + 4 * DAY).rule == "D9"
    with pytest.raises(LookupError):
        record_dispute_verified(db_engine, account.debt_id + 99, T)


def test_signals_need_what_they_name(db_engine: Engine) -> None:
    account = open_account(db_engine)
    with pytest.raises(ValueError):
        apply_signal(db_engine, account.debt_id, "wrong_number", at=T)
    with pytest.raises(ValueError):
        apply_signal(db_engine, account.debt_id, "inconvenient_time", at=T)
    with pytest.raises(ValueError):
        apply_signal(db_engine, account.debt_id, "louder_please", at=T)
    with pytest.raises(LookupError):
        apply_signal(db_engine, account.debt_id, "wrong_number", number=SEATTLE_CELL, at=T)
    with pytest.raises(LookupError):
        apply_signal(db_engine, account.debt_id + 99, "cease", at=T)


# -- D8: state caps ------------------------------------------------------------


def test_d8_massachusetts_third_attempt_in_seven_days_to_a_personal_number(
    db_engine: Engine,
) -> None:
    account = open_account(
        db_engine,
        state="MA",
        phones=[
            ("+16175550142", "personal", "creditor_provided"),
            ("+16175550199", "work", "creditor_provided"),
        ],
    )
    add_attempts(db_engine, account, [T - 3 * DAY, T - 1 * DAY], number="+16175550142")
    decision = ask(db_engine, account, T, "+16175550142")
    assert (decision.allowed, decision.rule) == (False, "D8")
    assert "2 counted attempts to personal numbers" in decision.reason
    assert "940 CMR 7.04" in decision.reason
    assert decision.next_allowed_at == T + 4 * DAY
    # The work number has its own allowance: 2 per 30 days.
    assert ask(db_engine, account, T, "+16175550199").allowed


def test_d8_massachusetts_third_attempt_in_thirty_days_to_a_work_number(
    db_engine: Engine,
) -> None:
    account = open_account(
        db_engine,
        state="MA",
        phones=[
            ("+16175550142", "personal", "creditor_provided"),
            ("+16175550199", "work", "creditor_provided"),
        ],
    )
    add_attempts(db_engine, account, [T - 20 * DAY, T - 10 * DAY], number="+16175550199")
    decision = ask(db_engine, account, T, "+16175550199")
    assert (decision.allowed, decision.rule) == (False, "D8")
    assert "to other and work numbers" in decision.reason
    assert "30 days" in decision.reason
    assert decision.next_allowed_at == T + 10 * DAY
    assert ask(db_engine, account, T, "+16175550142").allowed


def test_d8_washington_fourth_attempt_in_a_week_is_denied(db_engine: Engine) -> None:
    account = open_account(
        db_engine,
        state="WA",
        time_zone="America/Los_Angeles",
        phones=[(SEATTLE_CELL, "personal", "creditor_provided")],
    )
    add_attempts(db_engine, account, [T - n * DAY for n in (1, 2, 3)], number=SEATTLE_CELL)
    decision = ask(db_engine, account, T + 2 * HOUR, SEATTLE_CELL)
    assert (decision.allowed, decision.rule) == (False, "D8")
    assert "RCW 19.16.250" in decision.reason
    with Session(db_engine) as session:
        ledger = contact_ledger(session, account.debt_id, T + 2 * HOUR)
    assert (ledger.attempts_used_7d, ledger.limit) == (3, 3)
    # The oldest leaves the week at 07:00 in Seattle; then 08:00.
    assert ledger.next_allowed_at == T + 4 * DAY + HOUR


def test_d8_caps_are_a_data_table() -> None:
    states = {s for cap in CONTACT_CAPS if cap.states for s in cap.states}
    assert states == {"MA", "WA"}
    assert {(c.rule, c.limit, c.window.days) for c in CONTACT_CAPS} == {
        ("D1", 7, 7),
        ("D8", 2, 7),
        ("D8", 2, 30),
        ("D8", 3, 7),
    }


# -- D10: consent ------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "words"),
    [(None, "no prior express consent"), ("skip_traced", "skip-traced"), ("a_guess", "a_guess")],
)
def test_d10_number_without_consent_is_denied(
    db_engine: Engine, source: str | None, words: str
) -> None:
    account = open_account(db_engine, phones=[(NYC_CELL, "personal", source)])
    decision = ask(db_engine, account, T)
    assert (decision.allowed, decision.rule, decision.next_allowed_at) == (False, "D10", None)
    assert words in decision.reason


def test_d10_number_not_on_file_is_denied(db_engine: Engine) -> None:
    account = open_account(db_engine)
    assert ask(db_engine, account, T, SEATTLE_CELL).rule == "D10"
    assert ask(db_engine, account, T, "not a number").rule == "D10"


# -- the gate as a whole -----------------------------------------------------


def test_gate_reports_the_first_rule_in_the_fixed_order(db_engine: Engine) -> None:
    """Skip-traced, capped and at 07:00: consent comes before counts and hours."""
    account = open_account(db_engine, phones=[(NYC_CELL, "personal", "skip_traced")])
    add_attempts(db_engine, account, [T - n * HOUR for n in range(1, 8)])
    decision = ask(db_engine, account, local(2026, 12, 2, 7, 0))
    assert decision.rule == "D10"
    assert decision.reason.endswith("also D1; D4")
    # Consent does not come back with time: no next time to offer.
    assert decision.next_allowed_at is None


def test_gate_fails_closed_on_an_unknown_debt(db_engine: Engine) -> None:
    decision = reserve_attempt(db_engine, DialRequest(4242, NYC_CELL, T))
    assert (decision.allowed, decision.rule, decision.attempt_id) == (False, "unknown_debt", None)


def test_dial_request_needs_an_aware_time() -> None:
    with pytest.raises(ValueError):
        DialRequest(1, NYC_CELL, dt.datetime(2026, 12, 2, 10, 0))


def test_reserve_records_a_counted_dialing_attempt(db_engine: Engine) -> None:
    account = open_account(db_engine)
    decision = reserve_attempt(db_engine, DialRequest(account.debt_id, "+1 212-555-0100", T))
    assert decision.allowed and decision.rule == "ok"
    with Session(db_engine) as session:
        attempt = session.get_one(ContactAttempt, decision.attempt_id)
        assert (attempt.number, attempt.outcome, attempt.counts, attempt.at) == (
            NYC_CELL,
            "dialing",
            True,
            T,
        )
        assert attempt.decided_by == decision.reason
    denied = reserve_attempt(db_engine, DialRequest(account.debt_id, NYC_CELL, T - 8 * HOUR))
    assert (denied.allowed, denied.attempt_id) == (False, None)
    assert counted_attempts(db_engine, account) == 1


@pytest.mark.parametrize("workers", [2, 6])
def test_d1_workers_racing_for_the_seventh_attempt_exactly_one_wins(
    db_engine: Engine, workers: int
) -> None:
    account = open_account(db_engine)
    add_attempts(db_engine, account, [T - n * DAY for n in range(1, 7)])
    start = threading.Barrier(workers)
    decisions: list[Decision] = []
    errors: list[BaseException] = []

    def dial() -> None:
        try:
            start.wait()
            decisions.append(reserve_attempt(db_engine, DialRequest(account.debt_id, NYC_CELL, T)))
        except BaseException as exc:  # surfaced below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=dial) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(d.rule for d in decisions) == ["D1"] * (workers - 1) + ["ok"]
    assert counted_attempts(db_engine, account) == 7


# -- the ledger --------------------------------------------------------------


def test_ledger_shows_attempts_used_and_the_next_allowed_time(db_engine: Engine) -> None:
    account = open_account(db_engine)
    add_attempts(db_engine, account, [T - n * HOUR for n in range(1, 8)])
    with Session(db_engine) as session:
        ledger = contact_ledger(session, account.debt_id, T)
    assert (ledger.attempts_used_7d, ledger.limit, ledger.last_conversation_at) == (7, 7, None)
    # The oldest of the seven (03:00 New York) leaves the window a week later; then 08:00.
    assert ledger.next_allowed_at == local(2026, 12, 9, 8, 0)
    with Session(db_engine) as session, pytest.raises(LookupError):
        contact_ledger(session, 4242, T)


def test_gate_on_the_sample_portfolio(db_engine: Engine) -> None:
    """The demo portfolio as the gate sees it at 10:00 New York, 07:00 Seattle."""
    import_portfolio(db_engine, Path(__file__).parent / "data" / "portfolio.csv")
    with Session(db_engine) as session:
        debts = {ref: id_ for ref, id_ in session.execute(select(Debt.account_ref, Debt.id))}

        def rule(account_ref: str, number: str, at: dt.datetime = T) -> str:
            return check(session, DialRequest(debts[account_ref], number, at)).rule

        assert rule("ACME-0001", "+16175550142") == "ok"  # Boston, personal
        assert rule("ACME-0002", "+12065550117") == "D4"  # Seattle, 07:00
        assert rule("ACME-0002", "+12065550117", T + HOUR) == "ok"
        assert rule("OLDCO-7781", "+12145550199") == "ok"  # time-barred: callable, C9 in-call
        assert rule("ACME-0004", "+12065550123") == "D4"  # New York address, Seattle cell
        assert rule("ACME-0004", "+17185550144") == "D10"  # skip-traced
        assert rule("MEDI-9012", "+13125550123") == "ok"
        assert rule("ACME-0006", "+14045550188") == "D6"  # represented by an attorney


# -- 1006.14(b)(3): the callback the consumer asked for ------------------------


@dataclass(frozen=True)
class Said:
    """A policy event as ``record_call`` reads it (``agent.conversation.replies.PolicyEvent``)."""

    kind: str
    detail: dict[str, Any]
    at: dt.datetime


def at_work_call_me_after_six(engine: Engine, account: Account, *, party: str) -> list[str]:
    """ "I'm at work, call me after six tonight" on Wednesday 2 December, 14:25 in New York."""
    said = local(2026, 12, 2, 14, 25)
    return record_call(
        engine,
        account.debt_id,
        [
            Said(
                "signal",
                {
                    "kind": "inconvenient_time",
                    "window": {"weekday": 2, "start": "09:00", "end": "18:00"},
                },
                said,
            ),
            Said("signal", {"kind": "workplace_forbids_calls"}, said),
            Said(
                "callback_requested",
                {"date": "2026-12-02", "time": "18:00", "consented": True},
                said,
            ),
        ],
        party=party,
        number=NYC_CELL,
        ended_at=local(2026, 12, 2, 14, 30),
    )


def test_consented_callback_is_allowed_at_the_time_asked_despite_d2(db_engine: Engine) -> None:
    account = open_account(
        db_engine,
        phones=[
            (NYC_CELL, "personal", "creditor_provided"),
            (NYC_WORK, "work", "creditor_provided"),
        ],
    )
    assert at_work_call_me_after_six(db_engine, account, party="right_party") == []
    with Session(db_engine) as session:
        debt = session.get_one(Debt, account.debt_id)
        assert debt.last_conversation_at == local(2026, 12, 2, 14, 30)  # D2 started
        assert (debt.callback_from, debt.callback_until) == (
            local(2026, 12, 2, 18),
            local(2026, 12, 2, 20),
        )
    # Not before the time asked: D2 (the conversation at 14:30), lifting at 18:00.
    early = ask(db_engine, account, local(2026, 12, 2, 17, 59))
    assert (early.allowed, early.rule) == (False, "D2")
    assert early.next_allowed_at == local(2026, 12, 2, 18)
    assert "callback asked for opens" in early.reason
    # At the time asked: allowed, and the attempt does not count towards D1.
    on_time = reserve_attempt(
        db_engine, DialRequest(account.debt_id, NYC_CELL, local(2026, 12, 2, 18))
    )
    assert (on_time.allowed, on_time.consented_callback) == (True, True), on_time
    assert "1006.14(b)(3)" in on_time.reason
    assert record_outcome(db_engine, on_time.attempt_id, "answered") is False
    assert counted_attempts(db_engine, account) == 0
    # The workplace forbids calls: not on the work number, callback or not (D5).
    assert ask(db_engine, account, local(2026, 12, 2, 18, 30), NYC_WORK).rule == "D5"
    # After the window (two hours), D2 again until day D+7.
    late = ask(db_engine, account, local(2026, 12, 2, 20, 0))
    assert (late.allowed, late.rule) == (False, "D2")
    assert late.next_allowed_at == local(2026, 12, 9, 8)


def test_consented_callback_is_used_up_by_the_conversation_it_brings(db_engine: Engine) -> None:
    account = open_account(db_engine)
    at_work_call_me_after_six(db_engine, account, party="right_party")
    assert ask(db_engine, account, local(2026, 12, 2, 18, 5)).allowed
    record_conversation(db_engine, account.debt_id, local(2026, 12, 2, 18, 10))
    again = ask(db_engine, account, local(2026, 12, 2, 18, 30))
    assert (again.allowed, again.rule) == (False, "D2")


def test_consented_callback_keeps_every_other_rule(db_engine: Engine) -> None:
    account = open_account(db_engine, state="MA")
    record_call(
        db_engine,
        account.debt_id,
        [Said("callback_requested", {"date": "2026-12-02", "time": "20:30", "consented": True}, T)],
        party="right_party",
        number=NYC_CELL,
        ended_at=T,
    )
    add_attempts(db_engine, account, [T - DAY])
    assert ask(db_engine, account, local(2026, 12, 2, 20, 45)).allowed
    # D4: 21:00 is past the calling hours, inside the window or not.
    assert ask(db_engine, account, local(2026, 12, 2, 21, 0)).rule == "D4"
    # D8: Massachusetts counts the consented call too (no such exception in 940 CMR 7.04).
    decision = reserve_attempt(
        db_engine, DialRequest(account.debt_id, NYC_CELL, local(2026, 12, 2, 20, 40))
    )
    assert decision.consented_callback and counted_attempts(db_engine, account) == 1
    assert ask(db_engine, account, local(2026, 12, 2, 20, 50)).rule == "D8"
    # D7, D9 and the others are before the counts: a stop ends the callback too.
    apply_signal(db_engine, account.debt_id, "stop_calling", at=T)
    assert ask(db_engine, account, local(2026, 12, 2, 20, 45)).rule == "D7"


def test_consented_callback_is_not_capped_by_d1_and_expires_after_seven_days(
    db_engine: Engine,
) -> None:
    """ "Call me next Wednesday", asked at 10:00 on Wednesday 2 December: the consent
    lasts until 10:00 on the 9th, not the whole of that day."""
    account = open_account(db_engine)
    add_attempts(db_engine, account, [local(2026, 12, 8, 8) + n * HOUR for n in range(7)])
    window = record_callback_consent(
        db_engine, account.debt_id, dt.date(2026, 12, 9), None, at=local(2026, 12, 2, 10)
    )
    assert window == (local(2026, 12, 9, 0), local(2026, 12, 9, 10))
    inside = ask(db_engine, account, local(2026, 12, 9, 9, 30))
    assert inside.allowed and inside.consented_callback, inside
    assert "D1 not counted" in inside.reason
    expired = ask(db_engine, account, local(2026, 12, 9, 10, 0))
    assert (expired.allowed, expired.rule) == (False, "D1")
    # A day asked for past the 7 days is no consent at all.
    assert (
        record_callback_consent(
            db_engine, account.debt_id, dt.date(2026, 12, 10), None, at=local(2026, 12, 2, 10)
        )
        is None
    )


def test_only_the_consumer_can_consent_to_a_callback(db_engine: Engine) -> None:
    account = open_account(db_engine)
    at_work_call_me_after_six(db_engine, account, party="consumer_equivalent")
    with Session(db_engine) as session:
        debt = session.get_one(Debt, account.debt_id)
        assert debt.callback_from is None
        assert debt.last_conversation_at == local(2026, 12, 2, 14, 30)
    assert ask(db_engine, account, local(2026, 12, 2, 18, 30)).rule == "D2"


def test_callback_without_a_known_zone_is_no_consent(db_engine: Engine) -> None:
    account = open_account(
        db_engine,
        time_zone="Mars/Olympus",
        phones=[("+18005550100", "personal", "creditor_provided")],
    )
    assert (
        record_callback_consent(db_engine, account.debt_id, dt.date(2026, 12, 2), dt.time(18), at=T)
        is None
    )


# -- what a call tells the gate (record_call) ---------------------------------


def test_inconvenient_time_and_workplace_from_the_call_are_recorded(db_engine: Engine) -> None:
    account = open_account(
        db_engine,
        phones=[
            (NYC_CELL, "personal", "creditor_provided"),
            (NYC_WORK, "work", "creditor_provided"),
        ],
    )
    at_work_call_me_after_six(db_engine, account, party="right_party")
    with Session(db_engine) as session:
        consumer = session.get_one(Consumer, account.consumer_id)
        assert consumer.inconvenient == [{"weekday": 2, "start": "09:00", "end": "18:00"}]
        assert consumer.workplace_forbids_calls
    # The next Wednesday, past D2: 09:00-18:00 is inconvenient, so 18:00 on.
    wednesday = ask(db_engine, account, local(2026, 12, 9, 10))
    assert (wednesday.rule, wednesday.next_allowed_at) == ("D5", local(2026, 12, 9, 18))
    assert ask(db_engine, account, local(2026, 12, 10, 10)).allowed  # a Thursday


def test_signals_before_verification_reach_the_gate_without_a_conversation(
    db_engine: Engine,
) -> None:
    """rule C8: bankruptcy, a dispute, "stop calling", whoever says them; no D2."""
    account = open_account(db_engine, debts=2)
    problems = record_call(
        db_engine,
        account.debt_id,
        [
            Said("signal", {"kind": "bankruptcy"}, T),
            Said("signal", {"kind": "dispute", "partial": True}, T),
            Said("signal", {"kind": "hardship"}, T),  # for a person, not the gate
            Said("disposition", {"disposition": "bankruptcy"}, T),
        ],
        party="unverified",
        number=NYC_CELL,
        ended_at=T,
    )
    assert problems == []
    with Session(db_engine) as session:
        debts = session.scalars(select(Debt).order_by(Debt.id)).all()
        assert [d.bankrupt for d in debts] == [True, True]
        assert [d.disputed for d in debts] == [True, False]
        assert debts[0].last_conversation_at is None
    assert ask(db_engine, account, T + DAY).rule == "D9"


def test_attorney_name_and_number_are_kept(db_engine: Engine) -> None:
    account = open_account(db_engine, attorney_name="Pat Lawyer, Esq.")
    apply_signal(db_engine, account.debt_id, "attorney", at=T)  # no name: the known one stays
    record_call(
        db_engine,
        account.debt_id,
        [
            Said(
                "signal",
                {
                    "kind": "attorney",
                    "attorney_name": "Sam Counsel",
                    "attorney_number": "617-555-0199",
                },
                T,
            )
        ],
        party="attorney",
        number=NYC_CELL,
        ended_at=T,
    )
    decision = ask(db_engine, account, T + DAY)
    assert decision.rule == "D6"
    assert "Sam Counsel, tel. 617-555-0199" in decision.reason


def test_c3_a_number_a_third_party_answered_is_not_dialled_again(db_engine: Engine) -> None:
    """A third party is contacted once: who answers cannot be known before dialling, so
    their number is not dialled again, for any debt; the consumer's other numbers are."""
    account = open_account(
        db_engine,
        phones=[
            (NYC_CELL, "personal", "creditor_provided"),
            (NYC_WORK, "work", "creditor_provided"),
        ],
        debts=2,
    )
    assert ask(db_engine, account, T + DAY).allowed
    problems = record_call(
        db_engine,
        account.debt_id,
        [Said("third_party", {}, T)],
        party="third_party",
        number=NYC_CELL,
        ended_at=T,
    )
    assert problems == []
    later = ask(db_engine, account, T + 30 * DAY)
    assert (later.allowed, later.rule, later.next_allowed_at) == (False, "C3", None)
    assert "third party answered ...0100" in later.reason
    with Session(db_engine) as session:
        other = session.scalars(
            select(Debt.id).where(
                Debt.consumer_id == account.consumer_id, Debt.id != account.debt_id
            )
        ).one()
    assert ask(db_engine, Account(account.consumer_id, other), T + 30 * DAY).rule == "C3"
    assert ask(db_engine, account, T + 30 * DAY, number=NYC_WORK).allowed
    # The first contact is the one kept; a number of no consumer of the debt is refused.
    record_call(
        db_engine, account.debt_id, [], party="third_party", number=NYC_CELL, ended_at=T + DAY
    )
    assert "at 2026-12-02 15:00 UTC" in ask(db_engine, account, T + 30 * DAY).reason
    with pytest.raises(LookupError):
        record_third_party(db_engine, account.debt_id, SEATTLE_CELL, T)


def test_an_unreadable_inconvenient_time_is_kept_and_denies(db_engine: Engine) -> None:
    """A signal the gate cannot read is not dropped: D5 denies until a person reads it."""
    account = open_account(db_engine)
    problems = record_call(
        db_engine,
        account.debt_id,
        [
            Said("signal", {"kind": "inconvenient_time", "window": {"start": "evenings"}}, T),
            Said("signal", {"kind": "wrong_number"}, T),
        ],
        party="wrong_number",
        number=None,
        ended_at=T,
    )
    assert len(problems) == 2 and "inconvenient_time" in problems[0], problems
    decision = ask(db_engine, account, T + DAY)
    assert (decision.rule, decision.next_allowed_at) == ("D5", None)


def test_the_consumers_zone_is_the_address_then_the_area_code(db_engine: Engine) -> None:
    open_account(db_engine, ref="C1")
    open_account(
        db_engine, ref="C2", time_zone="Nowhere/Town", phones=[(SEATTLE_CELL, "personal", None)]
    )
    with Session(db_engine) as session:
        first, second = session.scalars(select(Consumer).order_by(Consumer.id)).all()
        assert consumer_time_zone(first, SEATTLE_CELL) == "America/New_York"
        assert consumer_time_zone(second, SEATTLE_CELL) == "America/Los_Angeles"
        assert consumer_time_zone(second) is None
        assert consumer_time_zone(second, "+18005550100") is None  # toll-free: no zone
