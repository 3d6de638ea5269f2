"""Benchmarks: ``bench turn`` (where a turn's time goes), ``bench guard``, ``bench stt``.

``bench turn`` runs the same simulated calls on real and on instant models.

The same simulated calls run twice: once on the embedded CPU models, once on
stub model servers that answer instantly over the same protocols. The second
run is the baseline: what is left there is our own orchestration (VAD, turn
detection, frame hops, HTTP and websocket round trips, pacing).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from agent.config import Settings
from agent.conversation.guard import GuardContext, Instruction, OutputGuard
from agent.conversation.intents import understand
from agent.conversation.redaction import redact_card_numbers
from agent.conversation.scenarios import builtin_scenarios
from agent.ledger.latency import (
    MEANINGS,
    RESPONSE,
    RESPONSE_TARGET_MS,
    VOICE_TO_VOICE,
    VOICE_TO_VOICE_TARGET_MS,
)
from agent.ledger.quantiles import percentile
from agent.ledger.records import TurnRecord
from agent.ledger.stage_profiles import (
    profile_document,
    profile_path_for,
    stage_option,
    write_profile,
)
from agent.runtime.context import AgentRuntime
from infra.stt_batcher import Transcriber
from tools.simulate import PARTS, CallerVoice

#: The caller script the benchmark repeats: a whole conversation, verification to promise.
BENCH_SCENARIO = "pays_in_full"
CONFIGS = {
    "cpu": "embedded CPU models (Whisper tiny.en, Gemma 3 270M, Piper)",
    "stub": "instant stub models (orchestration overhead only)",
}


async def measure(settings: Settings, config: str, turns: int) -> list[TurnRecord]:
    """Simulated calls on ``config`` until ``turns`` caller turns are recorded."""
    from tools.simulate import simulate_call

    scenario = builtin_scenarios()[BENCH_SCENARIO]
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
                p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
                cells.append(f"{p50:.0f} | {p95:.0f}")
            else:
                cells.append("- | -")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    counts = ", ".join(f"{c}: {len(r)} turns" for c, r in results.items())
    rows.append("")
    rows.append(f"Turns measured: {counts}.")
    return "\n".join(rows)


def _write_report(output: str, report: str) -> int:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report)
    print(f"\nwrote {path}")
    return 0


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


def _compute_class() -> str:
    """This machine as a price book compute class (the book prices a 2-core VM)."""
    return f"cpu-{os.cpu_count()}core"


def own_overhead_ms(turn: TurnRecord) -> float | None:
    """A turn's response latency less the model stages in it: our own share of the turn.

    The response runs from the VAD's stop to the first frame sent (agent.ledger.latency); in
    it are the STT's final (``stt_ms``, from the same VAD stop), the LLM's first token
    and the TTS's first byte. What is left is the end-of-turn decision beyond the
    final, frame hops, policy, guard and transport out.
    """
    parts = (turn.response_ms, turn.stt_ms, turn.llm_ttft_ms, turn.tts_ttfb_ms)
    if any(v is None for v in parts):
        return None
    response, stt, llm, tts = (float(v or 0.0) for v in parts)
    return max(0.0, response - stt - llm - tts)


def turn_profile(
    results: dict[str, list[TurnRecord]], settings: Settings, command: str, report: str
) -> dict[str, object]:
    """``bench turn``'s figures as the planner's stage profile (agent/ledger/stage_profiles.py).

    Both runs give the agent's own stages (endpointing, overhead); only the CPU run
    gives model stages: the stubs answer instantly and serve no one.
    """
    llm = (
        "policy templates (LLM_MODE=templates: no model on the reply path)"
        if settings.llm_mode == "templates"
        else f"{settings.llm_model} (embedded, CPU, LLM_MODE={settings.llm_mode})"
    )
    models = {
        "stt": ("stt_ms", "Whisper tiny.en (embedded, CPU)", "VAD stop to final transcript"),
        "llm": ("llm_ttft_ms", llm, "reply requested to first token or template text"),
        "tts": ("tts_ttfb_ms", "Piper (embedded, CPU)", "TTS request to first audio"),
    }
    options = []
    for config, turns in results.items():
        colocated = config == "cpu"
        where = (
            "models on the worker's cores (CPU default)"
            if colocated
            else "models behind URLs (stub run)"
        )
        endpoint = [t.endpointing_ms for t in turns if t.endpointing_ms is not None]
        if endpoint:
            options.append(
                stage_option(
                    "endpointing",
                    f"VAD {settings.vad} (stop {settings.vad_stop_secs:.2f} s) + smart-turn v3, "
                    + where,
                    samples_ms=endpoint,
                    colocated=colocated,
                    note="last voiced caller frame to the VAD's stop (the endpointing wait)",
                )
            )
        overhead = [v for t in turns if (v := own_overhead_ms(t)) is not None]
        if overhead:
            options.append(
                stage_option(
                    "overhead",
                    f"agent worker, {where}",
                    samples_ms=overhead,
                    colocated=colocated,
                    note="per turn: response - STT final - LLM first token - TTS first byte "
                    "(end-of-turn decision, frame hops, policy, guard, transport out)",
                )
            )
        if not colocated:
            continue
        for stage, (name, label, what) in models.items():
            values = [v for t in turns if (v := getattr(t, name)) is not None]
            if values:
                options.append(
                    stage_option(
                        stage,
                        label,
                        samples_ms=values,
                        concurrency=1,
                        colocated=True,
                        placement={"price_book_profile": "embedded-cpu"},
                        note=f"{what}, one call on the machine with all three models",
                    )
                )
    return profile_document(
        Path(report).stem, options, command=command, machine=_machine(), report=report
    )


def stt_profile(
    results: dict[str, list[SttRun]], command: str, report: str, window_ms: float, max_batch: int
) -> dict[str, object]:
    """``bench stt``'s finals as the planner's STT options, one per setting and stream count."""
    modes = {
        "batch 1": "batch 1",
        "batched": f"batched ({window_ms:g} ms window, <= {max_batch} per call)",
    }
    options = [
        stage_option(
            "stt",
            f"Whisper tiny.en int8 (CPU), STT server, {modes.get(name, name)}",
            samples_ms=run.final_ms,
            concurrency=run.streams,
            placement={"compute": _compute_class(), "concurrent_calls": run.streams},
            throughput={
                "audio_s_per_s": round(run.throughput, 3),
                "finals_per_model_call": round(run.finals / max(1, run.model_calls), 3),
            },
            note=f"finalize sent to final received, {run.streams} stream"
            f"{'s' if run.streams != 1 else ''} finalizing at once "
            "(the worst case for that many calls on one unit of this machine)",
        )
        for name, runs in results.items()
        for run in runs
    ]
    return profile_document(
        Path(report).stem, options, command=command, machine=_machine(), report=report
    )


#: Caller lines the STT benchmark speaks (Piper's joe voice), as long as real answers are.
STT_BENCH_LINES = (
    "Yes, this is Jordan.",
    "I can't pay all of that. I could do two hundred dollars a month.",
    "Starting on the fifteenth, by bank transfer.",
    "Can you call me back tomorrow afternoon?",
)
STT_BENCH_SAMPLE_RATE = 16000


@dataclasses.dataclass
class SttRun:
    """One STT benchmark run: ``streams`` concurrent streams against one server setting."""

    streams: int
    audio_seconds: float
    wall_seconds: float
    final_ms: list[float]
    model_calls: int
    finals: int

    @property
    def throughput(self) -> float:
        """Audio seconds transcribed per wall-clock second."""
        return self.audio_seconds / self.wall_seconds


async def _stt_stream(url: str, clips: Sequence[bytes], first: int, utterances: int) -> list[float]:
    """One call's stream: each utterance sent at once, then finalized; the finals' latencies."""
    import time

    import aiohttp

    frame = 2 * STT_BENCH_SAMPLE_RATE // 50  # 20 ms, as a transport delivers it
    latencies = []
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_json(
            {"type": "start", "call_id": f"bench-{first}", "sample_rate": STT_BENCH_SAMPLE_RATE}
        )
        await ws.receive_json()
        for turn in range(utterances):
            pcm = clips[(first + turn) % len(clips)]
            for offset in range(0, len(pcm), frame):
                await ws.send_bytes(pcm[offset : offset + frame])
            started = time.perf_counter()
            await ws.send_json({"type": "finalize", "turn": turn})
            final = await ws.receive_json()
            if final.get("type") != "final":
                raise RuntimeError(f"the STT server answered {final}")
            latencies.append((time.perf_counter() - started) * 1000)
        await ws.send_json({"type": "stop"})
    return latencies


async def _stt_run(
    transcriber: Transcriber,
    clips: Sequence[bytes],
    streams: int,
    utterances: int,
    *,
    window_ms: float,
    max_batch: int,
) -> SttRun:
    """``streams`` concurrent streams on a fresh STT server over loopback."""
    import time

    from aiohttp import web

    from infra.stt_server import WORKER, create_app

    app = create_app(transcriber, window_ms=window_ms, max_batch=max_batch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"ws://127.0.0.1:{port}/v1/listen"
    try:
        started = time.perf_counter()
        per_stream = await asyncio.gather(
            *(_stt_stream(url, clips, s, utterances) for s in range(streams))
        )
        wall = time.perf_counter() - started
        stats = app[WORKER].stats
    finally:
        await runner.cleanup()
    audio = sum(
        len(clips[(s + t) % len(clips)]) / 2 / STT_BENCH_SAMPLE_RATE
        for s in range(streams)
        for t in range(utterances)
    )
    finals = [ms for stream in per_stream for ms in stream]
    return SttRun(streams, audio, wall, finals, stats.model_calls, stats.finals)


def _stt_table(results: dict[str, list[SttRun]]) -> str:
    """One row per stream count: each setting's throughput and final p50, and the gain."""
    lines = [
        "| streams | batch 1: audio s / s | batch 1: final p50 ms | batched: audio s / s "
        "| batched: final p50 ms | finals per model call | speed-up |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for single, batched in zip(results["batch 1"], results["batched"], strict=True):
        lines.append(
            f"| {single.streams} | {single.throughput:.2f} | "
            f"{percentile(single.final_ms, 0.5):.0f} | {batched.throughput:.2f} | "
            f"{percentile(batched.final_ms, 0.5):.0f} | "
            f"{batched.finals / batched.model_calls:.2f} | "
            f"{batched.throughput / single.throughput:.2f}× |"
        )
    return "\n".join(lines)


_STT_WINDOWS = (
    "Every Whisper window is 30 s of mel frames whatever the utterance's length, so "
    "the encoder's cost grows with the rows of a batch; on a CPU the cores are "
    "already busy with one row, and batching saves only the per-call overhead and "
    "the decoder's per-step cost. On a GPU a batch of rows costs little more than "
    "one (see docs/benchmarks/gpu.md when measured), which is where batching pays."
)


async def run_stt_bench(
    output: str = "docs/benchmarks/stt.md",
    streams: Sequence[int] = (1, 2, 4, 8),
    utterances: int = 3,
    window_ms: float = 20.0,
    max_batch: int = 16,
) -> int:
    """``python -m agent bench stt``: the STT server's throughput with and without batching.

    The same process serves the same streams twice on Whisper tiny.en (CPU, int8): with
    finals of all streams batched (``window_ms``, ``max_batch``) and one final per model
    call (batch size 1). Each stream sends an utterance as fast as the socket takes it,
    finalizes it and waits for its final, ``utterances`` times.
    """
    import logging

    from infra.stt_server import WhisperTranscriber, warm_up

    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    logging.getLogger("infra.stt_server").setLevel(logging.WARNING)  # a line per final
    voice = CallerVoice(STT_BENCH_SAMPLE_RATE)
    clips = [voice.say(line) for line in STT_BENCH_LINES]
    transcriber = WhisperTranscriber()
    warm_up(transcriber)
    settings = {"batch 1": (0.0, 1), "batched": (window_ms, max_batch)}
    results: dict[str, list[SttRun]] = {name: [] for name in settings}
    for n in streams:
        for name, (window, largest) in settings.items():
            run = await _stt_run(
                transcriber, clips, n, utterances, window_ms=window, max_batch=largest
            )
            results[name].append(run)
            print(
                f"  [{name}] {n} streams: {run.audio_seconds:.1f} s of audio in "
                f"{run.wall_seconds:.2f} s, {run.model_calls} model calls",
                flush=True,
            )
    text = _stt_table(results)
    print()
    print(text)
    command = (
        f"python -m agent bench stt --streams {','.join(map(str, streams))} "
        f"--utterances {utterances} --batch-window-ms {window_ms:g} --max-batch {max_batch}"
    )
    report = "\n".join(
        [
            "# STT server: batching finals across calls",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with `{command}`.",
            "",
            "The STT websocket server (infra/stt_server.py) on Whisper tiny.en, CPU, int8, "
            "over loopback. Each stream sends a Piper-spoken caller line "
            f"({len(STT_BENCH_LINES)} lines, "
            f"{min(len(c) for c in clips) / 2 / STT_BENCH_SAMPLE_RATE:.1f}-"
            f"{max(len(c) for c in clips) / 2 / STT_BENCH_SAMPLE_RATE:.1f} s) as fast as the "
            f"socket takes it, finalizes it and waits for the final, {utterances} times. "
            "*batch 1*: one final per model call; *batched*: the finals of all streams that "
            f"arrive within {window_ms:g} ms share one call (at most {max_batch}). "
            "*audio s / s*: seconds of audio transcribed per wall-clock second, all streams "
            "together; *final p50*: finalize sent to final received.",
            "",
            text,
            "",
            _STT_WINDOWS,
            "",
        ]
    )
    _write_report(output, report)
    write_profile(
        stt_profile(results, command, output, window_ms, max_batch), profile_path_for(output)
    )
    print(f"wrote {profile_path_for(output)}")
    return 0


def baseline_section(report: str, bench: str = "turn", head: str = "| part (ms)") -> str:
    """An earlier ``bench`` report as a section to show beside a new run: its "Measured
    ..." line and its first table (the one whose first line starts with ``head``).
    ``ValueError`` if ``report`` is not one."""
    lines = report.splitlines()
    measured = next((line for line in lines if line.startswith("Measured ")), None)
    start = next((i for i, line in enumerate(lines) if line.startswith(head)), None)
    if measured is None or start is None:
        raise ValueError(f"not a `bench {bench}` report (no 'Measured' line or no table)")
    end = next(i for i in range(start, len(lines) + 1) if i == len(lines) or not lines[i])
    counted = [line for line in lines[end:] if line.startswith("Turns measured")][:1]
    return "\n".join(
        ["## Before (the baseline report)", "", measured, "", *lines[start:end], "", *counted]
    )


async def run_turn_bench(
    settings: Settings, turns: int, output: str, only: str | None, baseline: str | None = None
) -> int:
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
    command = f"python -m agent bench turn --turns {turns}"
    report = "\n".join(
        [
            "# Turn latency: CPU default and stub models",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`{command}`"
            + (f" --only {only}" if only else "")
            + f"; VAD {settings.vad} (stop {settings.vad_stop_secs:.2f} s), "
            "end of turn by pipecat's smart-turn v3.",
            "",
            *(f"- **{c}**: {CONFIGS[c]}" for c in configs),
            "",
            "Parts: *endpoint* = last voiced caller frame to the VAD's stop; *stt* = VAD "
            "stop to final transcript; *llm ttft* = request to first token; *tts ttfb* = "
            "request to first audio; *out* = first audio from TTS to first frame sent; "
            f"*response* = {MEANINGS[RESPONSE]} (target {RESPONSE_TARGET_MS:.0f} ms); "
            f"*v2v* = voice-to-voice, {MEANINGS[VOICE_TO_VOICE]} "
            f"(target {VOICE_TO_VOICE_TARGET_MS:.0f} ms).",
            "",
            text,
            "",
            *([baseline, ""] if baseline else []),
        ]
    )
    _write_report(output, report)
    command += f" --only {only}" if only else ""
    write_profile(turn_profile(results, settings, command, output), profile_path_for(output))
    print(f"wrote {profile_path_for(output)}")
    return 0


def _guard_bench_corpus() -> tuple[list[tuple[str, bool]], list[str]]:
    """Agent sentences (with whether the caller is verified) and caller turns, as in calls."""
    agent = [
        ("Hello, this is Riley, an automated assistant calling for Northwind Recovery.", False),
        ("This call is recorded and transcribed.", False),
        ("May I please speak with Jordan Smith?", False),
        ("Thank you. To protect your privacy, please tell me your date of birth.", False),
        ("You have a balance of $1,200 with Acme Bank.", False),
        ("I'm calling about your overdue account.", False),
        ("Is there a better time to reach Jordan?", False),
        ("This is Northwind Recovery, a debt collector.", True),
        (
            "This is an attempt to collect a debt, and any information obtained will be used "
            "for that purpose.",
            True,
        ),
        ("You have a balance of $1,200 with Acme Bank.", True),
        ("Are you able to pay it in full today?", True),
        ("I understand, that can be a lot at once.", True),
        ("We could set up a plan of $100 a month for 12 months.", True),
        ("You could settle today for $840, which is 30 percent off the balance.", True),
        ("On what date would you like to make that payment?", True),
        ("Would you like to pay by debit card, bank transfer or check?", True),
        ("We will send you a secure payment link, so please never read card numbers aloud.", True),
        ("Thank you for your time today. Goodbye.", True),
        ("You have a balance of $1,500 with Acme Bank.", True),
        ("We can take 50 percent off if you pay today.", True),
        ("We could do $25 a month for 48 months.", True),
        ("There is a $5 processing fee for paying by phone.", True),
        ("If you don't pay, we will have to take legal action and garnish your wages.", True),
        ("Our attorney will be in touch.", True),
        ("Your card number 4111 1111 1111 1111 is on file.", True),
    ]
    caller = [
        "Yes, this is Jordan.",
        "Speaking.",
        "No, this is his wife. He's at work right now.",
        "March fifth, nineteen eighty.",
        "The last four are one two three four.",
        "Who is this?",
        "Am I talking to a robot?",
        "I can't pay all of that. I could do two hundred dollars a month.",
        "Starting on the fifteenth, by bank transfer.",
        "I'll pay it in full on Friday by debit card.",
        "Can you take 40 percent off?",
        "I don't owe this, it's not my debt.",
        "Stop calling me.",
        "I have a lawyer, talk to him.",
        "I lost my job and I can't afford anything right now.",
        "Can you call me back tomorrow afternoon?",
        "Let me talk to a real person.",
        "Wrong number.",
        "Will I be arrested?",
        "My card number is 4111 1111 1111 1111, expires 12/27.",
        "Um, yeah, okay, I guess I could do, uh, fifty bucks a month starting next Friday.",
        "Hi, you've reached Jordan. Please leave a message after the tone.",
    ]
    return agent, caller


#: What each row of the guard bench times, by its sample key.
_GUARD_ROWS = (
    ("baseline", "one `re.search` of a trivial pattern, per sentence (floor)"),
    ("aggregation", "pipecat sentence aggregation, per sentence (baseline)"),
    ("guard", "`OutputGuard.check`, per sentence, all"),
    ("allowed", "`OutputGuard.check`, sentences allowed"),
    ("blocked", "`OutputGuard.check`, sentences blocked"),
    ("allow", "`OutputGuard.check` with the turn's instruction (deny + allow-list)"),
    ("response", "`OutputGuard.check_response`, per LLM response (1-2 sentences)"),
    ("redact", "`redact_card_numbers`, per caller turn"),
    ("understand", "`understand` (redaction included), per caller turn"),
)
_GUARD_BASELINE = (
    "The baseline is what the pipeline already pays for each sentence in "
    "the same place: pipecat's sentence aggregation, `match_endofsentence` on the "
    "text so far once per streamed word. The floor is one `re.search` of a trivial "
    "precompiled pattern. The budget for the guard is 1-2 ms per sentence."
)
_GUARD_INSTRUCTED = (
    "A phrased turn is checked with its instruction: the deny rules, then the "
    "allow-list (every figure, name, date, word of it justified by the policy's "
    "reference and the stage's facts), then the response as a whole (its length, "
    "the reference's figures, question and key terms). The guard's processor holds "
    "the LLM's whole response until all of that has passed, so nothing of it is "
    "spoken before: the voice starts at the response's end, not at its first "
    "clause as before this check. What that costs is the LLM's time from its first "
    "words to its last, not the check (tens of µs): see the phrase-mode section, "
    "where it is measured on the CPU model."
)


@dataclasses.dataclass(frozen=True)
class _GuardWork:
    """What the guard bench checks: sentences, caller turns, responses, their contexts."""

    agent: list[tuple[str, bool]]
    caller: list[str]
    #: LLM responses (one or two sentences) with whether the caller is verified.
    responses: list[tuple[str, bool]]
    #: The plain contexts and those with the turn's instruction, by verified.
    plain: dict[bool, GuardContext]
    instructed: dict[bool, GuardContext]

    @classmethod
    def build(cls) -> _GuardWork:
        from agent.conversation.scenarios import account_from

        agent, caller = _guard_bench_corpus()
        # The demo account: balance $1,200, 30 % off at most, $50 a month, 12 months.
        demo = account_from({})
        # With the turn's instruction (the policy's counter-offer; before verification, the
        # identity question), as the guard's processor checks phrased turns.
        counter = (
            "The lowest monthly payment I can set up is $100 a month, for 12 months. "
            "Would that work for you?"
        )
        question = f"Am I speaking with {demo.consumer_name}?"
        said = {True: counter, False: question}
        responses = [
            (f"{agent[i][0]} {agent[(i + 1) % len(agent)][0]}", agent[i][1])
            for i in range(len(agent))
        ] + [(counter, True), (f"Thank you. {counter}", True), (question, False)]
        return cls(
            agent,
            caller,
            responses,
            {v: GuardContext.for_account(demo, verified=v) for v in (True, False)},
            {
                v: GuardContext.for_account(
                    demo, verified=v, instruction=Instruction.for_turn(said[v], demo, verified=v)
                )
                for v in (True, False)
            },
        )


def _aggregate(sentence: str) -> None:
    """pipecat's sentence aggregation over a sentence streamed word by word."""
    from pipecat.utils.string import match_endofsentence

    words = sentence.split(" ")
    for i in range(1, len(words) + 1):
        match_endofsentence(" ".join(words[:i]))


def _time_guard(work: _GuardWork, sentences: int) -> tuple[dict[str, list[int]], int]:
    """Nanoseconds per call of each part timed, by row key; and the checks that blocked."""
    import datetime as dt
    import re
    import time

    guard = OutputGuard()
    trivial = re.compile(r"\bfee\b")
    today = dt.date(2026, 12, 2)
    samples: dict[str, list[int]] = {key: [] for key, _ in _GUARD_ROWS if key != "guard"}
    # One untimed pass loads what loads lazily (regex caches, the sentence splitter).
    for sentence, verified in work.agent:
        guard.check(sentence, work.plain[verified])
        guard.check(sentence, work.instructed[verified])
        _aggregate(sentence)
    for text, verified in work.responses:
        guard.check_response(text, work.instructed[verified])
    for turn in work.caller:
        understand(turn, today=today)
    blocked_count = 0
    for n in range(sentences):
        sentence, verified = work.agent[n % len(work.agent)]
        t0 = time.perf_counter_ns()
        trivial.search(sentence)
        t1 = time.perf_counter_ns()
        _aggregate(sentence)
        t2 = time.perf_counter_ns()
        verdict = guard.check(sentence, work.plain[verified])
        t3 = time.perf_counter_ns()
        samples["baseline"].append(t1 - t0)
        samples["aggregation"].append(t2 - t1)
        samples["allowed" if verdict.allowed else "blocked"].append(t3 - t2)
        blocked_count += not verdict.allowed
        turn = work.caller[n % len(work.caller)]
        t4 = time.perf_counter_ns()
        redact_card_numbers(turn)
        t5 = time.perf_counter_ns()
        understand(turn, today=today)
        t6 = time.perf_counter_ns()
        samples["redact"].append(t5 - t4)
        samples["understand"].append(t6 - t5)
        t7 = time.perf_counter_ns()
        guard.check(sentence, work.instructed[verified])
        t8 = time.perf_counter_ns()
        text, response_verified = work.responses[n % len(work.responses)]
        guard.check_response(text, work.instructed[response_verified])
        t9 = time.perf_counter_ns()
        samples["allow"].append(t8 - t7)
        samples["response"].append(t9 - t8)
    samples["guard"] = samples["allowed"] + samples["blocked"]
    return samples, blocked_count


def _guard_table(samples: dict[str, list[int]]) -> str:
    floor = percentile(samples["baseline"], 0.5) / 1000
    aggregation = percentile(samples["aggregation"], 0.5) / 1000
    lines = [
        "| what | calls | median µs | p99 µs | median × aggregation | median × re.search |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label in _GUARD_ROWS:
        ns = samples[key]
        p50 = percentile(ns, 0.5) / 1000
        lines.append(
            f"| {label} | {len(ns)} | {p50:.1f} | {percentile(ns, 0.99) / 1000:.1f} | "
            f"{p50 / aggregation:.2f} | {p50 / floor:.0f} |"
        )
    return "\n".join(lines)


def run_guard_bench(
    output: str = "docs/benchmarks/guard.md", sentences: int = 2000, phrase_repeats: int = 0
) -> int:
    """``python -m agent bench guard``: the output guard and the turn reader, per sentence.

    Both run on every turn in the audio path, so they are timed against what the
    pipeline already spends there in the same run: pipecat's sentence aggregation
    (``match_endofsentence`` on the text so far, once per streamed word) and, as a
    floor, one ``re.search``. With ``phrase_repeats``, phrase mode is also run over the
    builtin scenarios with the embedded base model (``tools.bench_phrase``); the
    command fails if a sentence it spoke fails the allow-list.
    """
    work = _GuardWork.build()
    samples, blocked_count = _time_guard(work, sentences)
    text = _guard_table(samples)
    print(text)
    report = "\n".join(
        [
            "# Output guard and turn reader: cost per sentence",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`python -m agent bench guard --sentences {sentences}"
            f"{f' --phrase --repeats {phrase_repeats}' if phrase_repeats else ''}`.",
            "",
            f"{sentences} agent sentences ({len(work.agent)} distinct, {blocked_count} checks "
            "blocked) and as many caller turns "
            f"({len(work.caller)} distinct), cycled. Every sentence the LLM writes is checked "
            "before the TTS sees it, and every caller turn is read (and its card data "
            "removed) before the policy and the LLM see it, so both sit in the 300 ms turn "
            f"budget. {_GUARD_BASELINE}",
            "",
            _GUARD_INSTRUCTED,
            "",
            text,
            "",
        ]
    )
    code = 0
    if phrase_repeats:
        import asyncio

        from tools.bench_phrase import phrase_audit, report_section

        command = f"python -m agent bench guard --phrase --repeats {phrase_repeats}"
        audit = asyncio.run(phrase_audit(repeats=phrase_repeats))
        for name, value in audit.totals().items():
            print(f"{name}: {value}")
        report += "\n" + report_section(audit, command)
        code = 1 if audit.violations else 0
    return _write_report(output, report) or code
