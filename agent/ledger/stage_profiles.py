"""The stage profiles: what the benchmarks measured of each stage, in the planner's format.

The benchmarks write them (``write_profile``; ``bench turn``, ``bench stt``, the GPU
check), the planner (``agent.ledger.plan``) and the console's dashboard read them
(``load_profiles``); every field is checked on reading, and a bad one is a
``ProfileError`` that names the file and the field.

**The profile format** (``agent-profile/1``), one JSON file per benchmark run::

    {"format": "agent-profile/1", "name": "turn-cpu", "source": "measured",
     "measured_at": "...", "machine": "...", "command": "python -m agent bench turn",
     "report": "docs/benchmarks/turn-cpu.md", "note": "(optional)",
     "options": [{"stage": "stt", "config": "Whisper tiny.en (embedded, CPU)",
                  "latency_ms": {"p50": 388.0, "p95": 536.0}, "samples_ms": [...],
                  "samples": 20, "concurrency": 1, "colocated": true,
                  "placement": {"price_book_profile": "embedded-cpu"}, "note": "..."}]}

``stage`` is one of :data:`STAGES`. ``latency_ms`` holds the measured
percentiles (``p50`` is required; ``p95``, ``p99``... as measured);
``samples_ms``, where kept, supply any other percentile. ``concurrency`` (or
``batch``) is the load the figures were measured at. ``placement`` says what
the option costs, for the model stages only (the agent's own stages,
endpointing and overhead, run in the agent worker, which the price book does
not price): ``{"compute": CLASS, "concurrent_calls": N}`` (one unit of a price
book compute class carries N calls at that latency), ``{"price_book_profile":
NAME}`` (the book's placement of that stage, optionally ``"cost_multiple": 2``
for a configuration the source says costs twice as much per call), or
``{"api": "fallback_tts", "characters_per_minute": N}`` (the book's per
character TTS API). ``source`` is ``measured`` or ``declared`` (a figure taken
from a talk, a design aim or the price book's placeholders, never measured
here); the planner marks every configuration that rests on a declared figure.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agent.ledger.pricebook import SELF_HOSTED_STAGES
from agent.ledger.quantiles import percentile as nearest_rank

logger = logging.getLogger(__name__)

FORMAT = "agent-profile/1"
#: Every stage a profile may describe.
STAGES = ("endpointing", "stt", "llm", "tts", "overhead")
#: The stages a serving configuration chooses (and the price book prices).
MODEL_STAGES = SELF_HOSTED_STAGES
#: The agent worker's own stages: measured by ``bench turn``, not priced.
AGENT_STAGES = ("endpointing", "overhead")
#: The serial chain the target applies to: the VAD's stop to first audio frame sent.
RESPONSE_STAGES = ("stt", "llm", "tts", "overhead")
SOURCES = ("measured", "declared")
#: The only per-character API the price book prices.
API_TTS = "fallback_tts"
_REPO = Path(__file__).resolve().parents[2]
#: The stage profiles: package data (pyproject.toml), so the installed agent and its image
#: (the console's dashboard) read them too.
DEFAULT_PROFILES = Path(__file__).resolve().parent / "profiles"
#: The benchmarks' reports; a report here has its profile in DEFAULT_PROFILES.
REPORTS = _REPO / "docs" / "benchmarks"


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the field."""


# -- the format --------------------------------------------------------------------------------


def profile_path_for(report: str | Path) -> Path:
    """Where a benchmark's profile goes: ``agent/ledger/profiles/<stem>.json`` for a report in
    docs/benchmarks/, else ``profiles/<stem>.json`` beside its markdown."""
    report = Path(report)
    shipped = report.resolve().parent == REPORTS
    return (DEFAULT_PROFILES if shipped else report.parent / "profiles") / f"{report.stem}.json"


def percentile_key(q: float) -> str:
    """``0.95`` -> ``"p95"``, ``0.999`` -> ``"p99.9"``."""
    return f"p{round(q * 100, 6):g}"


def stage_option(
    stage: str,
    config: str,
    *,
    samples_ms: Sequence[float] | None = None,
    latency_ms: Mapping[str, float] | None = None,
    placement: Mapping[str, Any] | None = None,
    concurrency: int | None = None,
    batch: int | None = None,
    colocated: bool = False,
    throughput: Mapping[str, float] | None = None,
    note: str = "",
    source: str | None = None,
) -> dict[str, Any]:
    """One stage option as a profile holds it.

    From ``samples_ms`` the p50, p95 and p99 are computed (nearest rank, as every
    benchmark table reports them) and the samples kept; ``latency_ms`` gives
    figures directly (a declared figure, or a median with no samples behind it).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (expected {', '.join(STAGES)})")
    figures: dict[str, float] = {}
    option: dict[str, Any] = {"stage": stage, "config": config}
    if samples_ms:
        for q in (0.5, 0.95, 0.99):
            figures[percentile_key(q)] = round(float(nearest_rank(samples_ms, q)), 3)
        option["samples"] = len(samples_ms)
    figures.update({k: round(float(v), 3) for k, v in (latency_ms or {}).items()})
    if "p50" not in figures:
        raise ValueError(f"{stage} {config!r}: samples or a p50 are needed")
    option["latency_ms"] = figures
    if samples_ms:
        option["samples_ms"] = [round(float(v), 3) for v in samples_ms]
    if concurrency is not None:
        option["concurrency"] = concurrency
    if batch is not None:
        option["batch"] = batch
    option["colocated"] = colocated
    if placement is not None:
        option["placement"] = dict(placement)
    if throughput:
        option["throughput"] = dict(throughput)
    if note:
        option["note"] = note
    if source is not None:
        option["source"] = source
    return option


def profile_document(
    name: str,
    options: Iterable[Mapping[str, Any]],
    *,
    source: str = "measured",
    command: str = "",
    machine: str = "",
    report: str = "",
    measured_at: datetime | None = None,
    note: str = "",
) -> dict[str, Any]:
    """A whole profile: where and how it was measured, and its options."""
    document: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "source": source,
        "measured_at": (measured_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "command": command,
        "report": report,
    }
    if note:
        document["note"] = note
    document["options"] = [dict(o) for o in options]
    return document


def write_profile(document: Mapping[str, Any], path: str | Path) -> Path:
    """Write a profile (validated first, so a benchmark never writes one the planner rejects)."""
    path = Path(path)
    parse_profile(document, source=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")
    logger.debug("wrote %s", path)
    return path


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """What one option costs: a compute class share, the book's placement, or an API."""

    compute: str | None = None
    concurrent_calls: float | None = None
    price_book_profile: str | None = None
    cost_multiple: float = 1.0
    api: str | None = None
    characters_per_minute: float | None = None

    def describe(self) -> str:
        if self.api is not None:
            return f"API, {self.characters_per_minute:g} characters/min"
        if self.price_book_profile is not None:
            extra = f", x{self.cost_multiple:g} cost" if self.cost_multiple != 1 else ""
            return f"price book profile {self.price_book_profile}{extra}"
        return f"{self.compute}, {self.concurrent_calls:g} calls/unit"


@dataclass(frozen=True)
class StageOption:
    """One way to serve one stage, with its measured (or declared) latency."""

    stage: str
    config: str
    source: str
    profile: str
    latency_ms: Mapping[str, float]
    samples_ms: tuple[float, ...] = ()
    samples: int | None = None
    concurrency: int | None = None
    batch: int | None = None
    colocated: bool = False
    placement: Placement | None = None
    throughput: Mapping[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def declared(self) -> bool:
        return self.source == "declared"

    @property
    def p50(self) -> float:
        return self.latency_ms["p50"]

    def at(self, q: float) -> float | None:
        """The latency at quantile ``q``: the figure written, else from the samples, else None."""
        key = percentile_key(q)
        if key in self.latency_ms:
            return self.latency_ms[key]
        if self.samples_ms:
            return float(nearest_rank(self.samples_ms, q))
        return None

    @property
    def label(self) -> str:
        load = ""
        if self.concurrency is not None and self.concurrency != 1:
            load = f" @ {self.concurrency} concurrent"
        elif self.batch is not None and self.batch != 1:
            load = f" @ batch {self.batch}"
        return f"{self.config}{load}"


@dataclass(frozen=True)
class Profile:
    """One profile file, parsed."""

    path: str
    name: str
    source: str
    measured_at: str
    machine: str
    command: str
    report: str
    options: tuple[StageOption, ...]
    note: str = ""


class _Fields:
    """Typed access to a profile's JSON; every error names the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> ProfileError:
        return ProfileError(f"{self.source}: {where}: {message}")

    def get(self, table: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in table:
            raise self.fail(f"{where}{key}", "missing")
        return table[key]

    def string(self, table: Mapping[str, Any], key: str, where: str = "") -> str:
        value = self.get(table, key, where)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where}{key}", f"expected a non-empty string, got {value!r}")
        return value

    def opt_string(self, table: Mapping[str, Any], key: str, where: str) -> str | None:
        return self.string(table, key, where) if key in table else None

    def number(
        self, table: Mapping[str, Any], key: str, where: str = "", *, positive: bool = False
    ) -> float:
        value = self.get(table, key, where)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"{where}{key}", f"expected a number, got {value!r}")
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            kind = "positive" if positive else "non-negative"
            raise self.fail(f"{where}{key}", f"expected a {kind} number, got {value!r}")
        return float(value)

    def opt_number(
        self, table: Mapping[str, Any], key: str, where: str, *, positive: bool = False
    ) -> float | None:
        return self.number(table, key, where, positive=positive) if key in table else None

    def integer(self, table: Mapping[str, Any], key: str, where: str) -> int | None:
        if key not in table:
            return None
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"{where}{key}", f"expected a positive integer, got {value!r}")
        return value

    def table(self, table: Mapping[str, Any], key: str, where: str = "") -> dict[str, Any]:
        value = self.get(table, key, where)
        if not isinstance(value, dict):
            raise self.fail(f"{where}{key}", f"expected an object, got {value!r}")
        return value

    def opt_table(self, table: Mapping[str, Any], key: str, where: str) -> dict[str, Any] | None:
        return self.table(table, key, where) if key in table else None


def parse_profile(data: Any, *, source: str = "<profile>") -> Profile:
    """Validate a profile's parsed JSON."""
    f = _Fields(source)
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object, got {type(data).__name__}")
    fmt = f.string(data, "format")
    if fmt != FORMAT:
        raise f.fail("format", f"expected {FORMAT!r}, got {fmt!r}")
    name = f.string(data, "name")
    file_source = f.string(data, "source")
    if file_source not in SOURCES:
        raise f.fail("source", f"expected one of {', '.join(SOURCES)}, got {file_source!r}")
    options_data = f.get(data, "options", "")
    if not isinstance(options_data, list):
        raise f.fail("options", f"expected a list, got {options_data!r}")
    options = []
    for i, raw in enumerate(options_data):
        where = f"options[{i}]."
        if not isinstance(raw, dict):
            raise f.fail(f"options[{i}]", f"expected an object, got {raw!r}")
        options.append(_parse_option(f, raw, where, name, file_source))
    return Profile(
        path=source,
        name=name,
        source=file_source,
        measured_at=str(data.get("measured_at", "")),
        machine=str(data.get("machine", "")),
        command=str(data.get("command", "")),
        report=str(data.get("report", "")),
        options=tuple(options),
        note=str(data.get("note", "")),
    )


def _parse_option(
    f: _Fields, raw: Mapping[str, Any], where: str, profile: str, file_source: str
) -> StageOption:
    stage = f.string(raw, "stage", where)
    if stage not in STAGES:
        raise f.fail(f"{where}stage", f"unknown stage {stage!r} (expected {', '.join(STAGES)})")
    config = f.string(raw, "config", where)
    source = f.opt_string(raw, "source", where) or file_source
    if source not in SOURCES:
        raise f.fail(f"{where}source", f"expected one of {', '.join(SOURCES)}, got {source!r}")
    latency_table = f.table(raw, "latency_ms", where)
    latency: dict[str, float] = {}
    for key in latency_table:
        try:
            q = float(key[1:]) / 100 if key.startswith("p") else math.nan
        except ValueError:
            q = math.nan
        if not 0 < q < 1:
            raise f.fail(f"{where}latency_ms.{key}", "expected a percentile key like p50 or p95")
        latency[key] = f.number(latency_table, key, f"{where}latency_ms.")
    if "p50" not in latency:
        raise f.fail(f"{where}latency_ms.p50", "missing")
    samples_raw = raw.get("samples_ms")
    samples: tuple[float, ...] = ()
    if samples_raw is not None:
        if not isinstance(samples_raw, list) or not samples_raw:
            raise f.fail(f"{where}samples_ms", "expected a non-empty list of numbers")
        samples = tuple(
            f.number({f"[{j}]": v}, f"[{j}]", f"{where}samples_ms")
            for j, v in enumerate(samples_raw)
        )
    colocated = raw.get("colocated", False)
    if not isinstance(colocated, bool):
        raise f.fail(f"{where}colocated", f"expected true or false, got {colocated!r}")
    placement_raw = f.opt_table(raw, "placement", where)
    if stage in MODEL_STAGES and placement_raw is None:
        raise f.fail(f"{where}placement", f"missing (a {stage} option must say what it costs)")
    if stage in AGENT_STAGES and placement_raw is not None:
        raise f.fail(f"{where}placement", f"{stage} runs in the agent worker: it has no placement")
    placement = (
        _parse_placement(f, placement_raw, f"{where}placement.", stage)
        if placement_raw is not None
        else None
    )
    throughput_raw = f.opt_table(raw, "throughput", where) or {}
    throughput = {
        key: f.number(throughput_raw, key, f"{where}throughput.") for key in throughput_raw
    }
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise f.fail(f"{where}note", f"expected a string, got {note!r}")
    return StageOption(
        stage=stage,
        config=config,
        source=source,
        profile=profile,
        latency_ms=MappingProxyType(latency),
        samples_ms=samples,
        samples=f.integer(raw, "samples", where) or (len(samples) or None),
        concurrency=f.integer(raw, "concurrency", where),
        batch=f.integer(raw, "batch", where),
        colocated=colocated,
        placement=placement,
        throughput=MappingProxyType(throughput),
        note=note,
    )


_PLACEMENT_FIELDS = {
    "compute": ("compute", "concurrent_calls"),
    "price_book_profile": ("price_book_profile", "cost_multiple"),
    "api": ("api", "characters_per_minute"),
}


def _parse_placement(f: _Fields, raw: Mapping[str, Any], where: str, stage: str) -> Placement:
    kinds = [k for k in _PLACEMENT_FIELDS if k in raw]
    if len(kinds) != 1:
        raise f.fail(
            where.rstrip("."), "expected exactly one of compute, price_book_profile or api"
        )
    for key in raw:
        if key not in _PLACEMENT_FIELDS[kinds[0]]:
            raise f.fail(f"{where}{key}", f"not a field of a {kinds[0]} placement")
    if kinds == ["compute"]:
        return Placement(
            compute=f.string(raw, "compute", where),
            concurrent_calls=f.number(raw, "concurrent_calls", where, positive=True),
        )
    if kinds == ["price_book_profile"]:
        multiple = f.opt_number(raw, "cost_multiple", where, positive=True)
        return Placement(
            price_book_profile=f.string(raw, "price_book_profile", where),
            cost_multiple=multiple if multiple is not None else 1.0,
        )
    api = f.string(raw, "api", where)
    if api != API_TTS or stage != "tts":
        raise f.fail(
            f"{where}api", f"the price book prices one API, {API_TTS!r}, for tts; got {api!r}"
        )
    return Placement(
        api=api,
        characters_per_minute=f.number(raw, "characters_per_minute", where),
    )


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON: {exc}") from exc
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_profile(data, source=str(path))


def load_profiles(directory: str | Path) -> list[Profile]:
    """Every ``*.json`` profile in ``directory``, by name; an error if there are none."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ProfileError(
            f"{directory}: no such directory: run the benchmarks first "
            "(python -m agent bench turn, python -m agent bench stt)"
        )
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ProfileError(
            f"{directory}: no profiles (*.json): run the benchmarks first "
            "(python -m agent bench turn, python -m agent bench stt)"
        )
    return [load_profile(p) for p in files]
