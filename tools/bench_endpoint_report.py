"""The verdict of ``bench endpoint`` and its report (docs/benchmarks/endpointing.md).

``recommend`` picks the quickest configuration no worse than the pipeline's on false cuts,
on all cuts and on turns never committed; the report explains the method, the tables and
the recommendation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime

from agent.config import Settings
from agent.ledger.quantiles import percentile
from tools.bench_endpoint_corpus import LEAD_S, NOISE_DBFS, RENDITIONS, TurnAudio
from tools.bench_endpoint_driver import FRAME_MS, Config, ConfigResult

logger = logging.getLogger(__name__)


#: The report's fixed paragraphs: how the turns are fed, what is not modelled, caveats.
_METHOD = (
    "Each turn is fed offline, faster than real time, through the VAD the pipeline "
    "builds (`create_vad_analyzer` inside pipecat's `VADController`) and, for the "
    "smart-turn rows, pipecat's own `TurnAnalyzerUserTurnStopStrategy` over "
    "`LocalSmartTurnAnalyzerV3`, in the pipeline's frame order. Decisions run on "
    "audio time: the VAD counts frames; smart-turn counts its fallback silence in "
    "audio milliseconds; the wall clock it reads for its buffer's timestamps (which "
    "choose the pre-speech audio the model hears) is replaced by the audio clock "
    "for the run. Smart-turn's inference, which the pipeline waits for, is timed "
    "on the wall clock and added to each delay; whether a turn was cut is judged at "
    "the audio frame that led to its commit. *VAD stop alone* commits at the "
    "VAD's stop event (what `SpeechTimeoutUserTurnStopStrategy` does with "
    "`user_speech_timeout=0`)."
)

_NOT_MODELLED = (
    "Not modelled: the wait for the final transcript. A commit here is the turn "
    "detection's own decision, as if the transcript were in hand (the stub models "
    "of `bench turn`, or a fast STT: the production target is 60 ms). In the "
    "pipeline the commit also waits for the final, and a caller who speaks again "
    "before it arrives cancels the pending end of turn (pipecat drops it at a VAD "
    "start): on the CPU default, where Whisper's final comes about 390 ms after "
    "the VAD stop, that wait adds its own delay and hides some of the false cuts "
    "measured here (those in pauses that end within it)."
)

_CAVEATS = (
    "Caveats: the caller is a synthetic voice. Smart-turn v3 listens to prosody and "
    "was trained on people; on Piper's it may judge worse than on callers' (the "
    "*apart* and *in context* columns bracket how much the prosody before a pause "
    "matters). The *VAD stop alone* rows do not depend on prosody at all: a pause "
    "longer than the stop time plus the VAD's lag is cut, whatever was said, so "
    "their false cuts follow from the pause lengths chosen here (300, 500, 700 ms in "
    "equal shares); a caller who pauses longer is cut every time. Likewise a "
    "shorter smart-turn fallback cuts nothing here only because no pause here is "
    "longer than it: a caller silent for longer than the fallback after the VAD's "
    "stop, with smart-turn saying *incomplete*, is cut by it. Confirm on recorded "
    "caller audio before changing production."
)


def recommend(results: Sequence[ConfigResult], hesitations_too: bool = False) -> ConfigResult:
    """The lowest endpoint p95 (then p50) among the configurations no worse than the
    baseline on false cuts, on all cuts (false cuts and cuts in the last clause) and on
    turns never committed; with ``hesitations_too``, on the hesitations' cuts as well."""
    baseline = next(r for r in results if r.baseline)

    def no_worse(mine: float | None, theirs: float | None) -> bool:
        return mine is None or theirs is None or mine <= theirs + 1e-9

    eligible = [
        r
        for r in results
        if r.delays
        and no_worse(r.false_cut_pct, baseline.false_cut_pct)
        and no_worse(r.cut_pct, baseline.cut_pct)
        and r.never <= baseline.never
        and (not hesitations_too or no_worse(r.hesitation_cut_pct, baseline.hesitation_cut_pct))
    ]
    if not eligible:
        return baseline
    return min(
        eligible,
        key=lambda r: (r.delay(0.95) or 0.0, r.delay(0.5) or 0.0, not r.baseline),
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(results: Sequence[ConfigResult], recommended: ConfigResult | None = None) -> str:
    """The markdown table: one row per configuration, the baseline marked."""
    rows = [
        "| configuration | turns | false cuts % | cut in last clause % | hesitations cut % "
        "| never committed "
        "| endpoint p50 ms | endpoint p95 ms | ended by fallback % | decision CPU ms/turn "
        "| smart-turn calls/turn |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        label = r.config.label
        if r.baseline:
            label = f"**{label} (baseline)**"
        if recommended is not None and r is recommended and not r.baseline:
            label += " (recommended)"
        if r.current:
            label += " (the pipeline's setting)"
        rows.append(
            f"| {label} | {r.turns} | {_pct(r.false_cut_pct)} | {_pct(r.early_pct)} "
            f"| {_pct(r.hesitation_cut_pct)} "
            f"| {r.never} | {_ms(r.delay(0.5))} | {_ms(r.delay(0.95))} "
            f"| {_pct(r.fallback_pct)} | {r.cpu_ms_per_turn:.1f} | {r.model_calls_per_turn:.1f} |"
        )
    return "\n".join(rows)


def pause_table(results: Sequence[ConfigResult], pauses_ms: Sequence[int]) -> str:
    """False cuts by mid-turn pause on the scenario lines, and on the hesitations; each
    cell: clauses spoken apart / in context."""
    head = "| configuration | " + " | ".join(f"pause {p} ms" for p in pauses_ms)
    rows = [head + " | hesitations |", "|---|" + "---:|" * (len(pauses_ms) + 1)]

    def cell(pause: int | None, hesitation: bool, r: ConfigResult) -> str:
        return " / ".join(_pct(r.false_cut_pct_where(pause, x, hesitation)) for x in RENDITIONS)

    for r in results:
        label = f"**{r.config.label}**" if r.baseline else r.config.label
        cells = [cell(p, False, r) for p in pauses_ms] + [cell(None, True, r)]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _how(config: Config) -> str:
    """What the pipeline would change to run ``config``."""
    steps = []
    if config.stop_secs != Settings().vad_stop_secs:
        steps.append(f"`VAD_STOP_SECS={config.stop_secs:g}` (agent/config.py's default)")
    if config.decision == "vad":
        steps.append(
            "in agent/pipeline/call.py, `SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0)` "
            "in place of the smart-turn strategy (which also frees smart-turn's CPU)"
        )
    elif config.fallback_secs is not None:
        steps.append(
            "in agent/pipeline/call.py, `LocalSmartTurnAnalyzerV3(params=SmartTurnParams("
            f"stop_secs={config.fallback_secs:g}))`"
        )
    return "; ".join(steps) if steps else "nothing"


def verdict(results: Sequence[ConfigResult], best: ConfigResult) -> str:
    baseline = next(r for r in results if r.baseline)
    base = (
        f"The baseline ({baseline.config.label}) cuts {baseline.cut_pct:.1f}% of the turns "
        f"({baseline.false_cut_pct:.1f}% in a mid-turn pause) and commits the others "
        f"{_ms(baseline.delay(0.5))} ms (p50) / {_ms(baseline.delay(0.95))} ms (p95) after "
        "the caller's voice ends."
    )
    if best is baseline:
        return (
            base + " No configuration measured is faster at p95 without cutting more "
            "turns: **keep the default** (VAD stop "
            f"{baseline.config.stop_secs:.2f} s with smart-turn)."
        )
    p50 = (best.delay(0.5) or 0.0) - (baseline.delay(0.5) or 0.0)
    return (
        base + f" **Recommended: {best.config.label}**: the lowest endpoint p95 "
        f"({_ms(best.delay(0.95))} ms) among the configurations that cut no more turns "
        f"than the baseline, in a pause or at all ({best.false_cut_pct:.1f}% false cuts, "
        f"{best.cut_pct:.1f}% in all); its p50 is {_ms(best.delay(0.5))} ms "
        f"({'+' if p50 >= 0 else '-'}{abs(p50):.0f} ms against the baseline's), at "
        f"{best.cpu_ms_per_turn:.1f} ms of CPU per turn for the decision (baseline "
        f"{baseline.cpu_ms_per_turn:.1f}). To run it: {_how(best.config)}."
    )


def _hesitation_view(results: Sequence[ConfigResult], best: ConfigResult) -> str:
    """The verdict held to the hesitations too, where every cut is a real one."""
    baseline = next(r for r in results if r.baseline)
    if baseline.hesitation_cut_pct is None or best.hesitation_cut_pct is None:
        return ""
    text = (
        "A stricter reading: many scenario lines open with a sentence of their own (*I can't "
        "pay anything right now. | I lost my job.*), where an agent that answers after the "
        "pause is not plainly wrong, though the rule above counts it a false cut. The "
        "hesitations are unfinished by construction, so every cut there is a real one: "
        f"the baseline cuts {baseline.hesitation_cut_pct:.1f}% of them"
    )
    if best is baseline:
        return text + "."
    text += f", the recommended setting {best.hesitation_cut_pct:.1f}%."
    if best.hesitation_cut_pct <= baseline.hesitation_cut_pct + 1e-9:
        return text + " It is no worse there either."
    strict = recommend(results, hesitations_too=True)
    if strict is baseline:
        fallback = baseline.fallback_pct or 0.0
        return (
            text + " Held to the hesitations as well, nothing measured here has a lower p95 "
            "than the baseline: its p95 is smart-turn's 3 s fallback (which ends "
            f"{fallback:.1f}% of its turns, where the model keeps saying *incomplete*); "
            "`--fallbacks` sweeps shorter ones."
        )
    return (
        text + f" Held to the hesitations as well, the choice is **{strict.config.label}** "
        f"(p95 {_ms(strict.delay(0.95))} ms, p50 {_ms(strict.delay(0.5))} ms, "
        f"{strict.false_cut_pct:.1f}% false cuts, {strict.hesitation_cut_pct or 0.0:.1f}% of "
        f"the hesitations cut; to run it: {_how(strict.config)})."
    )


def _corpus_section(audios: Sequence[TurnAudio], pauses_ms: Sequence[int], seed: int) -> list[str]:
    turns = [a.turn for a in audios]
    scenario = {t.text: t for t in turns if not t.hesitation}
    multi = [t for t in scenario.values() if len(t.clauses) > 1]
    hes = {t.text for t in turns if t.hesitation}
    sources = sorted({t.source for t in scenario.values()})
    minutes = sum(a.duration_s for a in audios) / 60
    pauses = ", ".join(str(p) for p in pauses_ms)
    out = [
        "## Corpus",
        "",
        f"{len(turns)} turns, {minutes:.1f} minutes of audio, spoken by the Piper voice "
        f"(`CallerVoice`, {audios[0].sample_rate} Hz; onnxruntime seeded with {seed}, so "
        "every run speaks the same audio):",
        "",
        f"- **scenario lines**: the {len(scenario)} distinct caller lines of "
        f"{len(sources)} built-in scenarios ({', '.join(sources)}; a line said word for word "
        "in several scenarios counts once), split into clauses after sentence ends and "
        f"commas. The {len(multi)} lines of two clauses or more are spoken with every pause "
        f"({pauses} ms) in both renditions; the {len(scenario) - len(multi)} lines of one "
        "clause once (no pause: they measure the delay alone);",
        f"- **hesitations**: {len(hes)} turns written for this bench (a filler or an "
        "unfinished phrase, the pause, the rest; listed below), with every pause in both "
        "renditions.",
        "",
        "Two renditions of a turn with pauses: *apart*, each clause synthesized on its own "
        "and the clips joined with the pause: Piper says each clause as a whole utterance, "
        "so its end sounds final even at a comma (the hard case for smart-turn); *in "
        "context*, the whole turn synthesized at once and Piper's own silence at each of the "
        "turn's pause points (it pauses 140 ms or more at every comma and sentence end) "
        "stretched to the pause, so the speech before the pause keeps the prosody of speech "
        "that goes on (the easier case). A comma inside one of the turn's clauses keeps "
        "Piper's own pause (about 150 to 400 ms), as in *My date of birth is, uh, | March "
        "fifth, nineteen eighty.*",
        "",
        "Voice is trimmed to its 10 ms windows above about -50 dBFS, so a pause is exactly "
        f"the gap between voice. A turn is {LEAD_S:.0f} s of line noise, the clauses with "
        "their pauses, and enough noise after for smart-turn's fallback to fire; Gaussian "
        f"noise at {NOISE_DBFS:.0f} dBFS (seeded per turn) lies under the whole turn, pauses "
        "included: a quiet line, not digital silence.",
        "",
        "*False cut*: committed before the turn's last clause started (the agent answers in "
        "the caller's pause). *Cut in last clause*: committed after it started, before the "
        "caller's voice ended. *Never committed*: no commit before the audio ran out. "
        "*Endpoint*: end of the turn's last voiced audio to the commit, for the turns "
        "committed after it (nearest-rank percentiles). *Decision CPU*: process CPU time "
        "spent in the VAD and, for smart-turn, the strategy and its model, per turn up to "
        "its commit.",
        "",
        "Turns (`|` marks a pause):",
        "",
    ]
    listed: set[str] = set()
    for t in turns:
        if t.text not in listed:
            listed.add(t.text)
            out.append(f"- {t.source}: {t.text}")
    out.append("")
    return out


def _cut_list(result: ConfigResult, limit: int = 15) -> list[str]:
    cut = [o for o in result.outcomes if o.outcome in ("false_cut", "early")]
    if not cut:
        return []
    out = [f"Cut turns under {result.config.label}:", ""]
    for o in cut[:limit]:
        where = "in the pause" if o.outcome == "false_cut" else "in the last clause"
        rendition = o.turn.rendition.replace("-", " ")
        out.append(f"- {o.turn.text} ({o.turn.pause_ms} ms pauses, {rendition}): {where}")
    if len(cut) > limit:
        out.append(f"- ... and {len(cut) - limit} more")
    out.append("")
    return out


def report(
    results: Sequence[ConfigResult],
    audios: Sequence[TurnAudio],
    settings: Settings,
    pauses_ms: Sequence[int],
    command: str,
    seed: int = 7,
) -> str:
    from tools.bench import _machine

    best = recommend(results)
    baseline = next(r for r in results if r.baseline)
    vad_rows = [r for r in results if r.config.decision == "vad" and r.delays]
    lag = ", ".join(f"{r.config.stop_secs:.2f} s: {_ms(r.delay(0.5))} ms" for r in vad_rows)
    model_ms = [
        ms
        for r in results
        if r.config.decision == "smart-turn"
        for o in r.outcomes
        for ms in o.model_ms
    ]
    inference = (
        f" Smart-turn's inference took {percentile(model_ms, 0.5):.0f} ms (p50) / "
        f"{percentile(model_ms, 0.95):.0f} ms (p95) per call here ({len(model_ms)} calls)."
        if model_ms
        else ""
    )
    return "\n".join(
        [
            "# Endpointing: VAD stop time and end-of-turn decision, false cuts and delay",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`{command}`; VAD {settings.vad} (aggressiveness {settings.vad_aggressiveness}, "
            f"start {settings.vad_start_secs:.2f} s), {FRAME_MS} ms frames, smart-turn v3 "
            "(pipecat's bundled `smart-turn-v3.2-cpu` ONNX model, fallback after "
            f"{fallback_secs():.0f} s of silence).",
            "",
            _METHOD,
            "",
            _NOT_MODELLED,
            "",
            table(results, best),
            "",
            "False cuts (%) by mid-turn pause on the scenario lines of several clauses, and "
            "on the hesitations; each cell: clauses spoken *apart* / *in context* (see "
            "Corpus):",
            "",
            pause_table(results, pauses_ms),
            "",
            "## Recommendation",
            "",
            verdict(results, best),
            "",
            _hesitation_view(results, best),
            "",
            "The VAD stops later than its stop time: it needs both webrtcvad's verdict and "
            "pipecat's smoothed volume (over a 0.4 s window) to drop, so the *VAD stop "
            f"alone* rows' p50 is the real stop lag ({lag}); `bench turn`'s *endpoint* "
            "counts from the VAD stop less `stop_secs` and does not see that lag."
            + inference
            + " That time varies with the machine's load and is part of each smart-turn "
            "delay, so those rows' delays move by a few tens of ms from run to run; the "
            "cuts, and the VAD rows, are the same on every run.",
            "",
            _CAVEATS,
            "",
            *_cut_list(baseline),
            *([] if best is baseline else _cut_list(best)),
            *_corpus_section(audios, pauses_ms, seed),
        ]
    )


def fallback_secs() -> float:
    from pipecat.audio.turn.smart_turn.base_smart_turn import STOP_SECS

    return float(STOP_SECS)
