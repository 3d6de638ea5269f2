"""The cache-hit check: its verdict rule, its prompts, and a measurement of a real server."""

from __future__ import annotations

import pytest

from agent.pipeline.call import ModelEndpoints
from infra import cache_hit_check
from infra.llm_server import MODEL_ALIAS


def test_the_verdict_compares_medians() -> None:
    assert cache_hit_check.verdict([100.0, 120.0, 90.0], [20.0, 25.0, 30.0]).verdict == "reused"
    report = cache_hit_check.verdict([100.0, 100.0], [90.0, 95.0])
    assert (report.verdict, report.ratio) == ("not reused", 0.925)


def test_each_repetition_has_a_fresh_long_prompt() -> None:
    a, b = cache_hit_check.system_prompt("a"), cache_hit_check.system_prompt("b")
    assert a != b and a.startswith("Session a.")
    assert len(a.split()) > 1000  # ~1,500 tokens: fits the embedded server's 2,048


@pytest.mark.models
async def test_the_check_measures_a_real_server(cpu_models: ModelEndpoints) -> None:
    # Whether the prefix was reused is a timing, judged by the check's report on the
    # serving machine (infra/gpu_check.sh), not asserted here.
    report = await cache_hit_check.measure(cpu_models.llm_url, MODEL_ALIAS, repetitions=2)
    assert len(report.cold_ttft_ms) == len(report.warm_ttft_ms) == 2
    assert all(ms > 0 for ms in report.cold_ttft_ms + report.warm_ttft_ms)
    assert report.verdict in ("reused", "not reused")
