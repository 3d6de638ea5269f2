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
  calls one sentence goes to the fallback TTS, recorded as the fallback adapter records
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

Here the run and its command; the parts are ``demo_measured`` (the measured turns),
``demo_portfolio`` (the generated portfolio), ``demo_callers`` (the caller's lines and the
conversation) and ``demo_call`` (one call's records on its measured timeline).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, exists, select, update
from sqlalchemy.orm import Session

from agent.campaigns import DialRequest, record_call, record_outcome, reserve_attempt
from agent.config import Settings
from agent.conversation.guard import OutputGuard
from agent.conversation.prompts import PromptSet
from agent.conversation.scenarios import Scenario, builtin_scenarios
from agent.ledger.pricebook import PriceBook
from agent.ledger.quantiles import percentile
from agent.ledger.records import FLAG_KINDS
from agent.store.database import StoreWriter, create_engine_for, upgrade
from agent.store.tables import AttemptOutcome, Call, Promise, PromiseStatus
from tools.demo_call import CallPlan, MadeCall, make_call
from tools.demo_measured import (
    DEMO_PREFIX,
    DemoError,
    Measurements,
    load_measurements,
    measure,
)
from tools.demo_portfolio import DemoDebt, import_demo_portfolio, weighted

logger = logging.getLogger(__name__)

DEFAULT_CALLS = 300
DEFAULT_AUDIO_CALLS = 4
DEFAULT_DAYS = 30
DEFAULT_SEED = 1
MAX_CALLS = 20_000
MAX_AUDIO_CALLS = 50
MAX_DAYS = 365
PROGRESS_EVERY = 25

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
#: The payments feed knows of a payment this many days after the due date; promises due
#: since then are still open (and past due on the console).
PAYMENT_LAG_DAYS = 2
#: What becomes of a promise whose due date has passed (the payments feed).
PROMISE_FATES = ((PromiseStatus.KEPT, 55), (PromiseStatus.PARTIAL, 15), (PromiseStatus.BROKEN, 30))


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
    return scenarios[weighted(rng, ((n, mix.get(n, OTHER_WEIGHT)) for n in sorted(scenarios)))]


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
        transport = weighted(self.rng, INBOUND_TRANSPORTS)
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
                    fate = weighted(rng, PROMISE_FATES)
                    session.execute(
                        update(Promise).where(Promise.id == promise.id).values(status=fate.value)
                    )
                    statuses[fate.value] += 1
                else:
                    statuses[promise.status] += 1
    return statuses


def _queues(made: Sequence[MadeCall], today: dt.date) -> dict[str, int]:
    """What the console's queues hold of these calls (agent/console/calls.py's rules)."""
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
