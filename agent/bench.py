"""``python -m agent bench turn``: where a turn's time goes, on real and on instant models.

The same simulated calls run twice: once on the embedded CPU models, once on
stub model servers that answer instantly over the same protocols. The second
run is the baseline: what is left there is our own orchestration (VAD, turn
detection, frame hops, HTTP and websocket round trips, pacing).
"""

from __future__ import annotations

import dataclasses
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

from agent.config import Settings
from agent.records import TurnRecord
from agent.runtime import AgentRuntime
from agent.simulate import PARTS, SCENARIOS, CallerVoice, summarize

CONFIGS = {
    "cpu": "embedded CPU models (Whisper tiny.en, Gemma 3 270M, Piper)",
    "stub": "instant stub models (orchestration overhead only)",
}


async def measure(settings: Settings, config: str, turns: int) -> list[TurnRecord]:
    """Simulated calls on ``config`` until ``turns`` caller turns are recorded."""
    from agent.simulate import simulate_call

    scenario = SCENARIOS["questions"]
    collected: list[TurnRecord] = []
    async with AgentRuntime(settings, stub_models=config == "stub") as ctx:
        voice = CallerVoice(settings.audio_in_sample_rate)
        while len(collected) < turns:
            sim = await simulate_call(ctx, scenario, voice)
            done = [t for t in sim.summary.turns if t.response_ms is not None]
            collected.extend(done)
            print(
                f"  [{config}] call {sim.summary.call_id[:8]}: {len(done)} turns "
                f"({len(collected)}/{turns})",
                flush=True,
            )
    return collected[:turns]


def table(results: dict[str, list[TurnRecord]]) -> str:
    """Markdown table: one row per latency part, median and p95 per configuration."""
    configs = list(results)
    head = "| part (ms) | " + " | ".join(f"{c} p50 | {c} p95" for c in configs) + " |"
    rule = "|---|" + "---:|---:|" * len(configs)
    rows = [head, rule]
    for name, label in PARTS:
        cells = []
        for config in configs:
            values = [v for t in results[config] if (v := getattr(t, name)) is not None]
            if values:
                p50, p95 = summarize(values)
                cells.append(f"{p50:.0f} | {p95:.0f}")
            else:
                cells.append("- | -")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    counts = ", ".join(f"{c}: {len(r)} turns" for c, r in results.items())
    rows.append("")
    rows.append(f"Turns measured: {counts}.")
    return "\n".join(rows)


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


async def run_turn_bench(settings: Settings, turns: int, output: str, only: str | None) -> int:
    configs = [only] if only else list(CONFIGS)
    # Benchmark calls go to their own database unless one is configured explicitly.
    if "DATABASE_URL" not in os.environ:
        settings = dataclasses.replace(settings, database_url="sqlite:///data/bench.db")
    results: dict[str, list[TurnRecord]] = {}
    for config in configs:
        print(f"measuring {turns} turns on {CONFIGS[config]} ...", flush=True)
        results[config] = await measure(settings, config, turns)
    text = table(results)
    print()
    print(text)
    report = "\n".join(
        [
            "# Turn latency: CPU default and stub models",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`python -m agent bench turn --turns {turns}`"
            + (f" --only {only}" if only else "")
            + f"; VAD {settings.vad} (stop {settings.vad_stop_secs:.2f} s), "
            "end of turn by pipecat's smart-turn v3.",
            "",
            *(f"- **{c}**: {CONFIGS[c]}" for c in configs),
            "",
            "Parts: *endpoint* = last voiced caller frame to turn committed; *stt* = VAD "
            "stop to final transcript; *llm ttft* = request to first token; *tts ttfb* = "
            "request to first audio; *out* = first audio from TTS to first frame sent; "
            "*response* = turn committed to first frame sent; *v2v* = last voiced frame "
            "to first frame sent.",
            "",
            text,
            "",
        ]
    )
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report)
    print(f"\nwrote {path}")
    return 0
