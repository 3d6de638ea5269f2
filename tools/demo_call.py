"""One demo call: the conversation held, laid on a measured call's timeline, priced.

The records are those a real call submits (``CallStarted``, events, turns, ``CallEnded``); each
turn's latency parts come from one measured turn, its durations and usage scale with its text.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

from agent.config import Settings
from agent.conversation import PolicyEvent
from agent.conversation.guard import OutputGuard
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.scenarios import Scenario
from agent.ledger.pricebook import CallUsage, PriceBook, price_call
from agent.ledger.records import (
    CallEnded,
    CallEventRecord,
    CallOutcome,
    CallStarted,
    PromiseRecord,
    TurnRecord,
    new_call_id,
)
from tools.demo_callers import Step, caller_lines, hold_conversation, phrase_reply
from tools.demo_measured import DEMO_PREFIX, MeasuredTurn, Measurements
from tools.demo_portfolio import DemoDebt

#: Share of calls in which the LLM phrases the policy's open questions (LLM_MODE=phrase).
PHRASED_SHARE = 0.3
#: Share of calls in which one sentence goes to the fallback TTS (the primary missed its
#: deadline), recorded as the TTS fallback adapter records it.
FALLBACK_SHARE = 0.04


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


@dataclass
class _Timeline:
    """A call's records as they are laid on its timeline, and the usage they add up to."""

    call_id: str
    events: list[CallEventRecord] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    signals: list[tuple[str, dt.datetime]] = field(default_factory=list)
    verified_at: dt.datetime | None = None
    fallback_characters: int = 0

    def note(self, event: PolicyEvent, at: dt.datetime) -> None:
        """A policy event at ``at``; a passed verification and a signal are kept for the gate."""
        self.events.append(CallEventRecord(self.call_id, at, event.kind, event.detail))
        if event.kind == "verification" and event.detail.get("result") == "passed":
            self.verified_at = at
        if event.kind == "signal":
            self.signals.append((str(event.detail.get("kind")), at))

    def usage(self, transport: str, duration_s: float) -> CallUsage:
        return CallUsage(
            transport=transport,
            duration_s=duration_s,
            stt_audio_s=sum(t.stt_audio_s or 0.0 for t in self.turns),
            llm_prompt_tokens=sum(t.llm_prompt_tokens or 0 for t in self.turns),
            llm_completion_tokens=sum(t.llm_completion_tokens or 0 for t in self.turns),
            tts_characters=sum(t.tts_characters or 0 for t in self.turns),
            fallback_tts_characters=self.fallback_characters,
        )


@dataclass(frozen=True)
class _Reply:
    """What the agent answered one caller turn with, and how it came to be spoken."""

    step: Step
    texts: list[str]
    #: The guard's verdicts on the LLM's draft (phrased replies only).
    blocked: list[dict[str, str]]
    measured: MeasuredTurn
    #: The router's deadline in ms when the first sentence went to the fallback TTS, else None.
    fallback_after_ms: float | None


def _lay_turn(
    timeline: _Timeline,
    number: int,
    reply: _Reply,
    started: dt.datetime,
    measurements: Measurements,
) -> dt.datetime:
    """One turn on the timeline from ``started``: its events and record; when it ended."""
    caller = reply.step.caller
    assert caller is not None
    latency = dict(reply.measured.latency)
    agent_text = " ".join(t.strip() for t in reply.texts).strip()
    speaking_s = len(caller) * measurements.stt_s_per_char
    decided = started + dt.timedelta(seconds=speaking_s + latency["endpointing_ms"] / 1000)
    fell_back = reply.texts[0].strip() if reply.fallback_after_ms is not None else None
    if reply.fallback_after_ms is not None:
        # The router waited out the primary's deadline, then the fallback spoke; its own
        # first byte is not measurable offline: a measured primary's stands in.
        for part in ("tts_ttfb_ms", "response_ms", "voice_to_voice_ms"):
            latency[part] += reply.fallback_after_ms
    first_audio = started + dt.timedelta(seconds=speaking_s + latency["voice_to_voice_ms"] / 1000)
    ended = first_audio + dt.timedelta(seconds=len(agent_text) * measurements.agent_s_per_char)
    for event in reply.step.events:
        timeline.note(event, decided)
    for detail in reply.blocked:
        timeline.events.append(
            CallEventRecord(timeline.call_id, decided, "blocked_sentence", detail)
        )
    if fell_back is not None:
        said = {"reason": "deadline", "characters": len(fell_back), "text": fell_back}
        timeline.events.append(CallEventRecord(timeline.call_id, first_audio, "tts_fallback", said))
        timeline.fallback_characters += len(fell_back)
    timeline.turns.append(
        TurnRecord(
            call_id=timeline.call_id,
            number=number,
            started_at=started,
            ended_at=ended,
            user_text=caller,
            agent_text=agent_text,
            stt_audio_s=round(speaking_s, 3),
            llm_prompt_tokens=reply.measured.llm_prompt_tokens,
            llm_completion_tokens=reply.measured.llm_completion_tokens,
            tts_characters=round(len(agent_text) * measurements.tts_chars_per_char),
            endpointing_ms=round(latency["endpointing_ms"], 3),
            stt_ms=round(latency["stt_ms"], 3),
            llm_ttft_ms=round(latency["llm_ttft_ms"], 3),
            tts_ttfb_ms=round(latency["tts_ttfb_ms"], 3),
            transport_out_ms=round(latency["transport_out_ms"], 3),
            response_ms=round(latency["response_ms"], 3),
            voice_to_voice_ms=round(latency["voice_to_voice_ms"], 3),
        )
    )
    return ended


def _outcome(policy: ConversationPolicy, timeline: _Timeline, debt_id: int | None) -> CallOutcome:
    promise = policy.promise if policy.promise and policy.promise.amount_cents > 0 else None
    return CallOutcome(
        party=policy.party,
        disposition=policy.disposition or "no_commitment",
        verified_at=timeline.verified_at,
        debt_id=debt_id,
        promise=PromiseRecord(
            promise.amount_cents, promise.due, promise.method, promise.installments
        )
        if promise
        else None,
    )


def _started(
    plan: CallPlan,
    call_id: str,
    measurements: Measurements,
    settings: Settings,
    prompt_version: str,
) -> CallStarted:
    """The call's first record: the models named are those of the measured calls."""
    return CallStarted(
        call_id=call_id,
        transport=plan.transport,
        direction=plan.direction,
        started_at=plan.at,
        scenario=f"{DEMO_PREFIX}{plan.scenario.name}",
        stt_model=measurements.model("stt_model"),
        llm_model=measurements.model("llm_model") or settings.llm_model,
        tts_voice=measurements.model("tts_voice"),
        prompt_version=prompt_version,
        number=plan.number,
        campaign=plan.campaign,
    )


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

    timeline = _Timeline(new_call_id())
    frame = measurements.call(rng)
    t0 = plan.at
    greeting_at = t0 + dt.timedelta(seconds=frame.greeting_s)
    for event in steps[0].events:
        timeline.note(event, greeting_at)
    greeting = prompts.greeting.format(consumer_name=account.consumer_name)
    timeline.events.append(
        CallEventRecord(timeline.call_id, greeting_at, "greeting", {"text": greeting})
    )
    clock = t0 + dt.timedelta(seconds=frame.opening_s)
    answered = ((i, s) for i, s in enumerate(steps) if s.caller is not None)
    for number, (index, step) in enumerate(answered, start=1):
        if number > 1:
            clock += dt.timedelta(seconds=measurements.gap(rng))
        phrased = phrased_call and step.phraseable
        texts, blocked = step.texts, []
        if phrased:
            phrasing = phrase_reply(step, account, rng, guard)
            texts, blocked = phrasing.texts, phrasing.blocked
        fallback = index == fallback_step and bool(texts)
        reply = _Reply(
            step,
            texts,
            blocked,
            measurements.turn(rng, phrased),
            float(settings.tts_fallback_deadline_ms) if fallback else None,
        )
        clock = _lay_turn(timeline, number, reply, clock, measurements)

    end = clock + dt.timedelta(seconds=frame.closing_s)
    duration = (end - t0).total_seconds()
    usage = timeline.usage(plan.transport, duration)
    started = _started(plan, timeline.call_id, measurements, settings, prompts.version)
    ended = CallEnded(
        call_id=timeline.call_id,
        ended_at=end,
        duration_s=duration,
        end_reason="agent_ended" if policy.disposition else "caller_hung_up",
        cost=price_call(price_book, settings.price_profile, usage),
        outcome=_outcome(policy, timeline, account.debt_id),
    )
    return MadeCall(started, timeline.events, timeline.turns, ended, policy, timeline.signals)
