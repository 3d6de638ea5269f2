"""The output guard's allow-list, by property (rule C3, C5, C6, C13; issue 17, item 5).

A small LLM writes anything: generated outputs from every family of what it gets wrong
(wrong amounts, invented discounts, dates and phone numbers, other scripts and
languages, the consumer's voice, truncated sentences, tool names and JSON, over-long
text, invented names, debt words before verification, the reference's content
dropped) are never allowed for any phraseable reference of the policy, on any
account; and the reference itself, or with a polite prefix, always is, so the guard is
not simply blocking everything. Through ``GuardProcessor``, nothing of a blocked
response is spoken: the policy's own text is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pipecat.frames.frames import LLMFullResponseEndFrame, LLMFullResponseStartFrame, LLMTextFrame
from pipecat.tests.utils import run_test

from agent.config import Settings
from agent.conversation.account import Account, dollars
from agent.conversation.allow_list import Instruction, extract_figures
from agent.conversation.exchange import PHRASEABLE
from agent.conversation.guard import GuardContext, OutputGuard
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Reply, Templates
from agent.conversation.scenarios import account_from
from agent.pipeline.dialogue import GuardProcessor, PhraseRequestFrame
from agent.pipeline.phrasing import Phrasing

PROMPTS = PromptSet.load(Settings.from_env({}).prompt_version)
TEMPLATES = PROMPTS.templates
KEYS = sorted(k for k in PHRASEABLE if k in TEMPLATES)
GUARD = OutputGuard()
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- the accounts and the references ----------------------------------------------------

NAMES = ("Jordan Smith", "Maria Garcia", "Wei Chen", "Aisha Khan", "Sam O'Neil")
CREDITORS = ("Acme Bank, N.A.", "Bluebird Credit Union", "Cedar Health", "Metro Telecom")


@st.composite
def accounts(draw: st.DrawFn) -> Account:
    return dataclasses.replace(
        account_from({}),
        consumer_name=draw(st.sampled_from(NAMES)),
        creditor=draw(st.sampled_from(CREDITORS)),
        balance_cents=100 * draw(st.integers(150, 9000)),
        max_discount_pct=float(draw(st.sampled_from((10, 20, 25, 30, 40, 50)))),
        min_installment_cents=100 * draw(st.integers(20, 200)),
        max_term_months=draw(st.integers(3, 24)),
    )


def placeholders(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def render(key: str, account: Account, offer_cents: int) -> str:
    """The policy's text for ``key`` on ``account``: every placeholder filled as the
    policy fills it (a placeholder it adds later gets an amount, the strictest case)."""
    balance = account.balance_cents
    floor = math.ceil(balance * (1 - account.max_discount_pct / 100))
    installment = max(account.min_installment_cents, math.ceil(balance / account.max_term_months))
    values: dict[str, Any] = {
        "consumer_name": account.consumer_name,
        "consumer_first_name": account.first_name,
        "amount": dollars(offer_cents),
        "min_settlement": dollars(floor),
        "installment": dollars(installment),
        "min_installment": dollars(account.min_installment_cents),
        "term_installment": dollars(installment),
        "months": account.max_term_months,
        "max_term": account.max_term_months,
        "max_discount": f"{account.max_discount_pct:g} percent",
        "balance": dollars(balance),
        "creditor": account.creditor,
        "question": TEMPLATES.get("ask_date", "On what date would you like to pay?"),
    }
    template = TEMPLATES[key]
    for name in placeholders(template):
        values.setdefault(name, "$75")
    return template.format(**values)


@st.composite
def turns(draw: st.DrawFn) -> tuple[str, Account, GuardContext]:
    """A phraseable reference on an account, and the guard's context for it (verified:
    the policy phrases only after verification)."""
    account = draw(accounts())
    key = draw(st.sampled_from(KEYS))
    reference = render(key, account, 100 * draw(st.integers(5, 400)))
    instruction = Instruction.for_turn(reference, account, verified=True)
    ctx = GuardContext.for_account(account, verified=True, instruction=instruction)
    return reference, account, ctx


def allowed_values(reference: str, account: Account) -> set[float]:
    """Every number the instruction gives (the reference's and the balance)."""
    found, _ = extract_figures(f"{reference} {dollars(account.balance_cents)}".lower())
    return {f.value for f in found}


def blocked(text: str, ctx: GuardContext) -> bool:
    return not GUARD.check_response(text, ctx).allowed


# -- faithful phrasings pass ------------------------------------------------------------

PREFIXES = ("", "Thank you. ", "I understand. ", "Okay. ", "I see. ", "Thanks. ")


def test_there_are_references_to_phrase():
    assert len(KEYS) >= 5, KEYS


@SETTINGS
@given(turns(), st.sampled_from(PREFIXES))
def test_the_reference_itself_and_with_a_polite_prefix_is_allowed(turn, prefix):
    reference, _, ctx = turn
    verdict = GUARD.check_response(prefix + reference, ctx)
    assert verdict.allowed, (prefix + reference, verdict.blocked)


# -- every family of what a model gets wrong is blocked ---------------------------------

ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()  # noqa: E501
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def in_words(n: int) -> str:
    """An amount as words ("one thousand two hundred and five")."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10 - 2] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + in_words(rest))
    rest = n % 1000
    return in_words(n // 1000) + " thousand" + ("" if rest == 0 else " " + in_words(rest))


def around(reference: str, sentence: str, where: int) -> str:
    """``sentence`` put before the reference, after it, or in place of it."""
    return [f"{sentence} {reference}", f"{reference} {sentence}", sentence][where % 3]


@SETTINGS
@given(turns(), st.integers(1, 20_000), st.integers(0, 3), st.integers(0, 2))
def test_an_amount_not_in_the_instruction_is_blocked(turn, amount, form, where):
    reference, account, ctx = turn
    assume(amount not in allowed_values(reference, account))
    said = [f"${amount:,}", f"${amount}.50", f"{in_words(amount)} dollars", f"{amount} dollars"]
    money = said[form]
    texts = [
        around(reference, f"That would be {money}.", where),
        re.sub(r"\$[\d,]+(?:\.\d\d)?", money, reference, count=1),
    ]
    for text in texts:
        if text != reference:
            assert blocked(text, ctx), text


@SETTINGS
@given(turns(), st.integers(1, 99), st.booleans(), st.integers(0, 2))
def test_an_invented_discount_or_percentage_is_blocked(turn, pct, sign, where):
    reference, account, ctx = turn
    assume(pct not in allowed_values(reference, account))
    text = around(reference, f"I can take {pct}{'%' if sign else ' percent'} off.", where)
    assert blocked(text, ctx), text


DATES = (
    "on Friday",
    "on December 11",
    "by the 15th",
    "tomorrow",
    "next week",
    "on 2026-12-05",
    "on 12/11",
    "on the fifth",
    "this weekend",
    "at 5 pm",
    "on Monday, January 4",
)


@SETTINGS
@given(turns(), st.sampled_from(DATES), st.integers(0, 2))
def test_an_invented_date_is_blocked(turn, date, where):
    reference, _, ctx = turn
    text = around(reference, f"You could start {date}.", where)
    assert blocked(text, ctx), text


@SETTINGS
@given(turns(), st.integers(100, 999), st.integers(0, 9999), st.integers(0, 3), st.integers(0, 2))
def test_an_invented_phone_number_is_blocked(turn, exchange, line, form, where):
    reference, _, ctx = turn
    number = [
        f"1-800-{exchange}-{line:04d}",
        f"{exchange}-{line:04d}",
        f"{exchange} {line:04d}",
        f"{exchange}.{line:04d}",
    ][form]
    text = around(reference, f"You can reach us at {number}.", where)
    assert blocked(text, ctx), text


OTHER_SCRIPTS = (
    "我们可以帮您安排付款。",
    "您好",
    "Мы можем помочь вам.",
    "يمكننا مساعدتك",
    "हम आपकी मदद कर सकते हैं।",
    "ขอบคุณครับ",
    "감사합니다.",
    "Está bien.",
    "Très bien, merci.",
    "Danke schön.",
    "ありがとうございます。",
)


@SETTINGS
@given(turns(), st.sampled_from(OTHER_SCRIPTS), st.integers(0, 2))
def test_other_scripts_are_blocked(turn, foreign, where):
    reference, _, ctx = turn
    text = around(reference, foreign, where)
    assert blocked(text, ctx), text


INDONESIAN = "saya akan membayar bayar uang hutang tidak bisa besok terima kasih bulan sekarang tolong dengan untuk kami".split()  # noqa: E501
SPANISH = "usted puede pagar dinero deuda gracias cuenta saldo quiero tengo ahora cuando hola buenos".split()  # noqa: E501


@SETTINGS
@given(
    turns(),
    st.sampled_from((INDONESIAN, SPANISH)).flatmap(
        lambda words: st.lists(st.sampled_from(words), min_size=1, max_size=6)
    ),
    st.integers(0, 2),
)
def test_other_languages_in_latin_letters_are_blocked(turn, words, where):
    reference, _, ctx = turn
    sentence = " ".join(words).capitalize() + "."
    text = around(reference, sentence, where)
    assert blocked(text, ctx), text


SUBJECTS = ("I", "I'm", "We", "I'll", "I've")
AUXILIARIES = ("", "will", "can't", "don't", "do not", "won't", "am going to", "just want to")
AUXILIARIES += ("really can't", "already", "never", "cannot", "would like to", "have to")
VERBS = ("pay", "owe", "afford", "dispute", "paid", "borrowed", "owe you", "pay it off")
VERBS += ("end the call", "hang up")
CONSUMER_LINES = (
    "My balance is too high.",
    "Please stop calling me.",
    "Call me back later.",
    "Who is this?",
    "You have the wrong number.",
    "Are you a robot?",
    "My card number is on file.",
    "Leave me alone.",
    "I lost my job.",
    "What is this about?",
)


@SETTINGS
@given(
    turns(),
    st.sampled_from(SUBJECTS),
    st.sampled_from(AUXILIARIES),
    st.sampled_from(VERBS),
    st.sampled_from(CONSUMER_LINES),
    st.integers(0, 2),
    st.booleans(),
)
def test_the_consumers_voice_is_blocked(turn, subject, aux, verb, line, where, fixed):
    reference, account, ctx = turn
    first = account.first_name
    identity = (f"This is {first}.", f"{first} speaking.", f"I'm {account.consumer_name}.")
    generated = " ".join(w for w in (subject, aux, verb) if w) + " it."
    sentence = line if fixed else generated
    for text in (around(reference, sentence, where), around(reference, identity[where], where)):
        assert blocked(text, ctx), text


@SETTINGS
@given(turns(), st.data())
def test_a_truncated_response_is_blocked(turn, data):
    reference, _, ctx = turn
    words = reference.split()
    cut = data.draw(st.integers(1, len(words) - 1))
    text = " ".join(words[:cut]).rstrip(".?!,;:")
    assert blocked(text, ctx), text
    assert blocked(reference.rstrip(".?!") + "...", ctx)
    assert blocked(reference.rstrip(".?!") + "\u2026", ctx)


CODE = (
    "record_promise(amount=50)",
    '{"amount": 50, "date": "2026-12-15"}',
    "<tool_call>",
    "Call end_call now.",
    "See https://pay.example.com for details.",
    "Visit www.northwind.com today.",
    "```json```",
    "**Note:** please pay.",
    "transfer()",
    "Caller: yes.",
    "Your task: say this.",
    "[record_dispute]",
    "#payment",
    "The function returns a date.",
)


@SETTINGS
@given(turns(), st.sampled_from(CODE), st.integers(0, 2))
def test_tool_names_json_markup_and_urls_are_blocked(turn, code, where):
    reference, _, ctx = turn
    text = around(reference, code, where)
    assert blocked(text, ctx), text


@SETTINGS
@given(turns(), st.integers(3, 5))
def test_an_over_long_response_is_blocked(turn, times):
    reference, _, ctx = turn
    assert blocked(" ".join([reference] * times), ctx)
    long_sentence = " and ".join(reference.rstrip(".?!").replace("?", ",").split(". ") * 4) + "."
    if len(long_sentence.split()) > 40:
        assert blocked(long_sentence, ctx), long_sentence


NAMES_INVENTED = ("Wells Fargo", "Capital One", "Michael", "Sarah Johnson", "Experian")
NAMES_INVENTED += ("Chase", "the IRS", "Judge Brown", "Northwind Legal")


@SETTINGS
@given(turns(), st.sampled_from(NAMES_INVENTED), st.integers(0, 2))
def test_an_invented_name_or_organisation_is_blocked(turn, name, where):
    reference, _, ctx = turn
    text = around(reference, f"{name} will help you with this.", where)
    assert blocked(text, ctx), text


@SETTINGS
@given(turns(), st.integers(0, 1))
def test_a_response_without_the_references_required_content_is_blocked(turn, how):
    """The counter-offer's figures and the question asked are the required content."""
    reference, _, ctx = turn
    if how == 0:  # every figure gone
        text = re.sub(r"\$[\d,.]+\d|\b\d+\b(?: percent)?", "that", reference)
        assume(text != reference)
    else:  # the question gone
        sentences = [s for s in re.split(r"(?<=[.?!])\s+", reference) if not s.endswith("?")]
        text = " ".join(sentences) or "Thank you."
    assert blocked(text, ctx), text


@SETTINGS
@given(turns(), st.sampled_from(("Yes.", "Yes, that's right.", "Yeah.", "No.", "Correct.")))
def test_an_answer_the_reference_does_not_give_is_blocked(turn, answer):
    """An implied yes ("is this about money?") is the policy's to give, never the LLM's."""
    reference, _, ctx = turn
    assume(not re.match(r"\W*(?:yes|no|of course|sure|certainly)\b", reference, re.I))
    assert blocked(f"{answer} {reference}", ctx)


DEBT_BEFORE_VERIFICATION = (
    "It's about your debt.",
    "You owe {balance}.",
    "This is about your account with {creditor}.",
    "We are a debt collector.",
    "Your balance is overdue.",
    "It is about money you owe.",
    "I'm calling from {creditor}.",
    "This is Northwind Recovery.",
    "It's about a payment.",
    "Yes, it's about money.",
)


@SETTINGS
@given(accounts(), st.sampled_from(DEBT_BEFORE_VERIFICATION), st.integers(0, 1))
def test_debt_words_before_verification_are_blocked(account, line, where):
    reference = TEMPLATES.get("confirm_identity", "Am I speaking with {consumer_name}?").format(
        consumer_name=account.consumer_name
    )
    instruction = Instruction.for_turn(reference, account, verified=False)
    ctx = GuardContext.for_account(account, verified=False, instruction=instruction)
    assert GUARD.check_response(reference, ctx).allowed  # the question itself may be put
    sentence = line.format(balance=dollars(account.balance_cents), creditor=account.creditor)
    text = around(reference, sentence, where)
    assert blocked(text, ctx), text


# -- through the pipeline: nothing blocked is spoken ---------------------------------------

FAMILIES: tuple[Callable[[str, Account], str], ...] = (
    lambda ref, a: f"{ref} That would be ${a.balance_cents // 100 + 17:,}.",
    lambda ref, a: f"{ref} I can take 95 percent off.",
    lambda ref, a: f"Please call 1026-12-05. {ref}",
    lambda ref, a: f"{ref} 我们可以帮您。",
    lambda ref, a: f"Saya akan bayar besok. {ref}",
    lambda ref, a: f"I do not owe it, I just want to end the call. {ref}",
    lambda ref, a: ref.rstrip("?.!").rsplit(" ", 2)[0],
    lambda ref, a: f"{ref} record_promise",
    lambda ref, a: " ".join([ref] * 4),
    lambda ref, a: "Please keep this number as your last name.",
)


def phrasing_for(account: Account, reference: str) -> Phrasing:
    """A phrasing whose pending reply is ``reference`` (the policy's text for the turn)."""
    policy = ConversationPolicy(account, Templates(TEMPLATES), dt.date(2026, 12, 2))
    policy.verified = True
    phrasing = Phrasing(policy, PROMPTS.turn)
    phrasing.context([], "I can pay something.", Reply([reference], phrase=reference))
    return phrasing


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns(), st.sampled_from(FAMILIES), st.integers(1, 4))
async def test_through_the_guard_processor_no_blocked_response_is_spoken(turn, family, pieces):
    reference, account, _ = turn
    text = family(reference, account)
    phrasing = phrasing_for(account, reference)
    events = []
    guard = GuardProcessor(phrasing.policy, events.append, phrasing=phrasing)
    step = max(1, len(text) // pieces)
    chunks = [text[i : i + step] for i in range(0, len(text), step)]
    down, _ = await run_test(
        guard,
        frames_to_send=[
            PhraseRequestFrame(phrasing.turn),
            LLMFullResponseStartFrame(),
            *[LLMTextFrame(chunk) for chunk in chunks],
            LLMFullResponseEndFrame(),
        ],
    )
    spoken = [f.text.strip() for f in down if isinstance(f, LLMTextFrame)]
    assert spoken == [reference], (text, spoken)  # the policy's own text, and only it
    assert events and all(e.kind == "blocked_sentence" for e in events)
    assert all(e.detail["rule"] and e.detail["reason"] for e in events)


@pytest.mark.parametrize("prefix", PREFIXES[:3])
async def test_through_the_guard_processor_a_faithful_phrasing_is_spoken(prefix):
    account = account_from({})
    reference = render(KEYS[0], account, 30_000)
    phrasing = phrasing_for(account, reference)
    guard = GuardProcessor(phrasing.policy, lambda e: None, phrasing=phrasing)
    down, _ = await run_test(
        guard,
        frames_to_send=[
            PhraseRequestFrame(phrasing.turn),
            LLMFullResponseStartFrame(),
            LLMTextFrame(prefix + reference),
            LLMFullResponseEndFrame(),
        ],
    )
    spoken = " ".join(f.text.strip() for f in down if isinstance(f, LLMTextFrame))
    assert spoken == (prefix + reference).strip()


OPPOSITES = (
    "You don't have to pay this.",
    "You no longer owe anything.",
    "This is not a debt.",
    "We will never call you again.",
)
HUMAN = ("I'm a real person.", "I am not a robot.", "I'm a human, not a machine.")


@SETTINGS
@given(turns(), st.sampled_from(OPPOSITES + HUMAN), st.integers(0, 1))
def test_a_negation_or_a_claim_to_be_human_the_reference_does_not_make_is_blocked(
    turn, sentence, where
):
    """A negation turns a sentence into its opposite; the agent is automated (C1)."""
    reference, _, ctx = turn
    text = around(reference, sentence, where)
    assert blocked(text, ctx), text
