"""What reaches the pre-dial gate from a call (issue 17, item 6), on SQLite and PostgreSQL.

Inbound callers matched to the portfolio by their number, so a consumer-initiated
conversation starts D2 and its signals count; "I'm at work, call me after six
tonight" recorded as an inconvenient time and a consented callback; and what
``simulate`` prints about the gate after a script that names a portfolio debt.
No models: the conversation is held by the policy at text level, on a fixed clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from agent.campaigns.contact_history import record_call
from agent.campaigns.portfolio import (
    UNMATCHED_CALLER,
    account_for,
    caller_e164,
    import_portfolio,
    match_caller,
)
from agent.campaigns.predial import DialRequest, check
from agent.config import Settings
from agent.conversation.account import Account
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.scenarios import (
    Scenario,
    account_from,
    converse,
    load_script,
    outcome_of,
)
from agent.pipeline.call import Call, CallSummary
from agent.server.app import inbound_account
from agent.store.tables import Consumer, Debt, Phone
from telephony.line import CallInfo
from tools.simulate import (
    GATE_NOT_CONSULTED,
    SimulatedCall,
    consult_gate,
    portfolio_account,
    print_call,
)

DATA = Path(__file__).resolve().parent / "data"
SEATTLE = ZoneInfo("America/Los_Angeles")
#: Daniel Kim (ACME-0002, Seattle): his one number, and his one debt.
DANIEL = "+12065550117"
#: Aisha Thompson's number: two open debts (ACME-0005, MEDI-9012).
AISHA = "+13125550123"


def seattle(day: int, hour: int, minute: int = 0) -> dt.datetime:
    """A Seattle wall-clock time in December 2026 (2 December is a Wednesday)."""
    return dt.datetime(2026, 12, day, hour, minute, tzinfo=SEATTLE)


@pytest.fixture
def portfolio(db_engine: Engine) -> Engine:
    import_portfolio(db_engine, DATA / "portfolio.csv")
    return db_engine


def debt_id(engine: Engine, account_ref: str) -> int:
    with Session(engine) as session:
        found = session.scalar(select(Debt.id).where(Debt.account_ref == account_ref))
    assert found is not None
    return found


def ask(engine: Engine, account_ref: str, at: dt.datetime, number: str = DANIEL):
    with Session(engine) as session:
        return check(session, DialRequest(debt_id(engine, account_ref), number, at))


# -- inbound: the caller's number -------------------------------------------


def test_caller_ids_are_read_as_e164() -> None:
    for said in ("+12065550117", "12065550117", "2065550117", "+1 (206) 555-0117"):
        assert caller_e164(said) == DANIEL, said
    for withheld in (None, "", "anonymous", "Restricted", "12", "sip"):
        assert caller_e164(withheld) is None, withheld


def test_a_number_on_file_for_one_consumer_with_one_open_debt_is_that_debt(
    portfolio: Engine,
) -> None:
    with Session(portfolio) as session:
        match = match_caller(session, "2065550117")  # a trunk's national form
    assert match.account is not None, match.reason
    assert match.account.debt_id == debt_id(portfolio, "ACME-0002")
    assert (match.account.consumer_name, match.account.timezone) == (
        "Daniel Kim",
        "America/Los_Angeles",
    )
    assert match.account.date_of_birth == dt.date(1991, 7, 4)  # what the policy verifies
    assert match.number == DANIEL


def test_an_ambiguous_or_unknown_caller_matches_no_debt(portfolio: Engine) -> None:
    with Session(portfolio) as session:
        assert match_caller(session, AISHA).reason == "the consumer has 2 open debts"
        assert match_caller(session, "+19175550100").reason == "the number is not in the portfolio"
        assert match_caller(session, "anonymous").reason == "no caller number"
        # Daniel's number, also on file for someone else: which debt is it about?
        other = Consumer(
            external_ref="C-9",
            name="Dana Kim",
            address="4410 Fremont Ave N",
            state="WA",
            city="Seattle",
            time_zone="America/Los_Angeles",
            inconvenient=[],
        )
        other.phones = [Phone(number=DANIEL, kind="personal")]
        session.add(other)
        session.commit()
        shared = match_caller(session, DANIEL)
    assert shared.account is None and "2 consumers" in shared.reason


def test_only_open_debts_and_numbers_not_marked_wrong_are_matched(portfolio: Engine) -> None:
    with Session(portfolio) as session, session.begin():
        # ACME-0005 is disputed: MEDI-9012 is Aisha's one open debt.
        session.execute(update(Debt).where(Debt.account_ref == "ACME-0005").values(disputed=True))
        session.execute(update(Phone).where(Phone.number == DANIEL).values(wrong_number=True))
    with Session(portfolio) as session:
        aisha = match_caller(session, AISHA)
        assert aisha.account is not None
        assert aisha.account.debt_id == debt_id(portfolio, "MEDI-9012")
        assert match_caller(session, DANIEL).account is None


def test_an_unmatched_caller_is_the_demo_consumer_only_on_the_embedded_models(
    portfolio: Engine,
) -> None:
    embedded = SimpleNamespace(settings=Settings.from_env({}, dotenv=False), engine=portfolio)
    production = SimpleNamespace(
        settings=Settings.from_env(
            {"STT_URL": "http://stt", "LLM_URL": "http://llm", "TTS_URL": "http://tts"},
            dotenv=False,
        ),
        engine=portfolio,
    )
    unknown = CallInfo(path="sip", remote_number="+19175550100")
    assert inbound_account(embedded, unknown) == (Account.demo(), "+19175550100")
    assert account_from({}) == Account.demo()
    account, number = inbound_account(production, unknown)
    assert account is UNMATCHED_CALLER and number == "+19175550100"
    # Nothing to verify against: the policy can disclose nothing.
    assert (account.date_of_birth, account.account_last4, account.debt_id) == (None, None, None)
    # A matched caller is the same whatever the models.
    for ctx in (embedded, production):
        matched, number = inbound_account(ctx, CallInfo(path="twilio", remote_number="2065550117"))
        assert matched.debt_id == debt_id(portfolio, "ACME-0002") and number == DANIEL


# -- a consumer-initiated conversation reaches the gate ------------------------


async def call_in(engine: Engine, lines: tuple[str, ...], now: dt.datetime) -> ConversationPolicy:
    """Daniel calls in from his number and says ``lines``; the call ends and tells the gate."""
    ctx = SimpleNamespace(settings=Settings.from_env({}, dotenv=False), engine=engine)
    account, number = inbound_account(ctx, CallInfo(path="sip", remote_number=DANIEL))
    prompts = PromptSet.load(ctx.settings.prompt_version)
    held = converse(Scenario("call_in", "", account, lines), prompts, clock=lambda: now)
    call = Call(ctx, None, transport_name="sip", policy=held.policy, number=number)  # type: ignore[arg-type]
    await call._tell_the_gate()
    return held.policy


async def test_at_work_call_me_after_six_tonight_is_a_window_and_a_consented_callback(
    portfolio: Engine,
) -> None:
    """Wednesday 14:25 in Seattle, 22:25 UTC: "tonight" is Seattle's Wednesday."""
    policy = await call_in(
        portfolio,
        (
            "Yes, this is Daniel Kim.",
            "July fourth, nineteen ninety-one.",
            "I'm at work, call me after six tonight.",
        ),
        seattle(2, 14, 25).astimezone(dt.UTC),
    )
    assert (policy.party, policy.disposition) == ("right_party", "callback_requested")
    with Session(portfolio) as session:
        debt = session.get_one(Debt, debt_id(portfolio, "ACME-0002"))
        assert debt.last_conversation_at == seattle(2, 14, 25)  # D2 starts: consumer-initiated
        assert debt.consumer.inconvenient, "the inconvenient time was not recorded"
    # Before six: D2 (and the inconvenient hours); the gate names six as the next time.
    early = ask(portfolio, "ACME-0002", seattle(2, 17, 30))
    assert not early.allowed and early.next_allowed_at == seattle(2, 18)
    # At six, the consented callback: D2 does not bar it, and it does not count (D1).
    six = ask(portfolio, "ACME-0002", seattle(2, 18))
    assert six.allowed and six.consented_callback, six
    # The day after: D2 again (the callback was for Wednesday evening).
    assert ask(portfolio, "ACME-0002", seattle(3, 10)).rule == "D2"


async def test_stop_calling_on_an_inbound_call_before_verification_reaches_the_gate(
    portfolio: Engine,
) -> None:
    now = seattle(2, 10).astimezone(dt.UTC)
    policy = await call_in(portfolio, ("Stop calling me.",), now)
    assert policy.disposition == "stop_calling" and policy.party != "right_party"
    decision = ask(portfolio, "ACME-0002", seattle(10, 10))
    assert (decision.allowed, decision.rule) == (False, "D7")
    with Session(portfolio) as session:  # no conversation about the debt took place
        assert session.get_one(Debt, debt_id(portfolio, "ACME-0002")).last_conversation_at is None


# -- simulate: a script's debt, and the gate afterwards -----------------------


def test_a_scripts_debt_is_resolved_against_the_portfolio(portfolio: Engine) -> None:
    account, number = portfolio_account(portfolio, "ACME-0001")
    assert (account.consumer_name, account.debt_id, number) == (
        "Maria Alvarez",
        debt_id(portfolio, "ACME-0001"),
        "+16175550142",
    )
    assert account.timezone == "America/New_York"
    with pytest.raises(LookupError, match="NOPE-1"):
        portfolio_account(portfolio, "NOPE-1")


async def test_simulate_prints_what_the_gate_says_about_the_next_attempt(
    portfolio: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    now = seattle(2, 14, 25).astimezone(dt.UTC)
    await call_in(
        portfolio,
        ("Yes, this is Daniel Kim.", "July fourth, nineteen ninety-one.", "Call me tomorrow."),
        now,
    )
    report = consult_gate(portfolio, debt_id(portfolio, "ACME-0002"), now)
    [(number, kind, decision)] = report.decisions
    assert (number, kind, decision.rule) == (DANIEL, "personal", "D2")
    scenario = Scenario("callback", "", account_for_debt(portfolio, "ACME-0002"), ("...",))
    print_call(SimulatedCall(scenario, CallSummary("c1", 1.0, "agent_ended"), gate=report))
    out = capsys.readouterr().out
    assert "pre-dial gate on ACME-0002, asked at 2026-12-02 22:25 UTC:" in out
    assert "...0117 (personal): denied by D2: a conversation about this debt on 2026-12-02" in out
    # Tomorrow, the consented day, from 08:00 Seattle (D4).
    assert "next allowed: 2026-12-03 16:00 UTC" in out
    assert "last conversation 2026-12-02 22:25 UTC" in out

    print_call(SimulatedCall(scenario, CallSummary("c2", 1.0, "agent_ended")))
    assert GATE_NOT_CONSULTED in capsys.readouterr().out


def account_for_debt(engine: Engine, account_ref: str):
    with Session(engine) as session:
        return account_for(session, debt_id(engine, account_ref))


def test_the_example_script_about_a_portfolio_debt(portfolio: Engine) -> None:
    """tests/data/callback_on_portfolio_debt.yaml, at text level, as docs/dialing.md shows it."""
    scenario = load_script(DATA / "callback_on_portfolio_debt.yaml")
    assert scenario.debt_ref == "ACME-0002"
    account, number = portfolio_account(portfolio, scenario.debt_ref)
    now = seattle(2, 14, 25).astimezone(dt.UTC)
    prompts = PromptSet.load(Settings.from_env({}, dotenv=False).prompt_version)
    held = converse(replace(scenario, account=account), prompts, clock=lambda: now)
    assert outcome_of(held.policy)["disposition"] == scenario.expect["disposition"]
    policy = held.policy
    assert account.debt_id is not None
    problems = record_call(
        portfolio, account.debt_id, policy.events, party=policy.party, number=number, ended_at=now
    )
    assert problems == []
    lines = consult_gate(portfolio, account.debt_id, now).lines()
    assert lines[1].startswith("  ...0117 (personal): denied by D2: ")
    assert lines[1].endswith("the callback asked for opens 2026-12-03 02:00 UTC; also D5")
    assert lines[2] == "    next allowed: 2026-12-03 02:00 UTC"  # 18:00 in Seattle
