"""The GPU check's report as the planner's profile: median-only options, and bad reports refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.ledger import stage_profiles
from agent.ledger.plan import plan
from agent.ledger.pricebook import PriceBook
from agent.ledger.stage_profiles import load_profile, profile_document, stage_option
from tools import gpu_profile

GPU_REPORT: dict[str, Any] = {
    "dry_run": False,
    "device": "NVIDIA H100 80GB HBM3",
    "dtype": "bfloat16",
    "torch": "2.13.0",
    "transformers": "5.24.0",
    "results": {
        "whisper": {
            "window_s": 30.0,
            "decode_tokens": 32,
            "batch_1": {"ms": 40.0, "audio_s_per_s": 750.0},
            "batch_8": {"ms": 80.0, "audio_s_per_s": 3000.0},
            "batch_16": {"error": "OutOfMemoryError: ..."},
        },
        "gemma": {
            "prefix_tokens": 1500,
            "new_tokens_cached": 100,
            "prefill_full": {"ms": 150.0},
            "prefill_after_cached_prefix": {"ms": 30.0},
            "decode_batch_1": {"ms_per_step": 20.0, "tokens_per_s": 50.0},
            "decode_batch_8": {"ms_per_step": 25.0, "tokens_per_s": 320.0},
        },
        "orpheus": {
            "step_budget_ms": 12.19,
            "batch_1": {"ms_per_step": 10.0},
            "batch_16": {"ms_per_step": 12.0},
            "batch_64": {"ms_per_step": 15.0},
            "largest_real_time_batch": 16,
        },
        "snac": {
            "frames_per_call": 4,
            "eager_batch_1": {"ms": 9.0},
            "compiled_batch_1": {"ms": 3.0},
            "compiled_batch_32": {"ms": 6.0},
        },
    },
}


def test_the_gpu_check_writes_median_only_options_the_planner_will_not_stretch(
    tmp_path: Path,
) -> None:
    doc = gpu_profile.planner_profile(GPU_REPORT, "python -m tools.gpu_profile x")
    profile = load_profile(stage_profiles.write_profile(doc, tmp_path / "gpu.json"))
    by = {(o.stage, o.batch): o for o in profile.options}
    assert set(by) == {("stt", 1), ("stt", 8), ("llm", 1), ("llm", 8), ("tts", 1), ("tts", 16)}
    assert by[("stt", 8)].p50 == 80 and by[("stt", 8)].at(0.95) is None
    assert by[("stt", 8)].placement == stage_profiles.Placement(compute="h100", concurrent_calls=8)
    assert by[("llm", 1)].p50 == 30 and by[("llm", 8)].p50 == 55
    # 4 SNAC frames = 28 tokens at 12 ms, + SNAC's decode at the next batch measured (32).
    assert by[("tts", 16)].p50 == pytest.approx(28 * 12 + 6)
    assert by[("tts", 1)].p50 == pytest.approx(28 * 10 + 3)
    # At p95 the GPU options' tails are unknown: a configuration on them is a lower bound
    # that only may meet the target, never one that meets it; at the median they are used.
    turn = profile_document(
        "turn",
        [
            stage_option("overhead", "agent worker", latency_ms={"p50": 10, "p95": 20}),
            stage_option("endpointing", "VAD + smart-turn", latency_ms={"p50": 200, "p95": 250}),
        ],
    )
    profiles = [profile, stage_profiles.parse_profile(turn)]
    book = PriceBook.load()
    at_p95 = plan(profiles, book)
    every = [*at_p95.passing, *at_p95.possible, *at_p95.failing]
    assert every and at_p95.cheapest is None
    assert all("stt" in c.tail_unknown and not c.meets for c in every)
    cheapest = plan(profiles, book, q=0.5, target_ms=1000).cheapest
    assert cheapest is not None and not cheapest.declared_stages
    assert cheapest.options["stt"].batch == 8  # 8 calls on one GPU cost less than 1


def test_the_compute_class_is_the_price_books_name_for_the_device() -> None:
    assert gpu_profile.compute_class("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_profile.compute_class("NVIDIA H200") == "h200"
    assert gpu_profile.compute_class("x86_64") == "x86-64"


def test_a_failed_check_leaves_its_stage_out() -> None:
    report = json.loads(json.dumps(GPU_REPORT))
    report["results"]["gemma"]["prefill_after_cached_prefix"] = {"error": "OutOfMemoryError"}
    stages = {o["stage"] for o in gpu_profile.planner_profile(report)["options"]}
    assert stages == {"stt", "tts"}


def test_the_command_line_writes_the_profile(tmp_path: Path) -> None:
    report, profile = tmp_path / "gpu_check.json", tmp_path / "profiles" / "gpu.json"
    report.write_text(json.dumps(GPU_REPORT))
    gpu_profile.main([str(report), "--out", str(profile)])
    written = load_profile(profile)
    assert written.name == "gpu" and len(written.options) == 6
    assert written.command == f"python -m tools.gpu_profile {report} --out {profile}"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read"),
        ("{not json", "not JSON"),
        ('{"device": "H100"}', "no 'results' object"),
        (json.dumps({**GPU_REPORT, "dry_run": True}), "a dry run"),
    ],
)
def test_a_bad_report_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, says: str
) -> None:
    report, profile = tmp_path / "gpu_check.json", tmp_path / "gpu.json"
    if content is not None:
        report.write_text(content)
    with pytest.raises(SystemExit) as exited:
        gpu_profile.main([str(report), "--out", str(profile)])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
    assert not profile.exists()
