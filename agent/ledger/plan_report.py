"""The planner's report: its plan (``agent.ledger.plan``) as markdown.

The configurations known to meet the target, cheapest first; those that may meet it but
rest on a stage whose tail is unknown (a declared median: their percentile is a lower
bound, marked "≥", never a zero tail); the trade of a faster stage; the closest misses;
and the inputs, with the production calls the plan was priced for when it was read from
the database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agent.ledger.latency import MEANINGS, RESPONSE, VOICE_TO_VOICE_TARGET_MS
from agent.ledger.plan import Configuration, PlanResult, resolve
from agent.ledger.pricebook import PriceBook
from agent.ledger.production import THROUGHPUT_LINES, Production
from agent.ledger.stage_profiles import MODEL_STAGES, STAGES, Placement, StageOption, percentile_key


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _tail(value: float | None) -> str:
    """A stage's figure at the percentile: unknown where nothing measured or declared it."""
    return "unknown" if value is None else f"{value:.0f}"


def _bound(c: Configuration, value: float | None) -> str:
    """A predicted figure; "≥" marks a lower bound (some stage's tail unknown)."""
    if value is None:
        return "-"
    return f"≥{value:.0f}" if c.tail_unknown else f"{value:.0f}"


def _usd(value: float) -> str:
    return f"${value:.4f}"


def _evidence(c: Configuration) -> str:
    parts = []
    if c.declared_stages:
        parts.append("**declared, not measured**: " + ", ".join(c.declared_stages))
    if c.tail_unknown:
        parts.append("**tail unknown**: " + ", ".join(c.tail_unknown))
    if c.declared_prices:
        parts.append("declared price: " + ", ".join(c.declared_prices))
    return "; ".join(parts) or "measured"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(result: PlanResult, *, command: str = "", now: datetime | None = None) -> str:
    """The plan as markdown: the passing table, the trade, those that may meet, the
    misses, the inputs."""
    key = percentile_key(result.q)
    book = result.book
    line_rate = book.telephony_rate(result.transport)
    out = [
        f"# Serving plan: configurations that meet {result.target_ms:g} ms at {key}",
        "",
        f"Planned {(now or datetime.now(UTC)):%Y-%m-%d %H:%M} UTC"
        + (f" with `{command}`" if command else "")
        + f"; price book {book.version} ({result.book_path or 'infra/pricebook.toml'}), "
        f"transport {result.transport} (line {_usd(line_rate)}/min), "
        f"cost target {_usd(book.target_usd_per_minute)}/min.",
        "",
        f"*{key} ms*: predicted response latency ({MEANINGS[RESPONSE]}) "
        f"= sum of the stage p50s (stt, llm, tts, our overhead) + root-sum-square of their "
        f"{key} - p50 excesses; *if tails coincide*: the sum of the stage {key}s, the "
        "pessimistic bound; *v2v*: the same prediction with endpointing added, voice-to-voice "
        f"(target {VOICE_TO_VOICE_TARGET_MS:.0f} ms). STT is counted in full from the VAD's "
        f"stop. *≥*: a lower bound: a stage's {key} is unknown (a declared median), its tail "
        f"is left out, not taken as zero. {_per_minute(result.production)} Method: "
        "agent/ledger/plan.py.",
        "",
    ]
    out += _passing(result)
    out += _possible(result)
    misses = result.failing[:5]
    if misses:
        best = result.cheapest or misses[0]
        out += [
            "## The closest that miss",
            "",
            _header(key, "cheapest" if result.cheapest else "fastest"),
            _RULE,
            *(_row("-", c, best) for c in misses),
            "",
        ]
    out += _inputs(result)
    return "\n".join(out).rstrip() + "\n"


_RULE = "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|"


def _header(key: str, base: str) -> str:
    return (
        f"| # | stt | llm | tts | p50 ms | {key} ms | if tails coincide ms | v2v {key} ms | "
        f"$/min | vs {base} | evidence |"
    )


def _per_minute(production: Production | None) -> str:
    if production is None:
        return (
            "*$/min*: one connected minute, all in (line + each model stage's compute share "
            "or API characters); the agent worker's own CPU is not in the price book."
        )
    return (
        "*$/min*: one connected minute of the calls in the database, all in: the line, each "
        "stage those calls' cost lines counted priced by that use (audio seconds, tokens) "
        "where the option's price book profile has throughputs, else its compute share of a "
        "minute, an API TTS by the characters those calls spoke (see Production below)."
    )


def _passing(result: PlanResult) -> list[str]:
    key = percentile_key(result.q)
    passing, cheapest, fastest = result.passing, result.cheapest, result.fastest
    if cheapest is None or fastest is None:
        return [
            f"## Nothing is known to meet {result.target_ms:g} ms at {key}",
            "",
            f"None of the {_total(result)} configurations is predicted at or under the target "
            "with every tail known.",
            "",
        ]
    spare = result.target_ms - cheapest.predicted_ms
    out = [
        f"## {len(passing)} of {_total(result)} configurations meet the target",
        "",
        _header(key, "cheapest"),
        _RULE,
        *(_row(str(i), c, cheapest) for i, c in enumerate(passing, 1)),
        "",
        f"**Cheapest that meets {result.target_ms:g} ms**: {_cell(cheapest.label)}: "
        f"{key} {cheapest.predicted_ms:.0f} ms ({spare:.0f} ms to spare), "
        f"{_usd(cheapest.usd_per_minute)}/min"
        + (f" ({_evidence(cheapest)})" if _evidence(cheapest) != "measured" else "")
        + ".",
    ]
    if fastest is not cheapest:
        ratio = fastest.usd_per_minute / cheapest.usd_per_minute
        out.append(
            f"**Fastest**: {_cell(fastest.label)}: {key} {fastest.predicted_ms:.0f} ms, "
            f"{_usd(fastest.usd_per_minute)}/min: {ratio:.2f}x the cost for "
            f"{cheapest.predicted_ms - fastest.predicted_ms:.0f} ms less, under a target "
            "the cheapest already meets."
        )
    return [*out, "", *_trade(result, cheapest)]


def _possible(result: PlanResult) -> list[str]:
    """The configurations under the target by a lower bound: they meet it only if the
    unknown tails fit in what is left."""
    key = percentile_key(result.q)
    first = result.cheapest_possible
    if first is None:
        return []
    room = result.target_ms - first.predicted_ms
    return [
        f"## {len(result.possible)} more may meet the target: a stage's {key} is unknown",
        "",
        _header(key, "cheapest of these"),
        _RULE,
        *(_row(str(i), c, first) for i, c in enumerate(result.possible, 1)),
        "",
        f"**Cheapest that may meet {result.target_ms:g} ms**: {_cell(first.label)}: "
        f"{key} ≥{first.predicted_ms:.0f} ms, {_usd(first.usd_per_minute)}/min; it meets the "
        f"target only if the tails of {', '.join(first.tail_unknown)} add at most "
        f"{room:.0f} ms over their medians: measure them before relying on it.",
        "",
    ]


def _total(result: PlanResult) -> int:
    return len(result.passing) + len(result.possible) + len(result.failing)


def _row(rank: str, c: Configuration, base: Configuration) -> str:
    o = c.options
    return (
        f"| {rank} | {_cell(o['stt'].label)} | {_cell(o['llm'].label)} | "
        f"{_cell(o['tts'].label)} | {c.p50_ms:.0f} | {_bound(c, c.predicted_ms)} | "
        f"{_bound(c, c.coinciding_ms)} | {_bound(c, c.voice_to_voice_ms)} | "
        f"{_usd(c.usd_per_minute)} | {c.usd_per_minute / base.usd_per_minute:.2f}x | "
        f"{_evidence(c)} |"
    )


def _trade(result: PlanResult, cheapest: Configuration) -> list[str]:
    """From the cheapest: each faster option of one stage, the other stages kept."""
    key = percentile_key(result.q)
    everything = [*result.passing, *result.failing]
    rows = []
    for stage in MODEL_STAGES:
        mine = cheapest.options[stage]
        mine_q = mine.at(result.q) or 0.0
        for c in everything:
            other = c.options[stage]
            faster = other.at(result.q)
            if other is mine or faster is None or faster >= mine_q:
                continue
            same_rest = all(
                c.options.get(s) is cheapest.options.get(s) for s in STAGES if s != stage
            )
            if not same_rest:
                continue
            stage_cost = c.stage_usd_per_minute(stage)
            base_cost = cheapest.stage_usd_per_minute(stage)
            stage_ratio = f"{stage_cost / base_cost:.2f}x" if base_cost > 0 else "-"
            rows.append(
                f"| {stage} | {_cell(other.label)} | {_ms(other.at(result.q))} vs "
                f"{_ms(mine_q)} | {c.predicted_ms:.0f} | {'yes' if c.meets else 'no'} | "
                f"{_usd(stage_cost)} ({stage_ratio}) | {_usd(c.usd_per_minute)} | "
                f"{c.usd_per_minute / cheapest.usd_per_minute:.2f}x |"
            )
    if not rows:
        return ["No faster option of any one stage exists beside the cheapest's.", ""]
    return [
        "## The trade: a faster option of one stage, the rest as in the cheapest",
        "",
        f"| stage | faster option | stage {key} ms | turn {key} ms | meets | "
        "stage $/min (vs cheapest's) | all in $/min | vs cheapest |",
        "|---|---|---:|---:|---|---:|---:|---:|",
        *rows,
        "",
        "Paying for a faster stage buys latency the target does not ask for: the talk's "
        "choice of a 120 ms LLM over an 80 ms one at twice the cost.",
        "",
    ]


def _inputs(result: PlanResult) -> list[str]:
    key = percentile_key(result.q)
    book = result.book
    out = [
        "## Inputs",
        "",
        "Profiles read:",
        "",
    ]
    for p in result.profiles:
        how = f"`{p.command}`" if p.command else "written by hand"
        if p.note:
            how += f"; {p.note}"
        when = f", {p.measured_at}" if p.measured_at else ""
        where = f" on {p.machine}" if p.machine else ""
        out.append(f"- `{Path(p.path).name}` ({p.source}{when}{where}): {how}")
    out += [
        "",
        "Stage options used (model stages priced per call minute by the price book):",
        "",
        f"| stage | option | source | n | p50 ms | {key} ms | placement | $/call-min | note |",
        "|---|---|---|---:|---:|---:|---|---:|---|",
    ]
    for stage in STAGES:
        for o in result.usable[stage]:
            price = "-"
            if o.placement is not None:
                price = _usd(_stage_price(o, result.book))
            place = o.placement.describe() if o.placement else "agent worker"
            if o.colocated:
                place += " (on the worker's cores)"
            source = "**declared**" if o.declared else "measured"
            out.append(
                f"| {stage} | {_cell(o.label)} | {source} | {o.samples or '-'} | "
                f"{o.p50:.0f} | {_tail(o.at(result.q))} | {_cell(place)} | {price} | "
                f"{_cell(o.note)} |"
            )
    if result.excluded:
        out += ["", "Not used:", ""]
        out += [
            f"- {e.option.stage}: {_cell(e.option.label)} (`{e.option.profile}`): {e.reason}"
            for e in result.excluded
        ]
    if result.notes:
        out += ["", *(f"- {n}" for n in result.notes)]
    if result.production is not None:
        out += ["", *_production(result.production, result.transport)]
    out += [
        "",
        f"Price book {book.version}: compute "
        + ", ".join(f"{k} ${v:.2f}/h" for k, v in book.compute_usd_per_hour.items())
        + f"; API TTS ${book.fallback_tts_usd_per_1k_characters:g} per 1,000 characters.",
        "",
    ]
    return out


def _stage_price(option: StageOption, book: PriceBook) -> float:
    resolved = resolve(option, book)
    if isinstance(resolved, Placement):
        chars = resolved.characters_per_minute or 0.0
        return chars / 1000.0 * book.fallback_tts_usd_per_1k_characters
    return book.compute_usd_per_hour[resolved.compute] / 60.0 / resolved.concurrent_calls


def _production(production: Production, transport: str) -> list[str]:
    """What the database held: the calls, their use per minute, their servers' throughput."""
    shares = ", ".join(f"{t} {n}" for t, n in sorted(production.transports.items()))
    out = [
        f"Production (the database, calls started {production.since:%Y-%m-%d %H:%M} to "
        f"{production.until:%Y-%m-%d %H:%M} UTC, PRICE_PROFILE {production.price_profile}): "
        f"{production.calls} calls ({shares}), {production.minutes:.1f} connected minutes, "
        f"{len(production.turns)} turns under the current latency definition"
        + (f", {production.legacy_turns} older turns left out" if production.legacy_turns else "")
        + f". The configurations are priced for one minute of these calls, over {transport}:",
        "",
        "| usage | per connected minute | servers' throughput (per compute second) |",
        "|---|---:|---:|",
    ]
    usage = production.minute_usage(transport)
    for stage in MODEL_STAGES:
        if not production.counted(stage):
            out.append(f"| {stage} | none counted (priced per call minute) | - |")
            continue
        name, _ = THROUGHPUT_LINES[stage]
        rate = production.throughput(stage)
        shown = f"{rate:.3g} {name}" if rate is not None else "not reported"
        amounts = {
            "stt": f"{usage.stt_audio_s:.2f} audio s",
            "llm": f"{usage.llm_prompt_tokens} prompt + {usage.llm_completion_tokens} "
            "completion tokens",
            "tts": f"{usage.tts_audio_s:.2f} audio s",
        }
        out.append(f"| {stage} | {amounts[stage]} | {shown} |")
    spoken = production.characters_per_minute()
    if spoken is not None:
        out.append(f"| agent speech | {spoken:.0f} characters | - |")
    return out
