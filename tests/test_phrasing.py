"""Production mode's per-turn request to the LLM and its tool gate."""

import datetime as dt
import re
from types import SimpleNamespace

import pytest

from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Reply, Templates
from agent.conversation.scenarios import account_from
from agent.pipeline.phrasing import Phrasing

PROMPTS = PromptSet.load("collections-v3")
ACCOUNT_DATA = re.compile(r"\$|acme|percent|month|1,200", re.I)


def phrasing(*lines: str, **account) -> Phrasing:
    policy = ConversationPolicy(
        account_from(account), Templates(PROMPTS.templates), dt.date(2026, 12, 2)
    )
    reply = policy.opening(PROMPTS.greeting.format(consumer_name=policy.account.consumer_name))
    policy.played(reply, len(reply.texts))
    for line in lines:
        reply = policy.on_caller_turn(line)
        policy.played(reply, len(reply.texts))  # each reply heard to its end
    return Phrasing(policy, PROMPTS.turn)


VERIFY = ("Yes, this is Jordan Smith.", "March fifth, nineteen eighty.")


def test_before_verification_nothing_is_phrased_and_an_instruction_holds_nothing_of_the_debt():
    p = phrasing(VERIFY[0])
    reply = p.policy.on_caller_turn("Mmm, hold on, what?")
    assert reply.phrase is None  # before verification every text is said verbatim
    text = p.instruction("Mmm, hold on, what?", reply.texts[0])
    assert "not verified" in text and "nothing about any debt" in text
    assert not ACCOUNT_DATA.search(text)
    assert "record_promise" not in text and "transfer" in text


def test_after_verification_the_instruction_gives_the_envelope_and_the_reference():
    p = phrasing(*VERIFY, balance=1200, max_discount_pct=30, min_installment=50)
    reply = p.policy.on_caller_turn("I can do twenty dollars a month.")
    text = p.instruction("I can do twenty dollars a month.", reply.phrase)
    assert "$1,200" in text and "30 percent" in text and "$50 a month" in text
    assert reply.phrase in text and "record_promise" in text and "2026-12-02" in text


def test_the_request_replaces_the_caller_turn_and_offers_only_the_allowed_tools():
    p = phrasing(VERIFY[0])
    history = [
        {"role": "system", "content": "You are the agent."},
        {"role": "assistant", "content": "Am I speaking with Jordan Smith?"},
        {"role": "user", "content": "Uh, what?"},
    ]
    reply = Reply(["Am I speaking with Jordan Smith?"], phrase="Am I speaking with Jordan Smith?")
    context = p.context(history, "Uh, what?", reply)
    messages = context.get_messages()
    assert messages[:2] == history[:2] and len(messages) == 3
    assert messages[-1]["role"] == "user" and '"Uh, what?"' in messages[-1]["content"]
    assert [t.name for t in context.tools.standard_tools] == ["transfer", "end_call"]
    assert p.pending is reply


async def test_a_tool_call_is_gated_by_the_policy_and_its_answer_is_spoken():
    p = phrasing(*VERIFY, min_installment=50)
    spoken = []
    p.bind(lambda reply: _append(spoken, reply))
    text = "I can maybe pay something."
    request = p.context([], text, p.policy.on_caller_turn(text))

    result, run_llm = await _call_tool(
        p, request, amount=20, date="2026-12-10", method="check", monthly=True
    )
    assert result["allowed"] is False and run_llm is False  # no second LLM turn
    assert p.policy.promise is None and "$100 a month" in spoken[0].texts[0]  # countered
    assert p.take_fallback() is None  # the tool's answer replaced the pending reply


def test_phrase_mode_needs_the_turn_template():
    with pytest.raises(ValueError, match="turn.txt"):
        Phrasing(phrasing().policy, "")


async def _append(into, reply):
    into.append(reply)


async def _call_tool(p, context, **arguments):
    """The LLM calls record_promise with ``arguments`` for request ``context``: what the
    gate answered it, and whether it asked for another LLM turn."""
    results = []

    async def result_callback(result, *, properties=None):
        results.append((result, properties.run_llm if properties else None))

    await p._gate(
        SimpleNamespace(
            function_name="record_promise",
            arguments=arguments,
            context=context,
            result_callback=result_callback,
        )
    )
    return results[0]


async def test_after_the_deadline_the_llm_is_too_late_for_tools_and_words():
    p = phrasing(*VERIFY, min_installment=50)
    abandoned = []
    p.abandon = abandoned.append
    reply = p.policy.on_caller_turn("I can do twenty dollars a month.")
    request = p.context([], "I can do twenty dollars a month.", reply)
    assert p.expire(p.turn - 1) is None  # an earlier request's deadline never fires here
    assert abandoned == []
    assert p.expire(p.turn) is reply and p.expired
    assert abandoned == [request]  # the LLM service gives the request up
    assert not p.begin(p.turn)  # the LLM's words, when they come, are dropped
    spoken = []
    p.bind(lambda r: _append(spoken, r))

    result, _ = await _call_tool(p, request, amount=300, date="2026-12-10", method="check")
    assert result["allowed"] is False and "too late" in result["reason"]
    assert spoken == [] and p.policy.promise is None


def test_once_the_llm_has_begun_the_deadline_passes_quietly():
    p = phrasing(*VERIFY, min_installment=50)
    abandoned = []
    p.abandon = abandoned.append
    reply = p.policy.on_caller_turn("I can do twenty dollars a month.")
    p.context([], "I can do twenty dollars a month.", reply)
    assert p.begin(p.turn)
    assert p.expire(p.turn) is None and not p.expired
    assert abandoned == []  # its answer is being spoken


def two_requests() -> tuple[Phrasing, object]:
    """A phrasing on its second request, and the first request's context."""
    p = phrasing(*VERIFY, min_installment=50)
    first = p.context([], "Hmm.", p.policy.on_caller_turn("I can do twenty dollars a month."))
    p.context([], "Okay.", p.policy.on_caller_turn("I can do twenty dollars a month."))
    return p, first


def test_an_older_requests_late_words_do_not_begin_the_next():
    p, _ = two_requests()
    reply = p.pending
    assert not p.begin(p.turn - 1)
    assert p.expire(p.turn) is reply  # not begun: the older request's words did not count


async def test_an_older_requests_late_tool_call_is_dropped():
    p, first = two_requests()
    result, _ = await _call_tool(p, first, amount=300, date="2026-12-10", method="check")
    assert result["allowed"] is False and p.policy.promise is None
    assert p.pending is not None  # the current request still waits for its phrasing
