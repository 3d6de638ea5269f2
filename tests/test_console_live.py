"""The live-calls page and its event stream, over HTTP against a real store."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import ClientResponse
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from agent.console import live as live_module
from agent.pipeline.live_calls import CALLS, LiveCall
from agent.store.tables import Call
from tests.console import console_client, log_in

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def _active(engine: Engine, call_id: str, minutes_ago: float, **fields: str) -> None:
    with Session(engine) as session, session.begin():
        session.add(
            Call(
                id=call_id,
                transport="sip",
                direction="outbound",
                status="active",
                started_at=NOW - dt.timedelta(minutes=minutes_ago),
                **fields,
            )
        )


def _populate(engine: Engine) -> None:
    _active(engine, "c-live-1", 3, number="+16175550142", campaign="march-early-stage")
    with Session(engine) as session, session.begin():
        session.add(
            Call(
                id="c-ended",
                transport="sip",
                direction="inbound",
                status="ended",
                started_at=NOW - dt.timedelta(minutes=9),
            )
        )


@pytest.fixture
async def console(db_url: str, tmp_path: Path):
    async with console_client(db_url, tmp_path, _populate) as (client, engine):
        yield client, engine


async def _next_event(response: ClientResponse) -> list[dict[str, str]]:
    async with asyncio.timeout(10):
        while True:
            line = (await response.content.readline()).decode()
            if line.startswith("data: "):
                return json.loads(line[len("data: ") :])


async def test_the_page_lists_the_calls_in_progress_only(console) -> None:
    client, _ = console
    await log_in(client)
    response = await client.get("/console/live")
    assert response.status == 200
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    page = await response.text()
    assert 'data-call="c-live-1"' in page and "c-ended" not in page
    # The number masked, the campaign shown, the script loaded.
    assert "0142" in page and "+16175550142" not in page
    assert "march-early-stage" in page
    assert 'src="/static/console/live.js"' in page
    script = await client.get("/static/console/live.js")
    assert script.status == 200 and "EventSource" in await script.text()


async def test_the_stream_follows_calls_starting_and_ending(console, monkeypatch) -> None:
    monkeypatch.setattr(live_module, "POLL_S", 0.05)
    client, engine = console
    await log_in(client)
    async with client.get("/console/live/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        first = await _next_event(response)
        assert [c["id"] for c in first] == ["c-live-1"]
        assert first[0]["number"].endswith("0142") and "+1617" not in first[0]["number"]

        await asyncio.to_thread(_active, engine, "c-live-2", 0.5)
        second = await _next_event(response)
        assert [c["id"] for c in second] == ["c-live-2", "c-live-1"]

        def end() -> None:
            with Session(engine) as session, session.begin():
                session.execute(update(Call).where(Call.id == "c-live-1").values(status="ended"))

        await asyncio.to_thread(end)
        third = await _next_event(response)
        assert [c["id"] for c in third] == ["c-live-2"]


async def test_a_call_this_process_holds_shows_its_stage_and_last_line(console) -> None:
    client, _ = console
    await log_in(client)
    policy = SimpleNamespace(stage="verification", account=SimpleNamespace(consumer_name="Jo"))
    live = LiveCall(call=SimpleNamespace(id="c-live-1", policy=policy))  # type: ignore[arg-type]
    live.publish("agent", "Can you confirm your date of birth? <b>now</b>")
    calls = client.server.app[CALLS]
    calls.add(live, calls.reserve())
    page = await (await client.get("/console/live")).text()
    assert "verification" in page
    assert "agent: Can you confirm your date of birth? &lt;b&gt;now&lt;/b&gt;" in page
    assert "<td>Jo</td>" in page  # no debt stored: the name the call holds
    client.server.app[CALLS].ended("c-live-1")  # nothing for the shutdown to end


async def test_only_operators_and_owners_see_live_calls(console) -> None:
    client, _ = console
    for path in ("/console/live", "/console/live/events"):
        anonymous = await client.get(path, allow_redirects=False)
        assert anonymous.status == 303 and anonymous.headers["Location"].startswith("/login")
    await log_in(client, "adam")
    for path in ("/console/live", "/console/live/events"):
        assert (await client.get(path)).status == 403
    await log_in(client, "owen")
    assert (await client.get("/console/live")).status == 200
