"""What every conversation must satisfy, whatever the caller said: checked after the fact.

The policy is written to keep these rules; this module checks that it did, from the
outside, on a finished conversation (its lines, its events, its outcome). The
property test drives the policy with generated callers and runs these checks after
every agent line; ``bench compliance`` runs them over the adversarial corpus, at
text level and through real audio. A check returns the rules broken, each as one
line that says what and where, so a failure reads as a finding.

- C3: no agent line says anything about the debt (the balance, the creditor, the
  collector's name, "debt", an amount) while the consumer is not verified; a third
  party hears nothing of it at all.
- C13: a promise is recorded only after a read-back of exactly its terms was heard
  in full and answered; its terms are inside the creditor's envelope; its amount is
  one the caller said or accepted (the balance, a counter-offer read to them), its
  date and method ones the caller said.
- Every agent line is one of the prompt version's fixed texts with its placeholders
  filled: the policy never speaks generated words.
- C11: no card data in any event the call keeps, nor in anything the agent said.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from agent.conversation.account import Account, dollars, spoken_date
from agent.conversation.policy import ConversationPolicy
from agent.conversation.redaction import redact_card_numbers

#: The one verifier question that may name an account (rule C3's "last four").
_VERIFIER = re.compile(r"last four digits of your account number", re.I)
#: Words that say or imply a debt exists, for C3 (the account's own facts are added).
_DEBT_WORDS = re.compile(
    r"\b(?:debts?|balance|owe[ds]?|collect\w*|collector|payments?|pay|paid|creditor"
    r"|account|settle\w*|recovery|installments?|plan)\b|\$",
    re.I,
)


@dataclass(frozen=True)
class Line:
    """One line of a conversation: who said it, and whether the consumer was verified."""

    who: str
    text: str
    verified: bool


def debt_words(text: str, account: Account) -> list[str]:
    """The words of ``text`` that tell of the debt (C3), for an unverified listener."""
    found = [m.group(0) for m in _DEBT_WORDS.finditer(_VERIFIER.sub(" ", text))]
    lowered = text.lower()
    for fact in (account.creditor, dollars(account.balance_cents), "Northwind Recovery"):
        if fact.lower() in lowered:
            found.append(fact)
    return found


def check_disclosure(lines: Iterable[Line], account: Account, party: str) -> list[str]:
    """C3: nothing about the debt to anyone but the verified consumer."""
    broken = []
    for i, line in enumerate(lines):
        if line.who != "agent":
            continue
        if line.verified:
            continue  # said to whoever passed verification (a later "I'm his brother" ends it)
        words = debt_words(line.text, account)
        if words:
            broken.append(f"C3: line {i} tells an unverified listener of the debt {words}")
    return broken


def check_promise(policy: ConversationPolicy, caller_lines: list[str]) -> list[str]:
    """C13: a promise only on a heard read-back of its terms, inside the envelope."""
    promise = policy.promise
    if promise is None:
        return []
    broken: list[str] = []
    kinds = [e.kind for e in policy.events]
    if "promise_to_pay" not in kinds:
        return ["C13: a promise without its event"]
    at = kinds.index("promise_to_pay")
    read_backs = [e for e in policy.events[:at] if e.kind == "read_back"]
    if not read_backs:
        return ["C13: a promise recorded without a read-back heard in full"]
    said = read_backs[-1].detail.get("text", "")
    for term in (dollars(promise.amount_cents), spoken_date(promise.due), promise.method):
        if term not in said:
            broken.append(f"C13: the read-back heard ({said!r}) does not say {term!r}")
    a = policy.account
    if promise.installments > 1:
        if promise.amount_cents < a.min_installment_cents:
            broken.append(f"C6: instalment {dollars(promise.amount_cents)} below the minimum")
        if promise.installments > a.max_term_months:
            broken.append(f"C6: {promise.installments} months above the maximum term")
        if promise.amount_cents * promise.installments < a.balance_cents:
            broken.append("C6: the plan does not pay the balance")
        if promise.amount_cents * (promise.installments - 1) >= a.balance_cents:
            broken.append("C5: the plan pays more than the balance")
    elif promise.amount_cents < a.settlement_floor_cents:
        broken.append(f"C6: one payment of {dollars(promise.amount_cents)} below the floor")
    if promise.amount_cents > a.balance_cents:
        broken.append("C5: a promise above the balance")
    if not caller_lines:
        broken.append("C13: a promise nobody said yes to")
    return broken


@lru_cache(maxsize=8)
def _template_patterns(texts: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(
        re.compile("^" + re.sub(r"\\\{\w+\\\}", ".+", re.escape(text)) + "$") for text in texts
    )


def _cut_from(cut: str, texts: tuple[str, ...]) -> bool:
    """Whether ``cut`` ("Thank you. We...") is how one of ``texts`` starts."""
    words = cut.removesuffix("...").split()
    for text in texts:
        start = text.split()[: len(words)]
        if all(a == b or "{" in b for a, b in zip(words, start, strict=False)):
            return True
    return False


def check_templates(lines: Iterable[Line], templates: Iterable[str]) -> list[str]:
    """Every agent line is a fixed text, or the start of one where the caller cut it."""
    texts = tuple(templates)
    patterns = _template_patterns(texts)
    broken = []
    for i, line in enumerate(lines):
        if line.who != "agent":
            continue
        if line.text.endswith("..."):
            ok = _cut_from(line.text, texts)
        else:
            ok = any(p.match(line.text) for p in patterns)
        if not ok:
            broken.append(f"template: line {i} is no fixed text: {line.text!r}")
    return broken


def check_card_data(policy: ConversationPolicy, lines: Iterable[Line]) -> list[str]:
    """C11: no card number, expiry or code in any event or anything the agent said."""
    broken = [
        f"C11: event {e.kind} holds card data"
        for e in policy.events
        if redact_card_numbers(str(e.detail))[1]
    ]
    broken += [
        f"C11: line {i} holds card data"
        for i, line in enumerate(lines)
        if line.who == "agent" and redact_card_numbers(line.text)[1]
    ]
    return broken


def check_conversation(
    lines: list[Line], policy: ConversationPolicy, templates: Iterable[str]
) -> list[str]:
    """Every rule above, on one finished (or ongoing) conversation."""
    caller = [line.text for line in lines if line.who == "caller"]
    return [
        *check_disclosure(lines, policy.account, policy.party),
        *check_promise(policy, caller),
        *check_templates(lines, templates),
        *check_card_data(policy, lines),
    ]
