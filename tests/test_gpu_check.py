"""The GPU check's dry run: the same code path on the CPU with tiny configs, checked for shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra import gpu_check


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("gpu") / "report.json"
    completed = subprocess.run(
        [sys.executable, "-m", "infra.gpu_check", "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    printed = json.loads(completed.stdout)
    assert json.loads(Path(out).read_text()) == printed
    return printed


def test_every_check_ran_without_error(report: dict) -> None:
    assert report["dry_run"] is True
    assert set(report["results"]) == {"whisper", "gemma", "orpheus", "snac"}
    errors = [
        (model, key)
        for model, entries in report["results"].items()
        for key, entry in entries.items()
        if isinstance(entry, dict) and "error" in entry
    ]
    assert errors == []


def test_whisper_reports_streams_per_batch(report: dict) -> None:
    whisper = report["results"]["whisper"]
    for batch in gpu_check.DRY_PLAN.whisper_batches:
        entry = whisper[f"batch_{batch}"]
        assert entry["ms"] > 0
        assert entry["audio_s_per_s"] == pytest.approx(
            batch * 30.0 / (entry["ms"] / 1000), rel=0.01
        )
        assert entry["streams_3s_utterances"] > 0


def test_gemma_reports_cached_and_full_prefill_and_decode(report: dict) -> None:
    gemma = report["results"]["gemma"]
    assert gemma["prefill_full"]["ms"] > 0
    assert gemma["prefill_after_cached_prefix"]["ms"] > 0
    for batch in gpu_check.DRY_PLAN.gemma_batches:
        assert gemma[f"decode_batch_{batch}"]["ms_per_step"] > 0


def test_orpheus_reports_the_real_time_batch(report: dict) -> None:
    orpheus = report["results"]["orpheus"]
    assert orpheus["step_budget_ms"] == pytest.approx(12.19, abs=0.01)
    fits = [
        b
        for b in gpu_check.DRY_PLAN.orpheus_batches
        if orpheus[f"batch_{b}"]["ms_per_step"] <= orpheus["step_budget_ms"]
    ]
    assert orpheus["largest_real_time_batch"] == max(fits, default=0)


def test_snac_reports_eager_and_compiled(report: dict) -> None:
    snac = report["results"]["snac"]
    for mode in ("eager", "compiled"):
        for batch in gpu_check.DRY_PLAN.snac_batches:
            entry = snac[f"{mode}_batch_{batch}"]
            assert entry["ms"] > 0
            # 4 coarse frames = 16 fine frames of 512 samples at 24 kHz.
            assert entry["audio_ms"] == pytest.approx(16 * 512 / 24.0)


def test_a_failing_check_is_recorded_and_the_rest_still_run() -> None:
    results: dict = {}
    gpu_check.guarded(results, "broken", lambda: 1 / 0)
    gpu_check.guarded(results, "fine", lambda: {"ms": 1.0})
    assert results["broken"] == {"error": "ZeroDivisionError: division by zero"}
    assert results["fine"] == {"ms": 1.0}


def test_the_real_budget_comes_from_the_snac_frame_rate() -> None:
    # 24000 / 512 / 4 coarse frames per second, 7 tokens each.
    assert gpu_check.orpheus_step_budget_ms(gpu_check.SNAC_24KHZ) == pytest.approx(
        1000 / (24000 / 512 / 4 * 7)
    )


def test_the_real_configs_are_the_published_ones() -> None:
    from transformers import Gemma3TextConfig, LlamaConfig, WhisperConfig

    gemma = Gemma3TextConfig(**gpu_check.GEMMA3_27B)
    assert (gemma.hidden_size, gemma.num_hidden_layers, gemma.sliding_window) == (5376, 62, 1024)
    assert (gemma.layer_types or []).count("full_attention") == 10  # every sixth layer is global
    whisper = WhisperConfig(**gpu_check.WHISPER_TURBO)
    assert (whisper.encoder_layers, whisper.decoder_layers, whisper.num_mel_bins) == (32, 4, 128)
    assert LlamaConfig(**gpu_check.ORPHEUS_3B).vocab_size == 156940
