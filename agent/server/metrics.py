"""``GET /metrics``: the server's live figures in the Prometheus text format.

- ``agent_live_calls``: calls this process is carrying now, read at scrape time.
- ``agent_asyncio_tasks``: the tasks of the process's event loop at scrape time (a
  leak check: ``bench soak`` reads it before and after its churn).
- ``agent_turn_response_seconds``: a histogram of turns' ``response_ms`` (the VAD's
  stop to the first agent audio frame: ``agent.ledger.latency``), and
  ``agent_turn_voice_to_voice_seconds`` of ``voice_to_voice_ms``.
- ``agent_calls_ended_total``, ``agent_call_seconds_total`` and
  ``agent_call_cost_usd_total{component=...}``: counters of ended calls, their
  connected time and their priced cost, by price-book component.

The histograms and counters are fed by ``observe_call(app, summary)`` with the
``CallSummary`` that ``Call.run()`` returns, once per ended call, from the
server's call task. They count from this process's start (Prometheus' own
convention: ``rate()`` copes with restarts); the durable record is the database
and the dashboard. Each app has its own registry, so tests and several apps in
one process do not meet. Served to the worker's own host, or to a scraper with a
``metrics:read`` API token. See docs/dashboard.md and docs/deploy.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from agent.access import Loopback, guard
from agent.console.tokens import Token
from agent.pipeline.live_calls import CALLS

if TYPE_CHECKING:
    from agent.pipeline.call import CallSummary

#: Buckets in seconds around the 300 ms voice-to-voice target.
LATENCY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)


class Metrics:
    """The server's Prometheus metrics, in a registry of their own."""

    def __init__(self, live_calls: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.live_calls = Gauge(
            "agent_live_calls", "Calls this process is carrying now.", registry=self.registry
        )
        self.live_calls.set_function(lambda: float(live_calls()))
        self.tasks = Gauge(
            "agent_asyncio_tasks", "Tasks of this process's event loop.", registry=self.registry
        )
        self.tasks.set_function(_task_count)
        self.response = Histogram(
            "agent_turn_response_seconds",
            "End of the caller's speech (VAD stop) to the first agent audio frame sent "
            "(turns.response_ms).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.voice_to_voice = Histogram(
            "agent_turn_voice_to_voice_seconds",
            "Last voiced caller frame to the first agent audio frame (turns.voice_to_voice_ms).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.calls_ended = Counter(
            "agent_calls_ended", "Calls ended and priced.", registry=self.registry
        )
        self.call_seconds = Counter(
            "agent_call_seconds", "Connected time of ended calls.", registry=self.registry
        )
        self.cost = Counter(
            "agent_call_cost_usd",
            "Priced cost of ended calls, by price-book component.",
            ["component"],
            registry=self.registry,
        )

    def observe(self, summary: CallSummary) -> None:
        """Count one ended call: its turns' latencies, its time and its cost lines."""
        for turn in summary.turns:
            if turn.response_ms is not None:
                self.response.observe(turn.response_ms / 1000.0)
            if turn.voice_to_voice_ms is not None:
                self.voice_to_voice.observe(turn.voice_to_voice_ms / 1000.0)
        self.calls_ended.inc()
        if summary.duration_s > 0:
            self.call_seconds.inc(summary.duration_s)
        if summary.cost is not None:
            for line in summary.cost.lines:
                # Counters only go up; a negative line (a credit) would be a pricing bug.
                if line.amount_usd >= 0:
                    self.cost.labels(component=line.component).inc(line.amount_usd)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


METRICS = web.AppKey("metrics", Metrics)


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # no running event loop: an exposition outside the server
        return 0.0


def _live_calls_of(app: web.Application) -> Callable[[], int]:
    def count() -> int:
        return len(app[CALLS].tasks()) if CALLS in app else 0

    return count


def add_metrics(app: web.Application, live_calls: Callable[[], int] | None = None) -> Metrics:
    """Add ``GET /metrics``. ``live_calls`` counts the calls in progress (default: the
    server's ``app[CALLS]``)."""
    metrics = Metrics(live_calls or _live_calls_of(app))
    app[METRICS] = metrics
    app.router.add_get("/metrics", _metrics)
    return metrics


def observe_call(app: web.Application, summary: CallSummary) -> None:
    """Feed one ended call into the app's metrics; nothing when ``add_metrics`` was not called."""
    metrics = app.get(METRICS)
    if metrics is not None:
        metrics.observe(summary)


@guard(Token("metrics:read"), Loopback())
async def _metrics(request: web.Request) -> web.Response:
    """For a scraper on the worker's host, or one with a ``metrics:read`` API token
    (docs/deploy.md): call volume and cost per component are the business's figures."""
    response = web.Response(body=request.app[METRICS].exposition())
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    response.headers["Cache-Control"] = "no-store"
    return response
