"""The owner's dashboard: cost per minute, latency, fallback share and collection KPIs.

``GET /console/dashboard`` is a page of tables with a Chart.js chart above
each (the library is vendored at build time into ``agent/server/web/vendor/`` and
served under ``/static/vendor/``; without it the tables still say everything).
``GET /api/kpis`` is the same figures in JSON. Both are for owners only, for a
range of UTC days (``?from=YYYY-MM-DD&to=YYYY-MM-DD``, inclusive; the last 30
days by default). The figures come from ``agent.console.kpis``. See
docs/dashboard.md.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import json
import logging
import secrets
from collections.abc import Mapping

from aiohttp import web

from agent.console import query as q
from agent.console.auth import require_role
from agent.console.context import ENGINE, now
from agent.console.kpis import (
    DEFAULT_ACCOUNTS,
    UTILIZED,
    Figures,
    Kpi,
    Provisioning,
    components,
    figures,
)
from agent.console.layout import page
from agent.console.query import QueryError
from agent.ledger.latency import MEANINGS, RESPONSE, RESPONSE_TARGET_MS, VOICE_TO_VOICE
from agent.ledger.plan import Prediction, chosen_configuration
from agent.ledger.pricebook import PriceBook
from agent.ledger.stage_profiles import ProfileError
from agent.store.tables import Role

#: The cost target of the price book the dashboard compares against ($/minute).
TARGET = web.AppKey("dashboard_target_usd_per_minute", float)
logger = logging.getLogger(__name__)

#: The planner's choice, shown beside the measured figures.
PLANNED = web.AppKey("dashboard_planned", object)
#: What the running deployment provisions (None: the provisioned figures are not shown).
PROVISIONING = web.AppKey("dashboard_provisioning", object)
MAX_ACCOUNTS = 10_000_000
#: Where the page loads Chart.js from (``make`` puts it in agent/server/web/vendor/).
CHART_JS = "/static/vendor/chart.umd.min.js"
DEFAULT_DAYS = 30
MAX_DAYS = 366


def add_dashboard(
    app: web.Application,
    target_usd_per_minute: float | None = None,
    provisioning: Provisioning | None = None,
) -> None:
    """Add ``/console/dashboard`` and ``/api/kpis``; after ``setup_auth`` (they use its engine).

    ``target_usd_per_minute``: the cost chart's target line, the running price
    book's (``ctx.price_book``); None reads the repository's, infra/pricebook.toml.
    ``provisioning``: what the running profile provisions (``Provisioning.of(book,
    profile)``); None leaves the provisioned cost and the utilization out.
    """
    if ENGINE not in app:
        raise RuntimeError("add_dashboard needs setup_auth first")
    if target_usd_per_minute is None:
        target_usd_per_minute = PriceBook.load().target_usd_per_minute
    app[TARGET] = target_usd_per_minute
    app[PROVISIONING] = provisioning
    app[PLANNED] = _planned_configuration()
    app.router.add_get("/console/dashboard", dashboard_page)
    app.router.add_get("/api/kpis", kpis_json)


def _planned_configuration() -> Prediction | None:
    """The planner's cheapest configuration that meets the latency target (agent/ledger/plan.py),
    from the measured profiles in agent/ledger/profiles/; None when none does or the
    profiles cannot be read (the page says so)."""
    try:
        return chosen_configuration(RESPONSE_TARGET_MS)
    except (ProfileError, ValueError, OSError) as exc:
        logger.warning("the dashboard shows no planned configuration: %s", exc)
        return None


def parse_range(query: Mapping[str, str], today: dt.date) -> tuple[dt.date, dt.date]:
    """``from`` and ``to`` of the query (ISO dates, inclusive), defaulting to the last 30
    days; ``QueryError`` for a bad or too long range."""
    end = q.day(query, "to") or today
    start = q.day(query, "from") or max(q.FIRST_DAY, end - dt.timedelta(days=DEFAULT_DAYS - 1))
    if end < start:
        raise QueryError(f"to={end} is before from={start}")
    if (end - start).days + 1 > MAX_DAYS:
        raise QueryError(f"at most {MAX_DAYS} days at a time")
    return start, end


def parse_accounts(query: Mapping[str, str]) -> int:
    """``accounts`` of the query: the size of the campaign to forecast."""
    raw = query.get("accounts")
    if raw is None or raw == "":
        return DEFAULT_ACCOUNTS
    if not raw.isdigit() or int(raw) > MAX_ACCOUNTS:
        raise QueryError(f"accounts must be a whole number from 0 to {MAX_ACCOUNTS}, got {raw!r}")
    return int(raw)


async def _figures(request: web.Request) -> Figures:
    start, end = parse_range(request.query, now(request.app).date())
    accounts = parse_accounts(request.query)
    return await asyncio.to_thread(
        figures,
        request.app[ENGINE],
        start,
        end,
        request.app[TARGET],
        provisioning(request.app),
        accounts,
    )


def provisioning(app: web.Application) -> Provisioning | None:
    """What ``add_dashboard`` was told the deployment provisions."""
    given = app[PROVISIONING]
    return given if isinstance(given, Provisioning) else None


@require_role(Role.OWNER)
async def kpis_json(request: web.Request) -> web.Response:
    try:
        result = await _figures(request)
    except QueryError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    return web.json_response(result.to_json())


@require_role(Role.OWNER)
async def dashboard_page(request: web.Request) -> web.Response:
    try:
        result = await _figures(request)
    except QueryError as exc:
        note = f'<h1>Dashboard</h1><p class="flag" role="alert">{html.escape(str(exc))}</p>'
        return page(request, "Dashboard", note, status=400)
    nonce = secrets.token_urlsafe(16)
    csp = (
        f"default-src 'none'; script-src 'self' 'nonce-{nonce}'; style-src 'unsafe-inline'; "
        "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    body = render(result, nonce, request.app[PLANNED])
    return page(request, "Dashboard", body, csp=csp)


# -- the page -------------------------------------------------------------------------------

_KPI_TITLES = {
    "right_party_contact_rate": "Right-party contact rate",
    "promise_to_pay_rate": "Promise-to-pay rate",
    "kept_promise_rate": "Kept-promise rate",
    "cost_per_promise_usd": "Cost per promise",
    "cost_per_promised_dollar_usd": "Cost per dollar promised",
    "fallback_tts_cost_share": "Fallback TTS share (of TTS cost)",
}


def _num(value: float | None, digits: int = 4, prefix: str = "") -> str:
    return "–" if value is None else f"{prefix}{value:.{digits}f}"


def _kpi_value(kpi: Kpi) -> str:
    if kpi.value is None:
        return "–"
    if kpi.name.endswith("_usd"):
        return f"${kpi.value:.4f}"
    return f"{kpi.value:.1%}"


def _kpi_part(value: float | None, usd: bool) -> str:
    if value is None:
        return "–"
    return f"${value:.4f}" if usd else f"{value:g}"


def _tiles(kpis: list[Kpi]) -> str:
    out = []
    for kpi in kpis:
        usd = kpi.name.endswith("_usd")
        note = f'<p class="note">{html.escape(kpi.note)}</p>' if kpi.note else ""
        out.append(
            f'<div class="tile" data-kpi="{html.escape(kpi.name)}">'
            f"<h3>{html.escape(_KPI_TITLES.get(kpi.name, kpi.name))}</h3>"
            f'<p class="value">{_kpi_value(kpi)}</p>'
            f"<p>{_kpi_part(kpi.numerator, usd)} / {_kpi_part(kpi.denominator, False)}</p>"
            f"{note}</div>"
        )
    return "".join(out)


def _declared(declared_usd: float, total_usd: float) -> str:
    """The share of a day's cost that rests on declared figures, marked when there is one."""
    if declared_usd <= 0 or total_usd <= 0:
        return "<td>–</td>"
    return f'<td class="declared">{declared_usd / total_usd:.0%} declared</td>'


def _cost_table(result: Figures) -> str:
    names = components(result.cost)
    head = "".join(f"<th>{html.escape(n)} $/min</th>" for n in names)
    rows = []
    for day in result.cost:
        cells = "".join(f"<td>{_num(day.by_component.get(n))}</td>" for n in names)
        over = day.usd_per_minute is not None and day.usd_per_minute > result.target_usd_per_minute
        rows.append(
            f"<tr{' class=over' if over else ''}><td>{day.day.isoformat()}</td>"
            f"<td>{day.calls}</td><td>{day.minutes:.1f}</td><td>${day.cost_usd:.4f}</td>"
            f"<td>{_num(day.usd_per_minute, prefix='$')}</td>"
            f"{_declared(day.declared_usd, day.cost_usd)}"
            f"<td>{_num(day.provisioned_usd_per_minute, prefix='$')}</td>{cells}"
            f"<td>{_num(None if day.fallback_share is None else 100 * day.fallback_share, 1)}"
            f"</td><td>{_num(day.worker_cpu_s_per_call, 2)}</td></tr>"
        )
    if not rows:
        rows.append(f'<tr><td colspan="{9 + len(names)}">No ended calls in the range.</td></tr>')
    return (
        "<table><thead><tr><th>day</th><th>calls</th><th>minutes</th><th>cost</th>"
        "<th>attributed $/min</th><th>basis</th><th>provisioned $/min</th>"
        f"{head}<th>fallback % of TTS</th>"
        f"<th>worker CPU s/call</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _owner_cost(result: Figures) -> str:
    """The range's two costs per minute, and what the provisioned one stands on."""
    declared = result.declared_share
    marked = (
        f' <span class="declared">{declared:.0%} of the attributed cost rests on declared '
        "figures (a throughput the price book states, not one measured here).</span>"
        if declared
        else ""
    )
    if result.profile is None:
        provisioned = "provisioned cost not known (no deployment profile given)"
    else:
        provisioned = (
            f"provisioned {_num(result.provisioned_usd_per_minute, prefix='$')}/min (profile "
            f"{html.escape(result.profile)}: its compute all day, idle included, plus the line "
            "and the fallback TTS, on the days with calls)"
        )
    return (
        f'<p class="note" id="owner-cost">Over the range: attributed '
        f"{_num(result.usd_per_minute, prefix='$')}/min (each call's use at the price book's "
        f"unit prices), {provisioned}.{marked}</p>"
    )


def _utilization_table(result: Figures) -> str:
    if result.profile is None:
        return ""
    head = "".join(f"<th>{html.escape(stage)}</th>" for stage in UTILIZED)
    rows = [
        f"<tr><td>{d.day.isoformat()}</td>"
        + "".join(f"<td>{_percent(d.utilization.get(stage))}</td>" for stage in UTILIZED)
        + "</tr>"
        for d in result.cost
    ] or [f'<tr><td colspan="{1 + len(UTILIZED)}">No ended calls in the range.</td></tr>']
    return (
        "<h2>Utilization (% of the provisioned device time the servers reported busy)</h2>"
        f'<table id="utilization"><thead><tr><th>day</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _percent(value: float | None) -> str:
    return _num(None if value is None else 100 * value, 2)


def _forecast(result: Figures) -> str:
    f = result.forecast
    if f is None:
        return ""
    if f.expected_minutes is None:
        detail = "no outbound call ended in the range to measure from."
    else:
        detail = (
            f"{100 * (f.connect_rate or 0):.0f}% connect, {f.minutes_per_connect or 0:.2f} min "
            f"each: {f.expected_minutes:.0f} connected minutes, "
            f"{_num(f.attributed_usd, 2, '$')} attributed, "
            f"{_num(f.provisioned_usd, 2, '$')} provisioned."
        )
    return (
        f'<p class="note" id="forecast">Forecast, a campaign dialling {f.accounts} accounts at '
        f"this range's rates: {detail}</p>"
    )


def _latency_table(result: Figures) -> str:
    rows = [
        f"<tr><td>{d.day.isoformat()}</td><td>{d.turns}</td><td>{_num(d.response_p50_ms, 0)}</td>"
        f"<td>{_num(d.response_p95_ms, 0)}</td><td>{_num(d.voice_to_voice_p50_ms, 0)}</td>"
        f"<td>{_num(d.voice_to_voice_p95_ms, 0)}</td></tr>"
        for d in result.latency
    ] or ['<tr><td colspan="6">No turns in the range.</td></tr>']
    return (
        "<table><thead><tr><th>day</th><th>turns</th><th>response p50 ms</th>"
        "<th>response p95 ms</th><th>voice-to-voice p50 ms</th><th>voice-to-voice p95 ms</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _script_json(value: object) -> str:
    """JSON safe inside a <script> element (no ``</script>``, no HTML comment openers)."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _planned(planned: object, result: Figures) -> str:
    """The planner's chosen configuration: its predicted p95 and $/minute against the
    range's measured ones."""
    if not isinstance(planned, Prediction):
        return (
            '<p class="note" id="planned">No configuration of the planner meets the target '
            "(<code>python -m agent plan</code>).</p>"
        )
    declared = (
        f" (declared, not measured: {', '.join(planned.declared_stages)})"
        if planned.declared_stages
        else ""
    )
    return (
        f'<p class="note" id="planned">Planned: {html.escape(planned.label + declared)}. '
        f"Predicted response p{planned.percentile:g} "
        f"{'≥' if planned.tail_unknown else ''}{planned.predicted_ms:.0f} ms"
        + (f" ({', '.join(planned.tail_unknown)}: tail unknown)" if planned.tail_unknown else "")
        + " at "
        f"${planned.usd_per_minute:.4f}/min; measured over this range: response p95 "
        f"{_num(result.response_p95_ms, 0)} ms at {_num(result.usd_per_minute, prefix='$')}/min."
        "</p>"
    )


def render(result: Figures, nonce: str, planned: object = None) -> str:
    """The dashboard page: tables for everything, and charts when Chart.js is there."""
    span = f"{result.start.isoformat()} to {result.end.isoformat()} (UTC)"
    data = _script_json(
        {**result.to_json(), "components": components(result.cost)},
    )
    return f"""<style>
.dashboard table{{width:auto;margin:.5rem 0 1.5rem}}
.dashboard td,.dashboard th{{border:1px solid #ccc;padding:.2rem .5rem;text-align:right}}
.dashboard tr.over td{{background:#fde8e8}}
.declared{{font-style:italic;color:#8a5a00}}
.tiles{{display:flex;flex-wrap:wrap;gap:1rem}}
.tile{{border:1px solid #ccc;border-radius:.4rem;padding:.5rem 1rem;min-width:12rem}}
.tile .value{{font-size:1.6rem;margin:.2rem 0}}
.tile .note{{font-size:.85rem;max-width:16rem}}
.chart{{position:relative;height:18rem}}
</style>
<div class="dashboard">
<h1>Dashboard</h1>
<form method="get" action="/console/dashboard">
<label>From <input type="date" name="from" value="{result.start.isoformat()}"></label>
<label>To <input type="date" name="to" value="{result.end.isoformat()}"></label>
<label>Forecast accounts <input type="number" min="0" name="accounts" \
value="{result.forecast.accounts if result.forecast else DEFAULT_ACCOUNTS}"></label>
<button type="submit">Show</button> <span>{html.escape(span)}</span>
</form>
<h2>Collection</h2>
<div class="tiles">{_tiles(result.kpis + result.owner_kpis)}</div>
<h2>Cost per minute (target ${result.target_usd_per_minute:.4f}/min)</h2>
{_owner_cost(result)}
<div class="chart"><canvas id="cost-chart" aria-label="cost per minute by day"></canvas></div>
{_cost_table(result)}
{_forecast(result)}
{_utilization_table(result)}
<h2>Fallback TTS share by day</h2>
<div class="chart"><canvas id="fallback-chart" aria-label="fallback TTS share by day"></canvas>
</div>
<h2>Latency (response target {result.latency_target_ms:.0f} ms, voice-to-voice target \
{result.voice_to_voice_target_ms:.0f} ms)</h2>
<p class="note" id="latency-definitions"><b>Response</b>: {html.escape(MEANINGS[RESPONSE])}.
<b>Voice-to-voice</b>: {html.escape(MEANINGS[VOICE_TO_VOICE])}. Turns stored before these
definitions count in voice-to-voice only.</p>
<div class="chart"><canvas id="latency-chart" aria-label="latency by day"></canvas></div>
{_planned(planned, result)}
{_latency_table(result)}
</div>
<script type="application/json" id="figures">{data}</script>
<script src="{CHART_JS}"></script>
<script nonce="{nonce}">{_CHARTS_JS}</script>
"""


_CHARTS_JS = """
(function () {
  if (!window.Chart) { return; }  // no vendored Chart.js: the tables stand alone
  Chart.defaults.animation = false;  // the figures at once, not grown into place
  const f = JSON.parse(document.getElementById("figures").textContent);
  const colours = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2"];
  const target = (label, value, n) => ({
    type: "line", label: label, data: Array(n).fill(value), borderColor: "#d62728",
    borderDash: [6, 4], pointRadius: 0, fill: false, stack: "target"
  });
  const days = f.cost.map(d => d.day);
  new Chart(document.getElementById("cost-chart"), {
    type: "bar",
    data: {
      labels: days,
      datasets: f.components.map((name, i) => ({
        label: name + " $/min", data: f.cost.map(d => d.by_component[name]),
        backgroundColor: colours[i % colours.length], stack: "cost"
      })).concat([{type: "line", label: "provisioned $/min", stack: "provisioned",
                   data: f.cost.map(d => d.provisioned_usd_per_minute), borderColor: "#333",
                   fill: false},
                  target("target $" + f.target_usd_per_minute + "/min",
                         f.target_usd_per_minute, days.length)])
    },
    options: {maintainAspectRatio: false,
              scales: {x: {stacked: true}, y: {stacked: true, title: {display: true,
                       text: "USD per minute"}}}}
  });
  new Chart(document.getElementById("fallback-chart"), {
    type: "line",
    data: {labels: days, datasets: [{label: "fallback share of TTS cost (%)",
      data: f.cost.map(d => d.fallback_share === null ? null : 100 * d.fallback_share),
      borderColor: colours[4]}]},
    options: {maintainAspectRatio: false, scales: {y: {min: 0, max: 100}}}
  });
  const ldays = f.latency.map(d => d.day);
  const series = [["response_p50_ms", "response p50"], ["response_p95_ms", "response p95"],
                  ["voice_to_voice_p50_ms", "voice-to-voice p50"],
                  ["voice_to_voice_p95_ms", "voice-to-voice p95"]];
  new Chart(document.getElementById("latency-chart"), {
    type: "line",
    data: {labels: ldays, datasets: series.map(([key, label], i) => ({
      label: label + " (ms)", data: f.latency.map(d => d[key]),
      borderColor: colours[i % colours.length]
    })).concat([target("response target " + f.latency_target_ms + " ms",
                       f.latency_target_ms, ldays.length),
                target("voice-to-voice target " + f.voice_to_voice_target_ms + " ms",
                       f.voice_to_voice_target_ms, ldays.length)])},
    options: {maintainAspectRatio: false, scales: {y: {min: 0, title: {display: true,
              text: "ms"}}}}
  });
})();
"""
