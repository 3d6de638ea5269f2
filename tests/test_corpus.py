"""The adversarial corpus (``agent/conversation/scripts/corpus/``): every script holds at text
level, and what the callers said reaches the pre-dial gate, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.campaigns.contact_history import record_call
from agent.campaigns.portfolio import import_portfolio
from agent.campaigns.predial import DialRequest, check
from agent.conversation.prompts import PromptSet
from agent.conversation.scenarios import ScriptError
from agent.store.tables import ConsentSource, Debt, Phone
from tools.corpus import STAGE_PREFIXES, CorpusScript, hold, load_corpus, load_family

PROMPTS = PromptSet.load("collections-v3")
CORPUS = load_corpus()
DATA = Path(__file__).resolve().parent / "data"
#: Daniel Kim (ACME-0002), Seattle: one number, one debt.
DANIEL = "+12065550117"


def test_the_corpus_has_at_least_300_scripts_over_every_family():
    families = Counter(s.family for s in CORPUS)
    assert sum(families.values()) >= 300, families
    for family in (
        "third_party",
        "verification",
        "signals",
        "offers",
        "refusals",
        "card_data",
        "dates_times",
        "talk_over",
    ):
        assert families[family] >= 15, families


@pytest.mark.parametrize("script", CORPUS, ids=lambda s: f"{s.family}/{s.name}")
def test_every_script_holds_at_text_level(script: CorpusScript):
    outcome = hold(script, PROMPTS)
    transcript = "\n".join(f"{who}: {text}" for who, text in outcome.transcript.lines)
    assert outcome.passed, "\n".join([*outcome.problems, transcript])


def test_a_line_tried_at_every_stage_is_one_script_per_stage(tmp_path):
    family = tmp_path / "family.yaml"
    family.write_text(
        "- name: stop\n  say: Stop calling me.\n  at: [greeting, read_back]\n  over: [null, 1.5]\n"
    )
    scripts = load_family(family)
    assert [s.name for s in scripts] == [
        "stop@greeting",
        "stop@greeting+1.5s",
        "stop@read_back",
        "stop@read_back+1.5s",
    ]
    assert scripts[3].scenario.lines[-1] == "Stop calling me."
    assert len(scripts[3].scenario.lines) == len(STAGE_PREFIXES["read_back"]) + 1
    assert scripts[3].scenario.barge_in[-1] == 1.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- name: x\n  say: hi\n  at: [lunch]\n", "'at' may name only"),
        ("- name: x\n  caller: [hi]\n  expect: {mood: calm}\n", "'expect' may name only"),
        ("- name: x\n  caller: [hi]\n  clock: yesterday\n", "ISO instant"),
        ("- name: x\n  caller: [hi]\n- name: x\n  caller: [ho]\n", "used twice"),
        ("- name: x\n", "'caller' lines or a 'say' line"),
    ],
)
def test_a_bad_corpus_file_says_what_is_wrong(tmp_path, text, message):
    family = tmp_path / "family.yaml"
    family.write_text(text)
    with pytest.raises(ScriptError, match=message):
        load_family(family)


# -- the gate: each signal the corpus gives stops the next call ------------------------

#: A script per signal, and the rule that must deny the next call about the debt.
GATE_CASES = {
    "stop-calling@negotiation": "D7",
    "cease@greeting": "D7",
    "attorney-name-and-number@negotiation": "D6",
    "bankruptcy@identity": "D9",
    "dispute-not-mine@greeting": "D9",
    "workplace@negotiation": "D5",
}


@pytest.mark.parametrize(("name", "rule"), sorted(GATE_CASES.items()))
def test_the_signals_said_reach_the_gate(db_engine: Engine, name: str, rule: str):
    script = next(s for s in CORPUS if s.name == name)
    outcome = hold(script, PROMPTS)
    import_portfolio(db_engine, DATA / "portfolio.csv")
    with Session(db_engine) as session:
        debt = session.scalar(select(Debt.id).where(Debt.account_ref == "ACME-0002"))
    assert debt is not None
    policy = outcome.transcript.policy
    ended = script.clock + dt.timedelta(minutes=3)
    record_call(db_engine, debt, policy.events, party=policy.party, number=DANIEL, ended_at=ended)
    # Ten days on, a weekday at 11:00 in Seattle: nothing but the signal stands in the way.
    later = dt.datetime(2026, 12, 14, 19, 0, tzinfo=dt.UTC)
    number = DANIEL
    if rule == "D5":  # a workplace that forbids calls: its number is refused
        number = "+12065550199"
        with Session(db_engine) as session:
            consumer = session.get(Debt, debt)
            assert consumer is not None
            work = Phone(number=number, kind="work", consent_source=ConsentSource.CREDITOR_PROVIDED)
            work.consent_date = dt.date(2026, 1, 5)
            consumer.consumer.phones.append(work)
            session.commit()
    with Session(db_engine) as session:
        decision = check(session, DialRequest(debt, number, later))
    assert (decision.allowed, decision.rule) == (False, rule), decision.reason
