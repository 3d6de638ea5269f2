"""The dashboard's figures (agent.console.kpis) on a small known set, and its routes.

Every test runs on SQLite and PostgreSQL (the ``db_engine`` fixture).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from argon2 import PasswordHasher
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from agent.console import kpis
from agent.console.auth import setup_auth
from agent.console.dashboard import add_dashboard, parse_range
from agent.console.users import Users
from agent.ledger.latency import LEGACY_DEFINITION
from agent.store.tables import Call, Consumer, CostLine, Debt, Promise, Turn

FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
PASSWORD = "correct horse battery"
DAY1 = dt.date(2026, 12, 1)
DAY2 = dt.date(2026, 12, 2)
NOW = dt.datetime(2026, 12, 2, 18, 0, tzinfo=dt.UTC)


def at(day: dt.date, hour: int) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour), dt.UTC)


def seed(engine: Engine) -> None:
    """Day 1: calls a (right party, 2 min), b (voicemail, 1 min), c (wrong number, 1 min).
    Day 2: d (right party, 30 s), e (still active). 30 Nov: f, outside the range."""
    with Session(engine) as session, session.begin():
        consumer = Consumer(
            external_ref="c1",
            name="Jordan Smith",
            address="1 Main St",
            state="MA",
            city="Boston",
            time_zone="America/New_York",
        )
        debt = Debt(
            consumer=consumer,
            account_ref="A1",
            creditor="Acme",
            balance_cents=10000,
            statute_status="within",
            tenant_type="third_party_collector",
            max_discount_pct=10,
            min_installment_cents=1000,
            max_term_months=6,
        )
        session.add_all([consumer, debt])

        def call(cid: str, day: dt.date, hour: int, duration: float | None, party: str | None):
            row = Call(
                id=cid,
                transport="webrtc",
                direction="outbound",
                status="ended" if duration is not None else "active",
                started_at=at(day, hour),
                duration_s=duration,
                party=party,
            )
            session.add(row)
            return row

        def cost(row: Call, component: str, amount: float) -> None:
            row.cost_lines.append(
                CostLine(
                    component=component,
                    quantity=1.0,
                    unit="x",
                    unit_price_usd=amount,
                    amount_usd=amount,
                    price_book_version="test",
                )
            )

        a = call("a", DAY1, 10, 120.0, "right_party")
        for component, amount in (("telephony", 0.02), ("stt", 0.01), ("tts", 0.03)):
            cost(a, component, amount)
        cost(a, "tts_fallback", 0.01)
        for n, (response, v2v) in enumerate(((100, 150), (200, 250), (300, 350), (400, None))):
            a.turns.append(Turn(number=n, response_ms=response, voice_to_voice_ms=v2v))
        cost(call("b", DAY1, 11, 60.0, "voicemail"), "telephony", 0.005)
        cost(call("c", DAY1, 23, 60.0, "wrong_number"), "telephony", 0.005)
        d = call("d", DAY2, 0, 30.0, "right_party")
        cost(d, "telephony", 0.01)
        cost(d, "tts", 0.01)
        d.turns.append(Turn(number=0, response_ms=500, voice_to_voice_ms=None))
        # stored before agent.ledger.latency's definitions: its response ran from the commit
        d.turns.append(
            Turn(
                number=1,
                response_ms=10,
                voice_to_voice_ms=700,
                latency_definition=LEGACY_DEFINITION,
            )
        )
        call("e", DAY2, 9, None, None)
        f = call("f", dt.date(2026, 11, 30), 12, 600.0, "right_party")
        cost(f, "telephony", 1.0)
        f.turns.append(Turn(number=0, response_ms=9999))
        session.flush()
        for cid in ("a", "d", "f"):
            session.add(
                Promise(
                    call_id=cid,
                    debt_id=debt.id,
                    amount_cents=5000,
                    due_date=DAY2,
                    method="card",
                    created_at=NOW,
                )
            )


@pytest.fixture
def seeded(db_engine: Engine) -> Engine:
    seed(db_engine)
    return db_engine


# -- the figures ------------------------------------------------------------------------------


def test_cost_per_minute_by_day_and_by_component(seeded: Engine) -> None:
    day1, day2 = kpis.cost_by_day(seeded, DAY1, DAY2)
    assert (day1.day, day1.calls, day1.minutes) == (DAY1, 3, 4.0)
    assert day1.cost_usd == pytest.approx(0.08)
    assert day1.usd_per_minute == pytest.approx(0.02)
    assert day1.by_component == pytest.approx(
        {"telephony": 0.0075, "stt": 0.0025, "tts": 0.0075, "tts_fallback": 0.0025}
    )
    assert day1.fallback_share == pytest.approx(0.25)
    # e is still active (no duration): not in the day's minutes nor its calls.
    assert (day2.day, day2.calls, day2.minutes) == (DAY2, 1, 0.5)
    assert day2.usd_per_minute == pytest.approx(0.04)
    assert day2.by_component == pytest.approx({"telephony": 0.02, "tts": 0.02})
    assert day2.fallback_share == 0.0


def test_latency_percentiles_by_day(seeded: Engine) -> None:
    day1, day2 = kpis.latency_by_day(seeded, DAY1, DAY2)
    assert (day1.day, day1.turns) == (DAY1, 4)
    assert (day1.response_p50_ms, day1.response_p95_ms) == (200, 400)
    assert (day1.voice_to_voice_p50_ms, day1.voice_to_voice_p95_ms) == (250, 350)
    # the legacy turn counts in voice-to-voice only (same meaning), not in the response
    assert (day2.turns, day2.response_p50_ms, day2.response_p95_ms) == (2, 500, 500)
    assert day2.voice_to_voice_p50_ms == 700
    assert kpis.response_percentile(seeded, DAY2, DAY2, 0.05) == 500


def test_fallback_share_of_tts_cost(seeded: Engine) -> None:
    share = kpis.fallback_share(seeded, DAY1, DAY2)
    assert share.numerator == pytest.approx(0.01)
    assert share.denominator == pytest.approx(0.05)
    assert share.value == pytest.approx(0.2)


def test_collection_kpis_with_numerators_and_denominators(seeded: Engine) -> None:
    by_name = {k.name: k for k in kpis.collection_kpis(seeded, DAY1, DAY2)}
    rpc = by_name["right_party_contact_rate"]
    # Right party a, d over answered by a person a, c, d (b voicemail, e unknown).
    assert (rpc.numerator, rpc.denominator, rpc.value) == (2, 3, pytest.approx(2 / 3))
    ptp = by_name["promise_to_pay_rate"]
    assert (ptp.numerator, ptp.denominator, ptp.value) == (2, 2, 1.0)
    kept = by_name["kept_promise_rate"]
    assert kept.value is None and kept.numerator is None
    assert kept.note and "no payment data" in kept.note
    cpp = by_name["cost_per_promise_usd"]
    assert cpp.numerator == pytest.approx(0.10) and cpp.denominator == 2
    assert cpp.value == pytest.approx(0.05)


def test_kept_promise_rate_once_promises_are_resolved(seeded: Engine) -> None:
    with Session(seeded) as session, session.begin():
        session.execute(update(Promise).where(Promise.call_id == "a").values(status="kept"))
        session.execute(update(Promise).where(Promise.call_id == "d").values(status="broken"))
    (kept,) = [k for k in kpis.collection_kpis(seeded, DAY1, DAY2) if k.name.startswith("kept")]
    assert (kept.numerator, kept.denominator, kept.value, kept.note) == (1, 2, 0.5, None)


def test_an_empty_range_has_no_values_and_says_why(db_engine: Engine) -> None:
    result = kpis.figures(db_engine, DAY1, DAY2, 0.04)
    assert result.cost == [] and result.latency == []
    assert all(k.value is None and k.note for k in result.kpis)


def test_a_range_that_ends_before_it_starts_is_refused(db_engine: Engine) -> None:
    with pytest.raises(ValueError):
        kpis.figures(db_engine, DAY2, DAY1, 0.04)


# -- the routes -------------------------------------------------------------------------------

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(seeded: Engine) -> AsyncIterator[Client]:
    users = Users(seeded, FAST)
    users.add("olga", PASSWORD, "owner")
    users.add("ann", PASSWORD, "operator")
    app = web.Application()
    setup_auth(app, seeded, secure_cookies=False, clock=lambda: NOW, hasher=FAST)
    add_dashboard(app)
    async with TestClient(TestServer(app)) as client:
        yield client


async def login(client: Client, username: str) -> None:
    form = await client.get("/login")
    found = re.search(r'name="csrf_token" value="([^"]*)"', await form.text())
    assert found
    data = {"username": username, "password": PASSWORD, "csrf_token": found.group(1)}
    response = await client.post("/login", data=data, allow_redirects=False)
    assert response.status == 303


def page_figures(page: str) -> dict[str, object]:
    found = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)
    assert found
    result: dict[str, object] = json.loads(found.group(1))
    return result


async def test_the_owner_sees_the_charts_the_target_lines_and_the_tiles(client: Client) -> None:
    await login(client, "olga")
    response = await client.get("/console/dashboard", params={"from": "2026-12-01"})
    assert response.status == 200
    assert response.headers["Cache-Control"] == "no-store"
    page = await response.text()
    for chart in ("cost-chart", "latency-chart", "fallback-chart"):
        assert f'<canvas id="{chart}"' in page
    assert '<script src="/static/vendor/chart.umd.min.js">' in page
    nonce = re.search(r'<script nonce="([^"]+)">', page)
    assert nonce and f"'nonce-{nonce.group(1)}'" in response.headers["Content-Security-Policy"]
    data = page_figures(page)
    assert data["target_usd_per_minute"] == 0.04  # infra/pricebook.toml
    assert (data["latency_target_ms"], data["voice_to_voice_target_ms"]) == (300.0, 600.0)
    assert 'target("target $"' in page and 'target("response target "' in page
    assert 'target("voice-to-voice target "' in page
    assert "target $0.0400/min" in page and "response target 300 ms" in page
    assert "voice-to-voice target 600 ms" in page
    # each figure's definition, from agent.ledger.latency, beside the chart
    definitions = re.search(r'<p class="note" id="latency-definitions">(.*?)</p>', page, re.S)
    assert definitions and "(VAD stop)" in definitions.group(1)
    # The tables stand without the chart: the figures are in the HTML itself.
    assert "<td>2026-12-01</td><td>3</td><td>4.0</td><td>$0.0800</td><td>$0.0200</td>" in page
    assert 'data-kpi="right_party_contact_rate"' in page and "66.7%" in page
    assert "no payment data" in page
    # The planner's choice (agent/ledger/profiles/) beside what was measured.
    planned = re.search(r'<p class="note" id="planned">(.*?)</p>', page, re.S)
    assert planned and "Predicted response p95" in planned.group(1)
    assert "measured over this range: response p95" in planned.group(1)


async def test_the_api_gives_the_same_figures_as_kpis(client: Client, seeded: Engine) -> None:
    await login(client, "olga")
    response = await client.get("/api/kpis", params={"from": "2026-12-01", "to": "2026-12-02"})
    assert response.status == 200
    body = await response.json()
    expected = kpis.figures(seeded, DAY1, DAY2, 0.04).to_json()
    assert body == expected
    assert body["cost"][0]["usd_per_minute"] == pytest.approx(0.02)
    assert [k["name"] for k in body["kpis"]] == [
        "right_party_contact_rate",
        "promise_to_pay_rate",
        "kept_promise_rate",
        "cost_per_promise_usd",
        "fallback_tts_cost_share",
    ]


async def test_the_api_defaults_to_the_last_30_days(client: Client) -> None:
    await login(client, "olga")
    body = await (await client.get("/api/kpis")).json()
    assert (body["start"], body["end"]) == ("2026-11-03", "2026-12-02")
    assert body["cost"][0]["day"] == "2026-11-30"  # f is in the default range


@pytest.mark.parametrize(
    "query",
    [{"from": "yesterday"}, {"to": "2026-13-01"}, {"from": "2026-12-02", "to": "2026-12-01"}],
)
async def test_bad_dates_are_a_400(client: Client, query: dict[str, str]) -> None:
    await login(client, "olga")
    response = await client.get("/api/kpis", params=query)
    assert response.status == 400
    assert "error" in await response.json()
    assert (await client.get("/console/dashboard", params=query)).status == 400


async def test_an_operator_gets_403(client: Client) -> None:
    await login(client, "ann")
    assert (await client.get("/console/dashboard")).status == 403
    assert (await client.get("/api/kpis")).status == 403


async def test_anonymous_pages_redirect_to_login_and_the_api_is_401(client: Client) -> None:
    page = await client.get("/console/dashboard", allow_redirects=False)
    assert page.status == 303
    assert page.headers["Location"].startswith("/login?next=%2Fconsole%2Fdashboard")
    api = await client.get("/api/kpis")
    assert api.status == 401


def test_parse_range_caps_the_span() -> None:
    today = dt.date(2026, 12, 2)
    assert parse_range({}, today) == (dt.date(2026, 11, 3), today)
    assert parse_range({"from": "2026-12-01", "to": ""}, today) == (DAY1, today)
    with pytest.raises(ValueError, match="at most"):
        parse_range({"from": "2020-01-01"}, today)


@pytest.mark.parametrize("to", ["9999-12-31", "0001-01-05"])
async def test_dates_at_the_ends_of_the_calendar_are_a_400_not_a_500(
    client: Client, to: str
) -> None:
    await login(client, "olga")
    for path in ("/api/kpis", "/console/dashboard"):
        response = await client.get(path, params={"to": to})
        assert response.status == 400 and "outside 1900-01-01" in await response.text()


# -- what the owner pays ----------------------------------------------------------------------


def _provisioning() -> kpis.Provisioning:
    """$9.60 a day of compute; 86,400 device seconds a day per model stage, 172,800 CPU seconds."""
    return kpis.Provisioning(
        "test",
        9.60,
        {"stt": 86_400.0, "llm": 86_400.0, "tts": 86_400.0, "worker": 172_800.0},
    )


def _measured(engine: Engine) -> None:
    """Call a's STT line measured, with the servers' time; a worker line on a and b."""
    with Session(engine) as session, session.begin():
        session.execute(
            update(CostLine)
            .where(CostLine.call_id == "a", CostLine.component == "stt")
            .values(basis="measured", compute_s=864.0)
        )
        for cid, cpu in (("a", 17.28), ("b", 0.0)):
            session.add(
                CostLine(
                    call_id=cid,
                    component="worker",
                    quantity=cpu,
                    unit="cpu_second",
                    unit_price_usd=0.0,
                    amount_usd=0.0,
                    price_book_version="test",
                    basis="measured",
                    compute_s=cpu,
                )
            )


def test_provisioned_cost_utilization_and_the_declared_share(seeded: Engine) -> None:
    _measured(seeded)
    day1, day2 = kpis.cost_by_day(seeded, DAY1, DAY2, _provisioning())
    # Day 1: the compute's $9.60 + the metered lines (telephony 0.03, fallback 0.01).
    assert day1.provisioned_usd == pytest.approx(9.64)
    assert day1.provisioned_usd_per_minute == pytest.approx(9.64 / 4.0)
    assert day1.usd_per_minute == pytest.approx(0.02)  # attributed: unchanged
    # Every line but a's STT rests on declared figures (stored without a basis).
    assert day1.declared_usd == pytest.approx(0.07)
    assert day1.utilization == {
        "stt": pytest.approx(0.01),
        "llm": None,
        "tts": None,
        "worker": pytest.approx(0.0001),
    }
    assert day1.worker_cpu_s_per_call == pytest.approx(17.28 / 3)
    assert day2.utilization["stt"] is None and day2.worker_cpu_s_per_call is None
    result = kpis.figures(seeded, DAY1, DAY2, 0.04, _provisioning())
    assert result.provisioned_usd_per_minute == pytest.approx((9.64 + 9.61) / 4.5)
    assert result.declared_share == pytest.approx(0.09 / 0.10)


def test_cost_per_dollar_promised_and_the_campaign_forecast(seeded: Engine) -> None:
    result = kpis.figures(seeded, DAY1, DAY2, 0.04, _provisioning(), accounts=100)
    [per_dollar] = result.owner_kpis
    # $0.10 of cost over the $100 promised on a and d.
    assert (per_dollar.numerator, per_dollar.denominator) == (pytest.approx(0.10), 100.0)
    assert per_dollar.value == pytest.approx(0.001)
    forecast = result.forecast
    assert forecast is not None
    # a, b, c, d ended with minutes (e is still active): 4 of 4 connected, 4.5 / 4 min each.
    assert (forecast.connect_rate, forecast.minutes_per_connect) == (1.0, 1.125)
    assert forecast.expected_minutes == pytest.approx(112.5)
    assert forecast.attributed_usd == pytest.approx(112.5 * 0.10 / 4.5)
    assert forecast.provisioned_usd == pytest.approx(112.5 * result.provisioned_usd_per_minute)
    with pytest.raises(ValueError, match="accounts"):
        kpis.forecast(seeded, DAY1, DAY2, -1, result)


async def test_the_owner_sees_what_a_minute_really_cost(seeded: Engine) -> None:
    _measured(seeded)
    users = Users(seeded, FAST)
    users.add("olga", PASSWORD, "owner")
    app = web.Application()
    setup_auth(app, seeded, secure_cookies=False, clock=lambda: NOW, hasher=FAST)
    add_dashboard(app, 0.04, _provisioning())
    async with TestClient(TestServer(app)) as client:
        await login(client, "olga")
        query = {"from": "2026-12-01", "to": "2026-12-02", "accounts": "100"}
        page = await (await client.get("/console/dashboard", params=query)).text()
        bad = await client.get("/api/kpis", params={"accounts": "many"})
        assert bad.status == 400
    owner = re.search(r'<p class="note" id="owner-cost">(.*?)</p>', page, re.S)
    assert owner and "attributed $0.0222/min" in owner.group(1)
    assert "provisioned $4.2778/min (profile test" in owner.group(1)
    assert '<span class="declared">90% of the attributed cost rests on declared' in owner.group(1)
    assert '<td class="declared">88% declared</td>' in page  # day 1: 0.07 of 0.08
    assert '<table id="utilization">' in page and "<td>1.00</td>" in page
    forecast = re.search(r'<p class="note" id="forecast">(.*?)</p>', page, re.S)
    assert forecast and "dialling 100 accounts" in forecast.group(1)
    assert "112 connected minutes, $2.50 attributed, $481.25 provisioned" in forecast.group(1)
    assert 'data-kpi="cost_per_promised_dollar_usd"' in page
