"""The conversation policy, rule by rule (rules C1-C13), at text level."""

import datetime as dt
import re

import pytest

from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Templates
from agent.conversation.scenarios import account_from

TODAY = dt.date(2026, 12, 2)  # a Wednesday
NOW = dt.datetime(2026, 12, 2, 16, 0, tzinfo=dt.UTC)  # 10:00 in Chicago
PROMPTS = PromptSet.load("collections-v3")
DEBT_WORDS = re.compile(r"debt|balance|owe|collect|payment|\$|acme|account|northwind", re.I)


def call(**account):
    policy = ConversationPolicy(
        account_from(account), Templates(PROMPTS.templates), TODAY, clock=lambda: NOW
    )
    greeting = PROMPTS.greeting.format(consumer_name=policy.account.consumer_name)
    reply = policy.opening(greeting)
    policy.played(reply, len(reply.texts))
    return policy, list(reply.texts)


def turns(policy, *lines):
    """Each line said after the agent's last reply was heard in full."""
    said = []
    for line in lines:
        reply = policy.on_caller_turn(line)
        policy.played(reply, len(reply.texts))
        said.extend(reply.texts)
    return said


def kinds(policy):
    return [e.kind for e in policy.events]


def signals(policy):
    return [e.detail for e in policy.events if e.kind == "signal"]


def verified(**account):
    policy, _ = call(**account)
    turns(policy, "Yes, this is Jordan Smith.", "March fifth, nineteen eighty.")
    assert policy.verified
    return policy


# -- C1, C2 ----------------------------------------------------------------------------


def test_c1_the_first_sentence_says_who_and_that_it_is_automated_but_names_no_company():
    policy, said = call()
    assert "automated assistant" in said[0] and "Riley" in said[0]
    assert "Northwind" not in said[0] and not DEBT_WORDS.search(said[0])
    assert kinds(policy)[:2] == ["ai_disclosure", "recording_notice"]


def test_c1_the_company_is_named_to_whoever_asks_who_is_calling_without_revealing_a_debt():
    policy, _ = call()
    said = turns(policy, "Who is this?")
    assert "Northwind" in said[0] and "Recovery" not in said[0]
    assert "company_named" in kinds(policy) and not policy.verified


def test_c1_a_robot_question_is_answered_truthfully_with_a_person_offered():
    policy, _ = call()
    said = turns(policy, "Hang on, am I talking to a robot?")
    assert said[0].startswith("Yes, I am an automated assistant")
    assert "a person" in said[0]
    assert policy.stage is Stage.OPENING and len(said) == 2  # and the question is asked again
    later = verified()
    assert turns(later, "Is this a real person?")[0].startswith("Yes, I am an automated")


def test_c2_recording_is_announced_and_an_objection_goes_to_a_person():
    policy, said = call()
    assert "recorded" in said[0] and "recording_notice" in kinds(policy)
    reply = policy.on_caller_turn("I do not consent to this call being recorded.")
    assert reply.transfer and reply.end_call
    assert policy.disposition == "escalated_to_human"


# -- C3: verification fails closed -----------------------------------------------------


def test_c3_nothing_about_the_debt_before_verification_and_a_failure_gives_the_number():
    policy, said = call()
    said += turns(policy, "Yes, speaking.", "January 1st 1990.", "February 2nd 1991.")
    assert not policy.verified and policy.disposition == "verification_failed"
    assert {"result": "failed", "reason": "no match"} in [
        e.detail for e in policy.events if e.kind == "verification"
    ]
    assert "1-800-555-0100" in said[-1]
    assert not any(DEBT_WORDS.search(text) for text in said)


@pytest.mark.parametrize(
    "line",
    [
        "No, this is his wife, he's at work.",
        "This is Sam, her husband.",
        "She's not here right now.",
        "I handle his bills, what is it?",
        "I'm calling on her behalf.",
        "This is Dana.",
    ],
)
def test_c3_a_third_party_learns_nothing(line):
    policy, said = call()
    said += turns(policy, line)
    assert policy.party == "third_party" and policy.stage is Stage.ENDED
    assert not any(DEBT_WORDS.search(text) for text in said)


@pytest.mark.parametrize(
    "line",
    [
        "This is her husband, her birthday is March 5th 1980.",
        "Her date of birth is March fifth, nineteen eighty.",
        "Wait. This is Sam, her husband.",
        "I'm his brother, March 5th 1980.",
    ],
)
def test_c3_a_third_party_who_knows_the_date_of_birth_is_still_a_third_party(line):
    policy, said = call()
    said += turns(policy, "Yes.", line)
    assert not policy.verified and policy.party == "third_party"
    assert "mini_miranda" not in kinds(policy)
    assert not any(DEBT_WORDS.search(text) for text in said)


def test_c3_an_unclear_answer_is_asked_again_never_taken_as_yes():
    policy, said = call()
    said += turns(policy, "Wait.")
    assert policy.stage is Stage.OPENING and "Am I speaking with Jordan Smith" in said[-1]
    said += turns(policy, "Hmm.", "What?")
    assert policy.stage is Stage.ENDED and not policy.verified
    assert not any(DEBT_WORDS.search(text) for text in said)


@pytest.mark.parametrize(
    "dob",
    [
        "March fifth, nineteen eighty.",
        "3/5/80",
        "oh three oh five eighty",
        "three five eighty",
        "March 5th 80",
        "the fifth of March 1980",
        "03-05-1980",
        "January 5th, no sorry, March 5th 1980",
    ],
)
def test_c3_dates_of_birth_are_read_in_every_common_form(dob):
    policy, _ = call()
    turns(policy, "Yes, speaking.", dob)
    assert policy.verified, dob


def test_c3_a_partial_date_of_birth_is_asked_for_in_full():
    policy, _ = call()
    said = turns(policy, "Yes.", "March 1980.")
    assert "full date of birth" in said[-1] and not policy.verified
    turns(policy, "March 5th 1980.")
    assert policy.verified


# -- C4 and what was heard -------------------------------------------------------------


def test_c4_the_mini_miranda_comes_right_after_verification():
    policy, _ = call()
    turns(policy, "Yes, this is Jordan Smith.")
    said = turns(policy, "March fifth, nineteen eighty.")
    assert "attempt to collect a debt" in said[0] and "debt collector" in said[0]
    events = kinds(policy)
    assert events.index("verification") < events.index("mini_miranda")


def test_c4_a_cut_disclosure_is_not_recorded_and_is_said_again_in_full():
    policy, _ = call()
    turns(policy, "Yes, this is Jordan Smith.")
    reply = policy.on_caller_turn("March fifth, nineteen eighty.")
    policy.played(reply, 0)  # "Okay." two seconds into the mini-Miranda
    assert "mini_miranda" not in kinds(policy)
    again = policy.on_caller_turn("Okay.")
    assert again.texts[0] == reply.texts[0]  # the mini-Miranda, in full, first
    assert policy.promise is None and policy.stage is Stage.NEGOTIATION
    policy.played(again, len(again.texts))
    assert "mini_miranda" in kinds(policy)


def test_words_over_an_unheard_question_do_not_answer_it():
    policy = verified()
    reply = policy.on_caller_turn("I'd rather set up a plan.")
    policy.played(reply, 0)  # the caller talked over "How much could you pay..."
    again = policy.on_caller_turn("Yes.")
    assert again.texts == reply.texts and policy.stage is Stage.NEGOTIATION


def test_signals_count_even_over_an_unheard_question():
    policy = verified()
    reply = policy.on_caller_turn("I'd rather set up a plan.")
    policy.played(reply, 0)
    policy.on_caller_turn("Stop calling me.")
    assert policy.disposition == "stop_calling"


# -- C5, C9 ------------------------------------------------------------------------------


def test_c5_c9_arrest_and_suit_questions_are_answered_without_threat():
    policy = verified(statute_status="time_barred")
    said = " ".join(turns(policy, "Am I going to be arrested or sued over this?"))
    assert "No one will arrest you" in said and "we will not sue you" in said
    within = verified()
    said = " ".join(turns(within, "Will you sue me?"))
    assert (
        "sue" not in said.replace("we will not sue you", "") and "can't give legal advice" in said
    )


# -- C6, C13: terms ----------------------------------------------------------------------


def test_c13_an_amount_without_one_or_monthly_is_asked_about():
    policy = verified()
    said = turns(policy, "I can pay two hundred.")
    assert said[-1] == "Would that be one payment of $200, or $200 a month?"
    said = turns(policy, "A month.")
    assert policy.stage is Stage.COMMITMENT and policy.promise is None


def test_c13_a_one_time_payment_is_never_recorded_as_a_plan():
    policy = verified(balance=1200, max_discount_pct=30)
    said = turns(policy, "$100 next Friday, just once.")
    assert "$840" in said[-1] and "one-time" in said[-1]
    assert "a month" not in said[-1] and policy.promise is None


def test_c6_an_offer_outside_the_envelope_is_countered_from_inside_it():
    policy = verified(max_discount_pct=30, balance=1200)
    said = turns(policy, "I want a ninety percent discount.")
    assert "$840" in said[0] and "offer_outside_envelope" in kinds(policy)
    small = verified(min_installment=50, balance=1200, max_term_months=12)
    said = turns(small, "I can do twenty dollars a month.")
    assert "$100 a month, for 12 months" in said[0]
    long = verified(balance=1200, max_term_months=12, min_installment=50)
    assert "12 months" in turns(long, "I can pay fifty dollars a month.")[0]


def test_c13_a_counter_offer_accepted_is_read_back_and_recorded_only_on_a_clear_yes():
    policy = verified(max_discount_pct=30, balance=1200)
    turns(policy, "Could I settle for 500, one payment?")
    assert policy.stage is Stage.NEGOTIATION
    said = turns(policy, "Yes.", "Friday, by check.")
    assert said[-1] == (
        "To confirm: one payment of $840 on Friday, December 4, by check, "
        "to settle your balance of $1,200. Is that right?"
    )
    turns(policy, "Okay.")  # not a clear yes
    assert policy.promise is None and policy.stage is Stage.READ_BACK
    turns(policy, "Yes, that's right.")
    assert policy.disposition == "promise_to_pay" and policy.promise.amount_cents == 84000
    assert kinds(policy).index("read_back") < kinds(policy).index("promise_to_pay")


def test_c13_a_plan_is_read_back_with_its_last_payment():
    policy = verified(balance=1200)
    said = turns(
        policy, "I can do two hundred fifty dollars a month.", "The fifteenth, by bank transfer."
    )
    assert "4 payments and then a last payment of $200" in said[-1]
    turns(policy, "Yes.")
    assert policy.disposition == "payment_plan"
    assert (policy.promise.amount_cents, policy.promise.installments) == (25000, 5)


def test_c13_a_no_to_the_read_back_asks_what_to_change_and_records_nothing():
    policy = verified()
    turns(policy, "I'll pay it in full.", "Friday, debit card.")
    said = turns(policy, "No.")
    assert "What would you like to change" in said[-1] and policy.promise is None
    said = turns(policy, "Make it Monday.")
    assert "Monday, December 7" in said[-1] and policy.stage is Stage.READ_BACK


def test_c13_amounts_in_words_and_ranges():
    policy = verified(balance=1200)
    assert "$990" in turns(policy, "I can pay nine ninety.")[-1]
    ranged = verified()
    assert "Exactly how much" in turns(ranged, "Maybe between 100 and 200 a month.")[-1]


def test_c13_a_date_in_the_past_or_far_off_is_asked_again():
    policy = verified()
    said = turns(policy, "I'll pay it in full.", "November 20th by check.")
    assert said[-1].startswith("I can set the first payment up to 45 days")
    said = turns(policy, "11/20/2026")
    assert said[-1].startswith("That date has already passed")


def test_c8_a_refusal_is_recorded_and_pressed_at_most_once():
    policy = verified()
    said = turns(policy, "I'm not paying you anything.")
    assert "refusal" in kinds(policy) and "a month" in said[-1]
    assert not any("balance of" in text for text in said)
    turns(policy, "No.")
    assert policy.disposition == "refused" and kinds(policy).count("refusal") == 2


def test_an_unreadable_answer_never_repeats_the_balance():
    policy = verified()
    said = turns(policy, "Blue.")
    assert "$" not in said[-1] and "payment plan" in said[-1]
    said = turns(policy, "Green.", "Red.")
    assert policy.stage is Stage.ENDED and policy.disposition == "no_commitment"


# -- C8: signals at every stage -----------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "disposition"),
    [
        ("I dispute this, it's not my debt.", "dispute"),
        ("I lost my job and can't afford anything.", "hardship"),
        ("I filed for bankruptcy last year.", "bankruptcy"),
        ("Stop calling me.", "stop_calling"),
    ],
)
@pytest.mark.parametrize("stage", ["greeting", "verification", "negotiation"])
def test_c8_each_signal_is_honoured_at_every_stage(line, disposition, stage):
    policy, said = call()
    if stage == "verification":
        said += turns(policy, "Yes, speaking.")
    elif stage == "negotiation":
        policy = verified()
        said = []
    said += turns(policy, line)
    assert policy.stage is Stage.ENDED and policy.disposition == disposition, line
    assert disposition in [s["kind"] for s in signals(policy)]
    if stage != "negotiation":
        assert not any(DEBT_WORDS.search(text) for text in said)


@pytest.mark.parametrize(
    "line",
    [
        "I lost my job and can't afford anything.",
        "I filed for bankruptcy last year.",
        "He passed away in March.",
    ],
)
@pytest.mark.parametrize("stage", ["greeting", "verification", "negotiation"])
@pytest.mark.parametrize("transfer_available", [False, True])
def test_c8_bankruptcy_death_and_hardship_go_to_a_person_at_every_stage(
    line, stage, transfer_available
):
    policy, said = call()
    policy.transfer_available = transfer_available
    if stage == "verification":
        said += turns(policy, "Yes, speaking.")
    elif stage == "negotiation":
        policy = verified()
        policy.transfer_available = transfer_available
        said = []
    said += turns(policy, line)
    assert policy.stage is Stage.ENDED and policy.transfer_requested, (line, stage)
    handoff = next(e.detail for e in policy.events if e.kind == "handoff")
    assert handoff == {"reason": policy.disposition, "now": transfer_available}
    # The last words say what really happens: held for a transfer only where one comes.
    assert ("Please hold" in said[-1]) is transfer_available
    assert "follow up" in said[-1] or transfer_available
    if stage != "negotiation":
        assert not any(DEBT_WORDS.search(text) for text in said)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("I'm his wife. He passed away last month.", "deceased"),
        ("This is her brother, she filed for bankruptcy.", "bankruptcy"),
    ],
)
def test_c8_what_a_third_party_reports_is_recorded_and_goes_to_a_person(line, kind):
    policy, said = call()
    said += turns(policy, line)
    assert policy.party == "third_party" and policy.transfer_requested
    assert {"kind": kind, "by": "third_party"} in signals(policy)
    assert not any(DEBT_WORDS.search(text) for text in said)


def test_no_hand_off_says_please_hold_unless_the_line_can_transfer():
    for transfer_available in (False, True):
        policy, _ = call()
        policy.transfer_available = transfer_available
        said = turns(policy, "I want to talk to a real person.")
        assert policy.transfer_requested and policy.disposition == "escalated_to_human"
        assert ("Please hold" in said[-1]) is transfer_available


def test_c8_a_partial_dispute_is_recognised():
    policy = verified()
    said = turns(policy, "I only owe part of it, the rest is fees I never agreed to.")
    assert {"kind": "dispute", "partial": True} in signals(policy)
    assert "part of this debt" in said[-1]


def test_c8_an_attorney_is_recorded_with_name_and_number_and_the_call_ends():
    policy = verified()
    said = turns(policy, "Talk to my lawyer.")
    assert "attorney's name and phone number" in said[-1]
    assert policy.party == "right_party"
    turns(policy, "Her name is Maria Lopez, 555 123 4567.")
    details = [s for s in signals(policy) if s["kind"] == "attorney"]
    assert details[-1]["attorney_number"] == "5551234567"
    assert policy.disposition == "attorney" and policy.stage is Stage.ENDED
    named = verified()
    turns(named, "My attorney is John Park, his number is 555 987 6543.")
    assert signals(named)[-1]["attorney_name"] == "John Park"


def test_c8_a_signal_after_the_goodbye_is_still_recorded():
    policy = verified()
    turns(policy, "Call me back tomorrow at 10 am.")
    assert policy.stage is Stage.ENDED
    reply = policy.on_caller_turn("Actually I dispute the whole thing.")
    assert reply.end_call and {"kind": "dispute", "late": True} in signals(policy)


# -- D2, D3, D5: what the gate learns -----------------------------------------------------


def test_d5_at_work_call_after_six_records_the_window_and_a_consented_callback():
    policy = verified(timezone="America/Chicago")
    said = turns(policy, "I'm at work, call me after six tonight.")
    window = next(s for s in signals(policy) if s["kind"] == "inconvenient_time")
    assert window["window"] == {"weekday": None, "start": "10:00", "end": "18:00"}
    callback = next(e.detail for e in policy.events if e.kind == "callback_requested")
    assert callback == {"date": "2026-12-02", "time": "18:00", "consented": True}
    assert "after 6 p.m." in said[-1] and policy.disposition == "callback_requested"


def test_d5_a_workplace_that_forbids_calls_is_recorded():
    policy = verified()
    turns(policy, "I can't take calls at work, my boss doesn't allow it.")
    assert {"kind": "workplace_forbids_calls"} in signals(policy)


def test_c13_dates_are_the_consumers_local_dates():
    late = dt.datetime(2026, 12, 5, 3, 30, tzinfo=dt.UTC)  # Friday 21:30 in Chicago
    policy = ConversationPolicy(
        account_from({"timezone": "America/Chicago"}),
        Templates(PROMPTS.templates),
        clock=lambda: late,
    )
    assert policy.today == dt.date(2026, 12, 4)


# -- C10, C11, C12 -----------------------------------------------------------------------


def test_c10_voicemail_gets_only_the_limited_content_message():
    policy, _ = call()
    said = turns(policy, "You've reached Jordan, please leave a message after the tone.")
    assert policy.disposition == "voicemail_lcm_left" and len(said) == 1
    assert not DEBT_WORDS.search(said[0].replace("Northwind", ""))
    assert "call us back" in said[0]


def test_c11_a_card_number_read_aloud_is_refused_and_not_kept():
    policy = verified()
    said = turns(policy, "I'll pay it all, my card is 4111 1111 1111 1111.")
    assert said[0].startswith("Please don't read card numbers aloud")
    assert "card_number_spoken" in kinds(policy) and policy.payment_open
    assert not any("4111" in str(e.detail) for e in policy.events)


def test_c11_payment_is_open_from_the_payment_question_to_the_end_of_the_step():
    policy, _ = call()
    assert not policy.payment_open
    policy = verified()
    assert policy.payment_open  # "Would you like to pay it in full, or ..."
    turns(policy, "Call me back tomorrow at 10 am.")
    assert not policy.payment_open


def test_c12_wrong_number_and_a_person_are_honoured():
    policy, _ = call()
    turns(policy, "Wrong number, there's no Jordan here.")
    assert (policy.party, policy.disposition) == ("wrong_number", "wrong_number")
    human, _ = call()
    assert human.on_caller_turn("Let me talk to a real person.").transfer


def test_every_agent_line_is_a_fixed_template():
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
        "Yes.",
    )
    for line in said:
        assert any(p.match(line) for p in patterns), line


def test_a_prompt_version_without_the_policys_texts_is_refused():
    with pytest.raises(ValueError, match="lacks the template"):
        ConversationPolicy(account_from({}), Templates({"ask_dob": "?"}), TODAY)


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


def test_c13_a_promise_the_llm_records_is_only_read_back_for_the_consumers_yes():
    policy = verified(balance=1200)
    assert policy.tools() == ("record_promise", "record_dispute", "transfer", "end_call")
    outcome = tool(policy, "record_promise", amount=1200, date="2026-12-10", method="debit_card")
    assert outcome.allowed and not outcome.reply.end_call and policy.promise is None
    assert outcome.reply.texts[0].startswith("To confirm: one payment of $1,200 on Thursday")
    policy.played(outcome.reply, 1)
    turns(policy, "Yes.")
    assert (policy.promise.amount_cents, policy.promise.due) == (120000, dt.date(2026, 12, 10))


def test_c6_a_promise_the_llm_records_outside_the_envelope_is_countered():
    policy = verified(min_installment=50, balance=1200, max_term_months=12)
    outcome = tool(
        policy, "record_promise", amount=20, date="2026-12-10", method="check", monthly=True
    )
    assert policy.promise is None and "$100 a month" in outcome.reply.texts[0]
    assert not outcome.allowed and "offer_outside_envelope" in kinds(policy)


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
    assert {"kind": "dispute", "partial": False} in signals(disputed)
    person, _ = call()
    assert tool(person, "transfer").reply.transfer
    assert person.disposition == "escalated_to_human"
    ended = verified()
    assert tool(ended, "end_call", reason="refused").reply.end_call
    assert ended.disposition == "no_commitment" and ended.tools() == ()
    assert not tool(ended, "transfer").allowed  # the call is over


def test_only_the_negotiation_questions_may_be_phrased():
    policy, _ = call()
    assert policy.on_caller_turn("Yes, this is Jordan Smith.").phrase is None  # verification
    reply = verified().on_caller_turn("I can do twenty dollars a month.")
    assert reply.phrase == reply.texts[0] and "$100 a month" in reply.phrase
    card = verified().on_caller_turn("I can do twenty a month, card 4111 1111 1111 1111.")
    assert card.phrase is None  # the warning is said verbatim


def test_a_disclosure_cut_again_and_again_ends_the_call_politely():
    policy, _ = call()
    turns(policy, "Yes, this is Jordan Smith.")
    reply = policy.on_caller_turn("March fifth, nineteen eighty.")
    for _ in range(4):
        policy.played(reply, 0)  # "uh-huh" over the mini-Miranda, every time
        reply = policy.on_caller_turn("Uh-huh.")
    assert policy.stage is Stage.ENDED and "mini_miranda" not in kinds(policy)
    assert policy.promise is None and reply.texts[-1].endswith("Goodbye.")


def test_only_the_question_asked_last_can_be_marked_heard():
    policy = verified()
    first = policy.on_caller_turn("Blue.")  # asked again
    second = policy.on_caller_turn("Green.")
    policy.played(first, len(first.texts))  # the older one, settled late
    assert policy.on_caller_turn("Yes.").texts == second.texts  # still unheard
