"""The policy under generated callers: invariants after every agent line (rule C3, C8,
C11, C13), whatever is said, in whatever order, heard in full or talked over.

A Hypothesis state machine plays the caller: each step says one line from a family
(identity answers, dates of birth right and wrong, third-party cues, every signal,
offers of any amount and form, yes and no, dates and methods, card data, noise) and
hears the agent's reply in full or cut at any text. After every step the checks of
``agent.conversation.invariants`` hold, every signal said has its event, and any promise holds only
terms the caller said or accepted.
"""

from __future__ import annotations

import datetime as dt
import re

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agent.conversation.intents import understand
from agent.conversation.invariants import Line, check_conversation
from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Templates
from agent.conversation.scenarios import account_from

PROMPTS = PromptSet.load("collections-v3")
TEMPLATES = [*PROMPTS.templates.values(), PROMPTS.greeting]
NOW = dt.datetime(2026, 12, 2, 16, 0, tzinfo=dt.UTC)
TODAY = dt.date(2026, 12, 2)

IDENTITY = ["Yes.", "Speaking.", "This is Jordan.", "Yes, this is Jordan Smith.", "That's me."]
DOB = ["March 5th 1980.", "3/5/80", "oh three oh five eighty", "January 1st 1990.", "March 1980."]
THIRD_PARTY = [
    "This is the wife.",
    "I'm a friend, March 5th 1980.",
    "This is his wife.",
    "She's not here right now.",
    "I handle his bills.",
    "This is Sam, her husband.",
    "I'm her roommate, March 5th 1980.",
    "Actually I'm his brother.",
]
SIGNALS = {
    "I dispute this, it's not mine.": "dispute",
    "Stop calling me.": "stop_calling",
    "I filed for bankruptcy.": "bankruptcy",
    "Talk to my lawyer.": "attorney",
    "I lost my job and can't afford it.": "hardship",
    "Cease and desist all communication.": "cease",
}
ANSWERS = ["Yes.", "No.", "Okay.", "Yes, that's right.", "Uh huh.", "Sure.", "Fine."]
WHEN = ["Friday.", "Tomorrow.", "The 15th.", "Next Monday by check.", "By debit card.", "Check."]
CARDS = ["4111 1111 1111 1111", "My card is 5500 0000 0000 0004 expires 12/28 cvv 123"]
NOISE = ["Blue.", "What?", "Hmm.", "Wait.", "Hello?", "Who is this?", "Is this a robot?"]
OFFER_FORMS = [
    "I can pay {a}.",
    "${a} a month.",
    "I can do {a} dollars, one payment.",
    "How about {a} once?",
    "{a} a month for {n} months.",
    "Can you take {p} percent off?",
    "I could do {a} a week.",
    "Between {a} and {b}.",
]


@st.composite
def offers(draw: st.DrawFn) -> str:
    form = draw(st.sampled_from(OFFER_FORMS))
    a = draw(st.integers(1, 3000))
    return form.format(
        a=a, b=a + draw(st.integers(1, 500)), n=draw(st.integers(1, 36)), p=draw(st.integers(1, 95))
    )


LINES = st.one_of(
    st.sampled_from(IDENTITY),
    st.sampled_from(DOB),
    st.sampled_from(THIRD_PARTY),
    st.sampled_from(sorted(SIGNALS)),
    st.sampled_from(ANSWERS),
    st.sampled_from(WHEN),
    st.sampled_from(CARDS),
    st.sampled_from(NOISE),
    offers(),
)


#: A clear yes, as a person would judge it (not the policy's own rules).
CLEAR_YES = re.compile(r"^(?:yes|yeah|yep|correct|that's right|right|exactly|absolutely)\b", re.I)

#: What a cooperative consumer says at each stage: it takes the call deep, so the
#: adversarial lines in between meet every stage.
COOPERATE = {
    Stage.OPENING: st.sampled_from(IDENTITY),
    Stage.VERIFICATION: st.sampled_from(["March 5th 1980.", "3/5/80"]),
    Stage.NEGOTIATION: st.one_of(offers(), st.sampled_from(["I'll pay it in full.", "Yes."])),
    Stage.COMMITMENT: st.sampled_from(["Friday by check.", "Next Monday, debit card."]),
    Stage.READ_BACK: st.sampled_from(
        ["Yes.", "Yes, that's right.", "No.", "Okay.", "Uh huh.", "Sure.", "Yes, but Monday."]
    ),
    Stage.CALLBACK: st.sampled_from(["Tomorrow at 10 am."]),
    Stage.ATTORNEY: st.sampled_from(["Maria Lopez, 555 123 4567."]),
    Stage.ENDED: st.sampled_from(NOISE),
}


class Caller(RuleBasedStateMachine):
    """One call; each step is one caller line."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = ConversationPolicy(
            account_from({}), Templates(PROMPTS.templates), clock=lambda: NOW
        )
        greeting = PROMPTS.greeting.format(consumer_name="Jordan Smith")
        self.lines: list[Line] = []
        self.said_signals: list[str] = []
        self.caller_amounts: set[int] = set()
        self.caller_dates: set[dt.date] = set()
        self.third_party_cue = False
        self.read_back_heard: str | None = None
        self._hear(self.policy.opening(greeting), None)

    def _hear(self, reply, cut_at: int | None) -> None:
        heard = len(reply.texts) if cut_at is None else min(cut_at, len(reply.texts))
        self.policy.played(reply, heard)
        self.lines.extend(Line("agent", t, self.policy.verified) for t in reply.texts)
        asked = reply.keys[reply.question] if reply.question is not None else None
        done = reply.question is not None and reply.question < heard
        self.read_back_heard = (
            reply.texts[reply.question] if asked == "read_back" and done else None
        )

    def _say(self, line: str, cut: int | None) -> None:
        ended = self.policy.stage is Stage.ENDED
        if line in SIGNALS:
            self.said_signals.append(SIGNALS[line])
        if line in THIRD_PARTY and not self.policy.verified and not ended:
            self.third_party_cue = True
        heard = understand(line, today=TODAY)
        if heard.amount_cents:
            self.caller_amounts.add(heard.amount_cents)
        read_back, had_promise = self.read_back_heard, self.policy.promise is not None
        self.lines.append(Line("caller", line, self.policy.verified))
        reply = self.policy.on_caller_turn(line)
        if self.policy.promise is not None and not had_promise:
            # C13: recorded only on a clear yes to a read-back of its terms heard in full.
            assert read_back is not None, line
            assert CLEAR_YES.match(line), line
        if not ended:
            self._hear(reply, cut)

    @rule(line=LINES, cut=st.one_of(st.none(), st.none(), st.integers(0, 3)))
    def say(self, line: str, cut: int | None) -> None:
        self._say(line, cut)

    @rule(data=st.data(), cut=st.one_of(st.none(), st.none(), st.none(), st.integers(0, 2)))
    def cooperate(self, data: st.DataObject, cut: int | None) -> None:
        self._say(data.draw(COOPERATE[self.policy.stage]), cut)

    @invariant()
    def a_third_party_is_never_verified(self) -> None:
        assert not (self.third_party_cue and self.policy.verified)

    @invariant()
    def rules_hold(self) -> None:
        broken = check_conversation(self.lines, self.policy, TEMPLATES)
        assert not broken, "\n".join(
            [*broken, *(f"{line.who}: {line.text}" for line in self.lines)]
        )

    @invariant()
    def every_signal_is_recorded(self) -> None:
        recorded = [e.detail.get("kind") for e in self.policy.events if e.kind == "signal"]
        for kind in self.said_signals:
            assert kind in recorded, (kind, [f"{line.who}: {line.text}" for line in self.lines])

    @invariant()
    def a_promise_holds_only_what_the_caller_said_or_accepted(self) -> None:
        promise = self.policy.promise
        if promise is None:
            return
        offered_by_agent = {
            round(float(m.replace(",", "")) * 100)
            for line in self.lines
            if line.who == "agent"
            for m in re.findall(r"\$([\d,]+(?:\.\d\d)?)", line.text)
        }
        assert promise.amount_cents in self.caller_amounts | offered_by_agent or (
            promise.installments > 1
        ), promise
        said_words = " ".join(line.text.lower() for line in self.lines if line.who == "caller")
        assert promise.method.split()[0] in said_words or promise.method == "check", promise
        assert promise.due >= TODAY


Caller.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCaller = Caller.TestCase
