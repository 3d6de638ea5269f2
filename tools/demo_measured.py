"""Measured turns for the demo data: real calls' latency parts, usage and timing, resampled.

The demo's calls take their latency and usage from turns the real pipeline measured: real-audio
calls made with the synthetic caller (``measure``), or the real calls already in the store
(``load_measurements``). tools/demo.py explains the whole; docs/demo-data.md the method.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine, or_, select
from sqlalchemy.orm import Session, selectinload

from agent.config import Settings
from agent.conversation.scenarios import builtin_scenarios
from agent.ledger.latency import DEFINITION
from agent.store.tables import Call, CallStatus

logger = logging.getLogger(__name__)

#: ``calls.scenario`` of every demo call starts so; the real-audio ones with ``demo:audio:``.
DEMO_PREFIX = "demo:"
AUDIO_PREFIX = "demo:audio:"

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


class DemoError(ValueError):
    """Demo data cannot be made as asked; the message says why and what to do."""


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
