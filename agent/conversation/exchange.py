"""The exchange of a call: what was asked, and what of it the caller heard.

The policy's replies are built here (``_ask``, ``_reply``, ``_part``) so that every one
keeps the same books: the question the caller's next words answer (and what an answer
to it is expected to hold, ``EXPECTS``), the disclosures owed because they were cut off
before their end, and the events noted once a text was heard in full (``played``).
What was heard counts, not what was sent: a cut disclosure is said again in full at the
start of the next reply, and words said over an unheard question do not answer it.
``ConversationPolicy`` (``agent.conversation.policy``) adds the call's stages on top.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.conversation.account import Account
from agent.conversation.intents import Expectation, Intent, Understanding
from agent.conversation.replies import Part, PolicyEvent, Reply, Templates

#: What an answer to each question is expected to hold, so "yes", "the fifth"
#: or "two hundred" are read against the question that was just asked.
EXPECTS: dict[str, Expectation] = {
    "greeting": Expectation.IDENTITY,
    "confirm_identity": Expectation.IDENTITY,
    "who_is_calling": Expectation.IDENTITY,
    "what_about": Expectation.IDENTITY,
    "ask_dob": Expectation.DATE_OF_BIRTH,
    "ask_full_dob": Expectation.DATE_OF_BIRTH,
    "ask_last4": Expectation.LAST4,
    "purpose": Expectation.AMOUNT,
    "purpose_again": Expectation.AMOUNT,
    "ask_amount": Expectation.AMOUNT,
    "which_amount": Expectation.AMOUNT,
    "ask_monthly_amount": Expectation.MONTHLY_AMOUNT,
    "monthly_only": Expectation.MONTHLY_AMOUNT,
    "one_or_monthly": Expectation.ONE_OR_MONTHLY,
    "above_balance": Expectation.CONFIRM,
    "counter_settlement": Expectation.CONFIRM,
    "counter_discount": Expectation.CONFIRM,
    "counter_plan": Expectation.CONFIRM,
    "press_once": Expectation.CONFIRM,
    "ask_date_and_method": Expectation.DATE,
    "ask_date": Expectation.DATE,
    "date_passed": Expectation.DATE,
    "date_too_far": Expectation.DATE,
    "ask_method": Expectation.METHOD,
    "read_back": Expectation.EXPLICIT_YES,
    "what_to_change": Expectation.AMOUNT,
    "callback_when": Expectation.DATE,
}

#: The replies the LLM may put in its own words in production (``Reply.phrase``): the
#: negotiation's questions. Everything else (disclosures, verification, answers about
#: the law, read-backs, goodbyes) is spoken verbatim.
PHRASEABLE = frozenset(
    {
        "ask_amount",
        "ask_monthly_amount",
        "counter_settlement",
        "counter_discount",
        "counter_plan",
        "ask_date_and_method",
        "ask_date",
        "ask_method",
        "callback_when",
        "purpose_again",
    }
)

#: Texts that must be heard in full, and the event each is noted as when it was.
DISCLOSURES = {
    "greeting": ("ai_disclosure", "recording_notice"),
    "mini_miranda": ("mini_miranda",),
    "time_barred_notice": ("time_barred_notice",),
    "ny_time_barred_notice": ("time_barred_notice",),
    "read_back": ("read_back",),
}

#: Events that keep the words that were heard.
_TEXTED = frozenset({"mini_miranda", "time_barred_notice", "read_back"})


def notes_for(key: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The events a text of ``key`` is noted as once heard in full (its disclosures)."""
    return tuple((kind, {}) for kind in DISCLOSURES.get(key, ()))


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Exchange:
    """The books of one call's exchange; ``ConversationPolicy`` is one.

    ``today`` is the consumer's local date; ``clock`` (aware, UTC) stamps every event."""

    account: Account
    templates: Templates
    today: dt.date | None = None
    clock: Callable[[], dt.datetime] = utc_now
    events: list[PolicyEvent] = field(default_factory=list)
    _unclear_count: int = 0
    _question: Part | None = None
    _expecting: Expectation | None = None
    #: The last question was played to its end (``played``): only then may words answer it.
    _question_heard: bool = False
    #: Disclosures given but not yet heard in full: said again at the next reply.
    _owed: list[Part] = field(default_factory=list)
    #: Disclosures cut so far: past ``MAX_CUTS`` the call ends politely, not in a loop.
    _cuts: int = 0
    #: The reply whose question is the one asked last (``played`` marks only it heard).
    _asked: Reply | None = None

    def played(self, reply: Reply, heard: int) -> None:
        """The first ``heard`` texts of ``reply`` were played out to the end.

        Their events are noted now; a disclosure among the rest is owed (said again in
        full next time) and a question among the rest was not heard, so words said
        over it do not answer it."""
        for i, text in enumerate(reply.texts):
            key = reply.keys[i] if i < len(reply.keys) else ""
            if i < heard:
                for kind, detail in reply.notes.get(i, []):
                    self._note(kind, {**detail, "text": text} if kind in _TEXTED else detail)
                self._owed = [p for p in self._owed if p.text != text]
                if i == reply.question and reply is self._asked:
                    self._question_heard = True  # only the question asked last counts
            elif key in DISCLOSURES and all(p.text != text for p in self._owed):
                notes = tuple((k, d) for k, d in reply.notes.get(i, []))
                self._owed.append(Part(key, text, notes))
                self._cuts += 1

    def _answers_unheard(self, heard: Understanding) -> bool:
        """Words that would answer a question the caller never heard to its end."""
        if self._question_heard or self._question is None:
            return False
        answers = heard.intents & {Intent.YES, Intent.NO, Intent.PAY_IN_FULL, Intent.PAYMENT_OFFER}
        facts = (heard.amount_cents, heard.date, heard.method, heard.date_of_birth, heard.last4)
        return bool(answers) or any(f is not None for f in facts) or heard.name is not None

    def _ask_again(self) -> Reply:
        """The current question once more, in full (its answer cannot be taken yet)."""
        if self._question is None:
            return self._reply([])
        return self._reply([self._question], question=self._question)

    def _with_question(self, parts: list[Part]) -> Reply:
        if self._question is None:
            return self._reply(parts)
        return self._reply([*parts, self._question], question=self._question)

    def _take_owed(self) -> list[Part]:
        owed, self._owed = self._owed, []
        return owed

    def _prefixed(self, prefix: list[Part], reply: Reply) -> Reply:
        if not prefix:
            return reply
        shift = len(prefix)
        texts = [p.text for p in prefix] + reply.texts
        keys = [p.key for p in prefix] + reply.keys
        notes = {i: list(p.notes) for i, p in enumerate(prefix) if p.notes}
        notes.update({i + shift: n for i, n in reply.notes.items()})
        question = None if reply.question is None else reply.question + shift
        prefixed = Reply(texts, reply.end_call, reply.transfer, None, keys, notes, question)
        if self._asked is reply:
            self._asked = prefixed
        return prefixed

    def _say(self, key: str, **values: Any) -> str:
        return self.templates.say(key, consumer_name=self.account.consumer_name, **values)

    def _part(self, key: str, **values: Any) -> Part:
        return Part(key, self._say(key, **values), notes_for(key))

    def _ask(self, key: str, *, keep_expecting: bool = False, **values: Any) -> Reply:
        """Ask ``key``: it becomes the question the caller's next words answer."""
        part = self._part(key, **values)
        self._unclear_count = 0
        if not keep_expecting:
            self._expecting = EXPECTS.get(key, self._expecting)
        return self._reply([part], question=part)

    def _reply(self, parts: list[Part], *, question: Part | None = None) -> Reply:
        notes = {i: list(p.notes) for i, p in enumerate(parts) if p.notes}
        index = None
        if question is not None:
            self._question, self._question_heard = question, False
            index = len(parts) - 1
        phrase = parts[-1].text if len(parts) == 1 and parts[0].key in PHRASEABLE else None
        reply = Reply(
            [p.text for p in parts],
            phrase=phrase,
            keys=[p.key for p in parts],
            notes=notes,
            question=index,
        )
        if question is not None:
            self._asked = reply
        return reply

    def _note(self, kind: str, detail: dict[str, Any]) -> None:
        self.events.append(PolicyEvent(kind, detail, self.clock()))
