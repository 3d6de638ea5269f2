"""bench cost's arithmetic on made-up priced calls (the calls themselves need the CPU models)."""

from pathlib import Path

import pytest

from agent.ledger.pricebook import CallUsage, PriceBook, price_call
from agent.ledger.records import TurnRecord
from agent.ledger.stage_profiles import load_profile, write_profile
from agent.ledger.throughput import MEASURED, measured
from tools.bench_cost import CostBench, PricedCall, accounting_overhead


@pytest.fixture(scope="module")
def bench() -> CostBench:
    book = PriceBook.load()
    calls = []
    for duration, stt_s in ((120.0, 30.0), (60.0, 5.0)):
        usage = CallUsage(
            "loopback",
            duration,
            stt_audio_s=stt_s,
            stt_compute_s=stt_s / 10,
            tts_audio_s=20.0,
            tts_compute_s=2.0,
            worker_cpu_s=3.0,
        )
        turns = [
            TurnRecord(call_id="c" * 32, number=n, stt_ms=400.0 + n, tts_ttfb_ms=90.0 + n)
            for n in range(3)
        ]
        lines = price_call(book, "embedded-cpu", usage).lines
        calls.append(PricedCall(duration / 60, lines, turns))
    return CostBench(book, "embedded-cpu", calls, wall_s=360.0)


def test_usage_is_summed_and_the_servers_compute_implies_a_throughput(bench: CostBench) -> None:
    assert bench.minutes == 3.0
    assert bench.quantity["stt", "audio_second"] == 35.0
    assert bench.measured_throughput("stt") == pytest.approx(10.0)
    assert bench.measured_throughput("tts") == pytest.approx(10.0)
    assert bench.measured_throughput("llm") is None  # the templates: no LLM request
    assert bench.worker_cpu_s_per_call() == 3.0


def test_provisioned_old_and_utilization(bench: CostBench) -> None:
    # One 2-core VM for 6 minutes over 3 call minutes.
    assert bench.provisioned_usd_per_minute("stt") == pytest.approx(0.10 * 0.1 / 3)
    assert bench.old_usd_per_minute("stt") == pytest.approx(0.10 / 60)
    assert bench.old_usd_per_minute("worker") is None
    assert bench.utilization("stt") == pytest.approx(3.5 / 360)
    assert bench.utilization("worker") == pytest.approx(6.0 / (2 * 360))
    assert bench.utilization("telephony") is None


def test_the_report_has_every_component_and_the_overhead(bench: CostBench) -> None:
    overhead = accounting_overhead(3.0, frames_per_call=1000, reports_per_call=90)
    assert 0 < overhead.share < 0.01
    report = bench.report(overhead, "a test machine", 2)
    for component in ("telephony", "stt", "llm", "tts", "tts_fallback", "worker", "**total**"):
        assert f"| {component} |" in report
    assert "| stt audio_s_per_s |" in report and "under the 1 % budget" in report


def test_the_measured_throughputs_are_a_profile_the_price_book_can_name(
    bench: CostBench, tmp_path: Path
) -> None:
    models = {"stt": "whisper", "llm": "gemma", "tts": "piper"}
    document = bench.stage_profile(models, "a test machine", "python -m agent bench cost")
    path = write_profile(document, tmp_path / "cost.json")  # valid for the planner too
    profile = load_profile(path)
    # The LLM sent no request (the templates): no option, so the book keeps its declared one.
    assert [o.stage for o in profile.options] == ["stt", "tts"]
    tts = profile.options[1]
    assert tts.config == "piper (embedded-cpu), simulated calls" and tts.concurrency == 1
    assert tts.samples == 6 and tts.p50 == 91.0 and tts.colocated
    assert tts.throughput["audio_s_per_s"] == pytest.approx(10.0)
    figure = measured("cost", "tts", "audio_s_per_s", concurrency=1, directory=tmp_path)
    assert (figure.per_s, figure.basis) == (pytest.approx(10.0), MEASURED)
    assert "cost.json: piper (embedded-cpu), simulated calls, 1 at once" in figure.source
