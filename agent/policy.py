"""The conversation policy: what the agent may say at each point of a collection call.

A deterministic state machine, one per call. It reads each caller turn through
``agent.understanding`` (rules, not the LLM), moves between stages and answers
with fixed templates from ``prompts/`` spoken verbatim. The LLM may phrase
small talk in production; it never decides what is legal.

    opening -> verification -> disclosure -> negotiation -> commitment -> wrap-up
        \\-> third party, wrong number, voicemail, and the exits (dispute, stop,
            attorney, hardship, bankruptcy, deceased, a person) from any stage

Every legally significant moment (disclosures given, verification result,
signals the consumer gave) is an event with a timestamp, for the compliance
timeline, and the call ends with a party and a disposition (DOMAIN.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

from agent.understanding import Expectation, Intent, PaymentMethod, Understanding, understand

MAX_VERIFICATION_TRIES = 2

#: How a promise may be paid when the LLM records it (the agent never takes card
#: digits by voice: a card payment goes through the secure link, DOMAIN C11).
PAYMENT_METHODS = (PaymentMethod.DEBIT_CARD, PaymentMethod.BANK_TRANSFER, PaymentMethod.CHECK)

#: What an answer to each question is expected to hold, so "yes", "the fifth"
#: or "two hundred" are read against the question that was just asked.
EXPECTS: dict[str, Expectation] = {
    "greeting": Expectation.IDENTITY,
    "who_is_calling": Expectation.IDENTITY,
    "ask_dob": Expectation.DATE_OF_BIRTH,
    "ask_last4": Expectation.LAST4,
    "purpose": Expectation.CONFIRM,
    "offer_floor": Expectation.CONFIRM,
    "installment_floor": Expectation.CONFIRM,
    "term_too_long": Expectation.CONFIRM,
    "ask_date_and_method": Expectation.DATE,
    "ask_date": Expectation.DATE,
    "ask_method": Expectation.METHOD,
    "callback_when": Expectation.DATE,
}

#: The replies the LLM may put in its own words in production (``Reply.phrase``): the
#: negotiation's questions and "I didn't catch that". Everything else (disclosures,
#: verification, answers about the law, goodbyes, confirmations) is spoken verbatim.
PHRASEABLE = frozenset(
    {
        "offer_floor",
        "installment_floor",
        "term_too_long",
        "ask_date_and_method",
        "ask_date",
        "ask_method",
        "callback_when",
        "didnt_catch",
    }
)

#: The tools the LLM may call (agent.phrasing describes them to it); the policy gates each.
TOOLS = ("record_promise", "record_dispute", "transfer", "end_call")


class Stage(StrEnum):
    OPENING = "opening"
    VERIFICATION = "verification"
    NEGOTIATION = "negotiation"
    COMMITMENT = "commitment"
    CALLBACK = "callback"
    ENDED = "ended"


@dataclass(frozen=True)
class Account:
    """What the call knows of the consumer and the debt (from the portfolio)."""

    consumer_name: str
    date_of_birth: date | None
    account_last4: str | None
    creditor: str
    balance_cents: int
    time_barred: bool
    state: str
    max_discount_pct: float
    min_installment_cents: int
    max_term_months: int
    fees_allowed: bool = False
    callback_number: str = "1-800-555-0100"
    debt_id: int | None = None

    @property
    def first_name(self) -> str:
        return self.consumer_name.split()[0]


@dataclass(frozen=True)
class Promise:
    amount_cents: int
    due: date
    method: str
    installments: int = 1


@dataclass(frozen=True)
class PolicyEvent:
    """A compliance-relevant moment: a disclosure, a verification, a consumer's signal."""

    kind: str
    detail: dict[str, Any]
    at: datetime


@dataclass
class Reply:
    """What the agent says next (fixed texts, verbatim) and whether the call goes on.

    ``phrase`` is set when the reply is one question the LLM may phrase in its own
    words (the text is the reference it must keep to); ``texts`` stay the vetted
    fallback, spoken whenever the LLM's version is missing or blocked.
    """

    texts: list[str]
    end_call: bool = False
    transfer: bool = False
    phrase: str | None = None


@dataclass(frozen=True)
class ToolOutcome:
    """The policy's answer to a tool call of the LLM: done or refused, and what to say."""

    allowed: bool
    reason: str
    reply: Reply


def _method(args: dict[str, Any]) -> str:
    """The tool call's payment method, as the schema names it ("debit_card" read too)."""
    return str(args.get("method", "")).replace("_", " ").strip().lower()


def dollars(cents: int) -> str:
    """An amount as a person says it: "$1,234.50", "$200"."""
    whole, rest = divmod(cents, 100)
    return f"${whole:,}" if rest == 0 else f"${whole:,}.{rest:02d}"


def spoken_date(day: date) -> str:
    return f"{day:%A, %B} {day.day}"


class Templates:
    """The fixed texts of a prompt version, filled from the account and nothing else."""

    def __init__(self, texts: dict[str, str]) -> None:
        self._texts = texts

    def say(self, key: str, **values: Any) -> str:
        try:
            return self._texts[key].format(**values)
        except KeyError as e:
            raise KeyError(f"template {key!r} or its placeholder {e} is missing") from None


@dataclass
class ConversationPolicy:
    """One call's conversation state; feed it caller turns, speak what it returns."""

    account: Account
    templates: Templates
    today: date
    stage: Stage = Stage.OPENING
    verified: bool = False
    verified_at: datetime | None = None
    party: str = "unverified"
    disposition: str | None = None
    promise: Promise | None = None
    #: The call ended with a hand-off to a person: the line transfers it where it can.
    transfer_requested: bool = False
    events: list[PolicyEvent] = field(default_factory=list)
    _tries: int = 0
    _question: str = ""
    _expecting: Expectation | None = None
    _offer_cents: int | None = None
    _installments: int = 1
    _due: date | None = None
    _method: str | None = None

    # -- what the agent says first -------------------------------------------------

    def opening(self, greeting: str) -> Reply:
        """The greeting (AI disclosure, recording notice, asking for the consumer)."""
        self._note("ai_disclosure", {})
        self._note("recording_notice", {})
        self._question, self._expecting = greeting, EXPECTS["greeting"]
        return Reply([greeting])

    # -- each caller turn ----------------------------------------------------------

    def on_caller_turn(self, text: str) -> Reply:
        if self.stage is Stage.ENDED:
            return Reply([], end_call=True)
        heard = understand(text, expecting=self._expecting, today=self.today)
        warning: list[str] = []
        if Intent.CARD_NUMBER in heard.intents:
            # C11: never take card digits by voice; the rest of the turn still counts.
            self._note("card_number_spoken", {})
            warning = [self._say("no_card_numbers")]
        reply = self._exits(heard) or self._stage_reply(heard)
        if warning:
            reply.texts[:0] = warning
            reply.phrase = None
        return reply

    def _stage_reply(self, heard: Understanding) -> Reply:
        handler = {
            Stage.OPENING: self._opening,
            Stage.VERIFICATION: self._verification,
            Stage.NEGOTIATION: self._negotiation,
            Stage.COMMITMENT: self._commitment,
            Stage.CALLBACK: self._callback,
        }[self.stage]
        return handler(heard)

    def on_voicemail(self) -> Reply:
        """A voicemail greeting answered: the limited-content message (C10), then hang up."""
        self.party = "voicemail"
        text = self._say(
            "voicemail",
            consumer_first_name=self.account.first_name,
            callback_number=self.account.callback_number,
        )
        self._note("voicemail_message", {"text": text})
        return self._end("voicemail_lcm_left", [text])

    # -- the LLM's tool calls (production) ------------------------------------------

    def tools(self) -> tuple[str, ...]:
        """The tools worth offering the LLM now: nothing about the debt before verification."""
        if self.stage is Stage.ENDED:
            return ()
        if self.verified and self.stage in (Stage.NEGOTIATION, Stage.COMMITMENT):
            return TOOLS
        return ("transfer", "end_call")

    def on_tool_call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        """Gate a tool call: it goes through the same rules as the caller's own words.

        A call the rules refuse is recorded as ``tool_denied`` and answered with the
        policy's own reply (a counter-offer at the envelope's edge, the question again).
        """
        refusal = self._tool_refusal(name, args)
        outcome = self._run_tool(name, args) if refusal is None else None
        if outcome is None or not outcome.allowed:
            reason = refusal or (outcome.reason if outcome else "")
            self._note("tool_denied", {"tool": name, "reason": reason})
            return outcome or ToolOutcome(False, reason, self._reask())
        self._note("tool_call", {"tool": name})
        return outcome

    def _run_tool(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        if name == "record_promise":
            heard = Understanding(
                intents=frozenset({Intent.PAYMENT_OFFER}),
                amount_cents=round(float(args["amount"]) * 100),
                monthly=bool(args.get("monthly", False)),
                date=date.fromisoformat(str(args["date"])),
                method=_method(args),
            )
            self.stage = Stage.NEGOTIATION
            reply = self._counter(heard)
            if self.promise is None:
                return ToolOutcome(False, "the offer is outside the creditor's envelope", reply)
            return ToolOutcome(True, "promise recorded", reply)
        if name == "record_dispute":
            return ToolOutcome(True, "dispute recorded", self._dispute())
        if name == "transfer":
            self._note("human_requested", {"by": "llm"})
            return ToolOutcome(True, "transferring", self._transfer())
        refused = self.verified and args.get("reason") == "refused"
        reply = self._end("refused" if refused else "no_commitment", [self._say("wrap_up")])
        return ToolOutcome(True, "call ended", reply)

    def _tool_refusal(self, name: str, args: dict[str, Any]) -> str | None:
        if name not in TOOLS:
            return f"unknown tool {name!r}"
        if name not in self.tools():
            return f"{name} is not allowed at this point of the call (stage {self.stage})"
        if name != "record_promise":
            return None
        try:
            amount = float(args["amount"])
            due = date.fromisoformat(str(args["date"]))
        except (KeyError, TypeError, ValueError):
            return "record_promise needs an amount in dollars and a date as YYYY-MM-DD"
        if not math.isfinite(amount) or amount <= 0:
            return "the amount must be a positive number of dollars"
        if due < self.today:
            return "the payment date is in the past"
        if _method(args) not in PAYMENT_METHODS:
            return f"the method must be one of: {', '.join(PAYMENT_METHODS)}"
        return None

    # -- what can happen at any point --------------------------------------------

    def _exits(self, heard: Understanding) -> Reply | None:
        intents = heard.intents
        if Intent.ROBOT_QUESTION in intents:
            self._note("ai_disclosure", {"asked": True})
            return Reply([self._say("robot_answer"), self._question])
        if Intent.RECORDING_OBJECTION in intents:
            self._note("recording_objection", {})
            return self._end("escalated_to_human", [self._say("recording_objection")], True)
        if Intent.HUMAN_REQUEST in intents:
            self._note("human_requested", {})
            return self._transfer()
        if Intent.WRONG_NUMBER in intents and not self.verified:
            self.party = "wrong_number"
            self._signal("wrong_number")
            return self._end("wrong_number", [self._say("wrong_number")])
        if Intent.STOP_CALLING in intents or Intent.CEASE in intents:
            kind = "cease" if Intent.CEASE in intents else "stop_calling"
            self._signal(kind)
            return self._end(
                "cease_requested" if kind == "cease" else "stop_calling",
                [self._say("stop_calling")],
            )
        if Intent.ATTORNEY in intents:
            self.party = "attorney" if not self.verified else self.party
            self._signal("attorney")
            return self._end("attorney", [self._say("attorney")])
        if not self.verified:
            return None
        # Below here the consumer is verified: signals about the debt itself.
        if Intent.DISPUTE in intents:
            return self._dispute()
        if Intent.BANKRUPTCY in intents:
            self._signal("bankruptcy")
            return self._end("bankruptcy", [self._say("bankruptcy")], transfer=True)
        if Intent.DECEASED in intents:
            self._signal("deceased")
            return self._end("deceased", [self._say("deceased")])
        if Intent.HARDSHIP in intents:
            self._signal("hardship")
            return self._end("hardship", [self._say("hardship")], transfer=True)
        if Intent.ARREST_OR_SUIT_QUESTION in intents:
            texts = [self._say("no_arrest")]
            texts.append(
                self._say("no_suit_time_barred")
                if self.account.time_barred
                else self._say("not_legal_advice")
            )
            return Reply([*texts, self._question])
        return None

    def _transfer(self) -> Reply:
        return self._end("escalated_to_human", [self._say("transfer")], transfer=True)

    def _dispute(self) -> Reply:
        self._signal("dispute")
        return self._end("dispute", [self._say("dispute_recorded")])

    # -- stages --------------------------------------------------------------------

    def _opening(self, heard: Understanding) -> Reply:
        if heard.voicemail:
            return self.on_voicemail()
        intents = heard.intents
        if Intent.THIRD_PARTY in intents or (Intent.NO in intents and heard.name is None):
            self.party = "third_party"
            self._note("third_party", {})
            return self._end("no_commitment", [self._say("third_party")])
        if Intent.YES in intents or self._names_the_consumer(heard):
            self.stage = Stage.VERIFICATION
            key = "ask_dob" if self.account.date_of_birth else "ask_last4"
            return self._ask(key)
        return self._ask("who_is_calling")

    def _verification(self, heard: Understanding) -> Reply:
        if self._identity_matches(heard):
            self.verified = True
            self.verified_at = datetime.now(UTC)
            self.party = "right_party"
            self._note("verification", {"result": "passed"})
            return self._disclose()
        given = heard.date_of_birth is not None or heard.last4 is not None
        self._tries += 1 if given else 0
        if self._tries >= MAX_VERIFICATION_TRIES:
            self._note("verification", {"result": "failed"})
            return self._end("hung_up_before_verify", [self._say("verification_failed")])
        return self._ask("verification_retry") if given else self._reask()

    def _disclose(self) -> Reply:
        texts = [self._say("mini_miranda")]
        self._note("mini_miranda", {"text": texts[0]})
        if self.account.time_barred:
            key = "ny_time_barred_notice" if self.account.state == "NY" else "time_barred_notice"
            texts.append(self._say(key))
            self._note("time_barred_notice", {"text": texts[-1]})
        self.stage = Stage.NEGOTIATION
        question = self._say(
            "purpose", balance=dollars(self.account.balance_cents), creditor=self.account.creditor
        )
        self._question, self._expecting = question, EXPECTS["purpose"]
        return Reply([*texts, question])

    def _negotiation(self, heard: Understanding) -> Reply:
        intents = heard.intents
        if Intent.CALLBACK in intents:
            return self._callback(heard) if heard.date else self._ask_callback()
        # An amount or a discount named is an offer, whatever "yes" came with it.
        if heard.amount_cents is not None or heard.discount_pct is not None:
            return self._counter(heard)
        if Intent.PAY_IN_FULL in intents or Intent.YES in intents:
            return self._accept(self.account.balance_cents, 1, heard)
        if Intent.NO in intents or Intent.PAYMENT_OFFER in intents:
            return self._ask(
                "installment_floor", min_installment=dollars(self.account.min_installment_cents)
            )
        return self._reask()

    def _counter(self, heard: Understanding) -> Reply:
        """An offer: a settlement, an instalment, or a counter-offer at the envelope's edge."""
        a = self.account
        amount = heard.amount_cents
        if heard.discount_pct is not None and heard.discount_pct > a.max_discount_pct:
            self._note("offer_outside_envelope", {"asked_discount_pct": heard.discount_pct})
            return self._settlement_floor()
        if amount is None:
            return self._reask()
        min_settlement = math.ceil(a.balance_cents * (1 - a.max_discount_pct / 100))
        if amount >= min_settlement and not heard.monthly:
            return self._accept(min(amount, a.balance_cents), 1, heard)
        if amount < a.min_installment_cents:
            self._note("offer_outside_envelope", {"offered_cents": amount})
            return self._ask("installment_floor", min_installment=dollars(a.min_installment_cents))
        months = math.ceil(a.balance_cents / amount)
        if months > a.max_term_months:
            self._note("offer_outside_envelope", {"offered_cents": amount, "months": months})
            per_month = math.ceil(a.balance_cents / a.max_term_months)
            return self._ask(
                "term_too_long", max_term=a.max_term_months, term_installment=dollars(per_month)
            )
        return self._accept(amount, months, heard)

    def _settlement_floor(self) -> Reply:
        a = self.account
        floor = math.ceil(a.balance_cents * (1 - a.max_discount_pct / 100))
        return self._ask(
            "offer_floor",
            min_settlement=dollars(floor),
            max_discount=f"{a.max_discount_pct:g} percent",
        )

    def _accept(self, amount_cents: int, installments: int, heard: Understanding) -> Reply:
        self._offer_cents, self._installments = amount_cents, installments
        self.stage = Stage.COMMITMENT
        return self._commitment(heard)

    def _commitment(self, heard: Understanding) -> Reply:
        self._due = heard.date or self._due
        self._method = heard.method or self._method
        if self._due is None and self._method is None:
            return self._ask("ask_date_and_method")
        if self._due is None:
            return self._ask("ask_date")
        if self._method is None:
            return self._ask("ask_method")
        assert self._offer_cents is not None
        self.promise = Promise(self._offer_cents, self._due, self._method, self._installments)
        self._note(
            "promise_to_pay",
            {
                "amount_cents": self._offer_cents,
                "due": self._due.isoformat(),
                "method": self._method,
                "installments": self._installments,
            },
        )
        if self._installments > 1:
            text = self._say(
                "confirm_plan",
                amount=dollars(self._offer_cents),
                date=spoken_date(self._due),
                method=self._method,
                months=self._installments,
            )
            return self._end("payment_plan", [text, self._say("wrap_up")])
        text = self._say(
            "confirm_promise",
            amount=dollars(self._offer_cents),
            date=spoken_date(self._due),
            method=self._method,
        )
        return self._end("promise_to_pay", [text, self._say("wrap_up")])

    def _ask_callback(self) -> Reply:
        self.stage = Stage.CALLBACK
        return self._ask("callback_when")

    def _callback(self, heard: Understanding) -> Reply:
        if heard.date is None:
            return self._reask()
        self._note("callback_requested", {"date": heard.date.isoformat()})
        return self._end(
            "callback_requested", [self._say("callback_confirmed", date=spoken_date(heard.date))]
        )

    # -- helpers -------------------------------------------------------------------

    def _names_the_consumer(self, heard: Understanding) -> bool:
        if heard.name is None:
            return False
        said = heard.name.lower().split()
        return bool(said) and said[0] == self.account.first_name.lower()

    def _identity_matches(self, heard: Understanding) -> bool:
        a = self.account
        if heard.date_of_birth is not None and a.date_of_birth is not None:
            return heard.date_of_birth == a.date_of_birth
        if heard.last4 is not None and a.account_last4 is not None:
            return heard.last4 == a.account_last4
        return False

    def _say(self, key: str, **values: Any) -> str:
        return self.templates.say(key, consumer_name=self.account.consumer_name, **values)

    def _ask(self, key: str, **values: Any) -> Reply:
        self._question = self._say(key, **values)
        self._expecting = EXPECTS.get(key, self._expecting)
        return self._reply(key, self._question)

    def _reask(self) -> Reply:
        return self._reply("didnt_catch", self._say("didnt_catch", question=self._question))

    @staticmethod
    def _reply(key: str, text: str) -> Reply:
        return Reply([text], phrase=text if key in PHRASEABLE else None)

    def _note(self, kind: str, detail: dict[str, Any]) -> None:
        self.events.append(PolicyEvent(kind, detail, datetime.now(UTC)))

    def _signal(self, kind: str) -> None:
        self._note("signal", {"kind": kind})

    def _end(self, disposition: str, texts: list[str], transfer: bool = False) -> Reply:
        self.disposition = disposition
        self.stage = Stage.ENDED
        self.transfer_requested = transfer
        self._note("disposition", {"disposition": disposition, "party": self.party})
        return Reply(texts, end_call=True, transfer=transfer)
