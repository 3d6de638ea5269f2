"""The conversation policy, rule by rule (DOMAIN C1-C12), at text level."""

import datetime as dt
import re

from agent.policy import ConversationPolicy, Stage, Templates
from agent.prompts import PromptSet
from agent.scenarios import account_from

TODAY = dt.date(2026, 12, 2)
PROMPTS = PromptSet.load("collections-v1")
DEBT_WORDS = re.compile(r"debt|balance|owe|collect|payment|\$|acme|account", re.I)


def call(**account):
    policy = ConversationPolicy(account_from(account), Templates(PROMPTS.templates), TODAY)
    greeting = PROMPTS.greeting.format(consumer_name=policy.account.consumer_name)
    said = list(policy.opening(greeting).texts)
    return policy, said


def turns(policy, *lines):
    said = []
    for line in lines:
        said.extend(policy.on_caller_turn(line).texts)
    return said


def kinds(policy):
    return [e.kind for e in policy.events]


def verified(**account):
    policy, _ = call(**account)
    turns(policy, "Yes, this is Jordan Smith.", "March fifth, nineteen eighty.")
    assert policy.verified
    return policy


def test_c1_the_first_sentence_says_who_and_that_it_is_automated():
    policy, said = call()
    assert "automated assistant" in said[0] and "Northwind Recovery" in said[0]
    assert kinds(policy)[:1] == ["ai_disclosure"]


def test_c1_a_robot_question_is_answered_truthfully_with_a_person_offered():
    policy, _ = call()
    said = turns(policy, "Hang on, am I talking to a robot?")
    assert said[0].startswith("Yes, I am an automated assistant")
    assert "transfer you to a person" in said[0]
    assert policy.stage is Stage.OPENING  # and the question is asked again
    later = verified()
    assert turns(later, "Is this a real person?")[0].startswith("Yes, I am an automated")


def test_c2_recording_is_announced_and_an_objection_goes_to_a_person():
    policy, said = call()
    assert "recorded" in said[0] and "recording_notice" in kinds(policy)
    reply = policy.on_caller_turn("I do not consent to this call being recorded.")
    assert reply.transfer and reply.end_call
    assert policy.disposition == "escalated_to_human"


def test_c3_nothing_about_the_debt_before_verification():
    policy, said = call()
    said += turns(policy, "Yes, speaking.", "January 1st 1990.", "February 2nd 1991.")
    assert not policy.verified and policy.disposition == "hung_up_before_verify"
    assert not any(DEBT_WORDS.search(text) for text in said[1:]), said
    assert not any(DEBT_WORDS.search(t) for t in said[0:1] if "Recovery" not in t)


def test_c3_a_third_party_learns_nothing():
    policy, said = call()
    said += turns(policy, "No, this is his wife, he's at work.")
    assert policy.party == "third_party" and policy.stage is Stage.ENDED
    assert not any(DEBT_WORDS.search(text) for text in said[1:])


def test_c4_the_mini_miranda_comes_right_after_verification():
    policy, _ = call()
    turns(policy, "Yes, this is Jordan Smith.")
    said = turns(policy, "March fifth, nineteen eighty.")
    assert "attempt to collect a debt" in said[0] and "debt collector" in said[0]
    events = kinds(policy)
    assert events.index("verification") < events.index("mini_miranda")


def test_c5_c9_arrest_and_suit_questions_are_answered_without_threat():
    policy = verified(statute_status="time_barred")
    said = " ".join(turns(policy, "Am I going to be arrested or sued over this?"))
    assert "No one will arrest you" in said and "we will not sue you" in said
    within = verified()
    said = " ".join(turns(within, "Will you sue me?"))
    assert (
        "sue" not in said.replace("we will not sue you", "") and "can't give legal advice" in said
    )


def test_c6_an_offer_outside_the_envelope_is_countered_at_its_edge():
    policy = verified(max_discount_pct=30, balance=1200)
    said = turns(policy, "I want a ninety percent discount.")
    assert "$840" in said[0] and "30 percent" in said[0]
    assert "offer_outside_envelope" in kinds(policy)
    # "I'll pay" said with a discount is no agreement to the balance (Whisper writes "90%").
    conditional = verified(max_discount_pct=30, balance=1200)
    said = turns(conditional, "I'll only pay if you give me a 90% discount.")
    assert "$840" in said[0] and conditional.stage is Stage.NEGOTIATION
    small = verified(min_installment=50)
    assert "$50 a month" in turns(small, "I can do twenty dollars a month.")[0]
    long = verified(balance=1200, max_term_months=12, min_installment=50)
    assert "12 months" in turns(long, "I can pay fifty dollars a month.")[0]


def test_c6_a_promise_inside_the_envelope_is_confirmed_with_amount_date_and_method():
    policy = verified()
    said = turns(
        policy, "I can do two hundred dollars a month.", "The fifteenth, by bank transfer."
    )
    assert policy.disposition == "payment_plan"
    assert policy.promise.amount_cents == 20000 and policy.promise.installments == 6
    assert "$200 a month" in said[-2]


def test_c8_each_signal_ends_the_call_with_its_disposition():
    for line, disposition in [
        ("I dispute this, it's not my debt.", "dispute"),
        ("Talk to my lawyer.", "attorney"),
        ("I lost my job and can't afford anything.", "hardship"),
        ("I filed for bankruptcy last year.", "bankruptcy"),
    ]:
        policy = verified()
        reply = policy.on_caller_turn(line)
        assert reply.end_call and policy.disposition == disposition, line
        assert {"kind": disposition if disposition != "attorney" else "attorney"} in [
            e.detail for e in policy.events if e.kind == "signal"
        ]


def test_c10_voicemail_gets_only_the_limited_content_message():
    policy, _ = call()
    said = turns(policy, "You've reached Jordan, please leave a message after the tone.")
    assert policy.disposition == "voicemail_lcm_left" and len(said) == 1
    assert not DEBT_WORDS.search(said[0].replace("Northwind", ""))
    assert "call us back" in said[0]


def test_c11_a_card_number_read_aloud_is_refused_and_not_kept():
    policy = verified()
    said = turns(policy, "Yes I'll pay it all, my card is 4111 1111 1111 1111.")
    assert said[0].startswith("Please don't read card numbers aloud")
    assert "card_number_spoken" in kinds(policy)
    assert not any("4111" in str(e.detail) for e in policy.events)


def test_c12_stop_calling_is_honoured_at_once_even_before_verification():
    policy, _ = call()
    reply = policy.on_caller_turn("Stop calling me.")
    assert reply.end_call and policy.disposition == "stop_calling"
    assert {"kind": "stop_calling"} in [e.detail for e in policy.events]


def test_c12_wrong_number_and_a_person_are_honoured():
    policy, _ = call()
    policy.on_caller_turn("Wrong number, there's no Jordan here.")
    assert (policy.party, policy.disposition) == ("wrong_number", "wrong_number")
    human, _ = call()
    assert human.on_caller_turn("Let me talk to a real person.").transfer


def test_every_agent_line_is_a_fixed_template():
    # Spoken verbatim, never generated: each line is a template with account values filled.
    patterns = [
        re.compile("^" + re.sub(r"\\{\w+\\}", ".+", re.escape(text)) + "$")
        for text in [*PROMPTS.templates.values(), PROMPTS.greeting]
    ]
    policy, said = call()
    said += turns(
        policy,
        "Yes, this is Jordan Smith.",
        "March fifth, nineteen eighty.",
        "I'll pay it all.",
        "This Friday, with my debit card.",
    )
    for line in said:
        assert any(p.match(line) for p in patterns), line


# -- production mode: the LLM's tool calls go through the same rules ---------------


def tool(policy, name, **args):
    return policy.on_tool_call(name, args)


def test_c3_before_verification_the_llm_is_offered_no_tool_about_the_debt():
    policy, _ = call()
    assert policy.tools() == ("transfer", "end_call")
    outcome = tool(policy, "record_dispute")
    assert not outcome.allowed and "not allowed" in outcome.reason
    outcome = tool(policy, "record_promise", amount=1200, date="2026-12-10", method="check")
    assert not outcome.allowed and policy.promise is None and policy.stage is Stage.OPENING
    assert not any(DEBT_WORDS.search(text) for text in outcome.reply.texts)
    assert kinds(policy).count("tool_denied") == 2


def test_c6_a_promise_the_llm_records_inside_the_envelope_is_confirmed():
    policy = verified(balance=1200)
    assert policy.tools() == ("record_promise", "record_dispute", "transfer", "end_call")
    outcome = tool(policy, "record_promise", amount=1200, date="2026-12-10", method="debit_card")
    assert outcome.allowed and outcome.reply.end_call
    assert (policy.promise.amount_cents, policy.promise.due) == (120000, dt.date(2026, 12, 10))
    assert "$1,200" in outcome.reply.texts[0] and "tool_call" in kinds(policy)


def test_c6_a_promise_the_llm_records_outside_the_envelope_is_refused_and_countered():
    policy = verified(min_installment=50)
    outcome = tool(policy, "record_promise", amount=20, date="2026-12-10", method="check")
    assert not outcome.allowed and policy.promise is None
    assert "$50 a month" in outcome.reply.texts[0]
    assert kinds(policy)[-2:] == ["offer_outside_envelope", "tool_denied"]
    plan = verified(balance=1200, max_term_months=12, min_installment=50)
    outcome = tool(
        plan, "record_promise", amount=60, date="2026-12-10", method="check", monthly=True
    )
    assert not outcome.allowed and "12 months" in outcome.reply.texts[0]


def test_a_tool_call_with_bad_arguments_is_refused_with_the_reason():
    for args, reason in [
        ({"amount": 1200, "date": "2026-12-01", "method": "check"}, "in the past"),
        ({"amount": 1200, "date": "next week", "method": "check"}, "YYYY-MM-DD"),
        ({"amount": -5, "date": "2026-12-10", "method": "check"}, "positive"),
        ({"amount": 1200, "date": "2026-12-10", "method": "card digits"}, "method must be"),
    ]:
        policy = verified()
        outcome = policy.on_tool_call("record_promise", args)
        assert not outcome.allowed and reason in outcome.reason, args
        assert policy.promise is None and not outcome.reply.end_call
    assert "unknown tool" in tool(verified(), "refund").reason


def test_c8_c12_the_llm_can_record_a_dispute_transfer_or_end_the_call():
    disputed = verified()
    assert tool(disputed, "record_dispute").allowed and disputed.disposition == "dispute"
    assert {"kind": "dispute"} in [e.detail for e in disputed.events if e.kind == "signal"]
    person, _ = call()
    assert tool(person, "transfer").reply.transfer
    assert person.disposition == "escalated_to_human"
    refused = verified()
    assert tool(refused, "end_call", reason="refused").reply.end_call
    assert refused.disposition == "refused" and refused.tools() == ()
    assert not tool(refused, "transfer").allowed  # the call is over


def test_only_the_negotiation_questions_may_be_phrased():
    policy, said = call()
    assert policy.on_caller_turn("Yes, this is Jordan Smith.").phrase is None  # verification
    reply = verified().on_caller_turn("I can do twenty dollars a month.")
    assert reply.phrase == reply.texts[0] and "$50 a month" in reply.phrase
    card = verified().on_caller_turn("I can do twenty a month, card 4111 1111 1111 1111.")
    assert card.phrase is None  # the warning is said verbatim
