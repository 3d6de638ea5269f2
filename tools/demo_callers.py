"""The demo's callers: a built-in script said by this consumer, and the policy holding the call.

Each line keeps its intent (identity, verification answer, an amount scaled to the balance)
and varies in its words; now and then the caller stumbles. The real ``ConversationPolicy``
answers, and the LLM's drafts of the questions it may phrase pass the real ``OutputGuard``.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent.conversation import Account, PolicyEvent, Templates
from agent.conversation.guard import GuardContext, OutputGuard
from agent.conversation.intents import Expectation, understand
from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.redaction import redact_card_numbers
from agent.conversation.scenarios import Scenario

#: Of the phrased questions, the share where the LLM's draft is a slip the guard must judge.
SLIP_SHARE = 0.25
#: How callers vary from the script (each a probability per call).
P_SWAP_IDENTITY = 0.6
P_WHO_IS_THIS = 0.08
P_WRONG_DOB = 0.08
P_FAIL_VERIFICATION = 0.35  # of the wrong dates of birth, those never corrected
P_ROBOT_ASIDE = 0.05
P_HANG_UP_EARLY = 0.06

#: The LLM's drafts for the questions the policy lets it phrase: a lead-in before the
#: policy's own question (spoken when the guard allows it), or a slip the guard judges.
LEAD_INS = ("Okay.", "I understand.", "Thanks for that.", "Sure.", "Got it.", "Alright.")
DRAFTS = (
    "If this isn't paid soon, we may have to take legal action.",
    "There is a small processing fee of five dollars for paying by card.",
    "Our attorney has asked me to settle this with you today.",
    "I could take sixty percent off if you pay it all today.",
    "We may garnish your wages if this stays unpaid.",
    "I can spread it over thirty-six months if that helps.",
    "Honestly, most people in your situation just pay it today.",
)

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_WEEKDAY_RE = re.compile(r"\b(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b")
_ORDINAL_RE = re.compile(r"\bthe (?:first|fifth|tenth|fifteenth|twentieth|15th|1st)\b")
_ORDINALS = ("first", "fifth", "tenth", "fifteenth", "twentieth")
_TOMORROW_RE = re.compile(r"\btomorrow\b")
_METHOD_RE = re.compile(
    r"\b(?:with my debit card|by debit card|with a debit card|by bank transfer|with a check|"
    r"by check)\b"
)
_METHODS = ("with my debit card", "by debit card", "by bank transfer", "by check", "with a check")
_IDENTITY_LINES = (
    "Yes, this is {name}.",
    "Speaking.",
    "Yes, it's me.",
    "That's me.",
    "This is {first}.",
    "Yes, speaking.",
    "Yeah, this is {name}.",
)
_DOB_LINES = ("My date of birth is {dob}.", "{dob}.", "It's {dob}.", "I was born {dob}.")
_LAST4_LINES = ("The last four are {digits}.", "{spaced}.", "It's {digits}.")
_MONTHLY_LINES = (
    "I can't pay all of that. I could do {amount} a month.",
    "I could do {amount} a month.",
    "How about {amount} a month?",
)
_LUMP_LINES = ("Okay, I can pay {amount}.", "I could pay {amount}.", "Would you take {amount}?")
_ROBOT_ASIDES = ("Am I talking to a real person?", "Wait, is this a recording?")
_DIGIT_WORDS = "zero one two three four five six seven eight nine".split()


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _spoken_dob(rng: random.Random, born: dt.date) -> str:
    month = f"{born:%B}"
    return rng.choice(
        (
            f"{month} {_ordinal(born.day)}, {born.year}",
            f"{born.month}/{born.day}/{born.year}",
            f"the {_ordinal(born.day)} of {month} {born.year}",
        )
    )


def _dollars_said(cents: int) -> str:
    return f"${cents // 100:,}"


def _verification_line(rng: random.Random, account: Account, wrong: bool = False) -> str:
    """The caller's answer to the verification question the policy will ask them."""
    if account.date_of_birth is not None:
        born = account.date_of_birth
        if wrong:
            born += dt.timedelta(days=rng.choice((-731, -365, -30, -1, 1, 30, 365, 731)))
        return _capitalized(rng.choice(_DOB_LINES).format(dob=_spoken_dob(rng, born)))
    digits = account.account_last4 or "0000"
    if wrong:
        digits = f"{(int(digits) + rng.randrange(1, 9999)) % 10_000:04d}"
    spaced = " ".join(_DIGIT_WORDS[int(d)] for d in digits)
    return _capitalized(rng.choice(_LAST4_LINES).format(digits=digits, spaced=spaced))


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def caller_lines(
    scenario: Scenario,
    account: Account,
    rng: random.Random,
    prompts: PromptSet,
    today: dt.date,
) -> list[str]:
    """The script's lines said by this consumer, about this debt, in their own words.

    Each line keeps its intent: the identity and the verification answer are the
    account's, an amount is scaled to the balance, days and payment methods vary. Now
    and then the caller stumbles (asks who is calling, gives a wrong date of birth,
    asks whether this is a person, hangs up early); the policy decides what follows.
    """
    demo = scenario.account
    name, first = account.consumer_name, account.first_name
    lines: list[str] = []
    verification_at: int | None = None
    for index, line in enumerate(scenario.lines):
        dob = understand(line, expecting=Expectation.DATE_OF_BIRTH, today=today).date_of_birth
        heard = understand(line, today=today)
        if dob is not None and dob == demo.date_of_birth:
            verification_at = len(lines)
            lines.append(_verification_line(rng, account))
            continue
        if heard.amount_cents is not None and demo.balance_cents:
            share = heard.amount_cents / demo.balance_cents * rng.uniform(0.85, 1.15)
            cents = max(1000, round(account.balance_cents * share / 500) * 500)
            template = rng.choice(_MONTHLY_LINES if heard.monthly else _LUMP_LINES)
            lines.append(template.format(amount=_dollars_said(cents)))
            continue
        if index == 0 and rng.random() < P_SWAP_IDENTITY:
            if _confirms_identity(line, demo, prompts, today):
                lines.append(rng.choice(_IDENTITY_LINES).format(name=name, first=first))
                continue
        # The script's own words, for this consumer, on another day, by another method.
        text = line.replace(demo.consumer_name, name)
        text = re.sub(rf"\b{re.escape(demo.first_name)}\b", first, text)
        text = _WEEKDAY_RE.sub(lambda _: rng.choice(_WEEKDAYS), text)
        text = _ORDINAL_RE.sub(lambda _: f"the {rng.choice(_ORDINALS)}", text)
        text = _TOMORROW_RE.sub(
            lambda _: rng.choice(("tomorrow", f"on {rng.choice(_WEEKDAYS)}")), text
        )
        text = _METHOD_RE.sub(lambda _: rng.choice(_METHODS), text)
        lines.append(text)

    if verification_at is not None and rng.random() < P_WRONG_DOB:
        lines.insert(verification_at, _verification_line(rng, account, wrong=True))
        if rng.random() < P_FAIL_VERIFICATION:
            lines[verification_at + 1] = _verification_line(rng, account, wrong=True)
        verification_at += 1
    if lines and _confirms_identity(scenario.lines[0], demo, prompts, today):
        if rng.random() < P_WHO_IS_THIS:
            lines.insert(0, "Sorry, who is this?")
            verification_at = None if verification_at is None else verification_at + 1
    if verification_at is not None:
        after = verification_at + 1
        if rng.random() < P_ROBOT_ASIDE and after < len(lines):
            lines.insert(after, rng.choice(_ROBOT_ASIDES))
        elif rng.random() < P_HANG_UP_EARLY and after < len(lines):
            del lines[after:]
    return lines


def _confirms_identity(line: str, account: Account, prompts: PromptSet, today: dt.date) -> bool:
    """Whether the policy takes ``line``, said to the greeting, as the consumer saying it's them."""
    policy = ConversationPolicy(account, Templates(prompts.templates), today)
    greeting = policy.opening(prompts.greeting.format(consumer_name=account.consumer_name))
    policy.played(greeting, len(greeting.texts))
    policy.on_caller_turn(line)
    return policy.stage is Stage.VERIFICATION


# -- one conversation ---------------------------------------------------------------------


@dataclass
class Step:
    """One exchange as the policy held it: what the caller said, what the agent answered."""

    #: The caller's words as the STT client passes them on (card digits removed); None for
    #: the greeting.
    caller: str | None
    texts: list[str]
    events: list[PolicyEvent]
    #: The reply is one the LLM may phrase (``Reply.phrase``).
    phraseable: bool = False
    verified: bool = False


def hold_conversation(
    account: Account, lines: Sequence[str], prompts: PromptSet, today: dt.date
) -> tuple[ConversationPolicy, list[Step]]:
    """Hold the conversation with the real policy, as the pipeline does, turn by turn.

    Like ``agent.conversation.scenarios.converse``, but the caller's words pass
    ``redact_card_numbers`` first (the STT client's job), and each step keeps the events of its
    own turn, so they can be placed on the call's timeline.
    """
    policy = ConversationPolicy(account, Templates(prompts.templates), today)
    greeting = prompts.greeting.format(consumer_name=account.consumer_name)
    opening = policy.opening(greeting)
    policy.played(opening, len(opening.texts))  # each reply is heard in full here
    steps = [Step(None, list(opening.texts), list(policy.events))]
    for said in lines:
        if policy.stage is Stage.ENDED:
            break
        heard, _ = redact_card_numbers(said)
        before = len(policy.events)
        reply = policy.on_caller_turn(heard)
        policy.played(reply, len(reply.texts))
        steps.append(
            Step(
                heard,
                list(reply.texts),
                policy.events[before:],
                phraseable=reply.phrase is not None,
                verified=policy.verified,
            )
        )
    return policy, steps


@dataclass
class Phrasing:
    """What the LLM's draft of a phrased reply came to: spoken texts and guard events."""

    texts: list[str]
    blocked: list[dict[str, str]]


def phrase_reply(step: Step, account: Account, rng: random.Random, guard: OutputGuard) -> Phrasing:
    """The LLM's version of a phraseable reply, past the real guard (as GuardProcessor does).

    The draft is a lead-in before the policy's question, or, now and then, a slip
    first. Each sentence is checked; at the first blocked one the rest of the draft is
    dropped and the policy's own text is spoken after what had passed.
    """
    draft = [rng.choice(LEAD_INS)]
    if rng.random() < SLIP_SHARE:
        draft.append(rng.choice(DRAFTS))
    draft.extend(step.texts)
    ctx = GuardContext.for_account(account, verified=step.verified)
    spoken: list[str] = []
    for sentence in draft:
        verdict = guard.check(sentence, ctx)
        if not verdict.allowed:
            blocked = {"rule": verdict.rule or "", "reason": verdict.reason or ""}
            return Phrasing([*spoken, *step.texts], [blocked])
        spoken.append(sentence)
    return Phrasing(spoken, [])
