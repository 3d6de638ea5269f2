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
its stage allows), a sentence must also be *justified*, an allow-list (rule ``allow:*``):

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

from pipecat.utils.string import match_endofsentence

from agent.conversation.english import FOREIGN_WORDS, GENERIC_WORDS, STOP_WORDS, is_english, stem
from agent.conversation.policy import Account
from agent.conversation.redaction import redact_card_numbers
from agent.conversation.spoken_numbers import (
    NUMBER_PATTERN,
    ORDINAL_WORDS,
    TENS_WORDS,
    UNIT_WORDS,
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


def _dollars(cents: int) -> str:
    whole, rest = divmod(cents, 100)
    return f"${whole:,}" if rest == 0 else f"${whole:,}.{rest:02d}"


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
            verdict = self._justified(sentence, ctx, _derive(ctx.instruction))
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
        stated = _derive(ctx.instruction).reference_money if ctx.instruction else frozenset()
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
                        f"instalment {_dollars(cents)} below the minimum "
                        f"{_dollars(ctx.min_installment_cents)}"
                    )
                    return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
                if cents > balance:
                    return self._misstated(ctx, cents)
                if months is not None:
                    per_month = {"month": 1.0, "week": 30.44 / 7, "two weeks": 30.44 / 14}
                    total = cents * months * per_month.get(money.per, 1.0)
                    if total < floor - 1:
                        reason = f"plan totals {_dollars(round(total))}, below {_dollars(floor)}"
                        return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
                continue
            if cents == balance:
                continue
            if cents > balance:
                return self._misstated(ctx, cents)
            if not settlement and _STATED_BALANCE_RE.search(money.lead):
                return self._misstated(ctx, cents)
            if settlement and cents < floor:
                reason = f"settlement {_dollars(cents)} below the floor {_dollars(floor)}"
                return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
            if cents < floor and cents < ctx.min_installment_cents:
                if money.offered or settlement:
                    reason = (
                        f"payment {_dollars(cents)} below the minimum "
                        f"{_dollars(ctx.min_installment_cents)}"
                    )
                    return self._blocked(ctx, "C6", reason, NOT_AVAILABLE)
                return self._misstated(ctx, cents)
        return ALLOWED

    def _misstated(self, ctx: GuardContext, cents: int) -> Verdict:
        reason = f"amount {_dollars(cents)} is not the balance {_dollars(ctx.balance_cents)}"
        replacement = f"The balance is {_dollars(ctx.balance_cents)}."
        return self._blocked(ctx, "C5", reason, replacement)

    # -- the allow-list ------------------------------------------------------------------

    def check_response(self, text: str, ctx: GuardContext) -> ResponseVerdict:
        """A whole LLM response: every sentence, then (with an instruction) the response
        as a whole. Nothing of it may be spoken unless it is allowed."""
        sentences = split_sentences(text)
        blocked = [(s, v) for s in sentences if not (v := self.check(s, ctx)).allowed]
        if not blocked and ctx.instruction is not None:
            verdict = self._response_justified(sentences, ctx, _derive(ctx.instruction))
            if not verdict.allowed:
                blocked.append((" ".join(sentences), verdict))
        return ResponseVerdict(not blocked, tuple(sentences), tuple(blocked))

    def _unjustified(self, ctx: GuardContext, rule: str, reason: str) -> Verdict:
        return self._blocked(ctx, f"allow:{rule}", reason, NEUTRAL)

    def _justified(self, sentence: str, ctx: GuardContext, allowed: _Allowed) -> Verdict:
        """Whether everything in ``sentence`` is justified by the turn's instruction."""
        text = sentence.strip().replace("\u2019", "'").replace("\u2018", "'")
        if m := _CODE_RE.search(text):
            return self._unjustified(ctx, "code", f"code, markup or a tool name ({m.group(0)})")
        for ch in text:
            if not _SPEAKABLE_RE.match(ch):
                if ch.isalpha():
                    return self._unjustified(ctx, "script", f"not English script ({ch!r})")
                return self._unjustified(ctx, "code", f"a character not spoken ({ch!r})")
        if not _TERMINAL_RE.search(text) or "..." in text or "\u2026" in text:
            return self._unjustified(ctx, "truncated", "the sentence does not end")
        tokens = _WORD_TOKEN_RE.findall(text)
        lower = [t.lower() for t in tokens]
        if m := _DANGLING_RE.search(text):
            return self._unjustified(ctx, "truncated", f"the sentence ends on {m[1]!r}")
        if len(tokens) > allowed.max_sentence_words:
            reason = f"{len(tokens)} words in one sentence (at most {allowed.max_sentence_words})"
            return self._unjustified(ctx, "length", reason)
        s = text.lower()
        for pattern in (*_CONSUMER_VOICE_RES, *allowed.identity):
            if (m := pattern.search(s)) and m[0] not in allowed.text:
                return self._unjustified(ctx, "consumer-voice", f"speaks as the consumer ({m[0]})")
        if (m := _FALSE_IDENTITY_RE.search(s)) and m[0] not in allowed.text:
            reason = f"says it is not an automated assistant ({m[0]})"
            return self._unjustified(ctx, "identity", reason)
        if (m := _ANSWER_RE.search(s)) and not allowed.answers:
            reason = f"an answer the reference does not give ({m[0].strip()})"
            return self._unjustified(ctx, "answer", reason)
        for word in lower:
            if word in FOREIGN_WORDS:
                return self._unjustified(ctx, "language", f"not English ({word})")
        if (name := _unjustified_name(text, allowed)) is not None:
            return self._unjustified(ctx, "name", f"a name not in the instruction ({name})")
        for word in lower:
            if word not in allowed.words and not is_english(word):
                return self._unjustified(ctx, "language", f"not an English word ({word})")
        for word in lower:
            family = _TERM_WORDS.get(word)
            if family is not None and family not in allowed.families:
                return self._unjustified(ctx, "term", f"a term not in the instruction ({word})")
        if (date := _unjustified_date(s, lower, allowed)) is not None:
            return self._unjustified(ctx, "figure", f"a date not in the instruction ({date})")
        figures, compounds = extract_figures(s)
        for compound in compounds:
            if compound not in allowed.compounds:
                return self._unjustified(ctx, "figure", f"a number not given ({compound})")
        for figure in figures:
            if not allowed.justifies(figure):
                return self._unjustified(ctx, "figure", f"{figure} is not in the instruction")
        return ALLOWED

    def _response_justified(
        self, sentences: list[str], ctx: GuardContext, allowed: _Allowed
    ) -> Verdict:
        """The response as a whole: its length, the reference's required content, and
        how much it adds that the reference does not say."""
        text = " ".join(sentences)
        words = _WORD_TOKEN_RE.findall(text)
        if len(sentences) > allowed.max_sentences or len(words) > allowed.max_words:
            reason = (
                f"{len(sentences)} sentences, {len(words)} words "
                f"(at most {allowed.max_sentences}, {allowed.max_words})"
            )
            return self._unjustified(ctx, "length", reason)
        s = text.lower().replace("\u2019", "'")
        figures, compounds = extract_figures(s)
        for need in allowed.required_figures:
            if not any(need.satisfied_by(f) for f in figures):
                return self._unjustified(ctx, "required", f"the reference's {need} is missing")
        for compound in allowed.required_compounds:
            if compound not in compounds:
                return self._unjustified(ctx, "required", f"the reference's {compound} is missing")
        if allowed.asks and "?" not in text:
            return self._unjustified(ctx, "required", "the reference's question is not asked")
        for label, pattern in allowed.key_terms:
            if not pattern.search(s):
                return self._unjustified(ctx, "required", f"the reference's {label!r} is missing")
        negations = _NEGATION_RE.findall(s)
        if len(negations) > allowed.negations:
            reason = f"a negation the reference does not make ({negations[-1].strip()})"
            return self._unjustified(ctx, "unsupported", reason)
        content = [w for w in (t.lower() for t in words) if _is_content(w)]
        novel = sorted({w for w in content if stem(w) not in allowed.stems})
        if len(novel) > max(1, len(content) // 3):
            reason = f"adds what the reference does not say ({', '.join(novel[:6])})"
            return self._unjustified(ctx, "unsupported", reason)
        for sentence in sentences:  # nor any one sentence of its own
            own = [w.lower() for w in _WORD_TOKEN_RE.findall(sentence) if _is_content(w.lower())]
            new = [w for w in own if stem(w) not in allowed.stems]
            if len(own) >= 2 and 2 * len(new) > len(own):
                reason = f"a sentence the reference does not say ({sentence})"
                return self._unjustified(ctx, "unsupported", reason)
        return ALLOWED


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


def split_sentences(text: str) -> list[str]:
    """``text`` cut where pipecat's sentence aggregation cuts it; the rest, unfinished, last."""
    sentences: list[str] = []
    rest = text
    while (end := match_endofsentence(rest)) > 0:
        if rest[:end].strip():
            sentences.append(rest[:end].strip())
        rest = rest[end:]
    if rest.strip():
        sentences.append(rest.strip())
    return sentences


#: Who the agent is and for whom it calls (rule C1): facts at every stage.
AGENT_NAME = "Riley"
AGENT_ROLE = "automated assistant"
#: The company, a fact only once the right party is verified (C1, C3).
COMPANY = "Northwind Recovery"


@dataclass(frozen=True)
class Instruction:
    """What the policy asked the LLM to say this turn, and what the stage lets it add.

    ``reference`` is the policy's own text (``Reply.phrase``); ``facts`` what the stage
    allows beyond it: before verification who is calling and for whom, after it also the
    balance, the creditor and the company. The envelope's limits are no fact of any
    stage: they are said only where the reference says them (a counter-offer)."""

    reference: str = ""
    facts: tuple[str, ...] = ()
    consumer: str = ""

    @classmethod
    def for_turn(cls, reference: str | None, account: Account, *, verified: bool) -> Instruction:
        facts = [AGENT_NAME, AGENT_ROLE, account.consumer_name]
        if verified:
            facts += [_dollars(account.balance_cents), account.creditor, COMPANY]
        return cls(reference or "", tuple(f for f in facts if f.strip()), account.consumer_name)


# -- figures: amounts, percentages, numbers, dates ------------------------------------------


@dataclass(frozen=True)
class Figure:
    """A number in a text: ``money`` (dollars), ``percent`` or a plain ``number``."""

    kind: str
    value: float
    #: A number of something ("one month", "3 payments"): never justified by itself.
    counted: bool = False

    def __str__(self) -> str:
        if self.kind == "money":
            return f"amount ${self.value:,.2f}".replace(".00", "")
        return f"{self.kind} {self.value:g}"

    def satisfied_by(self, other: Figure) -> bool:
        """Whether ``other`` (in a response) states this figure (of the reference)."""
        if abs(other.value - self.value) > 1e-6:
            return False
        if self.kind == "percent":
            return other.kind == "percent"
        if self.kind == "money":
            return other.kind in ("money", "number")
        return True


_UNITS_W = UNIT_WORDS
_TENS_W = TENS_WORDS
_ORDINALS_W = ORDINAL_WORDS
_SCALES_W = {"hundred": 100, "thousand": 1_000, "million": 1_000_000}
_FRACTIONS_W = {"half": ("percent", 50.0), "quarter": ("percent", 25.0), "dozen": ("number", 12)}
_NUMBER_WORDS = frozenset([*_UNITS_W, *_TENS_W, *_ORDINALS_W, *_SCALES_W, *_FRACTIONS_W])
_NUM_WORD_ALT = "|".join(sorted((w for w in _NUMBER_WORDS if w != "second"), key=len, reverse=True))
_WORD_NUMBER_RE = re.compile(
    rf"\b(?:a\s+(?=hundred|thousand|million|half|quarter|dozen))?"
    rf"(?:{_NUM_WORD_ALT}|(?<=the )second|(?<=on )second)"
    rf"(?:(?:\s+and\s+|\s+|-)(?:{_NUM_WORD_ALT}))*\b"
)
_COMPOUND_RE = re.compile(
    r"(?<![\d$.,])\d+(?:\s?[-/:]\s?\d+)+(?!\d)|(?<![\d$.,])\d{3,}(?:[ .]\d{3,})+(?!\d)"
)
_DIGITS_RE = re.compile(
    r"(?P<cur>\$\s?)?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<ord>st|nd|rd|th)?\b"
)
_UNIT_AFTER_RE = re.compile(
    r"\s*(?:(?P<pct>%|percent\b|per\s+cent\b)|(?P<usd>dollars?\b|bucks\b|usd\b)"
    r"|(?P<cents>cents?\b)|(?P<count>(?:more\s+|other\s+|full\s+|monthly\s+|equal\s+)?"
    r"(?:days?|weeks?|months?|years?|payments?|instal+ments?|times)\b))"
)


def _word_number_values(phrase: str) -> list[float]:
    """The numbers a phrase of number words says: "eight hundred and forty" is one,
    "five five five" three."""
    values: list[float] = []
    total = current = 0.0
    last: str | None = None  # "unit", "ten", "scale"
    started = False

    def flush() -> None:
        nonlocal total, current, started, last
        if started:
            values.append(total + current)
        total = current = 0.0
        started, last = False, None

    for word in re.split(r"[\s-]+", phrase):
        if word in ("and", "a", ""):
            continue
        if word in _FRACTIONS_W:
            flush()
            values.append(_FRACTIONS_W[word][1])
            continue
        if word in _SCALES_W:
            scale = _SCALES_W[word]
            if scale == 100:
                current = (current or 1) * 100
            else:
                total += (current or 1) * scale
                current = 0
            started, last = True, "scale"
        elif word in _TENS_W or word in _ORDINALS_W and _ORDINALS_W[word] >= 20:
            value = _TENS_W.get(word) or _ORDINALS_W[word]
            if last in ("unit", "ten"):
                flush()
            current += value
            started, last = True, "ten"
        elif word in _UNITS_W or word in _ORDINALS_W:
            value = _UNITS_W[word] if word in _UNITS_W else _ORDINALS_W[word]
            if last == "unit" or (last == "ten" and value >= 10):
                flush()
            current += value
            started, last = True, "unit"
    flush()
    return values


#: "first" of something ("your first payment") is no date.
_FIRST_OF_RE = re.compile(r"\s+(?!of\b|day\b)[a-z]")


def extract_figures(s: str) -> tuple[list[Figure], list[str]]:
    """Every number in lower-cased ``s``: its figures, and its digit runs (phone
    numbers, "2026-12-05", "12/11") as their digits."""
    compounds = [re.sub(r"\D", "", m[0]) for m in _COMPOUND_RE.finditer(s)]
    s = _COMPOUND_RE.sub(" # ", s)
    figures: list[Figure] = []

    def figure(value: float, end: int, money: bool = False, ordinal: bool = False) -> Figure:
        if ordinal:  # a date ("on the fifth"), unless "first" of something
            first = value == 1 and _FIRST_OF_RE.match(s, end) is not None
            return Figure("ordinal", value, counted=not first)
        m = _UNIT_AFTER_RE.match(s, end)
        if m is not None and m["pct"]:
            return Figure("percent", value)
        if m is not None and m["cents"]:
            return Figure("money", round(value / 100, 2))
        if money or (m is not None and m["usd"]):
            return Figure("money", value)
        return Figure("number", value, counted=m is not None and m["count"] is not None)

    for m in _DIGITS_RE.finditer(s):
        value = float(m["num"].replace(",", ""))
        figures.append(figure(value, m.end(), bool(m["cur"]), ordinal=bool(m["ord"])))
    for m in _WORD_NUMBER_RE.finditer(s):
        values = _word_number_values(m[0])
        if not values:
            continue
        phrase_words = m[0].split()
        if phrase_words and phrase_words[-1] in _FRACTIONS_W:
            kind, _ = _FRACTIONS_W[phrase_words[-1]]
            figures.append(Figure(kind, values[-1]))
            values = values[:-1]
        ordinal = bool(phrase_words) and phrase_words[-1].split("-")[-1] in _ORDINALS_W
        for i, value in enumerate(values):
            last = i == len(values) - 1
            if last:
                figures.append(figure(value, m.end(), ordinal=ordinal))
            else:
                figures.append(Figure("number", value))
    return figures, compounds


# -- the instruction, derived once per turn -------------------------------------------------

#: Date and time words: each must come from the instruction.
_DATE_WORDS = frozenset(
    "january february march april june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow tonight "
    "yesterday weekend noon midnight morning afternoon evening weekly biweekly fortnightly "
    "daily yearly annually quarterly".split()
)
_DATE_PHRASE_RE = re.compile(
    r"\b(?:next|this|coming|following|last)\s+(?:week|month|year|weekend)\b"
    r"|\bmay\s+(?=\d|the\b|first|second|third|[a-z]+th\b)"
    r"|\b(?:a|one|two|three|\d+)\s+(?:day|week)s?\s+(?:from|after)\b"
    r"|\b(?:a\.m\.|p\.m\.|pm|o'clock)"
)
#: Words that end no finished sentence.
_DANGLING_RE = re.compile(
    r"\b(the|a|an|and|or|but|nor|your|my|our|their|his|of|because|if|than|with|to|from|by"
    r"|at|for)\W*$",
    re.I,
)
_TERMINAL_RE = re.compile(r"[.?!][\"'\u201d)]*\s*$")
_WORD_TOKEN_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
#: What a spoken sentence is made of: ASCII letters, digits and the punctuation of prose.
_SPEAKABLE_RE = re.compile(r"[A-Za-z0-9\s.,?!'\"$%:;/&()\-\u2013\u2014\u201c\u201d]")
_CODE_RE = re.compile(
    r"\b[a-z]+_[a-z_]+\b|https?:|www\.|\.(?:com|org|net|io)\b|\b(?:json|api|function|tool"
    r"|tools|arguments?|null)\b|\"\w+\"\s*:|\b(?:call state|your task|what you may say"
    r"|the caller just said|reference|instruction|system prompt)\b"
    r"|^\s*(?:agent|caller|user|assistant|system|riley|model)\s*:|\w\(|\(\s*\)",
    re.I,
)
_I = r"\b(?:i|we)(?:'m|'ll|'d|'ve)?"
_AUX = (
    r"(?:\s+(?:am|are|was|were|will|would|can|could|do|does|did|have|has|had|shall|should"
    r"|must|might|may|just|really|already|never|not|no|longer|don't|didn't|can't|cannot"
    r"|won't|wouldn't|couldn't|shouldn't|haven't|hadn't|isn't|aren't|need|needs|needed"
    r"|want|wanted|got|gotta|wanna|going|gonna|to|be|been|able|unable|trying|try|tried"
    r"|plan|planning|promise|agree|refuse|intend|also|only|still|even|actually|honestly"
    r"|definitely|probably|simply|totally|ever|ready|willing|happy|glad|like|love|prefer"
    r"|rather|hope|wish|expect|decided|decide|afraid|sure|forced|supposed|going|about))*"
)
_CONSUMER_VOICE_RES = (
    re.compile(
        rf"{_I}{_AUX}\s+(?:owe[ds]?|owing|pay|paid|paying|repay\w*|afford|dispute\w*|borrow\w*"
        r"|lost|broke|unemployed|bankrupt|filed|declared|end|hang|leave|quit)\b"
    ),
    re.compile(
        r"\bmy\s+(?:\w+\s+)?(?:balance|debts?|account|bills?|loans?|cards?|bank|payments?"
        r"|money|salary|wages?|paycheck|job|income|lawyer|attorney|wife|husband|spouse"
        r"|kids?|children|family|mother|father|mom|dad|rent|budget|finances|credit|birthday"
        r"|birth|last name|address|ssn|social|phone|number|date)\b"
    ),
    re.compile(r"\bmy name(?:'s| is)\s+(?!riley\b)"),
    re.compile(
        r"\b(?:call|calling|text|texting|email|contact|contacting|bother\w*|harass\w*|send"
        r"|mail|sue|leave)\s+me\b|\bme money\b|\bowe (?:me|us)\b"
    ),
    re.compile(
        r"\bwho (?:is|'s) (?:this|calling|it)\b|\bwho are you\b|\bwhat(?: is|'s) this"
        r" (?:about|regarding)\b|\bare you a (?:robot|bot|machine|computer|real|human|person)\b"
        r"|\bam i (?:talking|speaking) (?:to|with) (?:a|an|the|some|real)\b"
        r"(?! (?:person|member) (?:from|at|of))|\bhow did you get (?:my|this) number\b"
        r"|\b(?:you (?:have|'ve got|got)|this is) (?:the |a )?wrong number\b"
    ),
    re.compile(r"^\W*(?:yes\W+)?(?:speaking|this is (?:he|she|him|her|me))\b"),
)
#: The agent is an automated assistant (C1): never a person, never "not a robot".
_FALSE_IDENTITY_RE = re.compile(
    r"\bi(?:'m| am)\s+(?:not\s+)?(?:an?\s+)?(?:real\s+|live\s+|actual\s+)?(?:human|person"
    r"|man|woman|lady|guy|robot|bot|machine|computer|ai|agent|collector|employee|lawyer"
    r"|attorney)\b|\bnot\s+(?:an?\s+)?(?:robot|bot|machine|computer|automated|recording)\b"
    r"|\b(?:real|live)\s+(?:person|human)\s+(?:here|speaking)\b"
)
_ANSWER_RE = re.compile(
    r"^\W*(?:yes|yeah|yep|yup|no|nope|nah|correct|exactly|indeed|right|true|sure|certainly"
    r"|absolutely|definitely|of course)\b|\b(?:yes|yeah|yep|yup|nope)\b"
    r"|\bthat(?:'s| is) (?:right|correct|true)\b"
)
#: Words that say the same in a reply to the policy's questions: a paraphrase may
#: use any of a group where the reference uses one.
_SYNONYMS = tuple(
    frozenset(group.split())
    for group in (
        "smallest lowest least minimum minimal low small smaller lower",
        "payment payments pay paying amount sum money figure",
        "balance total owed full whole entire",
        "date day days when time",
        "debit card cards",
        "bank transfer",
        "check cheque",
        "spread split divide stretch over",
        "work works suit suits fit okay manageable doable possible workable",
        "call reach ring contact phone back",
        "catch hear heard understand understood get missed",
        "offer provide give set arrange arranged setup deal",
        "method way methods",
        "privacy security protect verify confirm identity",
        "birth birthday born",
        "speak talk speaking talking",
        "like prefer want would",
        "make do",
        "most maximum highest largest up",
    )
)


#: Words that state terms: a plan, a settlement, a charge, a way to pay. Each may be said
#: only where the instruction says a word of its family: a paraphrase of a settlement
#: offer never turns it into a plan, and no payment method is offered that was not.
_TERM_FAMILIES = tuple(
    frozenset(family.split())
    for family in (
        "installment installments instalment instalments plan plans monthly month months "
        "weekly week weeks biweekly",
        "settlement settlements settle settled settling discount discounted lump reduced "
        "reduce reduction forgive forgiven forgiveness waive waived",
        "interest fee fees charge charges penalty penalties surcharge",
        "debit",
        "credit",
        "card cards",
        "transfer transfers wire ach",
        "check checks cheque cheques",
        "cash",
        "paypal venmo zelle bitcoin crypto cryptocurrency autopay",
    )
)
_TERM_WORDS = {word: i for i, family in enumerate(_TERM_FAMILIES) for word in family}


@dataclass(frozen=True)
class _Allowed:
    """What one instruction justifies, and what it requires of the response."""

    figures: frozenset[tuple[str, float]]
    text: str
    compounds: frozenset[str]
    words: frozenset[str]
    stems: frozenset[str]
    names: frozenset[str]
    required_figures: tuple[Figure, ...]
    reference_money: frozenset[float]
    required_compounds: tuple[str, ...]
    asks: bool
    key_terms: tuple[tuple[str, re.Pattern[str]], ...]
    answers: bool
    negations: int
    identity: tuple[re.Pattern[str], ...]
    families: frozenset[int]
    max_sentences: int
    max_words: int
    max_sentence_words: int

    def justifies(self, figure: Figure) -> bool:
        trivial = figure.value in (0.0, 1.0) and not figure.counted  # "no one", "one of"
        if figure.kind == "number":
            return trivial or any(abs(v - figure.value) < 1e-6 for _, v in self.figures)
        if figure.kind == "ordinal":  # a date: from a date or a count, not from an amount
            return trivial or any(
                abs(v - figure.value) < 1e-6 and k in ("number", "ordinal") for k, v in self.figures
            )
        return (figure.kind, figure.value) in self.figures


_NEGATION = r"n't\b|\bnot\b|\bcannot\b|\bnever\b|\bno\b"
#: A negation turns a sentence into its opposite: one the reference does not make is
#: never added ("you don't have to pay").
_NEGATION_RE = re.compile(_NEGATION)
#: Terms the reference's question turns on; a paraphrase that drops one asks something else.
_KEY_TERMS = (
    ("date of birth", r"\bdate of birth\b", r"\b(?:date of birth|birth ?date|birthday|born)\b"),
    ("last four", r"\blast (?:four|4)\b", r"\blast (?:four|4)\b"),
    ("debit card", r"\bdebit\b", r"\bdebit\b"),
    ("bank transfer", r"\bbank transfer\b", r"\b(?:bank|transfer)\b"),
    ("check", r"\bcheck\b(?! (?:in|on|out|with))", r"\bche(?:ck|que)s?\b"),
    ("date", r"\b(?:what|which) (?:date|day)\b", r"\b(?:date|day|when)\b"),
    ("time", r"\bgood time\b", r"\b(?:time|when)\b"),
    ("call back", r"\bcall you back\b", r"\b(?:call|reach|contact)\b"),
    ("how much", r"\bhow much\b", r"\b(?:how much|amount|what)\b"),
    ("one payment", r"\bone payment\b", r"\b(?:one|single|once|lump)\b"),
    ("monthly", r"\b(?:monthly|each month|a month|per month)\b", r"\bmonth(?:ly|s)?\b"),
    ("in full", r"\bin full\b", r"\b(?:full|whole|entire|all of it)\b"),
    ("payment plan", r"\bpayment plan\b", r"\b(?:plan|instal+ments?|monthly)\b"),
    # A refusal stays one: "I can't accept $300" never becomes "I can accept $300".
    ("the refusal", _NEGATION, _NEGATION + r"|\bunable\b|\btoo low\b"),
)


@lru_cache(maxsize=256)
def _derive(instruction: Instruction) -> _Allowed:
    """Everything the checks need from an instruction, worked out once per turn."""
    reference = instruction.reference.replace("\u2019", "'")
    texts = [reference, *instruction.facts]
    figures: set[tuple[str, float]] = set()
    compounds: set[str] = set()
    words: set[str] = set()
    for text in texts:
        found, runs = extract_figures(text.lower())
        figures.update(("count" if f.counted else f.kind, f.value) for f in found)
        compounds.update(runs)
        words.update(w.lower() for w in _WORD_TOKEN_RE.findall(text))
    stems = {stem(w) for w in words}
    families = frozenset(_TERM_WORDS[w] for w in words if w in _TERM_WORDS)
    for family in families:
        stems |= {stem(w) for w in _TERM_FAMILIES[family]}
    for group in _SYNONYMS:
        group_stems = {stem(w) for w in group}
        if stems & group_stems:
            stems |= group_stems
    ref = reference.lower()
    required, required_runs = extract_figures(ref)
    key_terms = [
        (label, re.compile(response))
        for label, in_reference, response in _KEY_TERMS
        if re.search(in_reference, ref)
    ]
    identity: list[re.Pattern[str]] = []
    names = [n for n in instruction.consumer.lower().split() if n]
    if names:
        first = re.escape(names[0])
        if re.search(rf"\b{first}\b", ref):
            key_terms.append((names[0], re.compile(rf"\b{first}\b")))
        alternatives = "|".join(re.escape(n) for n in names)
        identity.append(
            re.compile(
                rf"\b(?:i am|i'm|this is|it's|it is|here is|here's)\s+(?:{alternatives})\b"
                rf"|\b(?:{alternatives})\s+(?:here|speaking)\b"
            )
        )
    sentences = split_sentences(reference) if reference.strip() else []
    ref_words = len(_WORD_TOKEN_RE.findall(reference))
    longest = max((len(_WORD_TOKEN_RE.findall(s)) for s in sentences), default=0)
    capitalised = {w.lower() for t in texts for w in _WORD_TOKEN_RE.findall(t) if w[0].isupper()}
    return _Allowed(
        figures=frozenset(figures),
        text=" | ".join(" ".join(t.lower().split()) for t in texts),
        compounds=frozenset(compounds),
        words=frozenset(words),
        stems=frozenset(stems),
        names=frozenset(capitalised),
        required_figures=tuple(dict.fromkeys(required)),
        reference_money=frozenset(f.value for f in required if f.kind == "money"),
        required_compounds=tuple(dict.fromkeys(required_runs)),
        asks="?" in reference,
        key_terms=tuple(key_terms),
        answers=_ANSWER_RE.search(ref) is not None,
        negations=len(_NEGATION_RE.findall(ref)),
        identity=tuple(identity),
        families=families,
        max_sentences=max(2, len(sentences) + 1),
        max_words=max(40, ref_words + 15),
        max_sentence_words=max(30, longest + 10),
    )


_ALWAYS_CAPITAL = frozenset({"i", "i'm", "i'll", "i'd", "i've", "ok", "okay"})


_CAPITAL_RUN_RE = re.compile(r"\b[A-Z][A-Za-z']*(?:[ \t]+[A-Z][A-Za-z']*)*")


def _unjustified_name(text: str, allowed: _Allowed) -> str | None:
    """A capitalised name or organisation the instruction does not give.

    Capitalised words in a row are one name, which the instruction must give as such
    ("Capital One" is no "one"); the first word of a sentence is capitalised anyway,
    and is a name only if it is no English word."""
    for m in _CAPITAL_RUN_RE.finditer(text):
        initial = not text[: m.start()].strip(" \"'\u201c(")
        runs: list[list[str]] = [[]]
        for word in m[0].split():
            if word.lower() in _ALWAYS_CAPITAL:
                runs.append([])
            else:
                runs[-1].append(word)
        for i, run in enumerate(runs):
            if i == 0 and initial and run and _plain_word(run[0].lower(), allowed):
                run = run[1:]
            if len(run) == 1 and not _name_word(run[0].lower(), allowed):
                return run[0]
            if len(run) > 1 and " ".join(run).lower() not in allowed.text:
                return " ".join(run)
    return None


def _plain_word(word: str, allowed: _Allowed) -> bool:
    """A sentence's first word that is capitalised only for being first."""
    return is_english(word) or word in allowed.words


def _name_word(word: str, allowed: _Allowed) -> bool:
    """A capitalised word, alone, that the instruction gives (not as a number)."""
    if word in _ALWAYS_CAPITAL or word in _DATE_WORDS:  # dates are judged as dates
        return True
    return word in allowed.names or (word in allowed.words and word not in _NUMBER_WORDS)


def _unjustified_date(s: str, lower: list[str], allowed: _Allowed) -> str | None:
    """A date or time word or phrase the instruction does not give."""
    for word in lower:
        if word in _DATE_WORDS and word not in allowed.words:
            return word
        if word.endswith("s") and word[:-1] in _DATE_WORDS and word[:-1] not in allowed.words:
            return word
    for m in _DATE_PHRASE_RE.finditer(s):
        phrase = m[0].strip()
        if not all(w in allowed.words for w in _WORD_TOKEN_RE.findall(phrase)):
            return phrase
    return None


_NOT_CONTENT = (
    STOP_WORDS
    | GENERIC_WORDS
    | _NUMBER_WORDS
    | {
        "dollar",
        "dollars",
        "bucks",
        "percent",
        "cents",
        "cent",
    }
)


def _is_content(word: str) -> bool:
    return word not in _NOT_CONTENT and not word.endswith("'s") and len(word) > 1
