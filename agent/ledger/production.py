"""The calls we actually had, as the planner's stage profile and usage mix.

``python -m agent plan --from-db --since 7d`` asks which configuration would have met the
target for production's turns at the lowest cost. The store reads the turns and cost lines
of the calls that started in the window (``agent.store.past_calls``) into a
:class:`Production`; this module turns it into a stage profile in the benchmarks' format
(``agent.ledger.stage_profiles``), one option per stage and model that served, with the
turns' latency parts as samples, and into the usage of one connected minute, so that each
candidate configuration is priced for what those calls used, not for a call minute.

Only turns measured under the current latency definition (``agent.ledger.latency``) give
latency samples: a legacy turn's parts do not add up to its response. A turn's own
overhead is its response less its STT, LLM and TTS parts, as ``bench turn`` measures it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agent.ledger.pricebook import CallUsage
from agent.ledger.stage_profiles import Profile, parse_profile, profile_document, stage_option

#: The profile's name and what the report calls its source.
NAME = "production"
_SINCE = re.compile(r"(\d+)([dh])")
#: The cost lines that say what a call used, by (component, unit): CallUsage's field and
#: the scale from the line's unit to the field's.
USAGE_LINES = {
    ("stt", "audio_second"): ("stt_audio_s", 1.0),
    ("llm", "1k_prompt_tokens"): ("llm_prompt_tokens", 1000.0),
    ("llm", "1k_completion_tokens"): ("llm_completion_tokens", 1000.0),
    ("tts", "audio_second"): ("tts_audio_s", 1.0),
    ("tts_fallback", "1k_characters"): ("fallback_tts_characters", 1000.0),
    ("worker", "cpu_second"): ("worker_cpu_s", 1.0),
}
#: Each stage's throughput measured from its servers' compute, and the line it rests on.
THROUGHPUT_LINES = {
    "stt": ("audio_s_per_s", ("stt", "audio_second")),
    "llm": ("completion_tokens_per_s", ("llm", "1k_completion_tokens")),
    "tts": ("audio_s_per_s", ("tts", "audio_second")),
}


def parse_since(text: str) -> timedelta:
    """``7d`` or ``12h`` as a time span; ValueError for anything else."""
    match = _SINCE.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise ValueError(
            f"expected a positive whole number of days or hours (7d, 12h), got {text!r}"
        )
    n = int(match.group(1))
    return timedelta(days=n) if match.group(2) == "d" else timedelta(hours=n)


@dataclass(frozen=True)
class TurnLatency:
    """One stored turn's latency parts (ms; None: not measured), with the models that served."""

    stt_model: str | None
    llm_model: str | None
    tts_voice: str | None
    endpointing_ms: float | None
    stt_ms: float | None
    llm_ttft_ms: float | None
    tts_ttfb_ms: float | None
    response_ms: float | None
    voice_to_voice_ms: float | None

    @property
    def overhead_ms(self) -> float | None:
        """The response less its model parts: the agent's own share of the turn."""
        parts = (self.response_ms, self.stt_ms, self.llm_ttft_ms, self.tts_ttfb_ms)
        if any(p is None for p in parts):
            return None
        response, stt, llm, tts = (float(p or 0.0) for p in parts)
        return max(0.0, response - stt - llm - tts)


@dataclass(frozen=True)
class Production:
    """What the database holds of the calls that started in ``[since, until)``.

    ``used`` sums each usage line (``USAGE_LINES``) over the calls that have it, with those
    calls' connected minutes: a call priced before usage was counted has a per-minute
    line instead, and says nothing of its use.
    """

    since: datetime
    until: datetime
    price_profile: str  # the price book profile the calls ran under (PRICE_PROFILE)
    colocated: bool  # the models ran on the worker's own cores (the embedded default)
    calls: int = 0
    minutes: float = 0.0
    transports: Mapping[str, int] = field(default_factory=dict)
    turns: Sequence[TurnLatency] = ()
    legacy_turns: int = 0
    tts_characters: int = 0
    used: Mapping[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    compute_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def transport(self) -> str | None:
        """The transport most of the calls came over."""
        if not self.transports:
            return None
        return max(sorted(self.transports), key=lambda t: self.transports[t])

    def per_minute(self, component: str, unit: str) -> float | None:
        """The usage line's quantity per connected minute, None where no call counted it."""
        quantity, minutes = self.used.get((component, unit), (0.0, 0.0))
        return quantity / minutes if minutes > 0 else None

    def counted(self, stage: str) -> bool:
        """Whether the calls' lines say what ``stage`` used, and it was some use: calls
        that sent the LLM nothing (the templates) say nothing of what an LLM would use, so
        the stage is priced per minute, as without them."""
        return any(c == stage and q > 0 and m > 0 for (c, _), (q, m) in self.used.items())

    def minute_usage(self, transport: str) -> CallUsage:
        """One connected minute of these calls' use, as :func:`price_call` prices it."""
        fields: dict[str, Any] = {}
        for key, (name, scale) in USAGE_LINES.items():
            rate = self.per_minute(*key)
            if rate is not None:
                value = rate * scale
                fields[name] = round(value) if name.endswith(("tokens", "characters")) else value
        return CallUsage(transport, 60.0, **fields)

    def characters_per_minute(self) -> float | None:
        """The characters the agent spoke per connected minute (an API TTS's price)."""
        return self.tts_characters / self.minutes if self.minutes > 0 else None

    def throughput(self, stage: str) -> float | None:
        """Work per second of compute the stage's servers reported, None where none did."""
        _, key = THROUGHPUT_LINES[stage]
        quantity, _ = self.used.get(key, (0.0, 0.0))
        compute = self.compute_s.get(stage, 0.0)
        scale = 1000.0 if key[1].startswith("1k_") else 1.0
        return quantity * scale / compute if compute > 0 and quantity > 0 else None


def production_profile(production: Production, *, now: datetime) -> Profile:
    """The turns' latency parts as a measured stage profile: one option per stage and model."""
    placement = {"price_book_profile": production.price_profile}
    where = f"production, PRICE_PROFILE {production.price_profile}"
    groups: dict[tuple[str, str], list[float]] = {}

    def add(stage: str, config: str, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            groups.setdefault((stage, config), []).append(max(0.0, value))

    for turn in production.turns:
        add("stt", f"{turn.stt_model or 'STT'} ({where})", turn.stt_ms)
        add("llm", f"{turn.llm_model or 'LLM'} ({where})", turn.llm_ttft_ms)
        add("tts", f"{turn.tts_voice or 'TTS'} ({where})", turn.tts_ttfb_ms)
        add("endpointing", f"endpointing ({where})", turn.endpointing_ms)
        add("overhead", f"agent worker ({where})", turn.overhead_ms)
    options = []
    for (stage, config), samples in groups.items():
        rate = production.throughput(stage) if stage in THROUGHPUT_LINES else None
        options.append(
            stage_option(
                stage,
                config,
                samples_ms=samples,
                placement=placement if stage in THROUGHPUT_LINES else None,
                colocated=production.colocated,
                throughput={THROUGHPUT_LINES[stage][0]: rate} if rate else None,
                note=f"{len(samples)} turns stored since {production.since:%Y-%m-%d %H:%M} UTC",
            )
        )
    document = profile_document(
        NAME,
        options,
        command="the database (DATABASE_URL)",
        measured_at=now,
        note=f"{production.calls} calls, {production.minutes:.1f} connected minutes, "
        f"{len(production.turns)} turns under the current latency definition"
        + (f" ({production.legacy_turns} older turns left out)" if production.legacy_turns else ""),
    )
    return parse_profile(document, source="the database")
