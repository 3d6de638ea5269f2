"""The reports of ``bench sip`` and ``bench capacity``: what each step held to over its runs,
every run, where the worker's CPU went, and what the figures rest on."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime

from agent.ledger.quantiles import percentile
from telephony.rtp.sender import MAX_UNDERRUN_SLOTS, LatenessHistogram
from tools.bench import _machine
from tools.bench_profile import PROFILE_RATE
from tools.bench_profile import table as profile_table
from tools.bench_sip_callers import CALL_RATE, CALLER_LINE, caller_words, phrased_counter
from tools.bench_sip_runs import (
    ANSWER_SLACK_MS,
    LIMIT_S,
    PASS_SHARE,
    TARGET,
    Run,
    Step,
    StepRuns,
    Variant,
    calls_per_core,
    required_passes,
)
from tools.bench_sip_worker import SETTLE_S


def percent(share: float) -> str:
    """Rounded down, so that a step below TARGET never shows as meeting it."""
    return f"{math.floor(share * 10000 + 1e-6) / 100:.2f}%"


def _ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "–"
    top = LatenessHistogram.BUCKETS * LatenessHistogram.BUCKET_S
    return f"≥{top * 1000:.0f}" if seconds >= top else f"{seconds * 1000:.1f}"


def answer_ms(ms: float) -> str:
    return "–" if math.isnan(ms) else "∞" if math.isinf(ms) else f"{ms:.0f}"


def runs_table(steps: Sequence[Step], column: str) -> str:
    """Markdown table: one row per run of each variant's steps (``column`` names them)."""
    cores = os.cpu_count() or 1
    rows = [
        f"| {column} | calls | run | packets | underruns | p50 ms | p99 ms | p99.9 ms "
        "| within 5 ms | answered | answer p50 ms | answer p95 ms | worker CPU % "
        f"| worker's core CPU % | all CPU % (of {100 * cores}) | ramp-up: within 5 ms "
        "| ramp-up: max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        if s.error is not None:
            why = s.error.replace("|", "/")  # a cell of its own
            rows.append(f"| {s.variant} | {s.calls} | {s.run} | not measured: {why} |")
            continue
        h = s.window.lateness
        late, slow = ("" if ok else " ✗" for ok in (s.on_time, s.answered_in_time))
        p50 = f"{percentile(s.answers_ms, 0.5):.0f}" if s.answers_ms else "–"
        rows.append(
            f"| {s.variant} | {s.calls} | {s.run} | {h.count} | {s.window.underruns} "
            f"| {_ms(h.percentile(50))} | {_ms(h.percentile(99))} | {_ms(h.percentile(99.9))} "
            f"| {percent(s.window.within)}{late} | {len(s.answers_ms)}/{s.lines} | {p50} "
            f"| {answer_ms(s.answer_p95_ms)}{slow} | {s.cpu_percent:.0f} | {s.core_percent:.0f} "
            f"| {100 * s.machine_cpu_s / s.window_s:.0f} | {percent(s.ramp.within)} "
            f"| {_ms(s.ramp.lateness.percentile(100))} |"
        )
    return "\n".join(rows)


def steps_table(groups: Sequence[StepRuns], column: str) -> str:
    """Markdown table: one row per variant and step, its runs summed up."""
    rows = [
        f"| {column} | calls | runs passed | holds | runs failed on | within 5 ms: median "
        "| within 5 ms: worst "
        "| p99.9 ms: median | p99.9 ms: worst | answer p95 ms: median "
        "| CPU per call: core-ms per call-s, mean [95 % interval] "
        "| smart-turn service: core-ms per call-s | worker's core busy %: median "
        "| LLM requests per answer |",
        "|---|---:|---:|:-:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in groups:
        within, worst_within = g.within()
        p999, worst_p999 = g.p999_s()
        cpu, service = g.cpu_per_call(), g.service_cpu_per_call()
        rows.append(
            f"| {g.variant} | {g.calls} | {g.passes}/{len(g.runs)} "
            f"| {'yes' if g.held else 'no ✗'} | {g.failures()} | {percent(within)} "
            f"| {percent(worst_within)} | {_ms(p999)} | {_ms(worst_p999)} "
            f"| {answer_ms(g.answer_p95_ms())} | {cpu if cpu else '–'} "
            f"| {service if service else '–'} "
            f"| {g.core_percent():.0f} | {g.llm_per_answer():.2f} |"
        )
    return "\n".join(rows)


def headline(groups: Sequence[StepRuns], variants: Sequence[Variant], column: str) -> str:
    """Markdown table: each variant's calls per core (the most calls of a step that held)
    and, beside it, its CPU per call at that step."""
    rows = [
        f"| {column} | calls carried | CPU per call there: core-ms per call-s, mean "
        "[95 % interval] | and the smart-turn service's | runs |",
        "|---|---:|---:|---:|---:|",
    ]
    for variant in variants:
        best = calls_per_core(groups, variant.name)
        if best is None:
            rows.append(f"| {variant.name} | none of the steps | – | – | – |")
            continue
        rows.append(
            f"| {variant.name} | **{best.calls}** | {best.cpu_per_call()} "
            f"| {best.service_cpu_per_call()} | {best.passes} of {len(best.runs)} passed |"
        )
    return "\n".join(rows)


def criterion(runs: int) -> str:
    """What a step must meet, as the reports say it."""
    return (
        f"a run passes when at least {TARGET:.1%} of the agent's outgoing 20 ms packets "
        f"left within {LIMIT_S * 1000:.0f} ms of their schedule carrying the audio that was "
        "due (a slot skipped after a stall, or sent as silence because the agent's audio "
        "came late, an *underrun*, counts as late), and its answers were no more than "
        f"{ANSWER_SLACK_MS:.0f} ms slower (p95) than the median of the lightest step's runs, "
        "a caller line left unanswered counting as never answered; a step *holds* when it "
        f"passed in at least {required_passes(runs)} of its {runs} runs ({PASS_SHARE:.0%}, "
        "rounded up; a run that could not be measured counts as failed)"
    )


def columns() -> str:
    """The tables' columns, as the reports explain them."""
    return (
        "*runs passed*: of the step's runs (each a fresh worker); *within 5 ms*, *p99.9 ms*: "
        "the median and the worst of the runs; *CPU per call*: the CPU time of the worker "
        "process and its helper process (the RTP sender) over the window, in "
        "core-milliseconds per second of each call, the mean of the runs and its 95 % "
        "interval (Student's t; the figure least sensitive to the machine's other work, "
        "which it leaves out); *smart-turn service*: the same for the host's smart-turn "
        "service over the window (a model's CPU, on the models' core: on a GPU host it is "
        "the GPU's); *worker's core busy %*: how busy the worker's core(s) were, "
        "whatever ran there. In the table of every run: *packets*: every packet the agent "
        "sent in the window; *underruns*: slots sent as silence inside the agent's speech "
        "because its audio came too late (the sender counts a silence of at most "
        f"{MAX_UNDERRUN_SLOTS} slots that ends in more audio); *p50/p99/p99.9 ms*: lateness, "
        "the send against the packet's absolute deadline; *answered*: the agent's answers "
        "in the window against the caller's lines in it (whole cycles); *answer ms*: from "
        "the caller's last voiced packet received to the first packet of the agent's answer "
        "handed to the sender (`_TimedSession`: the same measure for every pipeline, "
        "endpointing included); *worker CPU %*: the worker's and its helpers' CPU over the "
        "window, in % of one core; *all CPU %*: every process on the machine; *ramp-up*: "
        "everything before the window (calls arriving, their greetings)."
    )


def load(measured: Run) -> str:
    """The machine's load while the bench ran, as the reports say it."""
    values = measured.load or [math.nan]
    return (
        f"the 1-minute load average as each worker started was {statistics.median(values):.1f} "
        f"(median; from {min(values):.1f} to {max(values):.1f}) on {os.cpu_count()} cores, "
        "the bench's own processes included"
    )


def profiles_section(measured: Run, profile_calls: int | None) -> list[str]:
    """The report's lines on where each pipeline's worker spent its CPU."""
    profiled = [
        line
        for name, (parts, total) in measured.profiles.items()
        for line in (f"**{name}**, {profile_calls} calls:", "", profile_table(parts, total), "")
    ]
    if not profiled:
        return []
    return [
        "## Where the worker's CPU goes",
        "",
        f"One more worker per pipeline carried {profile_calls} calls, sampled by py-spy "
        "over its window only (`py-spy record --threads --subprocesses --nonblocking --rate "
        f"{PROFILE_RATE}`, one run), the "
        "samples of the worker and its helper processes summed by part of the path "
        "(`tools/bench_profile.py`: each sample of the event loop counts for the innermost "
        "frame of its stack that belongs to a part; the RTP sender's and the smart-turn "
        "model's count whole; the waits are idle and left out).",
        "",
        *profiled,
    ]


def _setup(measured: Run, hold_s: float) -> str:
    """How the calls are placed and measured, as both reports say it."""
    return (
        f"sipp places the calls at {CALL_RATE} per second over our SIP user agent and RTP "
        f'engine, each streaming the caller\'s voice as RTP: "{CALLER_LINE}" every '
        f"{measured.cycle_s:.1f} s (Piper, looped), a line far more often than a real "
        "caller's. The caller is a consumer on file (the demo account, `Account.demo()`, "
        "its number in the bench's portfolio), so each call is about their debt; the agent "
        f'greets, then answers every turn, the stub STT hearing "{caller_words()}" in each: '
        "the first turn verifies the caller (the policy's mini-Miranda and the debt's "
        "purpose, said word for word), every later one is answered with the policy's "
        "counter-offer, and no call ends before sipp hangs up. The stub LLM answers every "
        f'request with "{phrased_counter()}", which the output guard lets through; the stub '
        "TTS says each text it is sent as a 0.3 s tone. Once all calls are up the worker "
        f"waits {SETTLE_S:g} s, and until every call has had its first answer (the one that "
        "verifies the caller), then measures until the first call ends "
        f"({hold_s:g} s); *ramp-up* is everything before that window. The agent's packets, "
        "a continuous 50 a second per call (silence included), leave from the worker's RTP "
        "sender process, which counts them (`telephony/rtp/sender.py`); it ran with "
        f"{'real-time priority' if measured.realtime else 'ordinary priority'}."
    )


def _measured(measured: Run, command: str, variants: int) -> str:
    return (
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with `{command}`: "
        f"every figure rests on {measured.runs} run(s) of its step, each a fresh worker"
        + ("; the profiles on one" if measured.profiles else "")
        + ("; the variants' runs interleaved" if variants > 1 else "")
        + ". A variant stops after two steps that did not hold. The machine was shared with "
        f"other work while it ran: {load(measured)}."
    )


def _tables(measured: Run, variants: Sequence[Variant], column: str) -> tuple[str, str, str]:
    """The headline, the steps' and every run's tables."""
    groups = StepRuns.group(measured.steps)
    return (
        headline(groups, variants, column),
        steps_table(groups, column),
        runs_table(measured.steps, column),
    )


def capacity_report(
    measured: Run,
    command: str,
    variants: Sequence[Variant],
    hold_s: float,
    worker_core: int,
    profile_calls: int | None,
    baseline: str | None,
) -> tuple[str, str]:
    """``bench capacity``'s report, and what of it to show on the terminal."""
    top, steps, every = _tables(measured, variants, "pipeline")
    profiled = profiles_section(measured, profile_calls)
    report = [
        "# Calls per core: the agent's pipeline vs pipecat's stock pipeline, the same work",
        "",
        _measured(measured, command, len(variants)),
        "",
        f"**Calls per core**: the most calls one worker on one core carried in a step that "
        f"held ({criterion(measured.runs)}); the true figure lies between the last step "
        "held and the next one.",
        "",
        top,
        "",
        f"The worker process is pinned to core {worker_core}, and its helper process with "
        "it (the RTP sender); the stub models (one `infra/stub_server.py`), the host's "
        "smart-turn service (`infra/smart_turn_server.py`, a real model, at the stubs' "
        "priority), sipp and the bench keep to the other core(s), but nothing "
        "keeps the machine's other work off the worker's core: *worker's core busy %* "
        f"counts it, *CPU per call* does not. {_setup(measured, hold_s)}",
        "",
        "All three end a caller's turn alike: the same VAD, smart-turn v3 asked of the "
        "host's service, the turn ended anyway after `TURN_FALLBACK_SECS` of silence. They "
        "ask the LLM alike too, once an answer, and *LLM requests per answer* (the chat "
        "completions in the stub server's access log over the agent's answers, each call's "
        "whole life) shows it: the stock pipeline asks it every turn; in phrase mode the "
        "policy hands it the replies it may phrase (the negotiation's questions, "
        "`PHRASEABLE` in agent/conversation/exchange.py), here every answer but each "
        "call's first, which verifies the caller and is said word for word. That answer "
        "comes before the window opens, so inside it every answer asks the LLM once in "
        "every pipeline; over a call's life, which the figure counts, *ours* and "
        "*production* ask once less than the stock pipeline: (n - 1)/n for calls of n "
        "answers, the closer to 1 the longer the hold. A figure above that counts "
        "speculative requests given up (*production* asks at the transcript, again if the "
        "words change). What a turn's request costs each pipeline is in its CPU per call.",
        "",
        *(f"- **{v.name}**: {v.about}." for v in variants),
        "",
        columns(),
        "",
        "## Each step over its runs",
        "",
        steps,
        "",
        "## Every run",
        "",
        every,
        "",
        *([baseline, ""] if baseline else []),
        *profiled,
    ]
    shown = "\n\n".join([top, steps, "\n".join(profiled[4:])])
    return "\n".join(report), shown


def sip_report(
    measured: Run, command: str, variants: Sequence[Variant], hold_s: float
) -> tuple[str, str]:
    """``bench sip``'s report, and what of it to show on the terminal."""
    top, steps, every = _tables(measured, variants, "transport")
    report = [
        "# SIP: concurrent calls one worker carries with its outgoing audio on time",
        "",
        _measured(measured, command, len(variants)),
        "",
        f"**Carried** ({criterion(measured.runs)}; stub models):",
        "",
        top,
        "",
        "One worker process, on whichever core the kernel gives it, runs the agent server's "
        "own call path (`make_app`, `start_call`: VAD, smart-turn, STT, policy, guard, TTS, "
        "call records in SQLite) on the instant stub models (one `infra/stub_server.py` "
        f"process for the run). {_setup(measured, hold_s)}",
        "",
        *(f"- **{v.name}**: {v.about}." for v in variants),
        "",
        "There is no websocket baseline any more. pipecat's websocket transport (the way it "
        "serves a carrier's media stream) sends audio only while the agent speaks, about a "
        "tenth of RTP's 50 packets a second, and paces each chunk from the one before, "
        "restarting its clock whenever it falls behind: the carrier buffers the audio and "
        "plays it on its own clock, so there is no absolute 20 ms deadline on the agent's "
        "side to be late against. Sending and timing it like RTP would mean replacing "
        "pipecat's pacing with ours, which would measure our pacer on a websocket, not "
        "pipecat's transport. The comparison with pipecat that holds is `bench capacity`'s: "
        "the same SIP transport, the same work, pipecat's stock pipeline against ours.",
        "",
        columns(),
        "",
        "## Each step over its runs",
        "",
        steps,
        "",
        "## Every run",
        "",
        every,
        "",
    ]
    return "\n".join(report), "\n\n".join([top, steps])
