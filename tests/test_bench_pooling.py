"""``bench pooling`` against the in-process stub server: every case measured, both transports."""

from __future__ import annotations

from tools.bench_pooling import measure, run_pooling_bench, table


async def test_every_client_transport_and_connection_mode_is_measured():
    results = await measure(requests=3)
    cases = {(client, transport, mode) for client, transport, mode, _ in results}
    assert cases == {
        (c, t, m) for c in ("TTS", "LLM") for t in ("http", "https") for m in ("fresh", "pooled")
    }
    assert all(len(times) == 3 and min(times) > 0 for *_, times in results)
    rendered = table(results)
    assert rendered.count("\n") == 9 and "pooled (keep-alive)" in rendered


def test_the_report_is_written(tmp_path):
    output = tmp_path / "pooling.md"
    assert run_pooling_bench(20, str(output)) == 0
    assert "| TTS | https | new per request |" in output.read_text()
