"""Demo data: a few hundred calls made by running the real code, so the console has life in it.

``python -m agent demo-data`` fills the database (``DATABASE_URL``, migrated
first) with calls a newcomer can browse: dispositions of every kind, flagged
calls, promises kept and broken, callbacks due, disputes and escalations. No
figure is typed in; each comes from running the project's own code:

- **The portfolio** is generated (a few hundred consumers and their debts,
  numbers in the fictional 555-01xx range) and imported through
  ``agent.campaigns.portfolio.import_portfolio``, so the pre-dial ledger is real.
- **The conversations** are held by the real ``ConversationPolicy`` over the
  built-in caller scripts (``agent/conversation/scripts/``), each line varied for the
  consumer at hand (their name, date of birth or last four, amounts scaled to
  their balance, other days and payment methods, a wrong date of birth, an
  early hang-up, ...): what the agent says, the party, the verification, the
  disposition, the promise and every compliance event are the policy's own.
  The caller's words pass ``redact_card_numbers`` first, as the STT client
  does. In a share of the calls the LLM phrases the questions the policy lets
  it phrase (production's ``LLM_MODE=phrase``): the draft is a lead-in before
  the policy's question, now and then with one of ``DRAFTS`` (small-model
  slips) first, and the real ``OutputGuard`` decides what of it is spoken; a
  blocked sentence is a
  ``blocked_sentence`` event and the policy's text is spoken instead, as
  ``GuardProcessor`` does.
- **Latency and usage** come from real measured turns: ``--audio-calls N``
  real-time calls with the Piper-voiced caller through the real pipeline
  (``tools.simulate``, on the models and settings ``simulate`` uses: the
  embedded CPU ones unless model URLs are set), or, with ``--audio-calls 0``,
  the measured turns already in the database. Each demo turn takes the seven
  latency parts of one measured turn drawn at random (a phrased reply one of
  the phrased measured turns, when any were measured); its durations and
  usage scale with its own text at the rates those turns measured (STT audio
  seconds per caller character, agent speaking seconds and TTS characters per
  agent character); the gaps, the greeting and the hang-up are drawn from the
  measured calls.
- **Cost** is ``price_call`` of the real price book over that usage; in a few
  calls one sentence goes to the fallback TTS, recorded as the router records
  it (a ``tts_fallback`` event, its characters on the fallback line).
- **Outbound calls** are cleared by the real pre-dial gate
  (``reserve_attempt`` at the call's time, ``record_outcome`` after, with
  unanswered and busy dials in between), and what the consumer said reaches
  the gate as a real call's does (``apply_signal``, ``record_conversation``),
  so a dispute, a "stop calling" or a conversation shapes which calls follow.
- **Everything is written** through ``StoreWriter`` with the record types a
  real call submits. A payments feed then marks the promises that fell due as
  kept, partial or broken.

Demo calls are told apart by their scenario: ``demo:<script>`` for the
resampled ones, ``demo:audio:<script>`` for the real-audio ones. The shares
below (how many calls are outbound, which scripts, how often a caller
stumbles) are the make-up of the simulated world, not measurements. See
docs/demo-data.md.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import datetime as dt
import logging
import math
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Engine, exists, or_, select, update
from sqlalchemy.orm import Session, selectinload

from agent.campaigns import DialRequest, record_call, record_outcome, reserve_attempt
from agent.campaigns.portfolio import REQUIRED_COLUMNS, account_for, import_portfolio, to_e164
from agent.config import Settings
from agent.conversation import Account, PolicyEvent, Templates
from agent.conversation.guard import GuardContext, OutputGuard
from agent.conversation.intents import Expectation, understand
from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.redaction import redact_card_numbers
from agent.conversation.scenarios import Scenario, builtin_scenarios
from agent.ledger.latency import DEFINITION
from agent.ledger.pricebook import CallUsage, PriceBook, price_call
from agent.ledger.quantiles import percentile
from agent.ledger.records import (
    FLAG_KINDS,
    CallEnded,
    CallEventRecord,
    CallOutcome,
    CallStarted,
    PromiseRecord,
    TurnRecord,
    new_call_id,
)
from agent.store.database import StoreWriter, create_engine_for, upgrade
from agent.store.tables import (
    AttemptOutcome,
    Call,
    CallStatus,
    Consumer,
    Debt,
    Promise,
    PromiseStatus,
)

logger = logging.getLogger(__name__)

#: ``calls.scenario`` of every demo call starts so; the real-audio ones with ``demo:audio:``.
DEMO_PREFIX = "demo:"
AUDIO_PREFIX = "demo:audio:"

DEFAULT_CALLS = 300
DEFAULT_AUDIO_CALLS = 4
DEFAULT_DAYS = 30
DEFAULT_SEED = 1
MAX_CALLS = 20_000
MAX_AUDIO_CALLS = 50
MAX_DAYS = 365
PROGRESS_EVERY = 25

#: The latency parts of a turn (``TurnRecord``), all resampled together from one measured turn.
LATENCY_PARTS = (
    "endpointing_ms",
    "stt_ms",
    "llm_ttft_ms",
    "tts_ttfb_ms",
    "transport_out_ms",
    "response_ms",
    "voice_to_voice_ms",
)


#: The scripts of the real-audio calls, in order (cycled past the end).
AUDIO_PLAN = (
    "pays_in_full",
    "callback",
    "big_discount",
    "dispute",
    "partial_payment",
    "voicemail",
    "wrong_number",
)

# -- the make-up of the simulated world (shares, not measurements) -----------------------

OUTBOUND_SHARE = 0.7
#: Unanswered dials (no answer, busy) per answered outbound call: they fill the contact ledger.
UNANSWERED_PER_CALL = 0.4
BUSY_SHARE = 0.25
#: Relative weights of the built-in scripts; a script not named here gets ``OTHER_WEIGHT``.
OUTBOUND_MIX = {
    "voicemail": 22,
    "spouse": 8,
    "wrong_number": 5,
    "pays_in_full": 7,
    "partial_payment": 9,
    "big_discount": 6,
    "card_number": 3,
    "callback": 10,
    "dispute": 6,
    "stop_calling": 5,
    "attorney": 3,
    "robot": 5,
    "arrest_question": 4,
}
INBOUND_MIX = {
    "voicemail": 0,
    "spouse": 0,
    "wrong_number": 0,
    "pays_in_full": 14,
    "partial_payment": 14,
    "big_discount": 8,
    "card_number": 5,
    "callback": 8,
    "dispute": 14,
    "stop_calling": 4,
    "attorney": 4,
    "robot": 10,
    "arrest_question": 8,
}
OTHER_WEIGHT = 3
#: How inbound calls reach the agent (transport, weight); outbound calls go out over SIP.
INBOUND_TRANSPORTS = (("sip", 5), ("twilio", 3), ("telnyx", 1), ("webrtc", 1))
#: Share of calls in which the LLM phrases the policy's open questions (LLM_MODE=phrase).
PHRASED_SHARE = 0.3
#: Of the phrased questions, the share where the LLM's draft is a slip the guard must judge.
SLIP_SHARE = 0.25
#: Share of calls in which one sentence goes to the fallback TTS (the primary missed its
#: deadline), recorded as the TTS router records it.
FALLBACK_SHARE = 0.04
#: The payments feed knows of a payment this many days after the due date; promises due
#: since then are still open (and past due on the console).
PAYMENT_LAG_DAYS = 2
#: What becomes of a promise whose due date has passed (the payments feed).
PROMISE_FATES = ((PromiseStatus.KEPT, 55), (PromiseStatus.PARTIAL, 15), (PromiseStatus.BROKEN, 30))
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

# -- the generated portfolio --------------------------------------------------------------

#: City, state, IANA zone and two area codes of the city; numbers are 555-01xx (fictional).
CITIES = (
    ("Boston", "MA", "America/New_York", ("617", "857")),
    ("New York", "NY", "America/New_York", ("212", "718")),
    ("Philadelphia", "PA", "America/New_York", ("215", "267")),
    ("Atlanta", "GA", "America/New_York", ("404", "678")),
    ("Miami", "FL", "America/New_York", ("305", "786")),
    ("Columbus", "OH", "America/New_York", ("614", "380")),
    ("Chicago", "IL", "America/Chicago", ("312", "773")),
    ("Dallas", "TX", "America/Chicago", ("214", "469")),
    ("Houston", "TX", "America/Chicago", ("713", "832")),
    ("Minneapolis", "MN", "America/Chicago", ("612", "763")),
    ("Denver", "CO", "America/Denver", ("303", "720")),
    ("Phoenix", "AZ", "America/Phoenix", ("602", "480")),
    ("Seattle", "WA", "America/Los_Angeles", ("206", "253")),
    ("Los Angeles", "CA", "America/Los_Angeles", ("213", "310")),
    ("San Diego", "CA", "America/Los_Angeles", ("619", "858")),
)
FIRST_NAMES = (
    "Maria James Linda Robert Patricia Michael Jennifer David Elizabeth William Susan Richard "
    "Jessica Joseph Sarah Thomas Karen Charles Nancy Daniel Lisa Matthew Betty Anthony Sandra "
    "Mark Ashley Steven Emily Andrew Donna Kevin Michelle Brian Carol George Amanda Edward "
    "Melissa Ronald Deborah Jason Rebecca Ryan Laura Gary Sharon Eric"
).split()
LAST_NAMES = (
    "Alvarez Kim Johnson Smith Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Wilson "
    "Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark "
    "Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green "
    "Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts"
).split()
STREETS = (
    "Maple Ave",
    "Oak St",
    "Cedar Ln",
    "Elm St",
    "Park Blvd",
    "Lake Dr",
    "Hill Rd",
    "River Rd",
    "Washington St",
    "Main St",
    "Pine Ct",
    "Sunset Blvd",
)
#: Creditor, account prefix.
CREDITORS = (
    ("Acme Card Services", "ACME"),
    ("Oldcastle Retail Credit", "OLDCO"),
    ("Harbor Medical Group", "HMED"),
    ("Summit Auto Finance", "SAF"),
    ("Lakeside Utilities", "LKU"),
)
TENANT_TYPES = (("third_party_collector", 6), ("debt_buyer", 3), ("first_party_creditor", 1))

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


class DemoError(ValueError):
    """Demo data cannot be made as asked; the message says why and what to do."""


@dataclass(frozen=True)
class DemoOptions:
    """What ``demo-data`` was asked for; ``check()`` refuses what cannot be done."""

    calls: int = DEFAULT_CALLS
    audio_calls: int = DEFAULT_AUDIO_CALLS
    days: int = DEFAULT_DAYS
    seed: int = DEFAULT_SEED
    append: bool = False
    #: Consumers in the generated portfolio; None: two for every three calls (20 at least).
    consumers: int | None = None

    def check(self) -> None:
        if not 1 <= self.calls <= MAX_CALLS:
            raise DemoError(f"--calls must be 1 to {MAX_CALLS}, got {self.calls}")
        if not 0 <= self.audio_calls <= MAX_AUDIO_CALLS:
            raise DemoError(f"--audio-calls must be 0 to {MAX_AUDIO_CALLS}, got {self.audio_calls}")
        if not 1 <= self.days <= MAX_DAYS:
            raise DemoError(f"--days must be 1 to {MAX_DAYS}, got {self.days}")
        if self.seed < 0:
            raise DemoError(f"--seed must not be negative, got {self.seed}")
        if self.consumers is not None and not 1 <= self.consumers <= 100_000:
            raise DemoError(f"--consumers must be 1 to 100000, got {self.consumers}")

    @property
    def portfolio_size(self) -> int:
        if self.consumers is not None:
            return self.consumers
        return max(20, min(5000, round(self.calls * 2 / 3)))


# -- measured turns ------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredTurn:
    """One turn of a real call: its latency parts, text lengths, usage and wall time."""

    latency: dict[str, float]
    user_chars: int
    agent_chars: int
    duration_s: float
    stt_audio_s: float | None = None
    tts_characters: int | None = None
    llm_prompt_tokens: int | None = None
    llm_completion_tokens: int | None = None

    @property
    def phrased(self) -> bool:
        """The LLM wrote (some of) this turn's reply."""
        return bool(self.llm_completion_tokens)

    @classmethod
    def of(cls, turn: Any) -> MeasuredTurn | None:
        """A stored turn (``Turn`` row or ``TurnRecord``) if it was measured whole, under the
        current latency definitions (agent.ledger.latency), else None."""
        parts = {name: getattr(turn, name) for name in LATENCY_PARTS}
        if any(value is None for value in parts.values()) or turn.interrupted:
            return None
        if turn.latency_definition != DEFINITION:
            return None
        if turn.started_at is None or turn.ended_at is None:
            return None
        return cls(
            latency={name: float(value) for name, value in parts.items()},
            user_chars=len(turn.user_text or ""),
            agent_chars=len(turn.agent_text or ""),
            duration_s=max(0.0, (turn.ended_at - turn.started_at).total_seconds()),
            stt_audio_s=turn.stt_audio_s,
            tts_characters=turn.tts_characters,
            llm_prompt_tokens=turn.llm_prompt_tokens,
            llm_completion_tokens=turn.llm_completion_tokens,
        )


@dataclass(frozen=True)
class MeasuredCall:
    """A real call's timing around its turns: greeting, gaps between turns, hang-up."""

    call_id: str
    turns: tuple[MeasuredTurn, ...]
    #: Call start to the greeting (the call answered).
    greeting_s: float
    #: Call start to the caller's first turn.
    opening_s: float
    #: The agent done speaking to the caller's next turn.
    gaps_s: tuple[float, ...]
    #: The last turn's end to the call's end.
    closing_s: float
    stt_model: str | None = None
    llm_model: str | None = None
    tts_voice: str | None = None

    @classmethod
    def of(
        cls,
        call_id: str,
        started_at: dt.datetime,
        ended_at: dt.datetime,
        turns: Sequence[Any],
        *,
        greeting_at: dt.datetime | None = None,
        stt_model: str | None = None,
        llm_model: str | None = None,
        tts_voice: str | None = None,
    ) -> MeasuredCall | None:
        """A stored call and its turns (rows or records), if any turn was measured whole."""
        timed = [t for t in turns if t.started_at is not None and t.ended_at is not None]
        timed.sort(key=lambda t: t.number)
        measured = tuple(m for m in (MeasuredTurn.of(t) for t in timed) if m is not None)
        if not measured:
            return None
        gaps = tuple(
            max(0.0, (later.started_at - earlier.ended_at).total_seconds())
            for earlier, later in zip(timed, timed[1:], strict=False)
        )
        opening = max(0.0, (timed[0].started_at - started_at).total_seconds())
        greeting = (greeting_at - started_at).total_seconds() if greeting_at else 0.0
        return cls(
            call_id=call_id,
            turns=measured,
            greeting_s=min(max(0.0, greeting), opening),
            opening_s=opening,
            gaps_s=gaps,
            closing_s=max(0.0, (ended_at - timed[-1].ended_at).total_seconds()),
            stt_model=stt_model,
            llm_model=llm_model,
            tts_voice=tts_voice,
        )


class Measurements:
    """The measured calls a demo resamples, and the rates their turns measured."""

    def __init__(self, calls: Sequence[MeasuredCall]) -> None:
        self.calls = tuple(calls)
        self.turns = tuple(t for c in self.calls for t in c.turns)
        if not self.turns:
            raise DemoError("no measured turn to resample")
        self.gaps = tuple(g for c in self.calls for g in c.gaps_s)
        self._phrased = tuple(t for t in self.turns if t.phrased) or self.turns
        self._templated = tuple(t for t in self.turns if not t.phrased) or self.turns
        with_stt = [t for t in self.turns if t.stt_audio_s and t.user_chars]
        if not with_stt:
            raise DemoError("the measured turns have no STT audio seconds to scale by")
        #: STT audio seconds (the caller speaking) per character of the caller's text.
        self.stt_s_per_char = sum(t.stt_audio_s or 0.0 for t in with_stt) / sum(
            t.user_chars for t in with_stt
        )
        spoken = [t for t in with_stt if t.agent_chars]
        agent_s = sum(
            max(0.0, t.duration_s - (t.stt_audio_s or 0.0) - t.latency["voice_to_voice_ms"] / 1000)
            for t in spoken
        )
        if not spoken or agent_s <= 0:
            raise DemoError("the measured turns do not show how fast the agent speaks")
        #: Seconds of agent speech per character of the agent's text.
        self.agent_s_per_char = agent_s / sum(t.agent_chars for t in spoken)
        billed = [t for t in self.turns if t.tts_characters and t.agent_chars]
        #: TTS characters the ledger counted per character of agent text (1 when not measured).
        self.tts_chars_per_char = (
            sum(t.tts_characters or 0 for t in billed) / sum(t.agent_chars for t in billed)
            if billed
            else 1.0
        )

    def __len__(self) -> int:
        return len(self.turns)

    def turn(self, rng: random.Random, phrased: bool) -> MeasuredTurn:
        """A measured turn at random: a phrased one for a phrased reply, where any was measured."""
        return rng.choice(self._phrased if phrased else self._templated)

    def call(self, rng: random.Random) -> MeasuredCall:
        return rng.choice(self.calls)

    def gap(self, rng: random.Random) -> float:
        """Seconds between the agent's reply and the caller's next turn (0 if never measured)."""
        return rng.choice(self.gaps) if self.gaps else 0.0

    def model(self, name: str) -> str | None:
        """The commonest model name of the measured calls (``stt_model``, ``tts_voice``, ...)."""
        seen = Counter(getattr(c, name) for c in self.calls if getattr(c, name))
        return seen.most_common(1)[0][0] if seen else None


def _real_calls() -> Any:
    """Calls that are not resampled demo calls: real ones and the demo's real-audio ones."""
    return or_(
        Call.scenario.is_(None),
        ~Call.scenario.startswith(DEMO_PREFIX, autoescape=True),
        Call.scenario.startswith(AUDIO_PREFIX, autoescape=True),
    )


def load_measurements(
    engine: Engine, call_ids: Sequence[str] | None = None, limit: int = 200
) -> Measurements:
    """The measured turns of ``call_ids``, or of the newest ``limit`` real calls in the store."""
    query = (
        select(Call)
        .where(Call.status == CallStatus.ENDED.value, Call.ended_at.is_not(None))
        .options(selectinload(Call.turns), selectinload(Call.events))
    )
    if call_ids is not None:
        query = query.where(Call.id.in_(list(call_ids)))
    else:
        query = query.where(_real_calls()).order_by(Call.started_at.desc()).limit(limit)
    measured = []
    with Session(engine) as session:
        for call in session.scalars(query):
            assert call.ended_at is not None
            greeting = next((e.at for e in call.events if e.kind == "greeting"), None)
            one = MeasuredCall.of(
                call.id,
                call.started_at,
                call.ended_at,
                list(call.turns),
                greeting_at=greeting,
                stt_model=call.stt_model,
                llm_model=call.llm_model,
                tts_voice=call.tts_voice,
            )
            if one is not None:
                measured.append(one)
    if not measured:
        where = "the real-audio calls just made" if call_ids is not None else "the database"
        raise DemoError(
            f"no measured turn in {where} (a turn with every latency part) to resample: "
            "run with --audio-calls 1 or more, or hold a call first (python -m agent simulate)"
        )
    return Measurements(measured)


async def measure(settings: Settings, count: int) -> list[str]:
    """Hold ``count`` real-time calls with the synthetic caller; their call ids.

    The models start as ``python -m agent simulate`` starts them (``AgentRuntime``: the
    embedded CPU servers unless model URLs are set) and the calls run with the same
    settings (``LLM_MODE`` included); they are stored as any call is, with the scenario
    ``demo:audio:<script>``.
    """
    from agent.runtime.context import AgentRuntime
    from tools.simulate import CallerVoice, simulate_call

    scenarios = builtin_scenarios()
    ids: list[str] = []
    async with AgentRuntime(settings) as ctx:
        voice = await asyncio.to_thread(CallerVoice, settings.audio_in_sample_rate)
        for index in range(count):
            name = AUDIO_PLAN[index % len(AUDIO_PLAN)]
            name = name if name in scenarios else sorted(scenarios)[0]
            scenario = replace(scenarios[name], name=f"{AUDIO_PREFIX}{name}")
            logger.info("real-audio call %d of %d: %s, in real time", index + 1, count, name)
            sim = await simulate_call(ctx, scenario, voice)
            for problem in sim.unmet_expectations():
                logger.warning("real-audio call %s: not as its script expects: %s", name, problem)
            ids.append(sim.summary.call_id)
    return ids


# -- the portfolio -------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoDebt:
    """A debt of the imported portfolio as the generator uses it."""

    account: Account
    consumer_id: int
    #: (E.164, kind, consent source) of the consumer's numbers.
    phones: tuple[tuple[str, str, str | None], ...]
    zone: ZoneInfo

    @property
    def debt_id(self) -> int:
        assert self.account.debt_id is not None
        return self.account.debt_id

    @property
    def caller_id(self) -> str:
        """The number the consumer calls from: their first personal number."""
        personal = [n for n, kind, _ in self.phones if kind == "personal"]
        return (personal or [self.phones[0][0]])[0]


def portfolio_rows(
    rng: random.Random, consumers: int, prefix: str, today: dt.date
) -> list[dict[str, str]]:
    """A generated portfolio in the CSV format of docs/portfolio.md, one dict per row."""
    numbers: set[str] = set()

    def number(area: str) -> str:
        for _ in range(1000):
            candidate = f"+1{area}55501{rng.randrange(100):02d}"
            if candidate not in numbers and to_e164(candidate) == candidate:
                numbers.add(candidate)
                return candidate
        raise DemoError(f"no free 555-01xx number left in area code {area}: ask for fewer")

    def consent_date() -> str:
        start = dt.date(today.year - 3, 1, 1)
        return (start + dt.timedelta(days=rng.randrange((today - start).days - 60))).isoformat()

    rows = []
    account_number = 0
    for index in range(consumers):
        city, state, zone, areas = rng.choice(CITIES)
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        born = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(52 * 365))
        home_area = rng.choice(areas)
        if rng.random() < 0.05:  # moved: a cell from another city (D4 checks both zones)
            home_area = rng.choice(rng.choice(CITIES)[3])
        source = "creditor_provided" if rng.random() < 0.85 else "consumer_provided"
        phones = [f"{number(home_area)}:personal:{source}:{consent_date()}"]
        if rng.random() < 0.2:
            phones.append(f"{number(rng.choice(areas))}:work:creditor_provided:{consent_date()}")
        if rng.random() < 0.1:
            phones.append(f"{number(rng.choice(areas))}:other:skip_traced")
        consumer = {
            "consumer_ref": f"{prefix}C{index + 1:05d}",
            "name": f"{first} {last}",
            "date_of_birth": "" if rng.random() < 0.1 else born.isoformat(),
            "address": f"{rng.randrange(10, 9999)} {rng.choice(STREETS)}",
            "city": city,
            "state": state,
            "time_zone": zone,
            "phones": ";".join(phones),
            "attorney_name": "Pat Rivera, Esq." if rng.random() < 0.02 else "",
        }
        creditors = rng.sample(CREDITORS, 2 if rng.random() < 0.2 else 1)
        for creditor, creditor_prefix in creditors:
            account_number += 1
            balance = min(9000.0, max(80.0, rng.lognormvariate(math.log(900), 0.8)))
            minimum = min(rng.choice((20, 25, 40, 50, 75, 100)), max(10, int(balance / 4)))
            rows.append(
                {
                    **consumer,
                    "account_ref": f"{prefix}{creditor_prefix}-{account_number:05d}",
                    "account_last4": f"{rng.randrange(10_000):04d}",
                    "creditor": creditor,
                    "balance": f"{balance:.2f}",
                    "statute_status": "time_barred" if rng.random() < 0.15 else "within",
                    "tenant_type": _weighted(rng, TENANT_TYPES),
                    "max_discount_pct": str(rng.choice((20, 25, 30, 40, 50, 60))),
                    "min_installment": f"{minimum:.2f}",
                    "max_term_months": str(rng.choice((6, 12, 18, 24))),
                }
            )
    return rows


def import_demo_portfolio(
    engine: Engine, rng: random.Random, consumers: int, prefix: str, today: dt.date
) -> list[DemoDebt]:
    """Generate the portfolio, import it with the real importer, and read its debts back."""
    rows = portfolio_rows(rng, consumers, prefix, today)
    columns = [*REQUIRED_COLUMNS, "date_of_birth", "account_last4", "attorney_name"]
    with tempfile.TemporaryDirectory(prefix="demo-portfolio-") as folder:
        path = Path(folder) / "demo-portfolio.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        report = import_portfolio(engine, path)
    if report.rejected:
        first = report.rejected[0]
        raise DemoError(
            f"the generated portfolio was refused ({len(report.rejected)} rows; line "
            f"{first.line}: {'; '.join(first.reasons)})"
        )
    debts = []
    with Session(engine) as session:
        query = (
            select(Debt)
            .where(Debt.account_ref.startswith(prefix, autoescape=True))
            .options(selectinload(Debt.consumer).selectinload(Consumer.phones))
            .order_by(Debt.id)
        )
        for debt in session.scalars(query):
            consumer = debt.consumer
            debts.append(
                DemoDebt(
                    account=account_for(session, debt.id),
                    consumer_id=consumer.id,
                    phones=tuple((p.number, p.kind, p.consent_source) for p in consumer.phones),
                    zone=ZoneInfo(consumer.time_zone),
                )
            )
    logger.info("demo portfolio: %d consumers, %d debts (%s...)", consumers, len(debts), prefix)
    return debts


# -- caller lines --------------------------------------------------------------------------


def _weighted(rng: random.Random, choices: Iterable[tuple[Any, float]]) -> Any:
    items = [(value, weight) for value, weight in choices if weight > 0]
    return rng.choices([v for v, _ in items], weights=[w for _, w in items])[0]


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


# -- the records of one call ---------------------------------------------------------------


@dataclass
class CallPlan:
    """One call to make: who, when, which way, which script."""

    at: dt.datetime
    debt: DemoDebt
    direction: str
    transport: str
    scenario: Scenario
    number: str | None
    campaign: str | None = None
    #: The contact attempt the pre-dial gate reserved for it (outbound calls).
    attempt_id: int | None = None


@dataclass
class MadeCall:
    """What a demo call left: its records, in the order a real call submits them."""

    started: CallStarted
    events: list[CallEventRecord]
    turns: list[TurnRecord]
    ended: CallEnded
    policy: ConversationPolicy
    #: (signal kind, when) for the pre-dial gate.
    signals: list[tuple[str, dt.datetime]] = field(default_factory=list)

    @property
    def records(self) -> list[CallStarted | TurnRecord | CallEventRecord | CallEnded]:
        ordered: list[Any] = sorted(
            [*self.events, *self.turns],
            key=lambda r: r.at if isinstance(r, CallEventRecord) else r.ended_at,
        )
        return [self.started, *ordered, self.ended]


def make_call(
    plan: CallPlan,
    measurements: Measurements,
    rng: random.Random,
    *,
    settings: Settings,
    prompts: PromptSet,
    price_book: PriceBook,
    guard: OutputGuard,
) -> MadeCall:
    """Hold the plan's conversation with the policy and lay it on a measured timeline."""
    account = plan.debt.account
    today = plan.at.astimezone(plan.debt.zone).date()
    lines = caller_lines(plan.scenario, account, rng, prompts, today)
    policy, steps = hold_conversation(account, lines, prompts, today)
    phrased_call = rng.random() < PHRASED_SHARE
    fallback_step = None
    spoken_steps = [i for i, s in enumerate(steps) if s.caller is not None and s.texts]
    if spoken_steps and rng.random() < FALLBACK_SHARE:
        fallback_step = rng.choice(spoken_steps)

    call_id = new_call_id()
    frame = measurements.call(rng)
    t0 = plan.at
    greeting_at = t0 + dt.timedelta(seconds=frame.greeting_s)
    events: list[CallEventRecord] = []
    turns: list[TurnRecord] = []
    signals: list[tuple[str, dt.datetime]] = []
    verified_at: dt.datetime | None = None

    def note(event: PolicyEvent, at: dt.datetime) -> None:
        nonlocal verified_at
        events.append(CallEventRecord(call_id, at, event.kind, event.detail))
        if event.kind == "verification" and event.detail.get("result") == "passed":
            verified_at = at
        if event.kind == "signal":
            signals.append((str(event.detail.get("kind")), at))

    for event in steps[0].events:
        note(event, greeting_at)
    greeting = prompts.greeting.format(consumer_name=account.consumer_name)
    events.append(CallEventRecord(call_id, greeting_at, "greeting", {"text": greeting}))

    clock = t0 + dt.timedelta(seconds=frame.opening_s)
    fallback_characters = 0
    stt_total = 0.0
    tts_total = 0
    prompt_tokens = 0
    completion_tokens = 0
    for number, (index, step) in enumerate(
        ((i, s) for i, s in enumerate(steps) if s.caller is not None), start=1
    ):
        assert step.caller is not None
        if number > 1:
            clock += dt.timedelta(seconds=measurements.gap(rng))
        texts = step.texts
        phrased = phrased_call and step.phraseable
        blocked: list[dict[str, str]] = []
        if phrased:
            phrasing = phrase_reply(step, account, rng, guard)
            texts, blocked = phrasing.texts, phrasing.blocked
        measured = measurements.turn(rng, phrased)
        latency = dict(measured.latency)
        agent_text = " ".join(t.strip() for t in texts).strip()
        started = clock
        speaking_s = len(step.caller) * measurements.stt_s_per_char
        decided = started + dt.timedelta(seconds=speaking_s + latency["endpointing_ms"] / 1000)
        fell_back: str | None = None
        if index == fallback_step and texts:
            # The router waited out the primary's deadline, then the fallback spoke; its
            # own first byte is not measurable offline: a measured primary's stands in.
            fell_back = texts[0].strip()
            extra = float(settings.tts_fallback_deadline_ms)
            latency["tts_ttfb_ms"] += extra
            latency["response_ms"] += extra
            latency["voice_to_voice_ms"] += extra
            fallback_characters += len(fell_back)
        first_audio = started + dt.timedelta(
            seconds=speaking_s + latency["voice_to_voice_ms"] / 1000
        )
        ended = first_audio + dt.timedelta(seconds=len(agent_text) * measurements.agent_s_per_char)
        for event in step.events:
            note(event, decided)
        for detail in blocked:
            events.append(CallEventRecord(call_id, decided, "blocked_sentence", detail))
        if fell_back is not None:
            said: dict[str, Any] = {
                "reason": "deadline",
                "characters": len(fell_back),
                "text": fell_back,
            }
            events.append(CallEventRecord(call_id, first_audio, "tts_fallback", said))
        stt_audio_s = round(speaking_s, 3)
        tts_characters = round(len(agent_text) * measurements.tts_chars_per_char)
        turns.append(
            TurnRecord(
                call_id=call_id,
                number=number,
                started_at=started,
                ended_at=ended,
                user_text=step.caller,
                agent_text=agent_text,
                stt_audio_s=stt_audio_s,
                llm_prompt_tokens=measured.llm_prompt_tokens,
                llm_completion_tokens=measured.llm_completion_tokens,
                tts_characters=tts_characters,
                endpointing_ms=round(latency["endpointing_ms"], 3),
                stt_ms=round(latency["stt_ms"], 3),
                llm_ttft_ms=round(latency["llm_ttft_ms"], 3),
                tts_ttfb_ms=round(latency["tts_ttfb_ms"], 3),
                transport_out_ms=round(latency["transport_out_ms"], 3),
                response_ms=round(latency["response_ms"], 3),
                voice_to_voice_ms=round(latency["voice_to_voice_ms"], 3),
            )
        )
        stt_total += stt_audio_s
        tts_total += tts_characters
        prompt_tokens += measured.llm_prompt_tokens or 0
        completion_tokens += measured.llm_completion_tokens or 0
        clock = ended

    end = clock + dt.timedelta(seconds=frame.closing_s)
    duration = (end - t0).total_seconds()
    usage = CallUsage(
        transport=plan.transport,
        duration_s=duration,
        stt_audio_s=stt_total,
        llm_prompt_tokens=prompt_tokens,
        llm_completion_tokens=completion_tokens,
        tts_characters=tts_total,
        fallback_tts_characters=fallback_characters,
    )
    cost = price_call(price_book, settings.price_profile, usage)
    promise = policy.promise if policy.promise and policy.promise.amount_cents > 0 else None
    outcome = CallOutcome(
        party=policy.party,
        disposition=policy.disposition or "no_commitment",
        verified_at=verified_at,
        debt_id=account.debt_id,
        promise=PromiseRecord(
            promise.amount_cents, promise.due, promise.method, promise.installments
        )
        if promise
        else None,
    )
    started_record = CallStarted(
        call_id=call_id,
        transport=plan.transport,
        direction=plan.direction,
        started_at=t0,
        scenario=f"{DEMO_PREFIX}{plan.scenario.name}",
        stt_model=measurements.model("stt_model"),
        llm_model=measurements.model("llm_model") or settings.llm_model,
        tts_voice=measurements.model("tts_voice"),
        prompt_version=prompts.version,
        number=plan.number,
        campaign=plan.campaign,
    )
    ended_record = CallEnded(
        call_id=call_id,
        ended_at=end,
        duration_s=duration,
        end_reason="agent_ended" if policy.disposition else "caller_hung_up",
        cost=cost,
        outcome=outcome,
    )
    return MadeCall(started_record, events, turns, ended_record, policy, signals)


# -- the whole run -------------------------------------------------------------------------


@dataclass
class DemoReport:
    """What a demo run made, for the summary it prints."""

    seed: int
    days: int
    consumers: int = 0
    debts: int = 0
    measured_calls: int = 0
    measured_turns: int = 0
    audio_calls: int = 0
    calls: int = 0
    directions: Counter[str] = field(default_factory=Counter)
    dispositions: Counter[str] = field(default_factory=Counter)
    dials: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    promises: Counter[str] = field(default_factory=Counter)
    flagged: Counter[str] = field(default_factory=Counter)
    queues: dict[str, int] = field(default_factory=dict)
    minutes: float = 0.0
    cost_usd: float = 0.0
    price_book: str = ""
    profile: str = ""
    response_ms: list[float] = field(default_factory=list)
    voice_to_voice_ms: list[float] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def text(self) -> str:
        def counts(counter: Counter[str]) -> str:
            return ", ".join(f"{key} {n}" for key, n in counter.most_common()) or "none"

        def quantiles(values: list[float]) -> str:
            if not values:
                return "-"
            return f"p50 {percentile(values, 0.5):,.0f} ms, p95 {percentile(values, 0.95):,.0f} ms"

        per_minute = self.cost_usd / self.minutes if self.minutes else 0.0
        lines = [
            f"demo data: {self.calls} calls ({counts(self.directions)}) over the last "
            f"{self.days} days, seed {self.seed}, made in {self.elapsed_s:.1f} s",
            f"  portfolio: {self.consumers} consumers, {self.debts} debts, imported",
            f"  measured: {self.measured_turns} turns of {self.measured_calls} real calls "
            f"resampled ({self.audio_calls} real-audio calls made by this run)",
            f"  dials through the pre-dial gate: {counts(self.dials)}; refused while looking "
            f"for a number to call: {counts(self.refusals)}",
            "  dispositions:",
            *(f"    {name:<24}{n:>5}" for name, n in sorted(self.dispositions.items())),
            f"  promises: {sum(self.promises.values())} ({counts(self.promises)})",
            f"  compliance flags: {counts(self.flagged)}",
            "  queues: " + ", ".join(f"{n} {name}" for name, n in self.queues.items()),
            f"  cost: ${self.cost_usd:.4f} over {self.minutes:.1f} min = ${per_minute:.4f}/min "
            f"(price book {self.price_book}, profile {self.profile})",
            f"  latency over {len(self.response_ms)} turns: response "
            f"{quantiles(self.response_ms)}; voice-to-voice {quantiles(self.voice_to_voice_ms)}",
        ]
        return "\n".join(lines)


def has_demo_data(engine: Engine) -> bool:
    with Session(engine) as session:
        return bool(
            session.scalar(
                select(exists().where(Call.scenario.startswith(DEMO_PREFIX, autoescape=True)))
            )
        )


def ensure_can_seed(engine: Engine, append: bool) -> None:
    """Refuse a second demo run into the same database unless it is to be appended."""
    if not append and has_demo_data(engine):
        raise DemoError(
            "the database already has demo calls (scenario demo:...): pass --append to add "
            "more, or point DATABASE_URL at a fresh database"
        )


def _window_start(now: dt.datetime, days: int) -> dt.datetime:
    return now - dt.timedelta(days=days)


def _local_slot(
    rng: random.Random, debt: DemoDebt, now: dt.datetime, days: int
) -> dt.datetime | None:
    """A time in the consumer's calling hours (08:00-20:45 local) in the last ``days`` days,
    fewer at weekends; None if the one drawn is not in the window (try again)."""
    latest = now - dt.timedelta(minutes=10)
    for _ in range(50):
        day = latest.astimezone(debt.zone).date() - dt.timedelta(days=rng.randrange(days))
        if (day.weekday() == 6 and rng.random() < 0.7) or (
            day.weekday() == 5 and rng.random() < 0.4
        ):
            continue
        minute = rng.randrange(8 * 60, 20 * 60 + 45)
        local = dt.datetime.combine(day, dt.time(minute // 60, minute % 60), tzinfo=debt.zone)
        at = local.astimezone(dt.UTC) + dt.timedelta(
            seconds=rng.randrange(60), microseconds=rng.randrange(1_000_000)
        )
        if _window_start(now, days) <= at <= latest:
            return at
    return None


def _campaign(creditor: str, at: dt.datetime) -> str:
    year, week, _ = at.isocalendar()
    slug = re.sub(r"[^a-z0-9]+", "-", creditor.lower()).strip("-")
    return f"demo-{slug}-{year}w{week:02d}"


def _scenario_for(rng: random.Random, scenarios: dict[str, Scenario], direction: str) -> Scenario:
    mix = OUTBOUND_MIX if direction == "outbound" else INBOUND_MIX
    return scenarios[_weighted(rng, ((n, mix.get(n, OTHER_WEIGHT)) for n in sorted(scenarios)))]


class _Generator:
    """Makes the calls in time order, so the pre-dial gate sees the history as it grows."""

    def __init__(
        self,
        engine: Engine,
        writer: StoreWriter,
        settings: Settings,
        measurements: Measurements,
        debts: list[DemoDebt],
        rng: random.Random,
        report: DemoReport,
        now: dt.datetime,
        days: int,
    ) -> None:
        self.engine, self.writer, self.settings = engine, writer, settings
        self.measurements, self.debts, self.rng = measurements, debts, rng
        self.report, self.now, self.days = report, now, days
        self.prompts = PromptSet.load(settings.prompt_version)
        self.price_book = PriceBook.load(settings.price_book)
        self.guard = OutputGuard()
        self.scenarios = builtin_scenarios()
        self.made: list[MadeCall] = []

    async def run(self, calls: int) -> None:
        slots: list[tuple[dt.datetime, int, str, DemoDebt]] = []
        for kind, count in (
            ("call", calls),
            ("unanswered", round(calls * OUTBOUND_SHARE * UNANSWERED_PER_CALL)),
        ):
            made = 0
            while made < count:
                debt = self.rng.choice(self.debts)
                at = _local_slot(self.rng, debt, self.now, self.days)
                if at is not None:
                    slots.append((at, len(slots), kind, debt))
                    made += 1
        slots.sort(key=lambda slot: (slot[0], slot[1]))
        for at, _seq, kind, debt in slots:
            if kind == "unanswered":
                await asyncio.to_thread(self._unanswered, at, debt)
                continue
            outbound = self.rng.random() < OUTBOUND_SHARE
            plan = await asyncio.to_thread(self._outbound, at, debt) if outbound else None
            if plan is None:
                plan = self._inbound(at, debt)
            await self._make(plan)
            if self.report.calls % PROGRESS_EVERY == 0 or self.report.calls == calls:
                logger.info(
                    "demo-data: %d/%d calls (%s); dials %s",
                    self.report.calls,
                    calls,
                    ", ".join(f"{n} {d}" for d, n in sorted(self.report.directions.items())),
                    dict(self.report.dials),
                )

    def _reserve(self, at: dt.datetime, debt: DemoDebt) -> tuple[int, str] | None:
        """A counted attempt the gate allowed on one of the debt's numbers, or None."""
        numbers = [number for number, _kind, _source in debt.phones]
        self.rng.shuffle(numbers)
        for number in numbers:
            decision = reserve_attempt(self.engine, DialRequest(debt.debt_id, number, at))
            if decision.allowed and decision.attempt_id is not None:
                return decision.attempt_id, number
            self.report.refusals[decision.rule] += 1
        return None

    def _unanswered(self, at: dt.datetime, debt: DemoDebt) -> None:
        reserved = self._reserve(at, debt)
        if reserved is None:
            return
        busy = self.rng.random() < BUSY_SHARE
        outcome = AttemptOutcome.BUSY if busy else AttemptOutcome.NO_ANSWER
        record_outcome(self.engine, reserved[0], outcome)
        self.report.dials[outcome.value] += 1

    def _outbound(self, at: dt.datetime, first: DemoDebt) -> CallPlan | None:
        """An outbound call at ``at``: the first debt the gate lets us call, trying a few."""
        candidates = [first, *self.rng.sample(self.debts, min(24, len(self.debts)))]
        for debt in candidates:
            reserved = self._reserve(at, debt)
            if reserved is None:
                continue
            attempt_id, number = reserved
            return CallPlan(
                at=at,
                debt=debt,
                direction="outbound",
                transport="sip",
                scenario=_scenario_for(self.rng, self.scenarios, "outbound"),
                number=number,
                campaign=_campaign(debt.account.creditor, at),
                attempt_id=attempt_id,
            )
        return None

    def _inbound(self, at: dt.datetime, debt: DemoDebt) -> CallPlan:
        """The consumer calls in (no gate: the agent does not dial); held about their debt."""
        transport = _weighted(self.rng, INBOUND_TRANSPORTS)
        return CallPlan(
            at=at,
            debt=debt,
            direction="inbound",
            transport=transport,
            scenario=_scenario_for(self.rng, self.scenarios, "inbound"),
            number=None if transport == "webrtc" else debt.caller_id,
        )

    async def _make(self, plan: CallPlan) -> None:
        made = make_call(
            plan,
            self.measurements,
            self.rng,
            settings=self.settings,
            prompts=self.prompts,
            price_book=self.price_book,
            guard=self.guard,
        )
        for record in made.records:
            self.writer.submit(record)
        # The attempt links the call's row, so the row is written first (as the server does).
        await self.writer.flush(timeout=60)
        attempt_id = plan.attempt_id
        disposition = made.ended.outcome.disposition if made.ended.outcome else None
        if attempt_id is not None:
            voicemail = disposition in ("voicemail_lcm_left", "voicemail_no_message")
            outcome = AttemptOutcome.VOICEMAIL if voicemail else AttemptOutcome.ANSWERED
            await asyncio.to_thread(
                record_outcome, self.engine, attempt_id, outcome, made.started.call_id
            )
            self.report.dials[outcome.value] += 1
        await asyncio.to_thread(self._tell_the_gate, plan, made)
        self._count(made)

    def _tell_the_gate(self, plan: CallPlan, made: MadeCall) -> None:
        """What the consumer said, for the gate's next decision (as ``Call`` does at its end:
        ``record_call``, with each signal's details, the conversation, a consented callback)."""
        problems = record_call(
            self.engine,
            plan.debt.debt_id,
            made.events,
            party=made.policy.party,
            number=plan.number,
            ended_at=made.ended.ended_at,
        )
        for problem in problems:
            logger.error("call %s: the gate did not take %s", made.started.call_id, problem)

    def _count(self, made: MadeCall) -> None:
        report = self.report
        report.calls += 1
        report.call_ids.append(made.started.call_id)
        report.directions[made.started.direction] += 1
        outcome = made.ended.outcome
        report.dispositions[(outcome.disposition if outcome else None) or "none"] += 1
        report.minutes += made.ended.duration_s / 60
        cost = made.ended.cost
        if cost is not None:  # unpriced only when pricing failed (a cost_error event says so)
            report.cost_usd += cost.total_usd
            report.price_book = cost.price_book_version
        for kind in {e.kind for e in made.events} & set(FLAG_KINDS):
            report.flagged[kind] += 1
        for turn in made.turns:
            if turn.response_ms is not None:
                report.response_ms.append(turn.response_ms)
            if turn.voice_to_voice_ms is not None:
                report.voice_to_voice_ms.append(turn.voice_to_voice_ms)
        self.made.append(made)


def settle_promises(
    engine: Engine, call_ids: Sequence[str], today: dt.date, rng: random.Random
) -> Counter[str]:
    """The payments feed: each promise of ``call_ids`` due more than ``PAYMENT_LAG_DAYS``
    before ``today`` is marked kept, partial or broken; later ones stay open. Returns the
    promises by status."""
    settled_before = today - dt.timedelta(days=PAYMENT_LAG_DAYS)
    statuses: Counter[str] = Counter()
    with Session(engine) as session, session.begin():
        for start in range(0, len(call_ids), 500):
            chunk = list(call_ids[start : start + 500])
            promises = session.scalars(
                select(Promise).where(Promise.call_id.in_(chunk)).order_by(Promise.id)
            ).all()
            for promise in promises:
                if promise.due_date < settled_before:
                    fate = _weighted(rng, PROMISE_FATES)
                    session.execute(
                        update(Promise).where(Promise.id == promise.id).values(status=fate.value)
                    )
                    statuses[fate.value] += 1
                else:
                    statuses[promise.status] += 1
    return statuses


def _queues(made: Sequence[MadeCall], today: dt.date) -> dict[str, int]:
    """What the console's queues hold of these calls (agent/console/pages.py's rules)."""
    dispositions = Counter(m.ended.outcome.disposition for m in made if m.ended.outcome)
    last_call: dict[int | None, dt.datetime] = {}
    for m in made:
        debt = m.ended.outcome.debt_id if m.ended.outcome else None
        last_call[debt] = max(last_call.get(debt, m.started.started_at), m.started.started_at)
    due = 0
    for m in made:
        outcome = m.ended.outcome
        if outcome is None or outcome.disposition != "callback_requested":
            continue
        asked = [e.detail.get("date") for e in m.events if e.kind == "callback_requested"]
        day = dt.date.fromisoformat(str(asked[-1])) if asked and asked[-1] else None
        if (day is None or day <= today) and last_call[outcome.debt_id] == m.started.started_at:
            due += 1
    return {
        "disputes": dispositions["dispute"],
        "callbacks due": due,
        "escalations": dispositions["escalated_to_human"],
    }


def _past_due(engine: Engine, call_ids: Sequence[str], today: dt.date) -> int:
    """Promises of ``call_ids`` the console lists as past due (open or broken, due before today)."""
    count = 0
    with Session(engine) as session:
        for start in range(0, len(call_ids), 500):
            count += len(
                session.scalars(
                    select(Promise.id).where(
                        Promise.call_id.in_(list(call_ids[start : start + 500])),
                        Promise.due_date < today,
                        Promise.status.in_((PromiseStatus.OPEN.value, PromiseStatus.BROKEN.value)),
                    )
                ).all()
            )
    return count


async def generate(
    engine: Engine,
    settings: Settings,
    options: DemoOptions,
    measurements: Measurements,
    *,
    now: dt.datetime | None = None,
) -> DemoReport:
    """Import the demo portfolio and make ``options.calls`` calls over ``measurements``.

    The unit under the command: no models, no audio. Does not check for earlier demo
    data (``ensure_can_seed``).
    """
    started = time.monotonic()
    now = now or dt.datetime.now(dt.UTC)
    rng = random.Random(options.seed)
    report = DemoReport(seed=options.seed, days=options.days, profile=settings.price_profile)
    report.measured_calls, report.measured_turns = len(measurements.calls), len(measurements)
    prefix = f"DEMO{options.seed}-"
    debts = await asyncio.to_thread(
        import_demo_portfolio, engine, rng, options.portfolio_size, prefix, now.date()
    )
    report.consumers = len({d.consumer_id for d in debts})
    report.debts = len(debts)
    writer = StoreWriter(engine)
    writer.start()
    try:
        generator = _Generator(
            engine, writer, settings, measurements, debts, rng, report, now, options.days
        )
        await generator.run(options.calls)
        await writer.flush(timeout=60)
    finally:
        writer.stop(30)
    today = now.date()
    report.promises = await asyncio.to_thread(settle_promises, engine, report.call_ids, today, rng)
    report.queues = _queues(generator.made, today)
    report.queues["promises past due"] = await asyncio.to_thread(
        _past_due, engine, report.call_ids, today
    )
    report.elapsed_s = time.monotonic() - started
    return report


async def run_demo(settings: Settings, options: DemoOptions) -> DemoReport:
    """``python -m agent demo-data``: migrate, refuse a second run, measure, generate."""
    options.check()
    started = time.monotonic()
    await asyncio.to_thread(upgrade, settings.database_url)
    engine = create_engine_for(settings.database_url)
    try:
        ensure_can_seed(engine, options.append)
        if options.audio_calls:
            logger.info(
                "demo-data: %d real-audio call(s) first, in real time (tens of seconds each)",
                options.audio_calls,
            )
            ids = await measure(settings, options.audio_calls)
            measurements = load_measurements(engine, ids)
        else:
            measurements = load_measurements(engine)
        logger.info(
            "demo-data: resampling %d measured turns of %d call(s)",
            len(measurements),
            len(measurements.calls),
        )
        report = await generate(engine, settings, options, measurements)
        report.audio_calls = options.audio_calls
        report.elapsed_s = time.monotonic() - started
        return report
    finally:
        engine.dispose()


# -- the command line ----------------------------------------------------------------------

HELP = "fill the database with a few hundred realistic calls for the console, made by the code"
DESCRIPTION = """\
Fill the database (DATABASE_URL, migrated first) with calls spread over the last --days
days, so the console has work in it. Nothing is typed in: a generated portfolio goes in
through the real importer; each conversation is held by the real conversation policy over
the built-in caller scripts, varied per consumer; outbound calls are cleared by the real
pre-dial gate; every record goes through the store's writer; the price book prices them.

Measured: --audio-calls real-time calls with the synthetic caller through the real
pipeline, on the models 'simulate' uses (the embedded CPU ones unless model URLs are set;
tens of seconds each). With --audio-calls 0, the measured turns already in the database.

Resampled: each demo turn's latency parts (endpointing, STT, LLM, TTS, transport out,
response, voice-to-voice) are those of one measured turn drawn at random; its durations
and usage (STT audio seconds, TTS characters) scale with its own text at the rates the
measured turns show; greeting, gaps and hang-up are drawn from the measured calls.

Demo calls have the scenario demo:<script> (demo:audio:<script> for the real-audio ones).
A second run into a database that has them is refused unless --append.
See docs/demo-data.md."""


def add_demo_parser(commands: Any) -> None:
    """The ``demo-data`` subcommand (``commands`` is the main parser's subparsers)."""
    demo = commands.add_parser(
        "demo-data",
        help=HELP,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--calls", type=int, default=DEFAULT_CALLS, help=f"calls to make (default {DEFAULT_CALLS})"
    )
    demo.add_argument(
        "--audio-calls",
        type=int,
        default=DEFAULT_AUDIO_CALLS,
        help="real-audio calls to measure first (default "
        f"{DEFAULT_AUDIO_CALLS}); 0: resample the measured turns already in the database",
    )
    demo.add_argument(
        "--days", type=int, default=DEFAULT_DAYS, help=f"days back (default {DEFAULT_DAYS})"
    )
    demo.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"random seed: the same seed makes the same calls (default {DEFAULT_SEED})",
    )
    demo.add_argument(
        "--consumers",
        type=int,
        help="consumers in the generated portfolio (default: two for every three calls)",
    )
    demo.add_argument(
        "--append", action="store_true", help="add to a database that already has demo calls"
    )


def run_demo_command(settings: Settings, args: argparse.Namespace) -> int:
    """Run ``demo-data``; the summary on stdout, progress on stderr. 2 on a refusal."""
    options = DemoOptions(
        calls=args.calls,
        audio_calls=args.audio_calls,
        days=args.days,
        seed=args.seed,
        append=args.append,
        consumers=args.consumers,
    )
    if not getattr(args, "verbose", False):
        # One line per gate decision and per call would bury the progress lines.
        logging.getLogger("agent.campaigns").setLevel(logging.WARNING)
    try:
        report = asyncio.run(run_demo(settings, options))
    except DemoError as e:
        sys.stderr.write(f"demo-data: {e}\n")
        return 2
    sys.stdout.write(report.text() + "\n")
    return 0
