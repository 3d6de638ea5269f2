"""bench cost's arithmetic on made-up priced calls (the calls themselves need the CPU models)."""

import pytest

from agent.ledger.pricebook import CallUsage, PriceBook, price_call
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
        calls.append(PricedCall(duration / 60, price_call(book, "embedded-cpu", usage).lines))
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
