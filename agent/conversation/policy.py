"""The conversation policy: what the agent may say at each point of a collection call.

A deterministic state machine, one per call. It reads each caller turn through
``agent.conversation.intents`` (rules, not the LLM), moves between stages and answers
with fixed templates from ``prompts/`` spoken verbatim. The LLM may phrase
some questions in production; it never decides what is legal.

    opening -> verification -> negotiation -> commitment -> read-back -> wrap-up
        \\-> third party, wrong number, voicemail, callback, and the exits (dispute,
            stop, attorney, hardship, bankruptcy, deceased, refusal, a person) from any stage

It fails closed (rule C3, C8, C13): whatever is unclear is asked again, a
second time ends politely, and nothing is ever assumed in the caller's
disfavour.

- Right party only after the person says they are the consumer and gives a
  matching verifier; anything that implies the speaker is someone else, at any
  moment before, makes them a third party, whatever they know.
- Every signal (dispute, also of part of the debt; stop calling; an attorney;
  bankruptcy, death, hardship; a refusal) is honoured at every stage, before
  verification too, where it is recorded without disclosing anything.
- Terms are only what the consumer said or accepted: one payment or a plan is
  asked, never assumed; an offer outside the creditor's envelope gets one
  counter-offer from inside it; every commitment is read back, and recorded
  only on a clear yes to the read-back.

What was heard counts, not what was sent: the books of that are kept by
``agent.conversation.exchange.Exchange``, which the policy is.

Every legally significant moment is an event with a timestamp from ``clock``,
for the compliance timeline, and the call ends with a party and a disposition.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from agent.conversation.account import Promise, Terms, dollars, local_zone, spoken_date, spoken_time
from agent.conversation.exchange import EXPECTS, Exchange, notes_for
from agent.conversation.intents import Expectation, Intent, PaymentMethod, Understanding, understand
from agent.conversation.replies import REQUIRED_TEMPLATES, Part, Reply, ToolOutcome

#: Verifiers that did not match before the call ends (C3).
MAX_VERIFICATION_TRIES = 2
#: Answers in a row the agent could not read before it ends politely.
MAX_UNCLEAR = 2
#: Disclosures cut off by the caller before the call ends politely instead of repeating.
MAX_CUTS = 3
#: How far ahead a first payment may be set: a date further off was most likely misheard
#: ("November 20th" said in December is next year's), so it is asked again.
MAX_DAYS_AHEAD = 45

#: How a promise may be paid when the LLM records it (the agent never takes card
#: digits by voice: a card payment goes through the secure link, rule C11).
PAYMENT_METHODS = (PaymentMethod.DEBIT_CARD, PaymentMethod.BANK_TRANSFER, PaymentMethod.CHECK)

#: The tools the LLM may call (agent.pipeline.phrasing describes them to it); the policy gates each.
TOOLS = ("record_promise", "record_dispute", "transfer", "end_call")

#: The signals of rule C8/C12 that end the call, with the disposition each leaves.
_ENDING_SIGNALS = (
    (Intent.CEASE, "cease", "cease_requested"),
    (Intent.STOP_CALLING, "stop_calling", "stop_calling"),
    (Intent.BANKRUPTCY, "bankruptcy", "bankruptcy"),
    (Intent.DECEASED, "deceased", "deceased"),
    (Intent.DISPUTE, "dispute", "dispute"),
    (Intent.HARDSHIP, "hardship", "hardship"),
)
#: The signals a person takes over from the agent (C8), whoever said them and at any stage.
_TO_A_PERSON = frozenset({"bankruptcy", "deceased", "hardship"})


class Stage(StrEnum):
    OPENING = "opening"
    VERIFICATION = "verification"
    NEGOTIATION = "negotiation"
    COMMITMENT = "commitment"
    READ_BACK = "read_back"
    CALLBACK = "callback"
    ATTORNEY = "attorney"
    ENDED = "ended"


#: Stages where payment is being discussed: the recording keeps no caller audio (C11).
PAYMENT_STAGES = frozenset({Stage.NEGOTIATION, Stage.COMMITMENT, Stage.READ_BACK})


def _method(args: dict[str, Any]) -> str:
    """The tool call's payment method, as the schema names it ("debit_card" read too)."""
    return str(args.get("method", "")).replace("_", " ").strip().lower()


@dataclass
class ConversationPolicy(Exchange):
    """One call's conversation state; feed it caller turns, speak what it returns.

    ``today`` is the consumer's local date; None takes it from ``clock`` in the
    account's zone. ``clock`` (aware, UTC) stamps every event."""

    stage: Stage = Stage.OPENING
    verified: bool = False
    verified_at: dt.datetime | None = None
    party: str = "unverified"
    disposition: str | None = None
    promise: Promise | None = None
    #: A person can take the call now: the line can transfer it (a SIP call with
    #: ``TRANSFER_TARGET`` set). Otherwise a hand-off is a follow-up by a person, and the
    #: agent says so instead of "please hold" before hanging up.
    transfer_available: bool = False
    #: The call ended with a hand-off to a person: the line transfers it where it can, and
    #: the console's escalations list it either way.
    transfer_requested: bool = False
    _identity_confirmed: bool = False
    _tries: int = 0
    _refusals: int = 0
    _attorney_asked: bool = False
    _counter: Terms | None = None
    _pending_amount: int | None = None
    _terms: Terms | None = None
    _due: dt.date | None = None
    _method: str | None = None
    #: The caller brought payment up outside the payment stages (a method, card digits).
    _payment_mentioned: bool = False

    def __post_init__(self) -> None:
        missing = self.templates.missing(REQUIRED_TEMPLATES)
        if missing:
            raise ValueError(f"the prompt version lacks the template(s): {', '.join(missing)}")
        if self.today is None:
            self.today = self.clock().astimezone(local_zone(self.account)).date()

    @property
    def _day(self) -> dt.date:
        assert self.today is not None
        return self.today

    @property
    def payment_open(self) -> bool:
        """Payment has come up and its step has not ended: the recording keeps no caller
        audio now, whatever the transcript says (C11)."""
        return self.stage in PAYMENT_STAGES or self._payment_mentioned

    # -- what the agent says first -------------------------------------------------

    def opening(self, greeting: str) -> Reply:
        """The greeting (AI disclosure, recording notice, asking for the consumer)."""
        part = Part("greeting", greeting, notes_for("greeting"))
        self._expecting = EXPECTS["greeting"]
        return self._reply([part], question=part)

    # -- each caller turn ----------------------------------------------------------

    def on_caller_turn(self, text: str) -> Reply:
        heard = understand(text, expecting=self._expecting, today=self._day)
        if self.stage is Stage.ENDED:
            return self._after_end(heard)
        owed = self._take_owed()
        if owed and self._cuts > MAX_CUTS:
            self._note("not_understood", {"stage": str(self.stage), "disclosure_cut": True})
            return self._end("no_commitment", [self._part("not_understood_end")])
        warning: list[Part] = []
        if Intent.CARD_NUMBER in heard.intents:
            # C11: never take card digits by voice; the rest of the turn still counts.
            self._note("card_number_spoken", {})
            self._payment_mentioned = True
            warning = [self._part("no_card_numbers" if self.verified else "no_numbers")]
        if heard.method is not None and self.stage not in PAYMENT_STAGES:
            self._payment_mentioned = True
        reply = self._exits(heard)
        if reply is None:
            if self._answers_unheard(heard):
                reply = self._ask_again()
            else:
                reply = self._stage_reply(heard)
        return self._prefixed(owed + warning, reply)

    def card_digits_heard(self) -> None:
        """The pipeline heard card digits and told the caller not to read them (its card
        guard): noted, and payment counts as open from here (C11), with no reply."""
        self._note("card_number_spoken", {"by": "card_guard"})
        self._payment_mentioned = True

    def on_voicemail(self) -> Reply:
        """A voicemail greeting answered: the limited-content message (C10), then hang up."""
        self.party = "voicemail"
        text = self._say(
            "voicemail",
            consumer_first_name=self.account.first_name,
            callback_number=self.account.callback_number,
        )
        part = Part("voicemail", text, (("voicemail_message", {"text": text}),))
        return self._end("voicemail_lcm_left", [part])

    # -- the LLM's tool calls (production) ------------------------------------------

    def tools(self) -> tuple[str, ...]:
        """The tools worth offering the LLM now: nothing about the debt before verification."""
        if self.stage is Stage.ENDED:
            return ()
        if self.verified and self.stage in PAYMENT_STAGES:
            return TOOLS
        return ("transfer", "end_call")

    def on_tool_call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        """Gate a tool call: it goes through the same rules as the caller's own words.

        ``record_promise`` never records a promise by itself: its terms go through the
        envelope like an offer and are then read back for the consumer's own yes (C13).
        A call the rules refuse is recorded as ``tool_denied`` and answered with the
        policy's own reply."""
        refusal = self._tool_refusal(name, args)
        if refusal is not None:
            self._note("tool_denied", {"tool": name, "reason": refusal})
            return ToolOutcome(False, refusal, self._ask_again())
        self._note("tool_call", {"tool": name})
        if name == "record_promise":
            heard = Understanding(
                intents=frozenset({Intent.PAYMENT_OFFER}),
                amount_cents=round(float(args["amount"]) * 100),
                monthly=bool(args.get("monthly", False)),
                once=not bool(args.get("monthly", False)),
                date=dt.date.fromisoformat(str(args["date"])),
                method=_method(args),
            )
            reply = self._offer(heard)
            if self.stage is Stage.READ_BACK:
                return ToolOutcome(True, "the terms are read back for the consumer's yes", reply)
            reason = "not inside the creditor's envelope as they are: asked or countered"
            self._note("tool_denied", {"tool": name, "reason": reason})
            return ToolOutcome(False, reason, reply)
        if name == "record_dispute":
            return ToolOutcome(True, "dispute recorded", self._signal_exit("dispute", "dispute"))
        if name == "transfer":
            self._note("human_requested", {"by": "llm"})
            return ToolOutcome(True, "transferring", self._transfer())
        return ToolOutcome(True, "call ended", self._end("no_commitment", [self._part("wrap_up")]))

    def _tool_refusal(self, name: str, args: dict[str, Any]) -> str | None:
        if name not in TOOLS:
            return f"unknown tool {name!r}"
        if name not in self.tools():
            return f"{name} is not allowed at this point of the call (stage {self.stage})"
        if name != "record_promise":
            return None
        try:
            amount = float(args["amount"])
            due = dt.date.fromisoformat(str(args["date"]))
        except (KeyError, TypeError, ValueError):
            return "record_promise needs an amount in dollars and a date as YYYY-MM-DD"
        if not math.isfinite(amount) or amount <= 0:
            return "the amount must be a positive number of dollars"
        if due < self._day:
            return "the payment date is in the past"
        if _method(args) not in PAYMENT_METHODS:
            return f"the method must be one of: {', '.join(PAYMENT_METHODS)}"
        return None

    # -- what can happen at any point --------------------------------------------

    def _exits(self, heard: Understanding) -> Reply | None:
        intents = heard.intents
        if Intent.RECORDING_OBJECTION in intents:
            self._note("recording_objection", {})
            return self._end("escalated_to_human", [self._part("recording_objection")], True)
        if Intent.WRONG_NUMBER in intents and not self.verified:
            self.party = "wrong_number"
            self._signal("wrong_number")
            return self._end("wrong_number", [self._part("wrong_number")])
        if self.stage is Stage.ATTORNEY:  # the answer to "your attorney's name and number?"
            for intent, kind, _ in _ENDING_SIGNALS:
                if intent in intents:
                    self._signal(kind)  # said with it, still honoured
            return self._attorney(replace(heard, attorney_name=heard.attorney_name or heard.name))
        if self._someone_else(heard):
            return self._third_party(heard)
        if Intent.ATTORNEY in intents:
            return self._attorney(heard)
        for intent, kind, disposition in _ENDING_SIGNALS:
            if intent in intents:
                return self._signal_exit(kind, disposition, heard)
        if Intent.HUMAN_REQUEST in intents:
            self._note("human_requested", {})
            return self._transfer()
        self._gate_signals(heard)
        if Intent.ROBOT_QUESTION in intents:
            self._note("ai_disclosure", {"asked": True})
            return self._with_question([self._part("robot_answer")])
        if not self.verified:
            return self._before_verification(heard)
        if Intent.REFUSAL in intents:
            return self._refusal()
        if Intent.ARREST_OR_SUIT_QUESTION in intents:
            answer = self._part("no_arrest")
            law = "no_suit_time_barred" if self.account.time_barred else "not_legal_advice"
            return self._with_question([answer, self._part(law)])
        if Intent.CALLBACK in intents or Intent.AT_WORK in intents:
            return self._callback(heard)
        return None

    def _before_verification(self, heard: Understanding) -> Reply | None:
        """Questions an unverified person may ask: answered without a word about a debt."""
        intents = heard.intents
        if Intent.WHO_IS_CALLING in intents:
            self._note("company_named", {"asked": True})
            return self._ask("who_is_calling")
        if Intent.WHAT_ABOUT in intents or Intent.ARREST_OR_SUIT_QUESTION in intents:
            return self._ask("what_about")
        if Intent.REFUSAL in intents:
            self._note("refusal", {"count": 1, "verified": False})
        if Intent.CALLBACK in intents or Intent.AT_WORK in intents or Intent.REFUSAL in intents:
            # Not yet the consumer: no consent can be taken, nothing discussed.
            return self._end("no_commitment", [self._part("third_party")])
        return None

    def _someone_else(self, heard: Understanding) -> bool:
        """Whether the speaker says or implies they are not the consumer (C3).

        Before verification any cue counts: a relative, another name, talk of the
        consumer as "he" or "she". After it, only a statement about who is speaking."""
        if Intent.THIRD_PARTY in heard.intents:
            return True
        if heard.name is not None and not self._is_consumer(heard.name):
            return _speaks_as(heard.text)
        if self.verified:
            return False
        if heard.third_person:
            return True
        return self.stage is Stage.OPENING and Intent.NO in heard.intents and heard.name is None

    def _third_party(self, heard: Understanding) -> Reply:
        self.party = "third_party"
        self._note("third_party", {})
        # What a third party tells us is still recorded (never acted on as the consumer's).
        reported = [
            kind
            for intent, kind, _ in _ENDING_SIGNALS
            if intent in heard.intents and kind in ("bankruptcy", "deceased")
        ]
        for kind in reported:
            self._signal(kind, by="third_party")
        if "deceased" in reported:
            return self._end("deceased", [self._part("deceased_unverified")], transfer=True)
        if reported:  # a person takes it from here (C8), still without a word of the debt
            return self._end("bankruptcy", [self._part("noted")], transfer=True)
        return self._end("no_commitment", [self._part("third_party")])

    def _signal_exit(
        self, kind: str, disposition: str, heard: Understanding | None = None
    ) -> Reply:
        """A signal that ends the call (C8, C12), before verification without disclosure."""
        detail: dict[str, Any] = {}
        if kind == "dispute":
            detail["partial"] = bool(heard and heard.partial_dispute)
        self._signal(kind, **detail)
        transfer = kind in _TO_A_PERSON
        if not self.verified:
            key = "noted" if transfer else "noted_unverified"
            key = "deceased_unverified" if kind == "deceased" else key
            key = "stop_calling" if kind in ("stop_calling", "cease") else key
            return self._end(disposition, [self._part(key)], transfer=transfer)
        key = {
            "cease": "stop_calling",
            "dispute": "dispute_partial" if detail.get("partial") else "dispute_recorded",
        }.get(kind, kind)
        return self._end(disposition, [self._part(key)], transfer=transfer)

    def _attorney(self, heard: Understanding) -> Reply:
        """An attorney named: recorded at once (C8), with the name and number if given;
        asked for them once if not, then the call ends."""
        details = heard.attorney_name is not None or heard.phone_number is not None
        if self.stage is not Stage.ATTORNEY or details:
            self._signal(
                "attorney", attorney_name=heard.attorney_name, attorney_number=heard.phone_number
            )
        if not details and not self._attorney_asked:
            # Whatever happens next (a hang-up), this is how the call ended.
            self.disposition = "attorney"
            self._note("disposition", {"disposition": "attorney", "party": self.party})
            self._attorney_asked = True
            self.stage = Stage.ATTORNEY
            return self._reply([self._part("ask_attorney")])
        return self._end("attorney", [self._part("attorney")])

    def _gate_signals(self, heard: Understanding) -> None:
        """What the pre-dial gate must honour later (D5): workplace, inconvenient times."""
        if Intent.WORKPLACE_FORBIDS_CALLS in heard.intents:
            self._signal("workplace_forbids_calls")
        window = self._inconvenient_window(heard)
        if window is not None:
            self._signal("inconvenient_time", window=window)

    def _inconvenient_window(self, heard: Understanding) -> dict[str, Any] | None:
        """The local hours the consumer said are inconvenient: "I'm at work, call me after
        six" is now until six, every day (work is every day's; fails toward fewer calls)."""
        if Intent.AT_WORK not in heard.intents:
            return None
        now = self.clock().astimezone(local_zone(self.account))
        start = now.replace(minute=0, second=0, microsecond=0).time()
        end = heard.time if heard.time and heard.time_relation in ("after", "at") else None
        end = end or dt.time(min(23, now.hour + 2))
        if end <= start:
            return None
        return {"weekday": None, "start": f"{start:%H:%M}", "end": f"{end:%H:%M}"}

    def _transfer(self) -> Reply:
        return self._end("escalated_to_human", [self._part("transfer")], transfer=True)

    def _refusal(self) -> Reply:
        """A refusal is recorded, and pressed at most once (C8)."""
        self._refusals += 1
        self._note("refusal", {"count": self._refusals})
        if self._refusals > 1:
            return self._end("refused", [self._part("refused")])
        self.stage = Stage.NEGOTIATION
        return self._offer_plan("press_once")

    def _after_end(self, heard: Understanding) -> Reply:
        """Words after the goodbye: a signal is still recorded, nothing else happens."""
        before = len(self.events)
        for intent, kind, _ in _ENDING_SIGNALS:
            if intent in heard.intents:
                self._signal(kind, late=True)
        if Intent.ATTORNEY in heard.intents:
            self._signal("attorney", attorney_name=heard.attorney_name, late=True)
        if Intent.NO in heard.intents and self.promise is not None:
            self._note("promise_objected", {"late": True})
        noted = len(self.events) > before
        return Reply([self._say("after_end")] if noted else [], end_call=True)

    # -- stages --------------------------------------------------------------------

    def _stage_reply(self, heard: Understanding) -> Reply:
        handler = {
            Stage.OPENING: self._opening,
            Stage.VERIFICATION: self._verification,
            Stage.NEGOTIATION: self._negotiation,
            Stage.COMMITMENT: self._commitment,
            Stage.READ_BACK: self._read_back,
            Stage.CALLBACK: self._callback,
        }[self.stage]
        return handler(heard)

    def _opening(self, heard: Understanding) -> Reply:
        if heard.voicemail:
            return self.on_voicemail()
        if Intent.YES in heard.intents or (heard.name and self._is_consumer(heard.name)):
            self._identity_confirmed = True
            self.stage = Stage.VERIFICATION
            if heard.date_of_birth is not None or heard.last4 is not None:
                return self._verification(heard)
            return self._ask("ask_dob" if self.account.date_of_birth else "ask_last4")
        return self._unclear("confirm_identity")

    def _verification(self, heard: Understanding) -> Reply:
        if Intent.NO in heard.intents and heard.date_of_birth is None and heard.last4 is None:
            return self._third_party(heard)
        given = heard.date_of_birth is not None or heard.last4 is not None
        if given and self._identity_matches(heard):
            return self._verified()
        if given:
            self._tries += 1
            self._unclear_count = 0
            if self._tries >= MAX_VERIFICATION_TRIES:
                return self._verification_failed("no match")
            return self._ask("verification_retry", keep_expecting=True)
        if heard.partial_date:
            return self._unclear("ask_full_dob")
        return self._unclear()

    def _verification_failed(self, reason: str) -> Reply:
        self._note("verification", {"result": "failed", "reason": reason})
        part = self._part("verification_failed", callback_number=self.account.callback_number)
        return self._end("verification_failed", [part])

    def _verified(self) -> Reply:
        self.verified = True
        self.verified_at = self.clock()
        self.party = "right_party"
        self._unclear_count = 0
        self._note("verification", {"result": "passed"})
        parts = [self._part("mini_miranda")]
        if self.account.time_barred:
            key = "ny_time_barred_notice" if self.account.state == "NY" else "time_barred_notice"
            parts.append(self._part(key))
        self.stage = Stage.NEGOTIATION
        question = self._part(
            "purpose", balance=dollars(self.account.balance_cents), creditor=self.account.creditor
        )
        self._expecting = EXPECTS["purpose"]
        return self._reply([*parts, question], question=question)

    def _negotiation(self, heard: Understanding) -> Reply:
        intents = heard.intents
        counter, self._counter = self._counter, None
        pending, self._pending_amount = self._pending_amount, None
        if pending is not None:
            return self._one_or_monthly(heard, pending)
        if counter is not None and counter.restated_by(heard):
            return self._accept(counter, heard)
        if _has_terms(heard):
            return self._offer(heard)
        if counter is not None and Intent.YES in intents:
            return self._accept(counter, heard)
        if counter is not None and Intent.NO in intents:
            return self._refusal()
        if Intent.PAY_IN_FULL in intents:
            return self._accept(Terms(self.account.balance_cents), heard)
        if Intent.PAYMENT_OFFER in intents or (Intent.NO in intents and counter is None):
            return self._ask("ask_amount")
        if counter is not None:
            self._counter = counter  # the same question, asked again
        return self._unclear()

    def _one_or_monthly(self, heard: Understanding, amount: int) -> Reply:
        """The answer to "one payment of $X, or $X a month?"."""
        if _has_terms(heard) and heard.amount_cents not in (None, amount):
            return self._offer(heard)
        monthly = heard.monthly or "month" in heard.text.lower()
        if heard.once and not monthly:
            return self._offer(replace(heard, amount_cents=amount, once=True))
        if monthly and not heard.once:
            return self._offer(replace(heard, amount_cents=amount, monthly=True, per="month"))
        self._pending_amount = amount
        return self._unclear("one_or_monthly", amount=dollars(amount))

    def _offer(self, heard: Understanding) -> Reply:
        """An offer read against the envelope: accepted terms, a question, or a counter-offer."""
        a = self.account
        self.stage = Stage.NEGOTIATION
        if heard.amounts_ambiguous:
            return self._ask("which_amount")
        if heard.discount_pct is not None and heard.amount_cents is None:
            if heard.discount_pct > a.max_discount_pct:
                self._note("offer_outside_envelope", {"asked_discount_pct": heard.discount_pct})
                return self._counter_settlement(None)
            return self._accept(a.settlement_at(heard.discount_pct), heard)
        amount = heard.amount_cents
        monthly = heard.monthly or self._expecting is Expectation.MONTHLY_AMOUNT
        if heard.per in ("week", "two weeks"):
            return self._ask("monthly_only")
        if amount is None:
            if heard.installments is not None:
                months = heard.installments
                per_month = math.ceil(a.balance_cents / months)
                return self._plan(per_month, months, heard)
            return self._ask("ask_amount")
        if amount >= a.balance_cents:
            if amount == a.balance_cents:
                return self._accept(Terms(amount), heard)
            self._counter = Terms(a.balance_cents)
            return self._ask("above_balance", balance=dollars(a.balance_cents))
        if monthly or (heard.installments is not None and heard.installments > 1):
            # The payments the amount needs; a longer term named would pay too much.
            return self._plan(amount, math.ceil(a.balance_cents / amount), heard)
        if not heard.once:
            self._pending_amount = amount
            self._stash_date_and_method(heard)
            return self._ask("one_or_monthly", amount=dollars(amount))
        if amount < a.settlement_floor_cents:
            self._note("offer_outside_envelope", {"offered_cents": amount, "one_payment": True})
            return self._counter_settlement(amount)
        return self._accept(Terms(amount, settlement=True), heard)

    def _plan(self, amount: int, months: int, heard: Understanding) -> Reply:
        if not self.account.allows_plan(amount, months):
            self._note("offer_outside_envelope", {"offered_cents": amount, "months": months})
            return self._offer_plan("counter_plan")
        return self._accept(Terms(amount, months=months, monthly=True), heard)

    def _offer_plan(self, key: str) -> Reply:
        """The envelope's lowest monthly plan, offered for a yes."""
        self._counter = plan = self.account.lowest_plan()
        return self._ask(key, installment=dollars(plan.amount_cents), months=plan.months)

    def _counter_settlement(self, offered: int | None) -> Reply:
        self._counter = self.account.settlement_at(self.account.max_discount_pct)
        floor = self._counter.amount_cents
        if offered is None:
            return self._ask("counter_discount", min_settlement=dollars(floor))
        return self._ask(
            "counter_settlement", amount=dollars(offered), min_settlement=dollars(floor)
        )

    def _stash_date_and_method(self, heard: Understanding) -> None:
        self._due = heard.date or self._due
        self._method = heard.method or self._method

    def _accept(self, terms: Terms, heard: Understanding) -> Reply:
        self._terms = terms
        self._counter = None
        self.stage = Stage.COMMITMENT
        self._stash_date_and_method(heard)
        return self._next_step()

    def _commitment(self, heard: Understanding) -> Reply:
        terms = self._terms
        if _has_terms(heard) and (terms is None or heard.amount_cents != terms.amount_cents):
            return self._offer(heard)
        self._stash_date_and_method(heard)
        return self._next_step()

    def _next_step(self) -> Reply:
        """What the commitment still needs: a date, a method, then the read-back."""
        if self._due is not None and self._due < self._day:
            self._due = None
            return self._ask("date_passed")
        if self._due is not None and self._due > self._day + dt.timedelta(days=MAX_DAYS_AHEAD):
            self._due = None
            return self._ask("date_too_far", days=MAX_DAYS_AHEAD)
        if self._due is None and self._method is None:
            return self._ask("ask_date_and_method")
        if self._due is None:
            return self._ask("ask_date")
        if self._method is None:
            return self._ask("ask_method")
        return self._read_back_question()

    def _read_back_question(self) -> Reply:
        self.stage = Stage.READ_BACK
        terms = self._terms
        assert terms is not None and self._due is not None and self._method is not None
        values: dict[str, Any] = {
            "amount": dollars(terms.amount_cents),
            "date": spoken_date(self._due),
            "method": self._method,
        }
        if terms.months > 1:
            last = self.account.balance_cents - terms.amount_cents * (terms.months - 1)
            if last == terms.amount_cents:
                text = self._say("read_back_plan", months=terms.months, **values)
            else:
                text = self._say(
                    "read_back_plan_last", count=terms.months - 1, last=dollars(last), **values
                )
        elif terms.settlement:
            balance = dollars(self.account.balance_cents)
            text = self._say("read_back_settlement", balance=balance, **values)
        else:
            text = self._say("read_back_payment", **values)
        part = Part("read_back", text, (("read_back", {}),))  # a disclosure: heard in full
        self._expecting = EXPECTS["read_back"]
        return self._reply([part], question=part)

    def _read_back(self, heard: Understanding) -> Reply:
        """Only a clear yes to the whole read-back records the promise (C13)."""
        if _has_terms(heard) or heard.date is not None or heard.method is not None:
            changed = heard.amount_cents is not None or heard.discount_pct is not None
            if changed or heard.installments is not None:
                return self._offer(heard)
            self.stage = Stage.COMMITMENT
            self._stash_date_and_method(heard)
            return self._next_step()
        if Intent.NO in heard.intents:
            self.stage = Stage.COMMITMENT
            return self._ask("what_to_change")
        if Intent.YES in heard.intents:
            return self._record_promise()
        return self._unclear()

    def _record_promise(self) -> Reply:
        terms, due, method = self._terms, self._due, self._method
        assert terms is not None and due is not None and method is not None
        self.promise = Promise(terms.amount_cents, due, method, terms.months)
        self._note(
            "promise_to_pay",
            {
                "amount_cents": terms.amount_cents,
                "due": due.isoformat(),
                "method": method,
                "installments": terms.months,
                "settlement": terms.settlement,
                "confirmed": True,
            },
        )
        disposition = "payment_plan" if terms.months > 1 else "promise_to_pay"
        return self._end(disposition, [self._part("promise_recorded"), self._part("wrap_up")])

    def _callback(self, heard: Understanding) -> Reply:
        """A verified consumer asks to be called another time: their consent (D3)."""
        asked = self.stage is Stage.CALLBACK
        self.stage = Stage.CALLBACK
        day = heard.date
        if day is None and heard.time is not None:
            now = self.clock().astimezone(local_zone(self.account))
            day = self._day if heard.time > now.time() else self._day + dt.timedelta(days=1)
        if day is None or day < self._day:
            if asked:
                return self._unclear()
            prefix = [self._part("inconvenient_noted")] if Intent.AT_WORK in heard.intents else []
            return self._prefixed(prefix, self._ask("callback_when"))
        at = f"{heard.time:%H:%M}" if heard.time else None
        self._note("callback_requested", {"date": day.isoformat(), "time": at, "consented": True})
        when = f", after {spoken_time(heard.time)}" if heard.time else ""
        if heard.time and heard.time_relation == "at":
            when = f", at {spoken_time(heard.time)}"
        part = self._part("callback_confirmed", date=spoken_date(day), time=when)
        return self._end("callback_requested", [part])

    # -- helpers -------------------------------------------------------------------

    def _unclear(self, key: str | None = None, **values: Any) -> Reply:
        """An answer the agent could not read: ask ``key`` (or the question again, never
        with the balance), and end politely once that has not helped."""
        self._unclear_count += 1
        if self._unclear_count > MAX_UNCLEAR:
            self._note("not_understood", {"stage": str(self.stage)})
            if self.stage is Stage.VERIFICATION:
                return self._verification_failed("not understood")
            return self._end("no_commitment", [self._part("not_understood_end")])
        count = self._unclear_count
        if key is not None:
            reply = self._ask(key, keep_expecting=key not in EXPECTS, **values)
        else:
            reply = self._reask()
        self._unclear_count = count
        return reply

    def _reask(self) -> Reply:
        question = self._question
        if question is None:
            return self._ask("confirm_identity")
        if question.key in ("purpose", "purpose_again"):
            return self._ask("purpose_again")
        if question.key == "read_back":  # still the read-back, to be heard in full
            text = self._say("read_back_again", read_back=question.text)
            part = Part("read_back", text, question.notes)
        else:
            part = self._part("didnt_catch", question=question.text)
        reply = self._reply([part], question=part)
        self._question = question  # asked again later, it is not "didn't catch" twice
        return reply

    def _is_consumer(self, name: str) -> bool:
        said = name.lower().split()
        return bool(said) and said[0] == self.account.first_name.lower()

    def _identity_matches(self, heard: Understanding) -> bool:
        a = self.account
        if heard.date_of_birth is not None and a.date_of_birth is not None:
            if heard.date_of_birth == a.date_of_birth:
                return True
        if heard.last4 is not None and a.account_last4 is not None:
            return heard.last4 == a.account_last4
        return False

    def _signal(self, kind: str, **detail: Any) -> None:
        self._note("signal", {"kind": kind, **detail})

    def _end(self, disposition: str, parts: list[Part], transfer: bool = False) -> Reply:
        """End the call with ``parts``; ``transfer``: a person takes it from here, and the
        last words say how (a transfer now, or a follow-up)."""
        self.disposition = disposition
        self.stage = Stage.ENDED
        self.transfer_requested = transfer
        if transfer:
            self._note("handoff", {"reason": disposition, "now": self.transfer_available})
            parts = [
                *parts,
                self._part("handoff_now" if self.transfer_available else "handoff_later"),
            ]
        self._note("disposition", {"disposition": disposition, "party": self.party})
        reply = self._reply(parts)
        reply.end_call, reply.transfer = True, transfer
        return reply


def _has_terms(heard: Understanding) -> bool:
    """The turn names an amount, a discount or a number of payments."""
    return (
        heard.amount_cents is not None
        or heard.discount_pct is not None
        or heard.installments is not None
        or heard.amounts_ambiguous
    )


_SPEAKS_AS_RE = re.compile(
    r"\b(?:this is|i am|i'm|it is|it's|my name is|my name's|name's|you are speaking with"
    r"|you're speaking with)\s|\b(?:speaking|here)\W*$",
    re.I,
)


def _speaks_as(text: str) -> bool:
    """Whether a name is the speaker's own ("this is Sam", "Sam speaking"), not a word
    alone that only looks like one ("Wait.")."""
    return _SPEAKS_AS_RE.search(text) is not None
