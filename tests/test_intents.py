"""agent.conversation.intents: caller turns as Whisper writes them, read into intents and
facts."""

from __future__ import annotations

import datetime as dt

import pytest

from agent.conversation.intents import Expectation, Intent, PaymentMethod, understand

# A Wednesday.
TODAY = dt.date(2026, 12, 2)


def heard(text: str, expecting: Expectation | None = None, today: dt.date = TODAY):
    return understand(text, expecting=expecting, today=today)


def intents(text: str, expecting: Expectation | None = None) -> frozenset[Intent]:
    return heard(text, expecting).intents


# -- C8: the signals that end or reroute collection ----------------------------------------

C8_SIGNALS = [
    (Intent.DISPUTE, "I dispute this debt."),
    (Intent.DISPUTE, "i want to dispute it"),
    (Intent.DISPUTE, "That's not my debt."),
    (Intent.DISPUTE, "this isn't mine"),
    (Intent.DISPUTE, "I don't owe you anything."),
    (Intent.DISPUTE, "I dont owe that"),
    (Intent.DISPUTE, "I never had an account with them."),
    (Intent.DISPUTE, "I already paid this."),
    (Intent.DISPUTE, "I paid that off already."),
    (Intent.DISPUTE, "Somebody stole my identity."),
    (Intent.DISPUTE, "That amount is wrong."),
    (Intent.DISPUTE, "I don't recognize this account at all."),
    (Intent.DISPUTE, "Send me proof that I owe it."),
    (Intent.DISPUTE, "No, I dispute this."),
    (Intent.ATTORNEY, "I have a lawyer."),
    (Intent.ATTORNEY, "Talk to my attorney."),
    (Intent.ATTORNEY, "My lawyer is Bob Jones, call him."),
    (Intent.ATTORNEY, "my attorney's handling this"),
    (Intent.ATTORNEY, "I've retained an attorney."),
    (Intent.ATTORNEY, "I'm represented by counsel on this."),
    (Intent.ATTORNEY, "I'll have to ask my lawyer."),
    (Intent.BANKRUPTCY, "I filed for bankruptcy last year."),
    (Intent.BANKRUPTCY, "We went through Chapter 7."),
    (Intent.BANKRUPTCY, "i'm in chapter thirteen"),
    (Intent.BANKRUPTCY, "That debt was discharged."),
    (Intent.DECEASED, "He passed away in March."),
    (Intent.DECEASED, "My husband died last month."),
    (Intent.DECEASED, "She's deceased."),
    (Intent.DECEASED, "he's dead"),
    (Intent.DECEASED, "We're handling her estate."),
    (Intent.HARDSHIP, "I lost my job."),
    (Intent.HARDSHIP, "I got laid off in October."),
    (Intent.HARDSHIP, "I can't afford this right now."),
    (Intent.HARDSHIP, "i cant pay anything right now"),
    (Intent.HARDSHIP, "I have medical bills piling up."),
    (Intent.HARDSHIP, "I'm on disability."),
    (Intent.HARDSHIP, "I don't have the money."),
    (Intent.HARDSHIP, "I'm unemployed."),
    (Intent.HARDSHIP, "I'm broke."),
    (Intent.HARDSHIP, "I'm in the hospital."),
    (Intent.HARDSHIP, "I'm on a fixed income."),
    (Intent.STOP_CALLING, "Stop calling me."),
    (Intent.STOP_CALLING, "please stop calling this number"),
    (Intent.STOP_CALLING, "Don't call me again!"),
    (Intent.STOP_CALLING, "Do not call this number anymore."),
    (Intent.STOP_CALLING, "Never call me again."),
    (Intent.STOP_CALLING, "Take me off your list."),
    (Intent.STOP_CALLING, "Put me on your do not call list."),
    (Intent.STOP_CALLING, "quit calling me"),
    (Intent.STOP_CALLING, "I don't want any more calls."),
    (Intent.STOP_CALLING, "Stop contacting me."),
    (Intent.STOP_CALLING, "Leave me alone."),
    (Intent.STOP_CALLING, "Stop."),
    (Intent.STOP_CALLING, "Stop. Please stop."),
    (Intent.STOP_CALLING, "I can't pay, so stop calling."),
    (Intent.CEASE, "Please don't contact me at all."),
    (Intent.CEASE, "Cease all communication with me."),
    (Intent.CEASE, "I'm sending you a cease and desist letter."),
    (Intent.CEASE, "I'll send you a letter telling you to stop."),
    (Intent.CEASE, "Stop all contact."),
    (Intent.CEASE, "Do not contact me ever again."),
]


@pytest.mark.parametrize(("intent", "text"), C8_SIGNALS)
def test_c8_signals_are_heard(intent: Intent, text: str) -> None:
    assert intent in intents(text)


C8_NEGATED = [
    (Intent.DISPUTE, "I don't dispute it."),
    (Intent.DISPUTE, "I'm not disputing that I owe it."),
    (Intent.DISPUTE, "No dispute from me."),
    (Intent.DISPUTE, "That is not my problem."),
    (Intent.ATTORNEY, "I don't have a lawyer."),
    (Intent.ATTORNEY, "Do I need a lawyer?"),
    (Intent.ATTORNEY, "I'm thinking about getting a lawyer."),
    (Intent.BANKRUPTCY, "I'm not bankrupt."),
    (Intent.BANKRUPTCY, "I never filed for bankruptcy."),
    (Intent.DECEASED, "She's not dead, she's just not home."),
    (Intent.HARDSHIP, "I'm not unemployed."),
    (Intent.HARDSHIP, "I'm sick of these calls."),
    (Intent.HARDSHIP, "My car broke down."),
    (Intent.HARDSHIP, "I can't pay it in full."),
    (Intent.HARDSHIP, "I can't pay 200, but I can pay 100."),
    (Intent.STOP_CALLING, "I don't want you to stop calling."),
    (Intent.STOP_CALLING, "I don't want you to stop."),
    (Intent.STOP_CALLING, "Stop, let me explain."),
    (Intent.STOP_CALLING, "Can you call me back tomorrow?"),
    (Intent.CEASE, "Stop calling me."),
]


@pytest.mark.parametrize(("intent", "text"), C8_NEGATED)
def test_c8_negated_or_near_miss_is_not_a_signal(intent: Intent, text: str) -> None:
    assert intent not in intents(text)


def test_c8_cease_is_also_a_stop_calling() -> None:
    assert {Intent.CEASE, Intent.STOP_CALLING} <= intents("Don't contact me at all.")


def test_d5_a_time_or_place_restriction_is_not_a_stop_calling() -> None:
    # "Don't call me at work" limits place and time (rule D5); it is no medium opt-out.
    for text in ("Don't call me at work.", "Don't call me before noon.", "Don't call me after 9."):
        assert Intent.STOP_CALLING not in intents(text), text


# -- C1, C12: a robot? a person! -----------------------------------------------------------

C1_ROBOT_QUESTIONS = [
    "Am I talking to a robot?",
    "am i speaking with a real person",
    "Is this a real person?",
    "Are you AI?",
    "Are you an A.I.?",
    "Are you a computer?",
    "Is this a recording?",
    "are you a real person or a machine",
    "You sound like a robot.",
    "Wait, are you a bot?",
    "Are you human?",
    "You're not a robot, are you?",
]


@pytest.mark.parametrize("text", C1_ROBOT_QUESTIONS)
def test_c1_robot_question_is_heard(text: str) -> None:
    assert Intent.ROBOT_QUESTION in intents(text)


C12_HUMAN_REQUESTS = [
    "Let me talk to a real person.",
    "Can I speak to your supervisor?",
    "I want to speak with a manager.",
    "Representative.",
    "agent please",
    "Transfer me to someone.",
    "Get me a human.",
    "I need a real person.",
    "Can I talk to somebody else?",
    "Put me through to an operator.",
]


@pytest.mark.parametrize("text", C12_HUMAN_REQUESTS)
def test_c12_human_request_is_heard(text: str) -> None:
    assert Intent.HUMAN_REQUEST in intents(text)


@pytest.mark.parametrize(
    "text",
    [
        "Is this a real person?",
        "I don't want to talk to anybody.",
        "Can I talk to you about a payment plan?",
        "Talk to my lawyer.",
    ],
)
def test_c12_near_misses_are_not_a_human_request(text: str) -> None:
    assert Intent.HUMAN_REQUEST not in intents(text)


C12_WRONG_NUMBERS = [
    "Wrong number.",
    "You have the wrong number.",
    "There's no one here by that name.",
    "Nobody by that name lives here.",
    "I don't know anyone named Jordan.",
    "Never heard of him.",
    "He doesn't live here anymore.",
    "This isn't his number.",
]


@pytest.mark.parametrize("text", C12_WRONG_NUMBERS)
def test_c12_wrong_number_is_heard(text: str) -> None:
    assert Intent.WRONG_NUMBER in intents(text)


# -- C2: recording -------------------------------------------------------------------------

C2_OBJECTIONS = [
    "Don't record me.",
    "I do not consent to recording.",
    "I don't consent to being recorded.",
    "Stop recording this call.",
    "I don't want this recorded.",
    "Turn off the recording.",
    "I object to being recorded.",
    "please don't transcribe this",
]


@pytest.mark.parametrize("text", C2_OBJECTIONS)
def test_c2_recording_objection_is_heard(text: str) -> None:
    assert Intent.RECORDING_OBJECTION in intents(text)


@pytest.mark.parametrize("text", ["I don't mind being recorded.", "That's fine, record it."])
def test_c2_consent_is_not_an_objection(text: str) -> None:
    assert Intent.RECORDING_OBJECTION not in intents(text)


def test_c2_no_to_the_recording_question_is_an_objection() -> None:
    assert Intent.RECORDING_OBJECTION in intents("No.", Expectation.RECORDING_CONSENT)
    assert Intent.RECORDING_OBJECTION not in intents("Yes, that's fine.")


# -- C5, C9: the caller asks about arrest or a lawsuit -------------------------------------

C5_LEGAL_QUESTIONS = [
    "Will I be arrested?",
    "Are you going to sue me?",
    "Will I go to jail?",
    "Can they garnish my wages?",
    "Am I getting taken to court?",
    "Are you gonna send the police?",
    "is there a warrant out for me",
    "Is this going to be a lawsuit?",
]


@pytest.mark.parametrize("text", C5_LEGAL_QUESTIONS)
def test_c5_arrest_or_suit_question_is_heard(text: str) -> None:
    assert Intent.ARREST_OR_SUIT_QUESTION in intents(text)


@pytest.mark.parametrize("text", ["This is Sue.", "Of course.", "I'm Sue Miller."])
def test_c5_a_name_or_of_course_is_not_a_legal_question(text: str) -> None:
    assert Intent.ARREST_OR_SUIT_QUESTION not in intents(text)


# -- C3: who is on the line ----------------------------------------------------------------

C3_IDENTITY_YES = [
    "Yes.",
    "Yeah, that's me.",
    "Speaking.",
    "This is she.",
    "this is he",
    "Yep.",
    "Mm-hmm.",
    "That's right.",
    "Correct.",
    "Yeah, you got him.",
    "Uh, yeah, this is Jordan.",
    "Yes, Jordan speaking.",
    "It's me.",
]


@pytest.mark.parametrize("text", C3_IDENTITY_YES)
def test_c3_identity_confirmed(text: str) -> None:
    got = intents(text, Expectation.IDENTITY)
    assert Intent.YES in got and Intent.NO not in got


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("This is Jordan Smith.", "Jordan Smith"),
        ("Jordan.", "Jordan"),
        ("Wait.", None),
        ("Hmm.", None),
    ],
)
def test_c3_a_name_alone_is_no_yes_the_policy_compares_it(text: str, name: str | None) -> None:
    heard = understand(text, expecting=Expectation.IDENTITY)
    assert Intent.YES not in heard.intents and heard.name == name


@pytest.mark.parametrize("text", ["Speaking.", "This is she.", "Yes.", "That's me."])
def test_c3_unmistakable_identity_answers_need_no_expectation(text: str) -> None:
    assert Intent.YES in intents(text)


def test_c3_this_is_alone_is_no_yes() -> None:
    assert Intent.YES not in intents("This is a bad time.", Expectation.IDENTITY)


C3_IDENTITY_NO = [
    ("No.", set()),
    ("Nope, wrong person.", {Intent.WRONG_NUMBER}),
    ("No, this is his wife. He's at work.", {Intent.THIRD_PARTY}),
    ("He's not here right now.", {Intent.THIRD_PARTY}),
    ("She's not home, can I take a message?", {Intent.THIRD_PARTY}),
    ("This is Jordan's wife.", {Intent.THIRD_PARTY}),
    ("it's his mother, he's sleeping", {Intent.THIRD_PARTY}),
    ("There's no one here by that name.", {Intent.WRONG_NUMBER}),
    ("Wrong number.", {Intent.WRONG_NUMBER}),
    ("He passed away last year.", {Intent.DECEASED}),
]


@pytest.mark.parametrize(("text", "also"), C3_IDENTITY_NO)
def test_c3_identity_denied(text: str, also: set[Intent]) -> None:
    got = intents(text, Expectation.IDENTITY)
    assert Intent.NO in got and Intent.YES not in got
    assert also <= got


@pytest.mark.parametrize(
    "text", ["Who's calling?", "What is this about?", "Hello?", "I'm sorry, who is this?"]
)
def test_c3_identity_neither_confirmed_nor_denied(text: str) -> None:
    assert not intents(text, Expectation.IDENTITY) & {Intent.YES, Intent.NO}


def test_c3_yes_and_no_the_last_one_counts() -> None:
    assert Intent.NO in intents("yeah no i can't do that")
    assert Intent.YES not in intents("yeah no i can't do that")
    assert Intent.YES in intents("No, wait, yes.")
    assert Intent.NO not in intents("No problem.")
    assert Intent.YES in intents("That sounds fair.")


C3_NAMES = [
    ("This is Jordan Smith.", None, "Jordan Smith"),
    ("Yes, Jordan speaking.", None, "Jordan"),
    ("Hi, this is Jordan Smith speaking.", None, "Jordan Smith"),
    ("my name is jordan smith", None, "Jordan Smith"),
    ("My name's Mary-Jane O'Brien.", None, "Mary-Jane O'Brien"),
    ("I'm Jordan.", None, "Jordan"),
    ("This is Mrs. Smith.", None, "Smith"),
    ("Jordan Smith here.", None, "Jordan Smith"),
    ("Jordan Smith.", Expectation.NAME, "Jordan Smith"),
    ("Jordan.", Expectation.IDENTITY, "Jordan"),
]


@pytest.mark.parametrize(("text", "expecting", "name"), C3_NAMES)
def test_c3_name_given(text: str, expecting: Expectation | None, name: str) -> None:
    assert heard(text, expecting).name == name


@pytest.mark.parametrize(
    "text",
    [
        "This is his wife.",
        "This is Jordan's wife.",
        "I'm not sure.",
        "I'm sorry, who is this?",
        "It's fine.",
        "Yes.",
        "Jordan Smith.",  # a bare name is read as one only when a name was asked for
        "Talk to my attorney, his name is Bob Jones.",
    ],
)
def test_c3_no_name_given(text: str) -> None:
    assert heard(text).name is None


C3_DATES_OF_BIRTH = [
    ("March 5th 1980", Expectation.DATE_OF_BIRTH),
    ("March 5th, 1980.", None),
    ("3/5/1980", Expectation.DATE_OF_BIRTH),
    ("03-05-1980", Expectation.DATE_OF_BIRTH),
    ("3/5/80", Expectation.DATE_OF_BIRTH),
    ("1980-03-05", Expectation.DATE_OF_BIRTH),
    ("the fifth of March nineteen eighty", Expectation.DATE_OF_BIRTH),
    ("March fifth, nineteen eighty.", Expectation.DATE_OF_BIRTH),
    ("march five nineteen eighty", Expectation.DATE_OF_BIRTH),
    ("I was born on March 5th, 1980.", None),
    ("It's 5th March 1980.", Expectation.DATE_OF_BIRTH),
    ("Uh, March the fifth, 1980.", Expectation.DATE_OF_BIRTH),
]


@pytest.mark.parametrize(("text", "expecting"), C3_DATES_OF_BIRTH)
def test_c3_date_of_birth_given(text: str, expecting: Expectation | None) -> None:
    got = heard(text, expecting)
    assert got.date_of_birth == dt.date(1980, 3, 5)
    assert got.date is None


@pytest.mark.parametrize(
    ("text", "dob"),
    [
        ("July fourth two thousand and one", dt.date(2001, 7, 4)),
        ("7/4/01", dt.date(2001, 7, 4)),
        ("Dec twenty fifth nineteen seventy five", dt.date(1975, 12, 25)),
        ("december 25 1975", dt.date(1975, 12, 25)),
        ("January first, twenty oh five", dt.date(2005, 1, 1)),
        ("February 29th 1996", dt.date(1996, 2, 29)),
    ],
)
def test_c3_more_dates_of_birth(text: str, dob: dt.date) -> None:
    assert heard(text, Expectation.DATE_OF_BIRTH).date_of_birth == dob


@pytest.mark.parametrize("text", ["nineteen eighty", "March 1980", "February 30th 1980", "1980"])
def test_c3_incomplete_or_impossible_date_of_birth_is_none(text: str) -> None:
    assert heard(text, Expectation.DATE_OF_BIRTH).date_of_birth is None


C3_LAST_FOUR = [
    ("The last four are 1 2 3 4.", None),
    ("the last four are one two three four", None),
    ("Last four digits: 1234.", None),
    ("last four of my account number is twelve thirty four", None),
    ("It ends in 1234.", None),
    ("one two three four", Expectation.LAST4),
    ("1234", Expectation.LAST4),
    ("Uh, it's 12 34.", Expectation.LAST4),
]


@pytest.mark.parametrize(("text", "expecting"), C3_LAST_FOUR)
def test_c3_last_four_given(text: str, expecting: Expectation | None) -> None:
    got = heard(text, expecting)
    assert got.last4 == "1234"
    assert got.amount_cents is None and got.date is None


def test_c3_last_four_with_zeros_and_doubles() -> None:
    assert heard("oh five double seven", Expectation.LAST4).last4 == "0577"
    assert heard("Oh, one two three four.", Expectation.LAST4).last4 == "1234"
    assert heard("the last four are 0 0 4 2").last4 == "0042"


def test_c3_not_four_digits_is_no_last_four() -> None:
    assert heard("one two three", Expectation.LAST4).last4 is None
    assert heard("the last four are one two three four five").last4 is None


# -- C6: negotiation: amounts, in full, offers, dates, methods, callbacks ------------------

AMOUNTS = [
    ("I can pay two hundred and fifty dollars.", None, 25000),
    ("I can pay $200.", None, 20000),
    ("I can pay 200 dollars.", None, 20000),
    ("How about fifty bucks?", None, 5000),
    ("I can do $1,200.50.", None, 120050),
    ("I can pay one thousand two hundred.", None, 120000),
    ("I can pay a hundred.", None, 10000),
    ("I can pay twelve hundred.", None, 120000),
    ("I could send 75.", None, 7500),
    ("Could you do 300?", None, 30000),
    ("I can pay a grand.", None, 100000),
    ("I can pay two grand.", None, 200000),
    ("I can pay 2k.", None, 200000),
    ("I can pay fifty dollars and twenty five cents.", None, 5025),
    ("I can pay twelve dollars fifty.", None, 1250),
    ("I can pay twelve fifty cents.", None, 1250),
    ("i owe 500 but can only pay 200 dollars", None, 20000),
    ("I can't pay 200, but I can pay 100.", None, 10000),
    ("75", Expectation.AMOUNT, 7500),
    ("a hundred", Expectation.AMOUNT, 10000),
    ("fifteen hundred", Expectation.AMOUNT, 150000),
    ("two hundred and fifty", Expectation.AMOUNT, 25000),
    # Two numbers back to back: the first is hundreds (see the module's rules).
    ("twelve fifty", Expectation.AMOUNT, 125000),
    ("two fifty", Expectation.AMOUNT, 25000),
    ("I can pay one fifty.", None, 15000),
    ("nineteen ninety nine", Expectation.AMOUNT, 199900),
]


@pytest.mark.parametrize(("text", "expecting", "cents"), AMOUNTS)
def test_c6_amount_offered(text: str, expecting: Expectation | None, cents: int) -> None:
    got = heard(text, expecting)
    assert got.amount_cents == cents
    assert Intent.PAYMENT_OFFER in got.intents


@pytest.mark.parametrize(
    "text",
    [
        "I have three kids.",
        "Call me at 5 pm.",
        "I can pay in two weeks.",
        "I can pay on the 15th.",
        "one two three four",
        "It's been 2 years.",
        "I was born in 1980.",
    ],
)
def test_c6_numbers_that_are_not_amounts(text: str) -> None:
    assert heard(text).amount_cents is None


@pytest.mark.parametrize(
    ("text", "per"),
    [
        ("How about fifty bucks a month?", "month"),
        ("I can do 200 per month.", "month"),
        ("I can pay $100 monthly.", "month"),
        ("I can send 150 every two weeks.", "two weeks"),
        ("I can do 40 a week.", "week"),
    ],
)
def test_c6_recurring_amounts(text: str, per: str) -> None:
    got = heard(text)
    assert got.per == per
    assert got.monthly == (per == "month")


PAY_IN_FULL = [
    "I can pay it in full on Friday.",
    "I'll pay the full amount.",
    "I'll pay the whole thing today.",
    "Let me just pay it off.",
    "I want to pay off the balance.",
    "I'll settle it in full.",
    "I can pay everything today.",
]


@pytest.mark.parametrize("text", PAY_IN_FULL)
def test_c6_pay_in_full(text: str) -> None:
    got = intents(text)
    assert Intent.PAY_IN_FULL in got
    assert Intent.PAYMENT_OFFER not in got


@pytest.mark.parametrize(
    "text",
    ["I can't pay it in full.", "I already paid it in full.", "I won't pay the whole thing."],
)
def test_c6_not_pay_in_full(text: str) -> None:
    assert Intent.PAY_IN_FULL not in intents(text)


PAYMENT_OFFERS = [
    "I can pay something on Friday.",
    "Can I set up a payment plan?",
    "Could I make payments?",
    "I'd like to make a payment.",
    "I can do 200 a month.",
    "I can't pay it in full but I can do 200 a month.",
    "Can you take 40 percent off?",
]


@pytest.mark.parametrize("text", PAYMENT_OFFERS)
def test_c6_payment_offer(text: str) -> None:
    assert Intent.PAYMENT_OFFER in intents(text)


@pytest.mark.parametrize(
    "text",
    [
        "I'm not paying anything.",
        "I won't pay you.",
        "I'll send you a letter.",
        "I can't pay 200.",
    ],
)
def test_c6_not_a_payment_offer(text: str) -> None:
    assert Intent.PAYMENT_OFFER not in intents(text)


@pytest.mark.parametrize(
    ("text", "pct"),
    [
        ("Can you take 40 percent off?", 40.0),
        ("Would you take 40% off?", 40.0),
        ("Could I pay 60% of the balance?", 40.0),
        ("I can settle for half.", 50.0),
        ("How about half off?", 50.0),
        ("Can you do a thirty percent discount?", 30.0),
    ],
)
def test_c6_discount_asked(text: str, pct: float) -> None:
    assert heard(text).discount_pct == pct


DATES = [
    ("tomorrow", TODAY, dt.date(2026, 12, 3)),
    ("today", TODAY, TODAY),
    ("the day after tomorrow", TODAY, dt.date(2026, 12, 4)),
    ("Friday.", TODAY, dt.date(2026, 12, 4)),
    ("on friday", TODAY, dt.date(2026, 12, 4)),
    ("this Friday", TODAY, dt.date(2026, 12, 4)),
    ("Wednesday", TODAY, dt.date(2026, 12, 9)),  # a weekday alone is after today
    ("this Wednesday", TODAY, TODAY),
    ("next Friday", TODAY, dt.date(2026, 12, 11)),  # Friday of next week
    ("next Monday", TODAY, dt.date(2026, 12, 7)),
    ("next Monday", dt.date(2026, 12, 5), dt.date(2026, 12, 7)),  # said on a Saturday
    ("the fifteenth", TODAY, dt.date(2026, 12, 15)),
    ("on the 15th", TODAY, dt.date(2026, 12, 15)),
    ("the first", TODAY, dt.date(2027, 1, 1)),
    ("the 2nd", TODAY, TODAY),
    ("the 31st", dt.date(2027, 2, 2), dt.date(2027, 3, 31)),  # February has no 31st
    ("December 20th", TODAY, dt.date(2026, 12, 20)),
    ("December twentieth", TODAY, dt.date(2026, 12, 20)),
    ("the twentieth of December", TODAY, dt.date(2026, 12, 20)),
    ("November 20th", TODAY, dt.date(2027, 11, 20)),
    ("12/20", TODAY, dt.date(2026, 12, 20)),
    ("January 5th, 2027", TODAY, dt.date(2027, 1, 5)),
    ("in two weeks", TODAY, dt.date(2026, 12, 16)),
    ("in 3 days", TODAY, dt.date(2026, 12, 5)),
    ("in a week", TODAY, dt.date(2026, 12, 9)),
    ("a week from today", TODAY, dt.date(2026, 12, 9)),
    ("end of the month", TODAY, dt.date(2026, 12, 31)),
    ("Tuesday the 8th", TODAY, dt.date(2026, 12, 8)),
]


@pytest.mark.parametrize(("text", "today", "day"), DATES)
def test_c6_date_resolved(text: str, today: dt.date, day: dt.date) -> None:
    got = heard(text, today=today)
    assert got.date == day
    assert got.date_of_birth is None


def test_c6_bare_ordinal_is_a_day_only_when_a_date_was_asked() -> None:
    assert heard("fifteenth", Expectation.DATE).date == dt.date(2026, 12, 15)
    assert heard("The first payment.").date is None


def test_c6_amount_and_date_in_one_turn() -> None:
    got = heard("I can pay two hundred and fifty dollars on the fifteenth.")
    assert (got.amount_cents, got.date) == (25000, dt.date(2026, 12, 15))
    got = heard("I'll pay 50 on Friday by debit card.")
    assert (got.amount_cents, got.date, got.method) == (5000, dt.date(2026, 12, 4), "debit card")


METHODS = [
    ("I'll pay by debit card.", PaymentMethod.DEBIT_CARD),
    ("with my debit", PaymentMethod.DEBIT_CARD),
    ("credit card", PaymentMethod.CREDIT_CARD),
    ("I'll use my Visa.", PaymentMethod.CREDIT_CARD),
    ("card", PaymentMethod.CARD),
    ("Can I pay with ACH?", PaymentMethod.BANK_TRANSFER),
    ("Can I pay with A.C.H.?", PaymentMethod.BANK_TRANSFER),
    ("bank transfer", PaymentMethod.BANK_TRANSFER),
    ("from my checking account", PaymentMethod.BANK_TRANSFER),
    ("I'll send a check.", PaymentMethod.CHECK),
    ("by check", PaymentMethod.CHECK),
    ("Check.", PaymentMethod.CHECK),
    ("money order", PaymentMethod.MONEY_ORDER),
]


@pytest.mark.parametrize(("text", "method"), METHODS)
def test_c6_payment_method(text: str, method: PaymentMethod) -> None:
    got = heard(text)
    assert got.method == method
    assert got.method == method.value  # a plain string the agent can read back


@pytest.mark.parametrize("text", ["Let me check.", "I'll check with my wife.", "Okay."])
def test_c6_no_payment_method(text: str) -> None:
    assert heard(text).method is None


CALLBACKS = [
    ("Can you call me back tomorrow?", dt.date(2026, 12, 3)),
    ("I'm driving right now, call me later.", None),
    ("This isn't a good time.", None),
    ("Call me next Monday.", dt.date(2026, 12, 7)),
    ("I'm at work.", None),
    ("Try me again later.", None),
    ("Could you call back on Friday?", dt.date(2026, 12, 4)),
    ("I'm at the doctor's, can I call you back?", None),
]


@pytest.mark.parametrize(("text", "day"), CALLBACKS)
def test_c12_callback_requested(text: str, day: dt.date | None) -> None:
    got = heard(text)
    assert Intent.CALLBACK in got.intents
    assert got.date == day


def test_c12_do_not_call_back_is_no_callback() -> None:
    got = intents("Don't call me back.")
    assert Intent.CALLBACK not in got
    assert Intent.STOP_CALLING in got


def test_understanding_is_deterministic_and_keeps_the_text() -> None:
    text = "Yes, I can pay $200 on Friday."
    assert heard(text) == heard(text)
    assert heard(text).text == text


# -- C10: an answering machine, not a person -----------------------------------------------

C10_VOICEMAIL_GREETINGS = [
    "Hi, you've reached Jordan. I can't take your call right now. Please leave a message after "
    "the tone.",
    "The person you are calling is not available. At the tone, please record your message.",
    "You have reached the voicemail box of 555-0100.",
    "Hey it's Jordan, leave me a message.",
    "The wireless customer you are calling is not available.",
    "The mailbox is full.",
]


@pytest.mark.parametrize("text", C10_VOICEMAIL_GREETINGS)
def test_c10_voicemail_greeting_is_recognised(text: str) -> None:
    assert heard(text).voicemail


@pytest.mark.parametrize(
    "text", ["Hello?", "Yes, this is Jordan.", "I got your voicemail.", "Can I take a message?"]
)
def test_c10_a_person_is_not_a_voicemail(text: str) -> None:
    assert not heard(text).voicemail
