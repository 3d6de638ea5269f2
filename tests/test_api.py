"""The console's JSON API (agent.console.api) and its OpenAPI document.

Calls are written through the ORM with what a real call leaves (turns, cost
lines, events, a promise, a contact attempt) and read back over HTTP by the
agent's own app (``make_app``, stub models) as people logged in through the
form, on SQLite and PostgreSQL. The last test starts the app on a free port and
lets schemathesis loose on every operation of the document it serves.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.pytest.lazy import get_all_tests
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session
from yarl import URL

from agent.config import Settings
from agent.console import kpis
from agent.console.api import MAX_LIMIT, OPENAPI, PREFIX, add_api
from agent.console.auth import setup_auth
from agent.console.context import CLOCK
from agent.console.dashboard import add_dashboard
from agent.console.users import Users
from agent.runtime.context import AgentRuntime
from agent.server.app import make_app
from agent.store.tables import (
    AuditEntry,
    Call,
    CallEvent,
    ContactAttempt,
    CostLine,
    Promise,
    Turn,
)
from tests.console import PEOPLE, add_consumer

#: The app's clock (``api``) and the data's, fixed: on the real clock the detail call (2 h
#: before) fell on "yesterday" between 00:00 and 02:00 UTC.
NOW = dt.datetime(2026, 12, 2, 15, 0, tzinfo=dt.UTC)
TODAY = NOW.date()
DETAIL = "c-api-detail"
NUMBER = "+16175550142"
#: Calls besides the two named ones, so the list pages.
FILLER = 7
TOTAL = FILLER + 2
RANGE = {"from": (TODAY - dt.timedelta(days=10)).isoformat(), "to": TODAY.isoformat()}


# -- data ------------------------------------------------------------------------------


def _populate(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        debt, phone = add_consumer(session, "api-c1", "Jordan Smith", NUMBER)

        def call(call_id: str, started_at: dt.datetime, disposition: str, **extra: Any) -> Call:
            row = Call(
                id=call_id,
                transport=extra.pop("transport", "sip"),
                direction=extra.pop("direction", "outbound"),
                status="ended",
                started_at=started_at,
                ended_at=started_at + dt.timedelta(seconds=120),
                duration_s=120.0,
                end_reason="agent_hangup",
                price_book_version="test",
                cost_usd=0.05,
                cost_per_minute_usd=0.025,
                disposition=disposition,
                **extra,
            )
            session.add(row)
            return row

        start = NOW - dt.timedelta(hours=2)
        detail = call(
            DETAIL,
            start,
            "promise_to_pay",
            debt_id=debt.id,
            party="right_party",
            number=NUMBER,
            campaign="spring",
            recording_uri="file:///recordings/c-api-detail.wav",
        )
        session.flush()
        session.add(
            ContactAttempt(
                debt_id=debt.id,
                consumer_id=debt.consumer_id,
                phone_id=phone.id,
                number=NUMBER,
                at=start,
                outcome="answered",
                counts=True,
                call_id=DETAIL,
                decided_by="test",
            )
        )
        for n, (user, agent) in enumerate(
            [(None, "Hello, this is Ava."), ("Yes, this is Jordan.", "Thanks, Jordan.")]
        ):
            detail.turns.append(
                Turn(
                    number=n,
                    started_at=start + dt.timedelta(seconds=10 * n) if user else None,
                    ended_at=start + dt.timedelta(seconds=10 * n + 5),
                    user_text=user,
                    agent_text=agent,
                    endpointing_ms=None if user is None else 500.0,
                    stt_ms=None if user is None else 120.0,
                    llm_ttft_ms=180.0,
                    tts_ttfb_ms=90.0,
                    transport_out_ms=20.0,
                    response_ms=410.0,
                    voice_to_voice_ms=None if user is None else 910.0,
                    llm_prompt_tokens=300,
                    llm_completion_tokens=20,
                    tts_characters=40,
                )
            )
        for component, amount in (("telephony", 0.02), ("tts", 0.02), ("tts_fallback", 0.01)):
            detail.cost_lines.append(
                CostLine(
                    component=component,
                    quantity=2.0,
                    unit="minute",
                    unit_price_usd=amount / 2,
                    amount_usd=amount,
                    price_book_version="test",
                )
            )
        for seconds, kind, detail_json in [
            (30, "blocked_sentence", {"text": "we will sue you"}),
            (1, "ai_disclosure", {}),
        ]:
            session.add(
                CallEvent(
                    call_id=DETAIL,
                    at=start + dt.timedelta(seconds=seconds),
                    kind=kind,
                    detail=detail_json,
                )
            )
        session.add(
            Promise(
                call_id=DETAIL,
                debt_id=debt.id,
                amount_cents=20_000,
                due_date=TODAY + dt.timedelta(days=3),
                method="card",
                created_at=start,
            )
        )
        call(
            "c-api-inbound",
            NOW - dt.timedelta(days=1),
            "dispute",
            transport="webrtc",
            direction="inbound",
        )
        for i in range(FILLER):
            call(f"c-api-fill-{i}", NOW - dt.timedelta(days=2, minutes=i), "no_commitment")


# -- the app and its people ----------------------------------------------------------------


@pytest.fixture
async def api(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[TestClient, Engine]]:
    config = Settings.from_env({"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path)})
    async with AgentRuntime(config, stub_models=True) as ctx:
        users = Users(ctx.engine)
        for name, (password, role) in PEOPLE.items():
            await asyncio.to_thread(users.add, name, password, role)
        await asyncio.to_thread(_populate, ctx.engine)
        app = make_app(ctx)
        app[CLOCK] = lambda: NOW  # "today" is the data's, whenever the test runs
        async with TestClient(TestServer(app)) as client:
            yield client, ctx.engine


async def log_in(client: TestClient, username: str) -> None:
    form = await client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    assert token, "no CSRF field in the login form"
    done = await client.post(
        "/login",
        data={"username": username, "password": PEOPLE[username][0], "csrf_token": token[1]},
        allow_redirects=False,
    )
    assert done.status == 303, await done.text()


async def get_json(client: TestClient, path: str, status: int = 200, **params: str) -> Any:
    response = await client.get(path, params=params)
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


PERSONAL = [f"{PREFIX}/calls", f"{PREFIX}/calls/{DETAIL}", f"{PREFIX}/calls/{DETAIL}/turns"]
AGGREGATE = [f"{PREFIX}/costs", f"{PREFIX}/kpis"]


# -- the document ------------------------------------------------------------------------


async def test_the_document_validates_and_describes_every_route(api):
    client, _ = api
    response = await client.get("/api/openapi.json")  # public: no login
    assert response.status == 200
    doc = await response.json()
    validate(doc)  # OpenAPI 3.1, and its schemas valid JSON Schema
    assert doc["openapi"] == "3.1.0"
    scheme = doc["components"]["securitySchemes"]["session"]
    assert scheme == {**scheme, "type": "apiKey", "in": "cookie", "name": "console_session"}

    served = {
        r.resource.canonical
        for r in client.app.router.routes()
        if r.resource is not None
        and r.method == "GET"
        and r.resource.canonical.startswith(f"{PREFIX}/")
    }
    assert served == {p for p in doc["paths"] if p.startswith(f"{PREFIX}/")}
    assert {"/api/calls/{call_id}", "/api/openapi.json"} <= set(doc["paths"])
    for path, item in doc["paths"].items():
        if path == "/api/openapi.json":
            assert item["get"]["security"] == []
            continue
        codes = set(item["get"]["responses"])
        assert {"200", "400", "401", "403"} <= codes, path


def test_the_cookie_in_the_document_follows_secure_cookies():
    app = web.Application()
    setup_auth(app, create_engine("sqlite://"), secure_cookies=True)
    add_dashboard(app, 0.02)
    add_api(app)
    scheme = app[OPENAPI]["components"]["securitySchemes"]["session"]
    assert scheme["name"] == "__Host-console_session"


# -- the routes ---------------------------------------------------------------------------


async def test_the_call_list_filters_and_pages(api):
    client, _ = api
    await log_in(client, "olive")
    page = await get_json(client, f"{PREFIX}/calls")
    ids = [c["id"] for c in page["calls"]]
    assert ids[:2] == [DETAIL, "c-api-inbound"] and len(ids) == TOTAL
    assert page["next"] is None
    first = page["calls"][0]
    assert first["number"] == "...0142" and NUMBER not in str(page)
    assert first["consumer"] == "Jordan Smith" and first["flagged"] is True
    assert first["url"] == f"{PREFIX}/calls/{DETAIL}"
    if "campaign" in first:  # once find_calls selects it
        assert first["campaign"] == "spring"

    async def ids_for(**params: str) -> list[str]:
        return [c["id"] for c in (await get_json(client, f"{PREFIX}/calls", **params))["calls"]]

    assert await ids_for(number="0142") == [DETAIL]
    assert await ids_for(number="+1 (617) 555-0142") == [DETAIL]
    assert await ids_for(name="jordan") == [DETAIL]
    assert await ids_for(disposition="dispute") == ["c-api-inbound"]
    assert await ids_for(transport="webrtc") == ["c-api-inbound"]
    assert await ids_for(campaign="spring") == [DETAIL]
    assert await ids_for(flagged="true") == [DETAIL]
    assert len(await ids_for(flagged="false")) == TOTAL
    yesterday = (TODAY - dt.timedelta(days=1)).isoformat()
    assert await ids_for(**{"from": yesterday, "to": yesterday}) == ["c-api-inbound"]

    # Keyset pages of 2, following `next`: every call once, newest first.
    seen: list[str] = []
    url: str | None = f"{PREFIX}/calls?limit=2&disposition=no_commitment"
    while url:
        page = await get_json(client, url)
        assert len(page["calls"]) <= 2
        seen += [c["id"] for c in page["calls"]]
        url = page["next"]
        if url:
            assert "disposition=no_commitment" in url and "limit=2" in url
            assert parse_qs(urlsplit(url).query)["before"] == [page["next_cursor"]]
    assert seen == [f"c-api-fill-{i}" for i in range(FILLER)]


async def test_one_call_its_turns_and_the_older_path(api):
    client, engine = api
    await log_in(client, "olive")
    call = await get_json(client, f"{PREFIX}/calls/{DETAIL}")
    assert (
        call["id"] == DETAIL
        and call["status"] == "ended"
        and call["disposition"] == ("promise_to_pay")
    )
    assert call["number"] == "...0142" and NUMBER not in str(call)
    assert call["campaign"] == "spring"
    assert call["recording_uri"] == "file:///recordings/c-api-detail.wav"
    assert call["consumer"]["name"] == "Jordan Smith" and call["flagged"] is True
    assert [t["number"] for t in call["turns"]] == [0, 1]
    assert call["turns"][1]["user_text"] == "Yes, this is Jordan."
    assert call["turns"][1]["voice_to_voice_ms"] == 910.0
    assert [c["component"] for c in call["cost_lines"]] == ["telephony", "tts", "tts_fallback"]
    assert [e["kind"] for e in call["events"]] == ["ai_disclosure", "blocked_sentence"]
    assert call["promises"][0]["amount_cents"] == 20_000
    assert call["promises"][0]["status"] == "open"
    assert call["contact_ledger"]["attempts_used_7d"] == 1

    turns = await get_json(client, f"{PREFIX}/calls/{DETAIL}/turns")
    assert turns == {"call_id": DETAIL, "turns": call["turns"]}
    # The older path, as the caller's page and scripts use it: the same record.
    assert await get_json(client, f"/api/calls/{DETAIL}") == call

    missing = await get_json(client, f"{PREFIX}/calls/no-such-call", status=404)
    assert "no-such-call" in missing["error"]
    await get_json(client, f"{PREFIX}/calls/no-such-call/turns", status=404)

    with Session(engine) as session:
        trail = session.execute(
            select(AuditEntry.action, AuditEntry.object_id).order_by(AuditEntry.id)
        ).all()
    views = [(a, o) for a, o in trail if a.startswith("view_")]
    # Each view is audited; an unknown call showed nothing and is not.
    assert views == [
        ("view_call", DETAIL),
        ("view_transcript", DETAIL),
        ("view_call", DETAIL),
    ]


async def test_costs_and_kpis_are_the_dashboards_figures(api):
    client, engine = api
    await log_in(client, "owen")
    ours = await get_json(client, f"{PREFIX}/kpis", **RANGE)
    assert ours == await get_json(client, "/api/kpis", **RANGE)
    assert ours["start"] == RANGE["from"] and ours["end"] == RANGE["to"]

    costs = await get_json(client, f"{PREFIX}/costs", **RANGE)
    assert costs["from"] == RANGE["from"] and costs["to"] == RANGE["to"]
    assert costs["days"] == ours["cost"]
    days = kpis.cost_by_day(engine, TODAY - dt.timedelta(days=10), TODAY)
    assert [d["day"] for d in costs["days"]] == [d.day.isoformat() for d in days]
    assert costs["components"] == ["telephony", "tts", "tts_fallback"]
    today = next(
        d for d in costs["days"] if d["day"] == (NOW - dt.timedelta(hours=2)).date().isoformat()
    )
    assert today["by_component"]["tts_fallback"] == pytest.approx(0.01 / today["minutes"])
    # Both match their schemas in the served document, which lists every field they hold
    # (DayCost, Kpis and Costs are closed: a field added to a response must be described).
    document = await get_json(client, "/api/openapi.json")
    for body, name in ((ours, "Kpis"), (costs, "Costs")):
        schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
        errors = list(Draft202012Validator(schema).iter_errors(body))
        assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]
    assert {"provisioned_usd_per_minute", "utilization", "declared_usd"} <= set(today)
    assert {"provisioned_usd_per_minute", "declared_share", "owner_kpis"} <= set(ours)
    # Without a range: the last 30 days, as the dashboard.
    default = await get_json(client, f"{PREFIX}/costs")
    assert default["to"] == TODAY.isoformat()
    assert default["from"] == (TODAY - dt.timedelta(days=29)).isoformat()


#: (path, query, what the 400's message says); one app for all, as each costs a login.
BAD_INPUT = [
    (f"{PREFIX}/calls", {"from": "yesterday"}, "from='yesterday' is not a date"),
    (f"{PREFIX}/calls", {"to": "2026-02-30"}, "to='2026-02-30' is not a date"),
    (f"{PREFIX}/calls", {"from": "20260101"}, "is not a date (YYYY-MM-DD)"),
    (f"{PREFIX}/calls", {"to": "0001-01-01"}, "outside 1900-01-01 to 9999-12-30"),
    (f"{PREFIX}/calls", {"from": "2026-03-02", "to": "2026-03-01"}, "is before from"),
    (f"{PREFIX}/calls", {"before": "nonsense"}, "before must be the cursor"),
    (f"{PREFIX}/calls", {"before": "2026-13-01T00:00:00~c1"}, "before must be the cursor"),
    (f"{PREFIX}/calls", {"before": "0001-01-01T00:00:00+05:00~c1"}, "before must be"),
    (f"{PREFIX}/calls", {"limit": "0"}, f"limit must be a whole number from 1 to {MAX_LIMIT}"),
    (f"{PREFIX}/calls", {"limit": str(MAX_LIMIT + 1)}, "limit must be a whole number"),
    (f"{PREFIX}/calls", {"limit": "ten"}, "limit must be a whole number"),
    (f"{PREFIX}/calls", {"disposition": "paid"}, "unknown disposition 'paid': one of"),
    (f"{PREFIX}/calls", {"number": "abc"}, "number must hold 1 to 15 digits"),
    (f"{PREFIX}/calls", {"flagged": "maybe"}, "flagged must be true or false"),
    (f"{PREFIX}/calls", {"name": "x" * 201}, "name is longer than 200 characters"),
    (f"{PREFIX}/calls", {"name": "a\x00b"}, "name must not contain control characters"),
    (f"{PREFIX}/calls/{'x' * 33}", {}, "call_id must be 1 to 32 characters"),
    (f"{PREFIX}/calls/a%00b/turns", {}, "call_id must be"),
    ("/api/calls/a%00b", {}, "call_id must be"),
    (f"{PREFIX}/costs", {"from": "2026-01-01", "to": "2027-06-01"}, "at most 366 days"),
    (f"{PREFIX}/costs", {"to": "9999-12-31"}, "outside 1900-01-01 to 9999-12-30"),
    (f"{PREFIX}/kpis", {"from": "2026-03-02", "to": "2026-03-01"}, "is before from"),
    (f"{PREFIX}/kpis", {"from": "1-1-1"}, "from='1-1-1' is not a date"),
    (f"{PREFIX}/kpis", {"to": "0001-01-05"}, "outside 1900-01-01 to 9999-12-30"),
    (f"{PREFIX}/calls", {"campaign": "c" * 129}, "campaign is longer than 128 characters"),
    (f"{PREFIX}/calls", {"transport": "sip\n"}, "transport must not contain control characters"),
    (f"{PREFIX}/calls", {"before": "2026-01-01T00:00:00~c\x00"}, "before must not contain control"),
    (f"{PREFIX}/calls", {"limit": "1e3"}, "limit must be a whole number"),
]


async def test_bad_input_is_a_400_that_says_what_is_wrong(api):
    client, _ = api
    await log_in(client, "owen")
    wrong = []
    for path, params, message in BAD_INPUT:
        response = await client.get(path, params=params)
        body = await response.json() if response.content_type == "application/json" else {}
        if not (
            response.status == 400
            and response.headers.get("Cache-Control") == "no-store"
            and set(body) == {"error"}
            and message in body["error"]
        ):
            wrong.append(f"{path} {params}: {response.status} {body or await response.text()}")
    assert not wrong, "\n".join(wrong)


async def test_unknown_routes_and_methods_under_v1_answer_json(api):
    client, _ = api
    await log_in(client, "owen")
    missing = await get_json(client, f"{PREFIX}/nothing-here", status=404)
    assert missing["error"]
    response = await client.post(f"{PREFIX}/calls")
    assert response.status == 405 and "GET" in response.headers["Allow"]
    assert "error" in await response.json()


async def test_anonymous_requests_are_refused(api):
    client, engine = api
    for path in [*PERSONAL, *AGGREGATE, f"/api/calls/{DETAIL}"]:
        body = await get_json(client, path, status=401)
        assert body == {"error": "log in first: POST /login"}
    with Session(engine) as session:
        actions = session.scalars(select(AuditEntry.action)).all()
    assert not [a for a in actions if a.startswith("view_")]


async def test_an_admin_may_not_read_calls_nor_an_operator_the_aggregates(api):
    client, engine = api
    await log_in(client, "adam")
    for path in [*PERSONAL, f"/api/calls/{DETAIL}"]:
        assert "admin may not see this" in (await get_json(client, path, status=403))["error"]
    with Session(engine) as session:
        actions = session.scalars(select(AuditEntry.action)).all()
    assert not [a for a in actions if a.startswith("view_")]  # refused: not a view

    await log_in(client, "olive")
    for path in AGGREGATE:  # owners only, as /api/kpis
        await get_json(client, path, status=403)


# -- a property-based run against the real server ----------------------------------------------

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@dataclass
class Fuzzed:
    operations: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)


def _fuzz(base_url: str, headers: dict[str, str], max_examples: int) -> Fuzzed:
    """schemathesis over every operation of the served document, in each of its phases.

    The phases: the examples, coverage (boundary and invalid values, methods the API does
    not have) and fuzzing (positive and negative data, ``max_examples`` a mode). The first
    failed check raises, with a curl line that reproduces it.

    ``get_all_tests`` builds those per-operation Hypothesis tests for
    ``schemathesis.pytest.from_fixture``, whose own pytest wrapper does not run under
    pytest 9 (it sets ``item._nodeid``); the tests it builds need no pytest.
    """
    schema = schemathesis.openapi.from_url(f"{base_url}/api/openapi.json")
    fuzzed = Fuzzed()

    def check(case: Any) -> None:
        response = case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)
        fuzzed.statuses[response.status_code] += 1

    run = settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    for built in get_all_tests(schema=schema, test_func=check, settings=run, given_kwargs=None):
        operation, test = built.ok()
        fuzzed.operations.append(operation.label)
        test()
        if "{call_id}" in operation.path:
            # Random ids are all unknown: a call that exists, so its full record is checked.
            known = operation.as_strategy(path_parameters={"call_id": DETAIL})
            run(given(case=known)(check))()
    return fuzzed


async def test_schemathesis_finds_no_server_error(db_url: str, tmp_path: Path):
    config = Settings.from_env({"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path)})
    async with AgentRuntime(config, stub_models=True) as ctx:
        await asyncio.to_thread(Users(ctx.engine).add, "owen", *PEOPLE["owen"])
        await asyncio.to_thread(_populate, ctx.engine)
        runner = web.AppRunner(make_app(ctx))
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)  # a free port
            await site.start()
            base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            jar = aiohttp.CookieJar(unsafe=True)  # cookies for an IP address
            async with aiohttp.ClientSession(base_url, cookie_jar=jar) as http:
                form = await (await http.get("/login")).text()
                token = re.search(r'name="csrf_token" value="([^"]+)"', form)
                assert token
                done = await http.post(
                    "/login",
                    data={
                        "username": "owen",
                        "password": PEOPLE["owen"][0],
                        "csrf_token": token[1],
                    },
                    allow_redirects=False,
                )
                assert done.status == 303
            cookie = jar.filter_cookies(URL(base_url))["console_session"]
            headers = {"Cookie": f"{cookie.key}={cookie.value}"}  # an owner may call them all
            started = time.monotonic()
            # schemathesis is synchronous: it runs in a thread while this loop serves it.
            fuzzed = await asyncio.to_thread(_fuzz, base_url, headers, 25)
            elapsed = time.monotonic() - started
        finally:
            await runner.cleanup()
    print(
        f"\nschemathesis: {len(fuzzed.operations)} operations, "
        f"{sum(fuzzed.statuses.values())} requests, "
        f"statuses {dict(sorted(fuzzed.statuses.items()))}, {elapsed:.1f} s"
    )
    # Every operation but the document itself, which schemathesis leaves out (its source).
    assert len(fuzzed.operations) == 6
    assert {200, 400, 404} <= set(fuzzed.statuses)
