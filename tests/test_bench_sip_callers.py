"""The bench's caller: a consumer on file whose words keep the policy negotiating, every
answer after the first one a reply the LLM may phrase, and no call ending."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from sqlalchemy.orm import Session

from agent.campaigns.portfolio import match_caller
from agent.conversation.account import Account
from agent.conversation.guard import GuardContext, Instruction, OutputGuard
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Reply, Templates
from agent.store.database import create_engine_for
from tools.bench_sip_callers import (
    CALLER_NUMBER,
    SIPP_SCENARIO,
    caller_on_file,
    caller_words,
    phrased_counter,
)

PROMPTS = PromptSet.load("collections-v3")
TODAY = dt.date(2026, 12, 2)
TURNS = 30


def greeted() -> tuple[ConversationPolicy, Reply]:
    policy = ConversationPolicy(Account.demo(), Templates(PROMPTS.templates), TODAY)
    greeting = PROMPTS.greeting.format(consumer_name=policy.account.consumer_name)
    return policy, policy.opening(greeting)


def answers(policy: ConversationPolicy, words: str, turns: int = TURNS) -> list[Reply]:
    """The policy's answers to ``turns`` turns of ``words``, each heard to its end."""
    replies = []
    for _ in range(turns):
        reply = policy.on_caller_turn(words)
        policy.played(reply, len(reply.texts))
        replies.append(reply)
    return replies


def test_the_first_turn_verifies_and_every_later_one_is_phrased_and_none_ends_the_call():
    policy, greeting = greeted()
    policy.played(greeting, len(greeting.texts))

    first, *rest = answers(policy, caller_words())

    assert policy.verified and first.phrase is None  # the mini-Miranda, word for word
    assert "mini_miranda" in first.keys
    assert all(reply.phrase is not None for reply in rest), [r.keys for r in rest]
    assert not any(reply.end_call for reply in [first, *rest])


@pytest.mark.parametrize("cut", ["greeting", "joined"])
def test_what_puts_a_script_out_of_step_costs_at_most_one_turn(cut):
    """A greeting the caller spoke over is asked again; two utterances may reach the
    policy as one turn: the same words still verify, then keep it negotiating."""
    policy, greeting = greeted()
    policy.played(greeting, 0 if cut == "greeting" else len(greeting.texts))
    words = caller_words()
    if cut == "joined":
        words = f"{words} {words}"

    replies = answers(policy, words)

    assert policy.verified
    assert all(reply.phrase is not None for reply in replies[2:])
    assert not any(reply.end_call for reply in replies)


def test_the_stub_llms_counter_offer_passes_the_guard():
    """As the call's guard checks it (``Dialogue._context``): phrase mode speaks it."""
    policy, greeting = greeted()
    policy.played(greeting, len(greeting.texts))
    *_, reply = answers(policy, caller_words(), turns=2)
    account = policy.account
    instruction = Instruction.for_turn(reply.phrase, account, verified=True)
    context = GuardContext.for_account(account, verified=True, instruction=instruction)

    verdict = OutputGuard().check_response(phrased_counter(), context)

    assert verdict.allowed, verdict


def test_the_caller_is_on_file_for_the_demo_account(tmp_path):
    url = f"sqlite:///{tmp_path / 'bench.db'}"

    caller_on_file(url, tmp_path)

    engine = create_engine_for(url)
    try:
        with Session(engine) as session:
            match = match_caller(session, CALLER_NUMBER)
    finally:
        engine.dispose()
    assert match.account is not None, match.reason
    assert dataclasses.replace(match.account, debt_id=None) == Account.demo()
    assert f"From: <sip:{CALLER_NUMBER}@" in SIPP_SCENARIO  # the number sipp calls from
