"""Throughput figures for the price book: measured ones read from the benchmarks' profiles.

A self-hosted stage's unit cost is its compute's hourly price over the work one unit does
in an hour. That work is either *measured* (a benchmark wrote it into a stage profile,
``agent/ledger/profiles/<name>.json``: ``bench stt``'s audio seconds per second,
``gpu_check``'s tokens per second, ``bench cost``'s figures for the CPU default) or
*declared* (a number written in the book, which the book's comment must justify). The
book names a measured figure by profile, stage and concurrency, so a rerun of the
benchmark reprices the next book version without anyone copying numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The two bases of a figure: measured in this repository, or stated in the price book.
MEASURED, DECLARED = "measured", "declared"
BASES = (MEASURED, DECLARED)
#: Where the benchmarks write their stage profiles (agent/ledger/plan.py reads them too).
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Throughput:
    """Work one unit of compute does per second (audio seconds, tokens), and its basis."""

    per_s: float
    basis: str
    #: Where the figure comes from: the profile and option, or "declared in the price book".
    source: str


def declared(value: float) -> Throughput:
    return Throughput(value, DECLARED, "declared in the price book")


def measured(
    profile: str,
    stage: str,
    key: str,
    *,
    concurrency: int | None = None,
    config: str | None = None,
    directory: Path = PROFILES_DIR,
) -> Throughput:
    """The ``throughput[key]`` of the option of ``stage`` at ``concurrency`` (and ``config``)
    in profile ``profile``; ``ValueError`` naming what is missing."""
    path = directory / f"{profile}.json"
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"throughput profile {path}: cannot be read ({exc})") from None
    if document.get("source") != MEASURED:
        raise ValueError(
            f"throughput profile {path}: not measured (source {document.get('source')!r})"
        )
    matches = [
        option
        for option in document.get("options", [])
        if _matches(option, stage, concurrency, config) and key in (option.get("throughput") or {})
    ]
    where = (
        f"{stage}, {key}"
        + (f", concurrency {concurrency}" if concurrency else "")
        + (f", config {config!r}" if config else "")
    )
    if len(matches) != 1:
        found = "no option" if not matches else f"{len(matches)} options"
        raise ValueError(f"throughput profile {path}: {found} for {where}")
    value = matches[0]["throughput"][key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(
            f"throughput profile {path}: {where}: expected a positive number, got {value!r}"
        )
    config_name = matches[0].get("config", "")
    return Throughput(
        float(value),
        MEASURED,
        f"agent/ledger/profiles/{profile}.json: {config_name}"
        + (f", {concurrency} at once" if concurrency else "")
        + f" ({document.get('measured_at') or 'undated'})",
    )


def _matches(
    option: Mapping[str, Any], stage: str, concurrency: int | None, config: str | None
) -> bool:
    return (
        option.get("stage") == stage
        and (concurrency is None or option.get("concurrency") == concurrency)
        and (config is None or option.get("config") == config)
    )
