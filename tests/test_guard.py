"""agent.conversation.guard: per in-call rule, sentences that must be blocked and near misses
that pass."""

from __future__ import annotations

import dataclasses

import pytest

from agent.conversation.allow_list import Instruction, extract_figures
from agent.conversation.guard import GuardContext, OutputGuard, Verdict
from agent.conversation.scenarios import account_from

# Balance $1,200; settlements from $840 (30 % off); at least $50 a month; at most 12 months.
VERIFIED = GuardContext(
    verified=True,
    balance_cents=120_000,
    creditor="Acme Bank, N.A.",
    time_barred=False,
    max_discount_pct=30.0,
    min_installment_cents=5_000,
    max_term_months=12,
    fees_allowed=False,
    consumer_name="Jordan Smith",
)
UNVERIFIED = dataclasses.replace(VERIFIED, verified=False)
TIME_BARRED = dataclasses.replace(VERIFIED, time_barred=True)
FEES_ALLOWED = dataclasses.replace(VERIFIED, fees_allowed=True)


@pytest.fixture(scope="module")
def guard() -> OutputGuard:
    return OutputGuard()


def blocked(guard: OutputGuard, sentence: str, ctx: GuardContext, rule: str) -> Verdict:
    verdict = guard.check(sentence, ctx)
    assert not verdict.allowed, sentence
    assert verdict.rule == rule, (sentence, verdict)
    assert verdict.reason
    assert verdict.replacement
    # What is said instead must itself pass the guard, in the same situation.
    assert guard.check(verdict.replacement, ctx).allowed, verdict.replacement
    return verdict


def allowed(guard: OutputGuard, sentence: str, ctx: GuardContext) -> None:
    verdict = guard.check(sentence, ctx)
    assert verdict.allowed, (sentence, verdict)
    assert verdict == Verdict(True)


# -- C3: nothing about the debt before the right party is verified -------------------------

C3_BLOCKED = [
    "You have a balance of $1,200 with Acme Bank.",
    "This is an attempt to collect a debt.",
    "I'm calling about your account.",
    "I'm calling from Acme Bank.",
    "I'm calling from ACME BANK N.A. about something important.",
    "Would you like to make a payment today?",
    "You owe us money.",
    "It's about an overdue bill.",
    "We can settle this today.",
    "It's regarding $1,200.",
    "This is about a past due loan.",
    "Can you confirm your account number?",
]


@pytest.mark.parametrize("sentence", C3_BLOCKED)
def test_c3_no_debt_detail_before_verification(guard: OutputGuard, sentence: str) -> None:
    verdict = blocked(guard, sentence, UNVERIFIED, "C3")
    assert verdict.replacement == "I'm only able to speak with Jordan Smith directly."


C3_NEAR_MISSES = [
    "Hello, this is Riley, an automated assistant calling for Northwind Recovery.",
    "This call is recorded and transcribed.",
    "May I please speak with Jordan Smith?",
    "Thank you. To protect your privacy, please tell me your date of birth.",
    "Please tell me the last four digits of your account number.",
    "Is there a better time to reach Jordan?",
    "I'm calling about a personal business matter.",
    "Thank you, I'll try again another time. Goodbye.",
    "Acme's weather is nice.",  # part of a name is not the creditor
]


@pytest.mark.parametrize("sentence", C3_NEAR_MISSES)
def test_c3_before_verification_identity_questions_pass(guard: OutputGuard, sentence: str) -> None:
    allowed(guard, sentence, UNVERIFIED)


def test_c3_after_verification_the_debt_may_be_named(guard: OutputGuard) -> None:
    for sentence in C3_BLOCKED[:3]:
        allowed(guard, sentence, VERIFIED)


def test_c3_replacement_without_a_name(guard: OutputGuard) -> None:
    ctx = dataclasses.replace(UNVERIFIED, consumer_name="")
    verdict = blocked(guard, "You owe $1,200.", ctx, "C3")
    assert verdict.replacement == "I'm only able to speak with the person I'm calling for directly."


# -- C5: threats, false legal statements, attorney or government, abuse --------------------

C5_THREATS = [
    "You could be arrested if you don't pay.",
    "The police will be notified.",
    "Not paying could land you in jail.",
    "There may be a warrant.",
    "This could become a criminal matter.",
    "If you don't pay, we will sue you.",
    "We may take legal action.",
    "This could end up in court.",
    "We will have to garnish your wages.",
    "We could seize your car.",
    "We may start taking part of your paycheck.",
    "A judgment could be entered against you.",
    "We'll file a lawsuit.",
]


@pytest.mark.parametrize("sentence", C5_THREATS)
def test_c5_no_threats(guard: OutputGuard, sentence: str) -> None:
    blocked(guard, sentence, VERIFIED, "C5")
    # Before verification the threat is still a threat (and the replacement stays neutral).
    blocked(guard, sentence, UNVERIFIED, "C5")


C5_AUTHORITY = [
    "Our attorney will contact you.",
    "I'll pass this to our lawyers.",
    "Our legal department is reviewing this.",
    "This is a matter for the government.",
    "Law enforcement may get involved.",
    "Federal agents may contact you.",
    "The IRS will be informed.",
    "Our law firm handles these cases.",
]


@pytest.mark.parametrize("sentence", C5_AUTHORITY)
def test_c5_no_attorney_or_government_implication(guard: OutputGuard, sentence: str) -> None:
    blocked(guard, sentence, VERIFIED, "C5")


C5_ABUSE = [
    "Don't be an idiot.",
    "What the hell are you doing?",
    "That's a stupid excuse.",
    "Stop being a deadbeat.",
    "This is bullshit.",
    "You're a liar.",
]


@pytest.mark.parametrize("sentence", C5_ABUSE)
def test_c5_no_profanity_or_abuse(guard: OutputGuard, sentence: str) -> None:
    verdict = blocked(guard, sentence, VERIFIED, "C5")
    assert verdict.replacement is not None and verdict.replacement.startswith("I apologize.")


C5_NEAR_MISSES = [
    "Of course, I can help with that.",
    "Hello, how are you today?",
    "I can assist you with that.",
    "Your attorney can call us at any time.",
    "Thank you. We will contact your attorney instead of you.",
    "Under federal law, you have the right to dispute this debt.",
    "I understand this is a difficult situation.",
    "Wage information is not needed.",
    "Let me pass you to a person who can help.",
]


@pytest.mark.parametrize("sentence", C5_NEAR_MISSES)
def test_c5_near_misses_pass(guard: OutputGuard, sentence: str) -> None:
    allowed(guard, sentence, VERIFIED)


C5_MISSTATED = [
    "You have a balance of $1,500 with Acme Bank.",
    "Your balance is $500.",
    "You owe $2,000.",
    "The total due is $1,000.",
    "That will be $1,250.",
]


@pytest.mark.parametrize("sentence", C5_MISSTATED)
def test_c5_no_misstated_amount(guard: OutputGuard, sentence: str) -> None:
    verdict = blocked(guard, sentence, VERIFIED, "C5")
    assert verdict.replacement == "The balance is $1,200."


C5_AMOUNTS_THAT_PASS = [
    "You have a balance of $1,200 with Acme Bank.",
    "You owe $1,200.00.",
    "The balance is twelve hundred dollars.",
    "The balance is one thousand two hundred dollars.",
    "You could pay $300 today.",
    "You can pay $200 today and the rest later.",
    "Your payment of $1,200 is due Friday.",
    "You have a balance of $1,200; you could pay $300 today.",
]


@pytest.mark.parametrize("sentence", C5_AMOUNTS_THAT_PASS)
def test_c5_the_balance_and_offers_inside_the_envelope_pass(
    guard: OutputGuard, sentence: str
) -> None:
    allowed(guard, sentence, VERIFIED)


# -- C9: time-barred debts -----------------------------------------------------------------


def test_c9_no_suit_threat_on_a_time_barred_debt(guard: OutputGuard) -> None:
    blocked(guard, "We can sue you for this.", TIME_BARRED, "C9")
    blocked(guard, "We will take you to court.", TIME_BARRED, "C9")
    blocked(guard, "We won't sue you, but we may garnish your wages.", TIME_BARRED, "C9")


@pytest.mark.parametrize(
    "sentence",
    [
        "Because of the age of this debt, we will not sue you for it.",
        "We believe the time to sue on this debt has expired, so we will not sue you to "
        "collect it, and making a payment may not restart that time.",
        "We can't sue you for this debt.",
    ],
)
def test_c9_time_barred_disclosure_passes_only_when_time_barred(
    guard: OutputGuard, sentence: str
) -> None:
    allowed(guard, sentence, TIME_BARRED)
    # On a debt that is not time-barred, a promise not to sue is a legal statement
    # the agent has no business making.
    blocked(guard, sentence, VERIFIED, "C5")


# -- C6: only offers inside the envelope ---------------------------------------------------

C6_OUTSIDE = [
    "We can take 40 percent off.",
    "I can give you a 50% discount.",
    "You could pay 60% of the balance.",
    "We can settle for half.",
    "You could settle today for $600.",
    "We could do $25 a month.",
    "We could do $100 a month for 18 months.",
    "A 24-month plan would work.",
    "I can spread it over two years.",
    "We could do $50 a month for 3 months.",
    "You can pay $20 today.",
    "How about twenty dollars a week?",
]


@pytest.mark.parametrize("sentence", C6_OUTSIDE)
def test_c6_no_offer_outside_the_envelope(guard: OutputGuard, sentence: str) -> None:
    verdict = blocked(guard, sentence, VERIFIED, "C6")
    assert verdict.replacement == (
        "I'm not able to offer that, but I can go over the options I do have."
    )


C6_INSIDE = [
    "We can take 30 percent off.",
    "You could pay 70% of the balance.",
    "You could settle today for $840.",
    "You could settle today for $900 instead of $1,200.",
    "We could do $100 a month for 12 months.",
    "We could do $50 a month.",
    "That's twelve monthly payments of $100.",
    "A 6-month plan would work.",
    "That's two hundred dollars a month.",
    "There is 0% interest on the plan.",
]


@pytest.mark.parametrize("sentence", C6_INSIDE)
def test_c6_offers_inside_the_envelope_pass(guard: OutputGuard, sentence: str) -> None:
    allowed(guard, sentence, VERIFIED)


def test_c6_envelope_follows_the_context(guard: OutputGuard) -> None:
    generous = dataclasses.replace(VERIFIED, max_discount_pct=50.0, max_term_months=24)
    allowed(guard, "We can settle for half.", generous)
    allowed(guard, "A 24-month plan would work.", generous)
    allowed(guard, "You could settle today for $600.", generous)


# -- C7: no fees unless allowed ------------------------------------------------------------

C7_FEES = [
    "There is a $5 processing fee for paying by phone.",
    "A convenience fee applies.",
    "We add a small service charge.",
    "There's a fee of three dollars.",
    "Paying by card has a surcharge.",
]


@pytest.mark.parametrize("sentence", C7_FEES)
def test_c7_no_fee_unless_allowed(guard: OutputGuard, sentence: str) -> None:
    verdict = blocked(guard, sentence, VERIFIED, "C7")
    assert verdict.replacement == "There is no fee for this."
    allowed(guard, sentence, FEES_ALLOWED)


@pytest.mark.parametrize(
    "sentence",
    [
        "There is no fee for paying by phone.",
        "We don't charge any fees.",
        "You can pay without any fees.",
        "The fee is waived.",
        "Paying online is free, with no extra fee.",
    ],
)
def test_c7_saying_there_is_no_fee_passes(guard: OutputGuard, sentence: str) -> None:
    allowed(guard, sentence, VERIFIED)


# -- C11: no card data in the output -------------------------------------------------------


@pytest.mark.parametrize(
    "sentence",
    [
        "Your card number 4111 1111 1111 1111 is on file.",
        "I have 4111111111111111 for the card.",
        "Is your card four two four two four two four two four two four two four two four two?",
    ],
)
def test_c11_no_card_number_in_the_output(guard: OutputGuard, sentence: str) -> None:
    verdict = blocked(guard, sentence, VERIFIED, "C11")
    assert "4111" not in (verdict.reason or "")


@pytest.mark.parametrize(
    "sentence",
    [
        "Your card ending in 1111 is on file.",
        "Please call us back at 1-800-555-0100.",
        "We will send you a secure payment link, so please never read card numbers aloud.",
    ],
)
def test_c11_near_misses_pass(guard: OutputGuard, sentence: str) -> None:
    allowed(guard, sentence, VERIFIED)


def test_guard_is_stateless_and_deterministic(guard: OutputGuard) -> None:
    sentence = "We can take 40 percent off."
    assert guard.check(sentence, VERIFIED) == guard.check(sentence, VERIFIED)
    assert OutputGuard().check(sentence, VERIFIED) == guard.check(sentence, VERIFIED)


# -- the allow-list: a sentence is spoken only if the turn's instruction justifies it ------

COUNTER = (
    "The lowest monthly payment I can set up is $100 a month, for 12 months. "
    "Would that work for you?"
)
ACCOUNT = account_from({})  # Jordan Smith, $1,200 with Acme Bank


def turn(reference: str, *, verified: bool = True) -> GuardContext:
    """The guard's context for a turn whose instruction is ``reference``."""
    instruction = Instruction.for_turn(reference, ACCOUNT, verified=verified)
    return GuardContext.for_account(ACCOUNT, verified=verified, instruction=instruction)


def test_the_facts_of_a_stage_grow_only_with_verification() -> None:
    before = Instruction.for_turn("Am I speaking with Jordan Smith?", ACCOUNT, verified=False)
    after = Instruction.for_turn(COUNTER, ACCOUNT, verified=True)
    assert before.facts == ("Riley", "automated assistant", "Jordan Smith")
    assert after.facts == (*before.facts, "$1,200", ACCOUNT.creditor, "Northwind Recovery")


@pytest.mark.parametrize(
    ("text", "figures", "runs"),
    [
        ("$1,200.50 and fifty cents", [("money", 1200.5), ("money", 0.5)], []),
        ("twelve hundred dollars", [("money", 1200)], []),
        ("a hundred and five dollars", [("money", 105)], []),
        ("30 percent off, or 25%", [("percent", 30), ("percent", 25)], []),
        ("half of it", [("percent", 50)], []),
        ("for twelve months", [("number", 12)], []),
        ("on the 3rd, or the fifteenth", [("ordinal", 3), ("ordinal", 15)], []),
        ("five five five", [("number", 5)] * 3, []),
        ("call 1-800-555-0100 or 555 0134 by 12/11", [], ["18005550100", "5550134", "1211"]),
    ],
)
def test_every_number_is_found_as_what_it_is(text: str, figures: list, runs: list) -> None:
    found, compounds = extract_figures(text)
    assert [(f.kind, f.value) for f in found] == figures
    assert compounds == runs


FAITHFUL = [
    COUNTER,
    "Thank you. " + COUNTER,
    "The lowest monthly amount is one hundred dollars, for twelve months. Could that work?",
    "I understand. The smallest plan I can set up is $100 a month for 12 months. Is that okay?",
]


@pytest.mark.parametrize("text", FAITHFUL)
def test_a_faithful_phrasing_of_the_reference_passes(guard: OutputGuard, text: str) -> None:
    verdict = guard.check_response(text, turn(COUNTER))
    assert verdict.allowed, verdict.blocked
    assert " ".join(verdict.sentences) == text


#: What a base model wrote in phrase mode (issue 17), and outputs of each class it
#: stands for, with the allow-list rule that stops each.
UNJUSTIFIED = [
    ("I will call the money in full if I have to pay it off.", "allow:consumer-voice"),
    ("I do not owe it, I just want to end the call.", "allow:consumer-voice"),
    ("This is Jordan Smith speaking.", "allow:consumer-voice"),
    ("Please call 1026-12-05. " + COUNTER, "allow:figure"),
    ("You could reach us at 555 0134. " + COUNTER, "allow:figure"),
    (COUNTER + " You can start on Friday.", "allow:figure"),
    (COUNTER + " You can start on the fifth.", "allow:figure"),
    (COUNTER.replace("$100", "$80"), "allow:figure"),
    (COUNTER.replace("12 months", "24 months"), "C6"),
    (COUNTER + " That is $1,000 in all.", "allow:figure"),
    (COUNTER + " I can also take 20 percent off.", "allow:figure"),
    (COUNTER + " Or settle today.", "allow:term"),
    (COUNTER + " You can pay with cash.", "allow:term"),
    ("Please keep this number as your last name.", "allow:required"),
    ("我们可以每月支付一百美元。", "allow:script"),
    ("Saya akan membayar $100 sebulan. " + COUNTER, "allow:language"),
    ("Puedes pagar $100 al mes. " + COUNTER, "allow:language"),
    (COUNTER + " Capital One will help you.", "allow:name"),
    ("Yes, that's right. " + COUNTER, "allow:answer"),
    ("Call record_promise now. " + COUNTER, "allow:code"),
    ('{"amount": 100, "months": 12}', "allow:code"),
    ("Call state: talking with Jordan Smith. " + COUNTER, "allow:code"),
    ("The lowest monthly payment I can set up is $100 a month, for 12", "allow:truncated"),
    ("The lowest monthly payment I can set up is $100 a month for the...", "allow:truncated"),
    (" ".join([COUNTER] * 3), "allow:length"),
    ("Thank you. Have a wonderful day, and take care.", "allow:required"),
    (COUNTER + " You don't have to pay the rest.", "allow:unsupported"),
    (COUNTER + " We will close your account once it is done.", "allow:unsupported"),
    ("I'm a real person, not a robot. " + COUNTER, "allow:identity"),
]


@pytest.mark.parametrize(("text", "rule"), UNJUSTIFIED)
def test_what_the_instruction_does_not_justify_is_blocked(
    guard: OutputGuard, text: str, rule: str
) -> None:
    verdict = guard.check_response(text, turn(COUNTER))
    assert not verdict.allowed, text
    assert verdict.verdict.rule == rule, verdict.blocked
    assert verdict.verdict.reason


def test_content_the_reference_does_not_say_is_blocked(guard: OutputGuard) -> None:
    text = "Your neighbours and family members must know about this situation soon. " + COUNTER
    verdict = guard.check_response(text, turn(COUNTER))
    assert verdict.verdict.rule == "allow:unsupported", verdict.blocked


def test_before_verification_only_who_is_calling_and_for_whom(guard: OutputGuard) -> None:
    ctx = turn("Am I speaking with Jordan Smith?", verified=False)
    for text in (
        "Am I speaking with Jordan Smith?",
        "Hello, this is Riley, an automated assistant. Am I speaking with Jordan Smith?",
    ):
        assert guard.check_response(text, ctx).allowed, text
    for text in (
        "Hello, this is Riley from Northwind Recovery. Am I speaking with Jordan Smith?",
        "It's about your account with Acme Bank. Am I speaking with Jordan Smith?",
        "Yes, it's about money. Am I speaking with Jordan Smith?",
    ):
        assert not guard.check_response(text, ctx).allowed, text


def test_a_refusal_in_the_reference_stays_a_refusal(guard: OutputGuard) -> None:
    reference = (
        "I can't accept $300 as one payment. The lowest one-time payment I can accept "
        "is $840. Would that work for you?"
    )
    assert guard.check_response(reference, turn(reference)).allowed  # $300 is restated
    flipped = reference.replace("can't", "can")
    assert guard.check_response(flipped, turn(reference)).verdict.rule == "allow:required"


def test_without_an_instruction_only_the_deny_rules_apply(guard: OutputGuard) -> None:
    text = "Capital One will call you on Friday."
    assert guard.check(text, VERIFIED).allowed
    assert not guard.check(text, turn(COUNTER)).allowed
