"""The output guard: every sentence the LLM writes is checked before it is spoken.

The LLM phrases; it never decides what is legal. A sentence that breaks a rule
of docs/compliance.md is not spoken: the guard says which rule, why, and gives a fixed
sentence to say instead. The checks are plain regexes over one sentence (the
pipeline aggregates the LLM's stream into sentences before the TTS), compiled
once, so a check costs microseconds against a turn budget of milliseconds.

What is blocked, in the order it is checked:

- C11: a card number (a Luhn-valid run of 13-19 digits, or 13+ after a card word).
- C5: threats of arrest, jail, police, criminal charges; lawsuits, court,
  garnishment, seizure (C9 when the debt is time-barred; the one exception is
  the time-barred disclosure "we will not sue you", allowed only on a
  time-barred debt); any suggestion that an attorney or the government is
  involved ("our attorney", "law enforcement"; "your attorney" is fine);
  profane or abusive words.
- C3: before the right party is verified, anything about a debt: debt,
  balance, amount, owe, collection, payment, account, the creditor's name,
  money. The one phrase allowed is the verification question itself, "the
  last four digits of your account number".
- C7: a fee ("processing fee", "convenience fee", "service charge") unless the
  agreement allows fees; "there is no fee" is fine.
- C6: a discount above the envelope's maximum, a term longer than its maximum,
  an instalment below its minimum, or instalments that add up to less than the
  smallest settlement.
- C5: an amount that is not the balance and not an offer inside the envelope
  (a settlement at or above the floor, a payment at or above the minimum
  instalment, never more than the balance), or an amount stated as what is owed
  ("a balance of", "you owe") that is not the balance.

Those rules are a deny-list: what they do not recognise would be spoken. So when the
context carries the turn's ``Instruction`` (the policy's reference text and the facts
its stage allows), a sentence must also be *justified*, an allow-list (rule ``allow:*``,
``agent.conversation.allow_list``):

- figure: every amount, percentage, number, count, ordinal, date, weekday, month and
  digit run (a phone number, "2026-12-05") appears in the reference or the facts, as
  what it is there (an amount is no count, a count no date);
- term: a word of a plan, a settlement, a charge or a way to pay only where the
  instruction says one of its family (a settlement never turns into a plan, no
  payment method is offered that was not);
- name: every capitalised name or organisation appears there too, as a whole;
- script, language: ASCII Latin letters only, every word English (``agent.conversation.english``) or
  taken from the instruction, no word of the languages a small model drifts into;
- consumer-voice: never the consumer's side ("I do not owe it", "I will pay", "my
  balance", "call me", "this is Jordan", "who is this?");
- identity: never a person, never "not a robot" (C1);
- answer: no "yes", "no", "correct" the reference does not give (an implied yes to
  "is this about money?");
- code: no tool names, JSON, markup, URLs or echo of the instruction's own labels;
- length and truncated: a bounded sentence, ending in . ? or ! and not on "the" or "and".

``check_response`` judges a whole LLM response: each sentence as above, then the
response as a whole: at most one sentence more than the reference and about 40 words
(length); it carries the reference's required content (required: every figure of the
reference, a question where the reference asks one, the reference's key terms: the
payment methods offered, "date of birth", "one payment or a monthly amount", the person
asked for, a refusal it makes); and it adds little the reference does not say
(unsupported: no negation it does not make, and content words neither in the
instruction, nor a synonym of one of its words, nor plain politeness: at most one in
three, and never most of a sentence). A response that fails any of it is not spoken at
all (``agent.pipeline.dialogue.GuardProcessor`` then speaks the policy's own text).

Nothing here is derived from the policy but its reference text: the required content
is read off the reference (its figures, its question mark, its key terms), so a new
phraseable reply needs no change here.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from functools import lru_cache

from agent.conversation.account import Account, dollars
from agent.conversation.allow_list import (
    Instruction,
    derive,
    split_sentences,
    unjustified_response,
    unjustified_sentence,
)
from agent.conversation.redaction import redact_card_numbers
from agent.conversation.spoken_numbers import (
    NUMBER_PATTERN,
    find_money,
    parse_number,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuardContext:
    """What the guard needs to know about the call at the moment a sentence is checked.

    ``max_discount_pct`` is in percent (30.0 is 30 % off the balance).
    """

    verified: bool
    balance_cents: int
    creditor: str
    time_barred: bool
    max_discount_pct: float
    min_installment_cents: int
    max_term_months: int
    fees_allowed: bool
    consumer_name: str
    #: The turn's instruction: with it the sentence must also pass the allow-list.
    instruction: Instruction | None = None

    @classmethod
    def for_account(
        cls, account: Account, *, verified: bool, instruction: Instruction | None = None
    ) -> GuardContext:
        """The context of a call about ``account``, verified or not yet."""
        return cls(
            verified=verified,
            balance_cents=account.balance_cents,
            creditor=account.creditor,
            time_barred=account.time_barred,
            max_discount_pct=account.max_discount_pct,
            min_installment_cents=account.min_installment_cents,
            max_term_months=account.max_term_months,
            fees_allowed=account.fees_allowed,
            consumer_name=account.consumer_name,
            instruction=instruction,
        )


@dataclass(frozen=True)
class Verdict:
    """Whether a sentence may be spoken; if not, the rule, why, and what to say instead."""

    allowed: bool
    rule: str | None = None
    reason: str | None = None
    replacement: str | None = None


ALLOWED = Verdict(True)

NEUTRAL = "I'm here to help you find an option that works for you."
APOLOGY = "I apologize. " + NEUTRAL
NOT_AVAILABLE = "I'm not able to offer that, but I can go over the options I do have."
NO_FEE = "There is no fee for this."
NO_CARD_DIGITS = "For your security, I won't read card details aloud."


def _c3_replacement(ctx: GuardContext) -> str:
    if ctx.consumer_name.strip():
        return f"I'm only able to speak with {ctx.consumer_name.strip()} directly."
    return "I'm only able to speak with the person I'm calling for directly."


# -- C5: threats, legal action, attorney or government, abuse ---------------------------

_THREAT_RE = re.compile(
    r"\b(?:arrest\w*|jail\w*|prison\w*|imprison\w*|police|sheriff|warrants?|criminal\w*|crimes?"
    r"|prosecut\w*|felony|felonies|deport\w*|lock(?:ed)? (?:you |them )?up)\b"
)
_LEGAL_RE = re.compile(
    r"\b(?:sue|sued|sues|suing|lawsuits?|court|courts|judg(?:e)?ments?|legal (?:action|"
    r"proceedings?|steps|measures)|litigation|garnish\w*|seiz\w*|repossess\w*|levy|liens?)\b"
    r"|\b(?:take|taking|withhold\w*|dock\w*|attach\w*) (?:part of |some of )?(?:your|his|her) "
    r"(?:wages?|pay ?checks?|salary|income|property|house|home|car|bank account)\b"
)
# The time-barred disclosure (rule C9, 23 NYCRR 1.3): "we will not sue you for it".
_NO_SUIT_RE = re.compile(
    r"\b(?:we|they|the creditor|no one|nobody|you)\s+(?:will|can|may|could|would|are|is|shall)"
    r"(?:\s+not|n't|not)\s+(?:legally\s+)?(?:be\s+able\s+to\s+)?(?:sue|be\s+sued)\b"
    r"|\b(?:we|they)\s+(?:won't|can't|cannot)\s+(?:legally\s+)?sue\b"
    r"|\btime to sue\b[^.]*\b(?:has|have)?\s*(?:expired|passed)\b"
)
_AUTHORITY_RE = re.compile(
    r"(?<!your )(?<!your own )\b(?:attorneys?|lawyers?)\b"
    r"|\b(?:law (?:firm|office)s?|legal (?:department|team|counsel|division)|counsel)\b"
    r"|\b(?:government\w*|law enforcement|fbi|irs|department of justice|attorney general"
    r"|district attorney|official notice|(?:federal|state) (?:agency|agencies|authorities"
    r"|officials?|agents?|investigat\w*))\b"
)
_PROFANITY_RE = re.compile(
    r"\b(?:fuck\w*|shit\w*|bullshit|damn\w*|goddam\w*|hell|crap\w*|ass|asshole\w*|bitch\w*"
    r"|bastard\w*|piss\w*|dick\w*|idiot\w*|stupid|moron\w*|dumb|loser\w*|deadbeat\w*|liar\w*"
    r"|pathetic|scum\w*|worthless|shut up)\b"
)

# -- C3: nothing about a debt before verification ------------------------------------------

_DEBT_RE = re.compile(
    r"\b(?:debts?|balances?|amounts?|owe[ds]?|owing|collect\w*|payments?|pay|paid|paying|payoffs?"
    r"|creditors?|accounts?|past due|overdue|delinquen\w*|outstanding|loans?|bills?|billing"
    r"|arrears|settle\w*|installments?|instalments?|dollars?|cents?|bucks|charged? off)\b"
    r"|\$\s?\d"
)
_VERIFICATION_QUESTION_RE = re.compile(
    r"\blast (?:four|4)(?: digits)? of (?:your|the) (?:account|social security) number\b"
)
_CORPORATE_SUFFIX_RE = re.compile(
    r"[,\s]+(?:inc|llc|l\.l\.c|ltd|corp|corporation|co|company|n\.a|na|plc|lp|llp)\.?$", re.I
)


@lru_cache(maxsize=256)
def _creditor_re(creditor: str) -> re.Pattern[str] | None:
    """The creditor's name, with and without its corporate suffix, as one pattern."""
    name = " ".join(creditor.lower().split())
    if not name:
        return None
    names = {name, _CORPORATE_SUFFIX_RE.sub("", name).strip()}
    alternatives = "|".join(
        r"\s+".join(re.escape(part) for part in n.split()) for n in sorted(names, key=len) if n
    )
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


# -- C7: fees ------------------------------------------------------------------------------

_FEE_RE = re.compile(
    r"\b(?:fees?|surcharges?|service charges?|(?:processing|convenience|transaction|handling"
    r"|phone|technology|admin\w*) charges?)\b"
)
_FEE_NEGATORS = {"no", "not", "never", "without", "zero", "free", "waive", "waived", "n't"}
_FEE_WAIVED_AFTER_RE = re.compile(r"^\s*(?:is|are|will be|would be|has been|have been) waived\b")

# -- C6: the envelope ----------------------------------------------------------------------

_NUM = rf"(?:\d+(?:\.\d+)?|{NUMBER_PATTERN})"
_TERM_RES = (
    re.compile(
        rf"\b(?:for|over|across|within|in)\s+(?:the\s+next\s+|a\s+period\s+of\s+|up\s+to\s+)?"
        rf"(?P<n>{_NUM})\s*(?P<unit>months?|years?|weeks?)\b"
    ),
    re.compile(
        rf"\b(?P<n>{_NUM})[\s-]*(?P<unit>month|year|week)\s+(?:payment\s+)?(?:plan|term|agreement"
        r"|period|schedule)\b"
    ),
    re.compile(rf"\b(?P<n>{_NUM})\s*(?P<unit>monthly|weekly)?\s*(?:payments|instal{{1,2}}ments)\b"),
)
_PERCENT_RE = re.compile(rf"(?P<n>{_NUM})\s*(?:%|percent\b|per cent\b)")
_DISCOUNT_AFTER_RE = re.compile(r"^\s*(?:off|discount|reduction|less|savings?)\b")
_OF_BALANCE_RE = re.compile(
    r"^\s*of\s+(?:(?:the|your)\s+)?(?:(?:full|total|current)\s+)?(?:balance|total|amount|debt"
    r"|what\s+you\s+owe)\b"
)
_SETTLEMENT_RE = re.compile(
    r"\b(?:settle\w*|discount\w*|lump sum|one[- ]time|reduced|instead of|off the balance|"
    r"save|saving|savings|forgive\w*|waive\w*)\b"
)
_HALF_RE = re.compile(r"\bhalf\b")
_HALF_OFF_RE = re.compile(r"\bhalf (?:off|of)\b")
_WORD_RE = re.compile(r"[a-z']+")
_STATED_BALANCE_RE = re.compile(r"\b(?:balance|owe|owed|owing|due|total|outstanding)\b")
_MONEY_HINT_RE = re.compile(r"\$|\bdollars?\b|\bbucks\b|\bcents?\b|\bgrand\b")


def _lower(sentence: str) -> str:
    return sentence.lower().replace("\u2019", "'")


def _fee_negated(s: str, start: int, end: int) -> bool:
    before = _WORD_RE.findall(s, max(0, start - 40), start)[-5:]
    if any(w in _FEE_NEGATORS or w.endswith("n't") for w in before):
        return True
    return _FEE_WAIVED_AFTER_RE.match(s[end:]) is not None


def _term_months(s: str) -> float | None:
    longest: float | None = None
    for pattern in _TERM_RES:
        for m in pattern.finditer(s):
            n = parse_number(m.group("n"))
            if n is None:
                continue
            unit = m.group("unit") or "month"
            months = n * 12 if unit.startswith("year") else n * 7 / 30.44 if "week" in unit else n
            longest = months if longest is None else max(longest, months)
    return longest


def _discount_pct(s: str) -> float | None:
    """The largest discount the sentence states, in percent of the balance."""
    found: list[float] = []
    settlement = _SETTLEMENT_RE.search(s) is not None
    for m in _PERCENT_RE.finditer(s):
        n = parse_number(m.group("n"))
        if n is None:
            continue
        after = s[m.end() : m.end() + 40]
        if _DISCOUNT_AFTER_RE.match(after):
            found.append(n)
        elif _OF_BALANCE_RE.match(after):
            found.append(100 - n)
        elif settlement:
            found.append(n)
    if _HALF_RE.search(s) and (settlement or _HALF_OFF_RE.search(s)):
        found.append(50.0)
    return max(found) if found else None


class OutputGuard:
    """Checks one sentence of the agent's output against the in-call rules."""

    def check(self, sentence: str, ctx: GuardContext) -> Verdict:
        """One sentence: the deny rules, then (with an instruction) the allow-list."""
        verdict = self._check(sentence, ctx)
        if verdict.allowed and ctx.instruction is not None:
            why = unjustified_sentence(sentence, derive(ctx.instruction))
            if why is not None:
                verdict = self._unjustified(ctx, *why)
        if not verdict.allowed and logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "blocked (%s: %s): %s",
                verdict.rule,
                verdict.reason,
                redact_card_numbers(sentence)[0],
            )
        return verdict

    def _check(self, sentence: str, ctx: GuardContext) -> Verdict:
        s = _lower(sentence)
        if redact_card_numbers(sentence)[1]:
            return self._blocked(ctx, "C11", "card data in the output", NO_CARD_DIGITS)
        if _THREAT_RE.search(s):
            return self._blocked(ctx, "C5", "threat of arrest or criminal action", NEUTRAL)
        if m := _LEGAL_RE.search(s):
            # On a time-barred debt the one legal sentence allowed is that we will not sue.
            disclosure = ctx.time_barred and not _LEGAL_RE.search(_NO_SUIT_RE.sub(" ", s))
            if not disclosure:
                rule = "C9" if ctx.time_barred else "C5"
                return self._blocked(ctx, rule, f"legal action mentioned ({m.group(0)})", NEUTRAL)
        if m := _AUTHORITY_RE.search(s):
            reason = f"implies attorney or government involvement ({m.group(0)})"
            return self._blocked(ctx, "C5", reason, NEUTRAL)
        if m := _PROFANITY_RE.search(s):
            return self._blocked(ctx, "C5", f"profane or abusive language ({m.group(0)})", APOLOGY)
        if not ctx.verified:
            verdict = self._before_verification(s, ctx)
            if verdict is not None:
                return verdict
        if not ctx.fees_allowed and (verdict := self._fees(s, ctx)) is not None:
            return verdict
        return self._envelope(sentence, s, ctx)

    def _blocked(self, ctx: GuardContext, rule: str, reason: str, replacement: str) -> Verdict:
        if not ctx.verified and _DEBT_RE.search(replacement.lower()):
            replacement = _c3_replacement(ctx)
        return Verdict(False, rule, reason, replacement)

    def _before_verification(self, s: str, ctx: GuardContext) -> Verdict | None:
        text = _VERIFICATION_QUESTION_RE.sub(" ", s)
        m = _DEBT_RE.search(text)
        creditor = _creditor_re(ctx.creditor)
        if m is None and creditor is not None:
            m = creditor.search(text)
        if m is None:
            return None
        reason = f"debt detail before verification ({m.group(0).strip()})"
        return Verdict(False, "C3", reason, _c3_replacement(ctx))

    def _fees(self, s: str, ctx: GuardContext) -> Verdict | None:
        for m in _FEE_RE.finditer(s):
            if not _fee_negated(s, m.start(), m.end()):
                return self._blocked(ctx, "C7", f"fee mentioned ({m.group(0)})", NO_FEE)
        return None

    def _envelope(self, sentence: str, s: str, ctx: GuardContext) -> Verdict:
        balance = ctx.balance_cents
        floor = math.ceil(balance * (1 - ctx.max_discount_pct / 100))
        discount = _discount_pct(s) if ("%" in s or "percent" in s or "half" in s) else None
        if discount is not None and discount > ctx.max_discount_pct + 1e-9:
            reason = f"discount {discount:g}% above the maximum {ctx.max_discount_pct:g}%"
            return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
        months: float | None = None
        if "month" in s or "year" in s or "week" in s or "payments" in s or "stalment" in s:
            months = _term_months(s)
            if months is not None and months > ctx.max_term_months + 1e-9:
                reason = f"term of {months:g} months above the maximum {ctx.max_term_months}"
                return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
        if not _MONEY_HINT_RE.search(s):
            return ALLOWED
        settlement = _SETTLEMENT_RE.search(s) is not None
        # Where fees are allowed, a small amount next to a fee is that fee, not an offer.
        fee_amounts = ctx.fees_allowed and _FEE_RE.search(s) is not None
        # An amount the policy's own reference states (a counter-offer restating what
        # the consumer offered) is the policy's to state; the allow-list judges it.
        stated = derive(ctx.instruction).reference_money if ctx.instruction else frozenset()
        for money in find_money(sentence):
            if not money.marked:
                continue
            cents = money.cents
            if round(cents / 100, 2) in stated:
                continue
            if fee_amounts and cents < ctx.min_installment_cents:
                continue
            if money.per is not None:
                if cents < ctx.min_installment_cents:
                    reason = (
                        f"instalment {dollars(cents)} below the minimum "
                        f"{dollars(ctx.min_installment_cents)}"
                    )
                    return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
                if cents > balance:
                    return self._misstated(ctx, cents)
                if months is not None:
                    per_month = {"month": 1.0, "week": 30.44 / 7, "two weeks": 30.44 / 14}
                    total = cents * months * per_month.get(money.per, 1.0)
                    if total < floor - 1:
                        reason = f"plan totals {dollars(round(total))}, below {dollars(floor)}"
                        return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
                continue
            if cents == balance:
                continue
            if cents > balance:
                return self._misstated(ctx, cents)
            if not settlement and _STATED_BALANCE_RE.search(money.lead):
                return self._misstated(ctx, cents)
            if settlement and cents < floor:
                reason = f"settlement {dollars(cents)} below the floor {dollars(floor)}"
                return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
            if cents < floor and cents < ctx.min_installment_cents:
                if money.offered or settlement:
                    reason = (
                        f"payment {dollars(cents)} below the minimum "
                        f"{dollars(ctx.min_installment_cents)}"
                    )
                    return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
                return self._misstated(ctx, cents)
        return ALLOWED

    def _misstated(self, ctx: GuardContext, cents: int) -> Verdict:
        reason = f"amount {dollars(cents)} is not the balance {dollars(ctx.balance_cents)}"
        replacement = f"The balance is {dollars(ctx.balance_cents)}."
        return self._blocked(ctx, "C5", reason, replacement)

    # -- the allow-list ------------------------------------------------------------------

    def check_response(self, text: str, ctx: GuardContext) -> ResponseVerdict:
        """A whole LLM response: every sentence, then (with an instruction) the response
        as a whole. Nothing of it may be spoken unless it is allowed."""
        sentences = split_sentences(text)
        blocked = [(s, v) for s in sentences if not (v := self.check(s, ctx)).allowed]
        if not blocked and ctx.instruction is not None:
            why = unjustified_response(sentences, derive(ctx.instruction))
            if why is not None:
                blocked.append((" ".join(sentences), self._unjustified(ctx, *why)))
        return ResponseVerdict(not blocked, tuple(sentences), tuple(blocked))

    def _unjustified(self, ctx: GuardContext, rule: str, reason: str) -> Verdict:
        return self._blocked(ctx, f"allow:{rule}", reason, NEUTRAL)


@dataclass(frozen=True)
class ResponseVerdict:
    """Whether an LLM response may be spoken: its sentences, and those blocked (the whole
    response, joined, when it fails as a whole) with why."""

    allowed: bool
    sentences: tuple[str, ...]
    blocked: tuple[tuple[str, Verdict], ...] = ()

    @property
    def verdict(self) -> Verdict:
        """The first reason it was blocked (``ALLOWED`` if it was not)."""
        return self.blocked[0][1] if self.blocked else ALLOWED
