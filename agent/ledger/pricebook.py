"""The versioned price book and the cost of one call.

Owners read cost per conversation minute by component (telephony, STT, LLM,
TTS, fallback TTS) against a target; this module turns a call's usage into
those lines. Prices live in ``infra/pricebook.toml`` so a price change is a new
book version, not a code change, and every stored cost line names the version
it was priced under.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

#: The book shipped with the repository, found relative to this package so it
#: loads from any working directory.
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "infra" / "pricebook.toml"

#: The stages a profile must place on some compute class.
SELF_HOSTED_STAGES = ("stt", "llm", "tts")


@dataclass(frozen=True)
class StagePlacement:
    """Where one self-hosted stage runs, and how many calls one unit serves."""

    compute: str
    concurrent_calls: float


@dataclass(frozen=True)
class PriceBook:
    """One version of the prices, validated on load."""

    version: str
    currency: str
    target_usd_per_minute: float
    compute_usd_per_hour: Mapping[str, float]
    profiles: Mapping[str, Mapping[str, StagePlacement]]
    fallback_tts_usd_per_1k_characters: float
    telephony_usd_per_minute: Mapping[str, float]

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceBook:
        """Read and validate a book; ``path=None`` is the repository's book."""
        source = Path(path) if path is not None else DEFAULT_PATH
        try:
            with source.open("rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{source}: not valid TOML: {exc}") from exc
        return cls.from_dict(data, source=str(source))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<price book>") -> PriceBook:
        """Validate parsed TOML; errors name the offending key."""
        reader = _Reader(source)
        version = reader.string(data, "version")
        currency = reader.string(data, "currency")
        if currency != "USD":
            raise ValueError(f"{source}: currency: prices are kept in USD, got {currency!r}")
        target = reader.number(data, "target_usd_per_minute")

        compute_table = reader.table(data, "compute")
        compute = {
            name: reader.number(compute_table, name, where="compute") for name in compute_table
        }
        if not compute:
            raise ValueError(f"{source}: compute: at least one compute class is needed")

        profiles: dict[str, Mapping[str, StagePlacement]] = {}
        profiles_table = reader.table(data, "profiles")
        for profile_name in profiles_table:
            where = f"profiles.{profile_name}"
            profile_table = reader.table(profiles_table, profile_name, where="profiles")
            unknown = sorted(set(profile_table) - set(SELF_HOSTED_STAGES))
            if unknown:
                raise ValueError(
                    f"{source}: {where}.{unknown[0]}: unknown stage "
                    f"(expected {', '.join(SELF_HOSTED_STAGES)})"
                )
            stages: dict[str, StagePlacement] = {}
            for stage in SELF_HOSTED_STAGES:
                stage_table = reader.table(profile_table, stage, where=where)
                compute_class = reader.string(stage_table, "compute", where=f"{where}.{stage}")
                if compute_class not in compute:
                    raise ValueError(
                        f"{source}: {where}.{stage}.compute: unknown compute class "
                        f"{compute_class!r} (known: {', '.join(sorted(compute))})"
                    )
                concurrent = reader.number(
                    stage_table, "concurrent_calls", where=f"{where}.{stage}"
                )
                if concurrent <= 0:
                    raise ValueError(
                        f"{source}: {where}.{stage}.concurrent_calls: must be positive"
                    )
                stages[stage] = StagePlacement(compute_class, concurrent)
            profiles[profile_name] = MappingProxyType(stages)

        fallback = reader.table(data, "fallback_tts")
        fallback_price = reader.number(fallback, "usd_per_1k_characters", where="fallback_tts")

        telephony = reader.table(data, "telephony")
        rates = reader.table(telephony, "usd_per_minute", where="telephony")
        telephony_rates = {
            transport: reader.number(rates, transport, where="telephony.usd_per_minute")
            for transport in rates
        }

        return cls(
            version=version,
            currency=currency,
            target_usd_per_minute=target,
            compute_usd_per_hour=MappingProxyType(compute),
            profiles=MappingProxyType(profiles),
            fallback_tts_usd_per_1k_characters=fallback_price,
            telephony_usd_per_minute=MappingProxyType(telephony_rates),
        )

    def profile(self, name: str) -> Mapping[str, StagePlacement]:
        """The stage placements of a deployment profile."""
        try:
            return self.profiles[name]
        except KeyError:
            raise ValueError(
                f"price book {self.version}: unknown profile {name!r} "
                f"(known: {', '.join(sorted(self.profiles))})"
            ) from None

    def telephony_rate(self, transport: str) -> float:
        """Dollars per connected minute on a transport."""
        try:
            return self.telephony_usd_per_minute[transport]
        except KeyError:
            known = ", ".join(sorted(self.telephony_usd_per_minute))
            raise ValueError(
                f"price book {self.version}: telephony.usd_per_minute has no rate for "
                f"transport {transport!r} (known: {known})"
            ) from None


@dataclass(frozen=True)
class CallUsage:
    """What a call consumed, as the ledger counted it."""

    transport: str
    duration_s: float
    stt_audio_s: float = 0.0
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    tts_characters: int = 0
    fallback_tts_characters: int = 0


@dataclass(frozen=True)
class CostLineItem:
    """One component's share of a call's cost."""

    component: str
    quantity: float
    unit: str
    unit_price_usd: float
    amount_usd: float


@dataclass(frozen=True)
class CallCost:
    """A priced call: its lines, the total and how it compares with the target."""

    lines: list[CostLineItem]
    total_usd: float
    per_minute_usd: float | None
    price_book_version: str
    target_usd_per_minute: float
    within_target: bool


def price_call(book: PriceBook, profile: str, usage: CallUsage) -> CallCost:
    """Price a call under a deployment profile.

    Self-hosted stages cost a share of their compute for each connected minute
    (``call_minute``), whatever the call said: the GPU is paid for by the hour.
    The fallback TTS API is paid by the character, the line by the minute.
    Every component gets a line, zero or not, so the dashboard shows them all.
    """
    if not math.isfinite(usage.duration_s) or usage.duration_s < 0:
        raise ValueError(f"duration_s must be a non-negative number, got {usage.duration_s!r}")
    if usage.fallback_tts_characters < 0:
        raise ValueError("fallback_tts_characters must not be negative")
    placements = book.profile(profile)
    minutes = usage.duration_s / 60.0

    lines = [_line("telephony", minutes, "minute", book.telephony_rate(usage.transport))]
    for stage in SELF_HOSTED_STAGES:
        placement = placements[stage]
        per_call_minute = (
            book.compute_usd_per_hour[placement.compute] / 60.0 / placement.concurrent_calls
        )
        lines.append(_line(stage, minutes, "call_minute", per_call_minute))
    lines.append(
        _line(
            "tts_fallback",
            usage.fallback_tts_characters / 1000.0,
            "1k_characters",
            book.fallback_tts_usd_per_1k_characters,
        )
    )

    total = math.fsum(line.amount_usd for line in lines)
    per_minute = total / minutes if minutes > 0 else None
    within = per_minute <= book.target_usd_per_minute if per_minute is not None else total == 0
    return CallCost(
        lines=lines,
        total_usd=total,
        per_minute_usd=per_minute,
        price_book_version=book.version,
        target_usd_per_minute=book.target_usd_per_minute,
        within_target=within,
    )


def _line(component: str, quantity: float, unit: str, unit_price: float) -> CostLineItem:
    return CostLineItem(component, quantity, unit, unit_price, quantity * unit_price)


class _Reader:
    """Typed access to parsed TOML with errors that name the key and the file."""

    def __init__(self, source: str) -> None:
        self.source = source

    def _get(self, table: Mapping[str, Any], key: str, where: str | None) -> tuple[Any, str]:
        name = f"{where}.{key}" if where else key
        if key not in table:
            raise ValueError(f"{self.source}: {name}: missing")
        return table[key], name

    def string(self, table: Mapping[str, Any], key: str, where: str | None = None) -> str:
        value, name = self._get(table, key, where)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{self.source}: {name}: expected a non-empty string, got {value!r}")
        return value

    def number(self, table: Mapping[str, Any], key: str, where: str | None = None) -> float:
        value, name = self._get(table, key, where)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{self.source}: {name}: expected a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"{self.source}: {name}: expected a non-negative number, got {value!r}"
            )
        return float(value)

    def table(self, table: Mapping[str, Any], key: str, where: str | None = None) -> dict[str, Any]:
        value, name = self._get(table, key, where)
        if not isinstance(value, dict):
            raise ValueError(f"{self.source}: {name}: expected a table, got {value!r}")
        return value
