"""The versioned price book and the cost of one call.

Owners read cost per conversation minute by component (telephony, STT, LLM, TTS, fallback
TTS, the worker) against a target; this module turns what a call consumed into those lines.
Prices live in ``infra/pricebook.toml`` so a price change is a new book version, not a code
change, and every stored cost line names the version it was priced under.

A self-hosted stage is priced by what the call used of it: STT by the audio seconds it
transcribed, the LLM by its prompt tokens (those not found in the server's cache) and its
completion tokens, the TTS by the audio seconds it produced. Each unit's price is the
compute's hourly price over the work one unit does in an hour at the deployment's target
utilization: ``usd_per_hour / 3600 / (throughput per second x utilization)``. The
throughput is *measured* (a benchmark's profile, ``agent.ledger.throughput``) or *declared*
in the book, and every line carries that basis. A placement the book gives only as calls
per unit (the planner's candidates) is priced the old way, a share of the compute per
connected minute, and is declared. The line, the fallback TTS and the worker's CPU are
metered quantities at the book's rates: measured. See docs/pricing.md.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agent.ledger.throughput import DECLARED, MEASURED, Throughput, declared, measured

#: The book shipped with the repository, found relative to this package so it
#: loads from any working directory.
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "infra" / "pricebook.toml"

#: The stages a profile must place on some compute class.
SELF_HOSTED_STAGES = ("stt", "llm", "tts")
#: Each stage's throughputs (work per second of one unit), as the book names them.
THROUGHPUTS = {
    "stt": ("audio_s_per_s",),
    "llm": ("prompt_tokens_per_s", "completion_tokens_per_s"),
    "tts": ("audio_s_per_s",),
}
#: The component the worker's CPU is priced under.
WORKER = "worker"
_EMPTY: Mapping[str, Throughput] = MappingProxyType({})


@dataclass(frozen=True)
class StagePlacement:
    """Where one self-hosted stage runs, how many calls one unit serves, what one unit
    does per second (empty: priced per call minute) and how many units are provisioned."""

    compute: str
    concurrent_calls: float
    throughput: Mapping[str, Throughput] = field(default_factory=lambda: _EMPTY)
    units: float = 0.0


@dataclass(frozen=True)
class WorkerPlacement:
    """The machines the agent workers run on: their compute class, its cores, how many."""

    compute: str
    cores: float
    units: float


@dataclass(frozen=True)
class Deployment:
    """What a profile provisions and the utilization its unit costs assume."""

    target_utilization: float
    hours_per_day: float
    worker: WorkerPlacement | None


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
    #: Each profile's provisioning (a profile without one: utilization 1, nothing provisioned).
    deployments: Mapping[str, Deployment] = field(default_factory=lambda: MappingProxyType({}))

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
        deployments: dict[str, Deployment] = {}
        profiles_table = reader.table(data, "profiles")
        for profile_name in profiles_table:
            profile_table = reader.table(profiles_table, profile_name, where="profiles")
            stages, deployment = _read_profile(
                reader, f"profiles.{profile_name}", profile_table, compute
            )
            profiles[profile_name] = MappingProxyType(stages)
            deployments[profile_name] = deployment

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
            deployments=MappingProxyType(deployments),
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

    def deployment(self, name: str) -> Deployment:
        """What profile ``name`` provisions (a bare one for a profile without provisioning)."""
        self.profile(name)
        return self.deployments.get(name, Deployment(1.0, 24.0, None))

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

    def unit_price(self, profile: str, stage: str, key: str) -> tuple[float, Throughput]:
        """Dollars per unit of work (an audio second, a token) of ``stage`` in ``profile``
        at its target utilization, with the throughput it rests on."""
        placement = self.profile(profile)[stage]
        throughput = placement.throughput[key]
        utilization = self.deployment(profile).target_utilization
        hourly = self.compute_usd_per_hour[placement.compute]
        return hourly / 3600.0 / (throughput.per_s * utilization), throughput

    def per_call_minute(self, profile: str, stage: str) -> float:
        """The old constant price: a share of the stage's compute per connected minute."""
        placement = self.profile(profile)[stage]
        return self.compute_usd_per_hour[placement.compute] / 60.0 / placement.concurrent_calls

    def provisioned_usd_per_day(self, profile: str) -> float:
        """What the profile's provisioned compute costs a day, used or idle."""
        deployment = self.deployment(profile)
        units = [(p.compute, p.units) for p in self.profile(profile).values()]
        if deployment.worker is not None:
            units.append((deployment.worker.compute, deployment.worker.units))
        hourly = math.fsum(self.compute_usd_per_hour[c] * n for c, n in units)
        return hourly * deployment.hours_per_day

    def provisioned_seconds_per_day(self, profile: str, stage: str) -> float:
        """Device seconds a day the profile provisions for ``stage`` (the worker: CPU seconds)."""
        deployment = self.deployment(profile)
        if stage == WORKER:
            worker = deployment.worker
            return (
                0.0
                if worker is None
                else worker.units * worker.cores * 3600 * deployment.hours_per_day
            )
        return self.profile(profile)[stage].units * 3600 * deployment.hours_per_day


def _read_profile(
    reader: _Reader, where: str, table: Mapping[str, Any], compute: Mapping[str, float]
) -> tuple[dict[str, StagePlacement], Deployment]:
    settings = {"target_utilization", "hours_per_day", WORKER}
    unknown = sorted(set(table) - set(SELF_HOSTED_STAGES) - settings)
    if unknown:
        raise ValueError(
            f"{reader.source}: {where}.{unknown[0]}: unknown stage "
            f"(expected {', '.join(SELF_HOSTED_STAGES)})"
        )
    utilization = (
        reader.number(table, "target_utilization", where) if "target_utilization" in table else 1.0
    )
    if not 0 < utilization <= 1:
        raise ValueError(
            f"{reader.source}: {where}.target_utilization: must be in (0, 1], got {utilization!r}"
        )
    hours = reader.number(table, "hours_per_day", where) if "hours_per_day" in table else 24.0
    if hours > 24:
        raise ValueError(f"{reader.source}: {where}.hours_per_day: at most 24, got {hours!r}")
    stages = {
        stage: _read_stage(
            reader, f"{where}.{stage}", stage, reader.table(table, stage, where), compute
        )
        for stage in SELF_HOSTED_STAGES
    }
    worker = None
    if WORKER in table:
        worker_table = reader.table(table, WORKER, where)
        name = f"{where}.{WORKER}"
        worker = WorkerPlacement(
            _compute_class(reader, worker_table, name, compute),
            _positive(reader, worker_table, "cores", name),
            reader.number(worker_table, "units", name),
        )
    return stages, Deployment(utilization, hours, worker)


def _read_stage(
    reader: _Reader, where: str, stage: str, table: Mapping[str, Any], compute: Mapping[str, float]
) -> StagePlacement:
    compute_class = _compute_class(reader, table, where, compute)
    concurrent = _positive(reader, table, "concurrent_calls", where)
    keys = [key for key in THROUGHPUTS[stage] if key in table]
    if keys and len(keys) != len(THROUGHPUTS[stage]):
        missing = sorted(set(THROUGHPUTS[stage]) - set(keys))
        raise ValueError(
            f"{reader.source}: {where}.{missing[0]}: missing (a {stage} priced by use "
            f"needs {', '.join(THROUGHPUTS[stage])})"
        )
    throughput = {key: _throughput(reader, table, key, where, stage) for key in keys}
    units = reader.number(table, "units", where) if "units" in table else 0.0
    return StagePlacement(compute_class, concurrent, MappingProxyType(throughput), units)


def _throughput(
    reader: _Reader, table: Mapping[str, Any], key: str, where: str, stage: str
) -> Throughput:
    value = table[key]
    if not isinstance(value, dict):
        return declared(_positive(reader, table, key, where))
    name = f"{where}.{key}"
    profile = reader.string(value, "measured", name)
    concurrency = int(reader.number(value, "concurrency", name)) if "concurrency" in value else None
    config = reader.string(value, "config", name) if "config" in value else None
    field_name = reader.string(value, "field", name) if "field" in value else key
    try:
        return measured(profile, stage, field_name, concurrency=concurrency, config=config)
    except ValueError as exc:
        raise ValueError(f"{reader.source}: {name}: {exc}") from None


def _compute_class(
    reader: _Reader, table: Mapping[str, Any], where: str, compute: Mapping[str, float]
) -> str:
    compute_class = reader.string(table, "compute", where=where)
    if compute_class not in compute:
        raise ValueError(
            f"{reader.source}: {where}.compute: unknown compute class "
            f"{compute_class!r} (known: {', '.join(sorted(compute))})"
        )
    return compute_class


def _positive(reader: _Reader, table: Mapping[str, Any], key: str, where: str) -> float:
    value = reader.number(table, key, where=where)
    if value <= 0:
        raise ValueError(f"{reader.source}: {where}.{key}: must be positive")
    return value


@dataclass(frozen=True)
class CallUsage:
    """What a call consumed, as the ledger counted it.

    The ``*_compute_s`` are the model servers' own time for the call's requests, as they
    reported it (0.0 where a server reports none: a third-party one); ``llm_cached_tokens``
    are the prompt tokens the server found in its prefix cache (part of
    ``llm_prompt_tokens``); ``worker_cpu_s`` the call's share of the worker's CPU
    (``agent.ledger.cpu``).
    """

    transport: str
    duration_s: float
    stt_audio_s: float = 0.0
    stt_compute_s: float = 0.0
    llm_prompt_tokens: int = 0
    llm_cached_tokens: int = 0
    llm_completion_tokens: int = 0
    llm_compute_s: float = 0.0
    tts_characters: int = 0
    tts_audio_s: float = 0.0
    tts_compute_s: float = 0.0
    fallback_tts_characters: int = 0
    worker_cpu_s: float = 0.0


@dataclass(frozen=True)
class CostLineItem:
    """One priced quantity of a call: what, how much, at what price, on what basis.

    ``compute_s``: the device seconds the servers reported for this line's work (the
    LLM's on its completion line), what the dashboard's utilization adds up; None where no
    server reports (third-party servers, the line, the fallback API)."""

    component: str
    quantity: float
    unit: str
    unit_price_usd: float
    amount_usd: float
    basis: str
    compute_s: float | None = None


@dataclass(frozen=True)
class CallCost:
    """A priced call: its lines, the total and how it compares with the target."""

    lines: list[CostLineItem]
    total_usd: float
    per_minute_usd: float | None
    price_book_version: str
    target_usd_per_minute: float
    within_target: bool

    @property
    def declared_usd(self) -> float:
        """The part of the total that rests on declared figures."""
        return math.fsum(line.amount_usd for line in self.lines if line.basis == DECLARED)


def price_call(book: PriceBook, profile: str, usage: CallUsage) -> CallCost:
    """Price a call's usage under a deployment profile.

    Every component gets its lines, zero or not, so the dashboard shows them all; the
    worker's only where the profile provisions one.
    """
    _check(usage)
    placements = book.profile(profile)
    minutes = usage.duration_s / 60.0

    lines = [_line("telephony", minutes, "minute", book.telephony_rate(usage.transport), MEASURED)]
    for stage in SELF_HOSTED_STAGES:
        if placements[stage].throughput:
            lines.extend(_used(book, profile, stage, usage))
        else:
            lines.append(
                _line(stage, minutes, "call_minute", book.per_call_minute(profile, stage), DECLARED)
            )
    lines.append(
        _line(
            "tts_fallback",
            usage.fallback_tts_characters / 1000.0,
            "1k_characters",
            book.fallback_tts_usd_per_1k_characters,
            MEASURED,
        )
    )
    deployment = book.deployment(profile)
    if deployment.worker is not None:
        worker = deployment.worker
        cpu_second = book.compute_usd_per_hour[worker.compute] / 3600.0 / worker.cores
        lines.append(
            _line(
                WORKER,
                usage.worker_cpu_s,
                "cpu_second",
                cpu_second / deployment.target_utilization,
                MEASURED,
                usage.worker_cpu_s,
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


def _used(book: PriceBook, profile: str, stage: str, usage: CallUsage) -> list[CostLineItem]:
    """A stage's lines priced by what the call used of it."""

    def line(quantity: float, unit: str, key: str, compute_s: float | None) -> CostLineItem:
        price, throughput = book.unit_price(profile, stage, key)
        scale = 1000.0 if unit.startswith("1k_") else 1.0
        return _line(stage, quantity, unit, price * scale, throughput.basis, compute_s)

    if stage == "stt":
        return [line(usage.stt_audio_s, "audio_second", "audio_s_per_s", usage.stt_compute_s)]
    if stage == "tts":
        return [line(usage.tts_audio_s, "audio_second", "audio_s_per_s", usage.tts_compute_s)]
    uncached = usage.llm_prompt_tokens - usage.llm_cached_tokens
    return [
        line(uncached / 1000.0, "1k_prompt_tokens", "prompt_tokens_per_s", None),
        line(
            usage.llm_completion_tokens / 1000.0,
            "1k_completion_tokens",
            "completion_tokens_per_s",
            usage.llm_compute_s,
        ),
    ]


def _check(usage: CallUsage) -> None:
    if not math.isfinite(usage.duration_s) or usage.duration_s < 0:
        raise ValueError(f"duration_s must be a non-negative number, got {usage.duration_s!r}")
    for name in CallUsage.__dataclass_fields__:
        value = getattr(usage, name)
        if isinstance(value, int | float) and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    if usage.llm_cached_tokens > usage.llm_prompt_tokens:
        raise ValueError(
            f"llm_cached_tokens ({usage.llm_cached_tokens}) exceed llm_prompt_tokens "
            f"({usage.llm_prompt_tokens})"
        )


def _line(
    component: str,
    quantity: float,
    unit: str,
    unit_price: float,
    basis: str,
    compute_s: float | None = None,
) -> CostLineItem:
    return CostLineItem(
        component, quantity, unit, unit_price, quantity * unit_price, basis, compute_s
    )


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
