"""The GPU check's report as the planner's stage profile.

``infra/gpu_check.py`` runs on a lent GPU machine and knows nothing of the agent (infra imports
nothing from it); this reads the JSON report it wrote and turns its figures into stage options
in the planner's format (agent/ledger/plan.py), which ``python -m agent plan`` reads:

    python -m tools.gpu_profile gpu_check.json [--out agent/ledger/profiles/gpu.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

from agent.ledger.stage_profiles import (
    DEFAULT_PROFILES,
    ProfileError,
    profile_document,
    stage_option,
)
from agent.ledger.stage_profiles import write_profile as write_profile_document
from infra.gpu_check import ORPHEUS_TOKENS_PER_FRAME

logger = logging.getLogger(__name__)

DEFAULT_OUT = DEFAULT_PROFILES / "gpu.json"


def compute_class(device: str) -> str:
    """The price book's compute class for a device name ("NVIDIA H100 80GB HBM3" -> h100)."""
    name = device.lower()
    for known in ("h100", "h200"):
        if known in name:
            return known
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown"


def _ms(entry: Any, key: str = "ms") -> float | None:
    if isinstance(entry, dict) and isinstance(entry.get(key), int | float):
        return float(entry[key])
    return None


def _batches(section: dict[str, Any], prefix: str, key: str = "ms") -> dict[int, tuple[float, Any]]:
    """``{batch: (figure, entry)}`` for the section's ``<prefix><batch>`` entries that ran."""
    found = {}
    for name, entry in section.items():
        if name.startswith(prefix) and (ms := _ms(entry, key)) is not None:
            found[int(name.removeprefix(prefix))] = (ms, entry)
    return found


def _stt_options(whisper: dict[str, Any], engine: str, compute: str) -> list[dict[str, Any]]:
    """One Whisper option per batch: a window encoded and a short cached decode."""
    return [
        stage_option(
            "stt",
            f"Whisper large-v3-turbo ({engine}), {compute}",
            latency_ms={"p50": ms},
            batch=batch,
            placement={"compute": compute, "concurrent_calls": batch},
            throughput={"audio_s_per_s": float(entry.get("audio_s_per_s", 0.0))},
            note=f"median model time: a {whisper.get('window_s', 30):g} s window "
            f"encoded + {whisper.get('decode_tokens', '?')} cached decode steps, "
            f"{batch} finals at once",
        )
        for batch, (ms, entry) in _batches(whisper, "batch_").items()
    ]


def _llm_options(gemma: dict[str, Any], engine: str, compute: str) -> list[dict[str, Any]]:
    """Gemma alone on the GPU (its cached-prefix prefill), and behind each decode batch."""
    prefill = _ms(gemma.get("prefill_after_cached_prefix"))
    if prefill is None:
        return []
    config = f"Gemma 3 27B ({engine}), {compute}, cached system prefix"
    cached = (
        f"{gemma.get('new_tokens_cached', '?')} new tokens after a cached "
        f"{gemma.get('prefix_tokens', '?')}-token prefix"
    )
    options = [
        stage_option(
            "llm",
            config,
            latency_ms={"p50": prefill},
            batch=1,
            placement={"compute": compute, "concurrent_calls": 1},
            note=f"median model time to the first token on an idle GPU: prefill of {cached}",
        )
    ]
    for batch, (step, entry) in _batches(gemma, "decode_batch_", "ms_per_step").items():
        if batch == 1:
            continue
        options.append(
            stage_option(
                "llm",
                config,
                latency_ms={"p50": prefill + step},
                batch=batch,
                placement={"compute": compute, "concurrent_calls": batch},
                throughput={"tokens_per_s": float(entry.get("tokens_per_s", 0.0))},
                note=f"estimate: a request arriving while {batch} sequences decode waits "
                f"for the step in flight ({step:g} ms median) then its prefill of {cached}",
            )
        )
    return options


def _tts_options(
    orpheus: dict[str, Any], snac: dict[str, Any], engine: str, compute: str
) -> list[dict[str, Any]]:
    """Orpheus' decode of one SNAC window plus SNAC's decode of it, per real-time batch."""
    budget, frames = orpheus.get("step_budget_ms"), snac.get("frames_per_call")
    if budget is None or frames is None:
        return []
    snac_ms = {batch: ms for batch, (ms, _) in _batches(snac, "compiled_batch_").items()}
    tokens = int(frames) * ORPHEUS_TOKENS_PER_FRAME
    options = []
    for batch, (step, _) in _batches(orpheus, "batch_", "ms_per_step").items():
        decoder = min((b for b in snac_ms if b >= batch), default=None)
        if step > budget or decoder is None:
            continue  # not real time, or no SNAC decode measured at this batch
        options.append(
            stage_option(
                "tts",
                f"Orpheus 3B + SNAC ({engine}, SNAC compiled), {compute}",
                latency_ms={"p50": tokens * step + snac_ms[decoder]},
                batch=batch,
                placement={"compute": compute, "concurrent_calls": batch},
                note=f"estimate: {tokens} tokens ({frames} SNAC frames) at {step:g} ms a step "
                f"for {batch} streams, + SNAC's decode of them at batch {decoder}; the prompt's "
                "prefill is not timed",
            )
        )
    return options


def planner_profile(report: dict[str, Any], command: str = "") -> dict[str, Any]:
    """The report's figures as stage options for the planner (``python -m agent plan``).

    Every figure is the median of a few iterations of model time alone (no server, no
    network, no batching window), so each option has a p50 and nothing else: the planner
    will not assume a p95 it was not given. Calls per unit is the batch: every call using
    the stage at the same moment, the pessimistic reading.
    """
    compute = compute_class(str(report.get("device", "")))
    engine = f"transformers eager, {report.get('dtype', '?')}"
    results = report.get("results", {})
    options = [
        *_stt_options(results.get("whisper", {}), engine, compute),
        *_llm_options(results.get("gemma", {}), engine, compute),
        *_tts_options(results.get("orpheus", {}), results.get("snac", {}), engine, compute),
    ]
    return profile_document(
        "gpu",
        options,
        command=command or "python -m tools.gpu_profile gpu_check.json",
        machine=f"{report.get('device', '?')}, torch {report.get('torch', '?')}, "
        f"transformers {report.get('transformers', '?')}",
        report="docs/benchmarks/gpu.md",
    )


def read_report(path: str | Path) -> dict[str, Any]:
    """The GPU check's JSON report, or a ProfileError that says what is wrong with the file."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ProfileError(f"{path}: cannot read the GPU check's report: {error}") from error
    except json.JSONDecodeError as error:
        raise ProfileError(f"{path}: not JSON ({error}): expected gpu_check's --out") from error
    if not isinstance(report, dict) or not isinstance(report.get("results"), dict):
        raise ProfileError(f"{path}: no 'results' object: expected gpu_check's --out")
    if report.get("dry_run"):
        raise ProfileError(f"{path}: a dry run's tiny models on the CPU are no GPU profile")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="the JSON that `python -m infra.gpu_check --out` wrote")
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        help="where to write the profile (default: the planner's, agent/ledger/profiles/gpu.json)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    command = "python -m tools.gpu_profile " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        document = planner_profile(read_report(args.report), command.strip())
        written = write_profile_document(document, args.out)
    except ProfileError as error:
        parser.error(str(error))
    logger.info("wrote %s: %d stage options", written, len(document["options"]))


if __name__ == "__main__":
    main()
