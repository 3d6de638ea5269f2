"""``GET /metrics``: the exposition parses, and ended calls feed its histogram and counters."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Handler
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from agent.console.audit import BY_CODE
from agent.console.context import CLOCK, ENGINE, utc_now
from agent.console.tokens import Tokens
from agent.ledger.pricebook import CallCost, CostLineItem
from agent.ledger.records import TurnRecord
from agent.pipeline.call import CallSummary
from agent.server.metrics import add_metrics, observe_call

Client = TestClient[web.Request, web.Application]


class Live:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        return self.calls


@pytest.fixture
def live() -> Live:
    return Live()


@pytest.fixture
async def client(live: Live) -> AsyncIterator[Client]:
    """A scraper on the worker's own host (the test client is on loopback)."""
    app = web.Application()
    add_metrics(app, live)
    async with TestClient(TestServer(app)) as client:
        yield client


async def test_a_scraper_from_elsewhere_needs_a_metrics_token(db_engine: Engine) -> None:
    app = web.Application(middlewares=[_from_elsewhere])
    app[ENGINE], app[CLOCK] = db_engine, utc_now
    add_metrics(app, Live())
    tokens = Tokens(db_engine)
    metrics, _ = tokens.create("prometheus", ["metrics:read"], utc_now(), by=BY_CODE)
    other, _ = tokens.create("crm", ["campaigns:write"], utc_now(), by=BY_CODE)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/metrics")).status == 401
        wrong = await client.get("/metrics", headers={"Authorization": f"Bearer {other}"})
        assert wrong.status == 403
        right = await client.get("/metrics", headers={"Authorization": f"Bearer {metrics}"})
        assert right.status == 200 and "agent_live_calls" in await right.text()


@web.middleware
async def _from_elsewhere(request: web.Request, handler: Handler) -> web.StreamResponse:
    return await handler(request.clone(remote="203.0.113.9"))


def summary() -> CallSummary:
    lines = [
        CostLineItem("telephony", 2.0, "minute", 0.01, 0.02, "measured"),
        CostLineItem("tts_fallback", 0.5, "1k_characters", 0.02, 0.01, "measured"),
    ]
    cost = CallCost(
        lines=lines,
        total_usd=0.03,
        per_minute_usd=0.015,
        price_book_version="test",
        target_usd_per_minute=0.04,
        within_target=True,
    )
    turns = [
        TurnRecord(call_id="c1", number=0, response_ms=250.0, voice_to_voice_ms=280.0),
        TurnRecord(call_id="c1", number=1, response_ms=450.0),
        TurnRecord(call_id="c1", number=2),
    ]
    return CallSummary("c1", 120.0, "caller_hung_up", turns, cost)


async def scrape(client: Client) -> dict[str, float]:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


async def test_the_exposition_parses_and_starts_at_zero(client: Client, live: Live) -> None:
    live.calls = 3
    samples = await scrape(client)
    assert samples["agent_live_calls{}"] == 3.0
    assert samples["agent_turn_response_seconds_count{}"] == 0.0
    assert samples["agent_calls_ended_total{}"] == 0.0


async def test_an_ended_call_feeds_the_histogram_and_the_counters(client: Client) -> None:
    app = client.app
    assert app is not None
    observe_call(app, summary())
    samples = await scrape(client)
    assert samples["agent_turn_response_seconds_count{}"] == 2.0
    assert samples["agent_turn_response_seconds_sum{}"] == pytest.approx(0.7)
    assert samples["agent_turn_response_seconds_bucket{le=0.3}"] == 1.0
    assert samples["agent_turn_response_seconds_bucket{le=0.5}"] == 2.0
    assert samples["agent_turn_voice_to_voice_seconds_count{}"] == 1.0
    assert samples["agent_calls_ended_total{}"] == 1.0
    assert samples["agent_call_seconds_total{}"] == 120.0
    assert samples["agent_call_cost_usd_total{component=telephony}"] == pytest.approx(0.02)
    assert samples["agent_call_cost_usd_total{component=tts_fallback}"] == pytest.approx(0.01)


def test_observing_without_metrics_does_nothing() -> None:
    observe_call(web.Application(), summary())


def test_the_live_calls_default_reads_the_servers_calls() -> None:
    from agent.pipeline.live_calls import CALLS, LiveCalls
    from agent.server.metrics import METRICS

    app = web.Application()
    app[CALLS] = LiveCalls()
    add_metrics(app)
    assert b"agent_live_calls 0.0" in app[METRICS].exposition()
