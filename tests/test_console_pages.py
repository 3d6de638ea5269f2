"""The operator's console pages: the call list, a call's detail, the queues.

Calls are inserted through the ORM with the fields a real call leaves (turns
with their latency parts, compliance events, a contact attempt, a promise),
then read back over HTTP as an operator logged in through the form. One test
drives headless Chromium through the same pages and keeps screenshots.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import wave
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.console.calls import CallFilter, find_calls
from agent.console.context import CLOCK
from agent.console.users import Users
from agent.runtime.context import AgentRuntime
from agent.server.app import make_app
from agent.store.tables import (
    AuditEntry,
    Call,
    CallEvent,
    ContactAttempt,
    Debt,
    Phone,
    Promise,
    Turn,
)
from tests.console import add_consumer

PASSWORD = "a long operator password"
CHROMIUM = Path("/usr/bin/chromium")
#: The console's clock (``_app``) and the data's, fixed: on the real clock the pages' "today"
#: and the data's drifted apart, and a day's boundary moved calls between days.
NOW = dt.datetime(2026, 12, 2, 15, 0, tzinfo=dt.UTC)
#: The call the detail tests open.
DETAIL = "c-detail-0001"
#: 60 filler calls, so the list has two pages.
FILLER = 60
#: The campaign every fourth filler call was dialled for.
CAMPAIGN = "2026-12-early-stage"
#: An inbound call: its number is the caller id, on the call, with no contact attempt.
INBOUND = "c-inbound-0001"


def _call(
    session: Session,
    call_id: str,
    debt: Debt,
    phone: Phone,
    started_at: dt.datetime,
    disposition: str,
    transport: str = "sip",
    campaign: str | None = None,
) -> Call:
    call = Call(
        id=call_id,
        transport=transport,
        direction="outbound",
        number=phone.number,
        campaign=campaign,
        status="ended",
        started_at=started_at,
        ended_at=started_at + dt.timedelta(seconds=95),
        duration_s=95.0,
        end_reason="agent_hangup",
        cost_usd=0.0312,
        debt_id=debt.id,
        party="right_party",
        disposition=disposition,
    )
    session.add(call)
    session.flush()
    session.add(
        ContactAttempt(
            debt_id=debt.id,
            consumer_id=debt.consumer_id,
            phone_id=phone.id,
            number=phone.number,
            at=started_at,
            outcome="answered",
            counts=True,
            call_id=call_id,
            decided_by="test",
        )
    )
    return call


def _populate(engine) -> None:
    with Session(engine) as session, session.begin():
        jordan, jordan_phone = add_consumer(session, "c1", "Jordan <b>Smith</b>", "+16175550142")
        maria, maria_phone = add_consumer(session, "c2", "Maria Lopez", "+13125559876")
        lee, lee_phone = add_consumer(session, "c3", "Lee Chen", "+14155550999")
        lee.disputed = True  # c-dispute's verification is not sent yet
        for i in range(FILLER):
            _call(
                session,
                f"c-fill-{i:04d}",
                maria,
                maria_phone,
                NOW - dt.timedelta(days=3, minutes=i),
                "no_commitment" if i % 2 else "refused",
                transport="webrtc" if i % 3 == 0 else "sip",
                campaign=CAMPAIGN if i % 4 == 0 else "2026-12-late-stage",
            )
        # An inbound caller the agent matched to no account: no debt, no contact attempt.
        session.add(
            Call(
                id=INBOUND,
                transport="sip",
                direction="inbound",
                status="ended",
                started_at=NOW - dt.timedelta(hours=1),
                ended_at=NOW - dt.timedelta(minutes=59),
                duration_s=40.0,
                disposition="wrong_number",
                number="+17735554466",
            )
        )
        start = NOW - dt.timedelta(hours=2)
        call = _call(session, DETAIL, jordan, jordan_phone, start, "promise_to_pay")
        texts = [
            (None, "Hello, this is Ava, an automated assistant calling for Example Recovery."),
            ("Yes, this is Jordan.", "Thanks. Can you confirm your date of birth?"),
            ("March third, 1980.", "This is an attempt to collect a debt. Can you pay today?"),
            ("I can pay two hundred on Friday.", "I have recorded a promise of $200.00."),
        ]
        for n, (user, agent) in enumerate(texts):
            at = start + dt.timedelta(seconds=10 * n)
            call.turns.append(
                Turn(
                    number=n,
                    started_at=at if user else None,
                    ended_at=at + dt.timedelta(seconds=6),
                    user_text=user,
                    agent_text=agent,
                    endpointing_ms=None if user is None else 500.0,
                    stt_ms=None if user is None else 120.0 + n,
                    llm_ttft_ms=180.0 + 10 * n,
                    tts_ttfb_ms=90.0,
                    transport_out_ms=20.0,
                    response_ms=410.0 + 10 * n,
                    voice_to_voice_ms=None if user is None else 910.0 + 10 * n,
                )
            )
        # Inserted out of order: the page sorts them by time.
        for seconds, kind, detail in [
            (31, "mini_miranda", {}),
            (1, "ai_disclosure", {}),
            (2, "recording_notice", {}),
            (21, "verification", {"method": "date_of_birth"}),
            (33, "blocked_sentence", {"text": "we will sue you <today>"}),
            (40, "disposition", {"disposition": "promise_to_pay"}),
        ]:
            session.add(
                CallEvent(
                    call_id=DETAIL,
                    at=start + dt.timedelta(seconds=seconds),
                    kind=kind,
                    detail=detail,
                )
            )
        session.add(
            Promise(
                call_id=DETAIL,
                debt_id=jordan.id,
                amount_cents=20_000,
                due_date=(NOW + dt.timedelta(days=3)).date(),
                method="card",
                created_at=start,
            )
        )
        # The queues.
        _call(session, "c-dispute", lee, lee_phone, NOW - dt.timedelta(hours=5), "dispute")
        _call(
            session,
            "c-escalated",
            lee,
            lee_phone,
            NOW - dt.timedelta(hours=6),
            "escalated_to_human",
        )
        # Handed to a person for a bankruptcy (C8): an escalation, whatever its disposition.
        robin, robin_phone = add_consumer(session, "c5", "Robin Vale", "+13125550188")
        _call(session, "c-bankrupt", robin, robin_phone, NOW - dt.timedelta(hours=8), "bankruptcy")
        session.add(
            CallEvent(
                call_id="c-bankrupt",
                at=NOW - dt.timedelta(hours=8),
                kind="handoff",
                detail={"reason": "bankruptcy", "now": False},
            )
        )
        _call(
            session,
            "c-callback",
            jordan,
            jordan_phone,
            NOW - dt.timedelta(days=9),
            "callback_requested",
        )
        session.add(
            CallEvent(
                call_id="c-callback",
                at=NOW - dt.timedelta(days=9),
                kind="callback_requested",
                detail={"date": (NOW - dt.timedelta(days=1)).date().isoformat()},
            )
        )
        _call(
            session,
            "c-callback-later",
            lee,
            lee_phone,
            NOW - dt.timedelta(hours=7),
            "callback_requested",
        )
        session.add(
            CallEvent(
                call_id="c-callback-later",
                at=NOW - dt.timedelta(hours=7),
                kind="callback_requested",
                detail={"date": (NOW + dt.timedelta(days=4)).date().isoformat()},
            )
        )
        sam, sam_phone = add_consumer(session, "c4", "Sam Park", "+12065550123")
        _call(
            session,
            "c-callback-due",
            sam,
            sam_phone,
            NOW - dt.timedelta(days=4),
            "callback_requested",
        )
        session.add(
            CallEvent(
                call_id="c-callback-due",
                at=NOW - dt.timedelta(days=4),
                kind="callback_requested",
                detail={"date": (NOW - dt.timedelta(days=2)).date().isoformat()},
            )
        )
        old = _call(
            session,
            "c-old-promise",
            maria,
            maria_phone,
            NOW - dt.timedelta(days=20),
            "promise_to_pay",
        )
        session.add(
            Promise(
                call_id=old.id,
                debt_id=maria.id,
                amount_cents=7_500,
                due_date=(NOW - dt.timedelta(days=10)).date(),
                method="ach",
                created_at=old.started_at,
            )
        )


async def _runtime_client(db_url: str, tmp_path: Path):
    settings = Settings.from_env({"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path)})
    runtime = AgentRuntime(settings, stub_models=True)
    ctx = await runtime.__aenter__()
    users = Users(ctx.engine)
    await asyncio.to_thread(users.add, "olive", PASSWORD, "operator")
    await asyncio.to_thread(users.add, "adam", "a long admin password!", "admin")
    await asyncio.to_thread(_populate, ctx.engine)
    return runtime, ctx


def _app(ctx):
    """The server's app on the fixture's clock: what it calls today is NOW's day."""
    app = make_app(ctx)
    app[CLOCK] = lambda: NOW
    return app


@pytest.fixture
async def console(db_url, tmp_path):
    runtime, ctx = await _runtime_client(db_url, tmp_path)
    try:
        async with TestClient(TestServer(_app(ctx))) as client:
            yield client, ctx.engine
    finally:
        await runtime.__aexit__(None, None, None)


async def log_in(client, username="olive", password=PASSWORD):
    form = await client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text()).group(1)
    done = await client.post(
        "/login",
        data={"username": username, "password": password, "csrf_token": token},
        allow_redirects=False,
    )
    assert done.status in (302, 303), await done.text()


def _call_ids(page: str) -> list[str]:
    return re.findall(r'<tr data-call="([^"]+)"', page)


async def test_anonymous_is_sent_to_the_login_form(console):
    client, _ = console
    for path in ("/console", f"/console/calls/{DETAIL}", "/console/queues"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 303
        assert response.headers["Location"].startswith("/login?next=")


async def test_the_list_filters_and_pages(console):
    client, _ = console
    await log_in(client)
    response = await client.get("/console")
    assert response.status == 200
    assert response.headers["Cache-Control"] == "no-store"
    page = await response.text()
    ids = _call_ids(page)
    assert len(ids) == 50
    # Newest first: the detail call (2 h ago) before the dispute (5 h ago).
    assert ids.index(DETAIL) < ids.index("c-dispute")
    # Escaped, and the number masked to its last four.
    assert "Jordan &lt;b&gt;Smith&lt;/b&gt;" in page and "<b>Smith" not in page
    assert "0142" in page and "+16175550142" not in page
    # The logout form carries the session's CSRF token.
    assert re.search(r'action="/logout"><input type="hidden" name="csrf_token" value="[^"]+"', page)

    older = re.search(r'class="older" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    second = _call_ids(await (await client.get(older)).text())
    total = FILLER + 9
    assert len(second) == total - 50 and not set(ids) & set(second)

    by_disposition = _call_ids(await (await client.get("/console?disposition=dispute")).text())
    assert by_disposition == ["c-dispute"]
    by_number = _call_ids(await (await client.get("/console?number=0142")).text())
    assert sorted(by_number) == sorted([DETAIL, "c-callback"])
    # Typed as the whole number, punctuation and all: the digits are what counts.
    by_whole = _call_ids(await (await client.get("/console?number=%2B1+617-555-0142")).text())
    assert by_whole == [DETAIL, "c-callback"]
    assert _call_ids(await (await client.get("/console?number=99999")).text()) == []
    by_name = _call_ids(await (await client.get("/console?name=lee+chen")).text())
    assert sorted(by_name) == sorted(["c-dispute", "c-escalated", "c-callback-later"])
    by_campaign = _call_ids(await (await client.get(f"/console?campaign={CAMPAIGN}")).text())
    assert sorted(by_campaign) == [f"c-fill-{i:04d}" for i in range(0, FILLER, 4)]
    assert _call_ids(await (await client.get("/console?campaign=2026-12")).text()) == []
    flagged = _call_ids(await (await client.get("/console?flagged=1")).text())
    assert flagged == [DETAIL]
    webrtc = _call_ids(await (await client.get("/console?transport=webrtc")).text())
    assert len(webrtc) == FILLER // 3
    # What the request said comes back escaped; what cannot be read is refused, saying why.
    hostile = await client.get('/console?name="><script>x</script>')
    assert hostile.status == 200
    text = await hostile.text()
    assert "<script>x" not in text and "&quot;&gt;&lt;script&gt;x&lt;/script&gt;" in text
    for query, reason in [
        ("before=junk", "before must be the cursor"),
        ("from=nope", "from=&#x27;nope&#x27; is not a date"),
        ("to=9999-12-31", "outside 1900-01-01 to 9999-12-30"),
        ("before=0001-01-01T00:00:00%2B05:00~x", "before must be the cursor"),
        ("name=a%00b", "control characters"),
        ("disposition=happy", "unknown disposition &#x27;happy&#x27;"),
        ("from=2026-02-02&to=2026-02-01", "is before"),
    ]:
        refused = await client.get(f"/console?{query}")
        assert refused.status == 400, query
        assert reason in await refused.text(), query
    day = (NOW - dt.timedelta(days=3)).date().isoformat()
    in_range = _call_ids(await (await client.get(f"/console?from={day}&to={day}")).text())
    assert all(i.startswith("c-fill-") for i in in_range) and len(in_range) >= FILLER - 30


async def test_an_inbound_call_is_found_by_the_callers_number(console):
    client, _ = console
    await log_in(client)
    page = await (await client.get("/console?number=4466")).text()
    assert _call_ids(page) == [INBOUND]
    row = page.split(f'data-call="{INBOUND}"')[1].split("</tr>")[0]
    assert "4466" in row and "+17735554466" not in page and "inbound" in row
    # The newest page shows it too, with its number, though it has no contact attempt.
    newest = await (await client.get("/console")).text()
    assert _call_ids(newest)[0] == INBOUND and "4466" in newest


async def test_the_campaign_filter_pages_and_keeps_itself(console):
    client, engine = console
    await log_in(client)
    page = await (await client.get(f"/console?campaign={CAMPAIGN}&disposition=refused")).text()
    # Every fourth filler call is in the campaign, and all of those (even i) were refused.
    assert sorted(_call_ids(page)) == [f"c-fill-{i:04d}" for i in range(0, FILLER, 4)]
    assert f'name="campaign" value="{CAMPAIGN}"' in page
    first, cursor = await asyncio.to_thread(find_calls, engine, CallFilter(campaign=CAMPAIGN), 10)
    assert len(first) == 10 and cursor is not None
    f = CallFilter.from_query({"campaign": CAMPAIGN, "before": cursor})
    rest, end = await asyncio.to_thread(find_calls, engine, f, 10)
    assert len(rest) == FILLER // 4 - 10 and end is None
    assert {r.campaign for r in first + rest} == {CAMPAIGN}
    older = CallFilter(campaign=CAMPAIGN).query_string(before=cursor)
    assert f"campaign={CAMPAIGN}" in older and "before=" in older


async def test_a_call_shows_transcript_timeline_waterfall_and_is_audited(console):
    client, engine = console
    await log_in(client)
    response = await client.get(f"/console/calls/{DETAIL}")
    assert response.status == 200
    page = await response.text()
    assert "I can pay two hundred on Friday." in page
    assert "automated assistant calling for Example Recovery" in page
    assert "promise_to_pay" in page and "$200.00" in page and "card" in page
    assert "...0142" in page and "+16175550142" not in page
    kinds = re.findall(r'<li class="event[^"]*" data-kind="([^"]+)"', page)
    assert kinds == [
        "ai_disclosure",
        "recording_notice",
        "verification",
        "mini_miranda",
        "blocked_sentence",
        "disposition",
    ]
    assert "we will sue you &lt;today&gt;" in page
    bars = re.findall(r'data-part="([a-z_]+)"[^>]*style="left:([\d.]+)%;width:([\d.]+)%', page)
    parts = {part for part, _, _ in bars}
    assert parts == {"endpointing_ms", "stt_ms", "llm_ttft_ms", "tts_ttfb_ms", "transport_out_ms"}
    assert len(re.findall(r'class="wf-row"', page)) == 4
    # Each bar starts where the one before it ended, within a turn.
    last = [bar for bar in bars][-5:]
    for (_, left_a, width_a), (_, left_b, _) in zip(last, last[1:], strict=False):
        assert abs(float(left_a) + float(width_a) - float(left_b)) < 0.02
    assert "voice-to-voice 940 ms" in page
    # The debt's pre-dial ledger: counted attempts against its 7-day cap.
    ledger = page.split('id="ledger"')[1].split("</section>")[0]
    used, cap = map(int, re.search(r"(\d+) of (\d+)", ledger).groups())
    assert 0 <= used <= cap and cap in (2, 3, 7) and "Next allowed call" in ledger

    with Session(engine) as session:
        entries = session.scalars(select(AuditEntry).where(AuditEntry.action == "view_call")).all()
    assert [(entry.object_id, entry.user_id is not None) for entry in entries] == [(DETAIL, True)]

    missing = await client.get("/console/calls/no-such-call")
    assert missing.status == 404 and "No such call" in await missing.text()


async def test_an_admin_may_not_see_calls(console):
    client, engine = console
    await log_in(client, "adam", "a long admin password!")
    for path in ("/console", f"/console/calls/{DETAIL}", "/console/queues"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 403, path
    with Session(engine) as session:
        assert session.scalar(select(AuditEntry).where(AuditEntry.action == "view_call")) is None


async def test_the_queues(console):
    client, _ = console
    await log_in(client)
    page = await (await client.get("/console/queues")).text()
    sections = dict(re.findall(r'<section id="([a-z]+)">(.*?)</section>', page, re.S))
    assert _call_ids(sections["disputes"]) == ["c-dispute"]
    assert _call_ids(sections["escalations"]) == ["c-escalated", "c-bankrupt"]
    # c-callback was due yesterday, but a later call (the detail call) reached that debt;
    # c-callback-later is not due yet.
    assert _call_ids(sections["callbacks"]) == ["c-callback-due"]
    assert "asked for" in sections["callbacks"]
    assert _call_ids(sections["broken"]) == ["c-old-promise"]
    assert "No payments are recorded" in sections["broken"]


async def test_a_disputes_verification_sent_lifts_the_suppression(console):
    """D9: a disputed debt is not called until its verification is sent; the operator marks
    it sent from the queue (a CSRF-bound form, audited) and it leaves the queue."""
    client, engine = console
    await log_in(client)
    page = await (await client.get("/console/queues")).text()
    disputes = dict(re.findall(r'<section id="([a-z]+)">(.*?)</section>', page, re.S))["disputes"]
    form = re.search(
        r'action="/console/debts/(\d+)/dispute-verified"><input type="hidden" '
        r'name="csrf_token" value="([^"]+)"',
        disputes,
    )
    assert form is not None, disputes
    debt_id, token = form.groups()
    path = f"/console/debts/{debt_id}/dispute-verified"
    refused = await client.post(path, data={}, allow_redirects=False)
    assert refused.status == 403
    with Session(engine) as session:
        assert session.get(Debt, int(debt_id)).disputed

    done = await client.post(path, data={"csrf_token": token}, allow_redirects=False)
    assert done.status == 303 and done.headers["Location"] == "/console/queues"
    with Session(engine) as session:
        assert not session.get(Debt, int(debt_id)).disputed
        entry = session.scalar(select(AuditEntry).where(AuditEntry.action == "dispute_verified"))
        assert entry is not None and entry.object_id == debt_id and entry.detail is None
    page = await (await client.get("/console/queues")).text()
    disputes = dict(re.findall(r'<section id="([a-z]+)">(.*?)</section>', page, re.S))["disputes"]
    assert _call_ids(disputes) == [] and "No disputes." in disputes

    missing = await client.post(
        "/console/debts/999999/dispute-verified", data={"csrf_token": token}, allow_redirects=False
    )
    assert missing.status == 404


def _record(engine, call_id: str, directory: Path) -> None:
    """A stereo WAV for ``call_id`` in the file store, as the recorder leaves one."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{call_id}.wav"
    t = np.arange(8000 * 3) / 8000
    left = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    right = (8000 * np.sin(2 * np.pi * 660 * t)).astype(np.int16)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(8000)
        wav.writeframes(np.column_stack([left, right]).tobytes())
    with Session(engine) as session, session.begin():
        session.get(Call, call_id).recording_uri = path.resolve().as_uri()


#: Where the browser test leaves its screenshots (CONSOLE_SCREENSHOTS overrides).
SCREENSHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "screenshots"


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")
async def test_in_a_browser(tmp_path):
    """The acceptance walk: an operator works a call (list, filter, audio, waterfall, live
    calls), an owner sees the charts, an admin the users; what each may not see is refused."""
    from playwright.async_api import async_playwright

    runtime, ctx = await _runtime_client(f"sqlite:///{tmp_path / 'agent.db'}", tmp_path)
    await asyncio.to_thread(Users(ctx.engine).add, "owen", "a long owner password!", "owner")
    await asyncio.to_thread(_record, ctx.engine, DETAIL, tmp_path / "recordings")
    shots = Path(os.environ.get("CONSOLE_SCREENSHOTS") or SCREENSHOTS)
    shots.mkdir(parents=True, exist_ok=True)
    taken: list[str] = []

    async def shot(page, name: str) -> None:
        await page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        taken.append(name)

    async def log_in_as(page, base: str, username: str, password: str, home: str) -> None:
        await page.goto(f"{base}/login")
        await page.fill("input[name=username]", username)
        await page.fill("input[name=password]", password)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{base}{home}")

    try:
        async with TestServer(_app(ctx), host="127.0.0.1") as server:
            base = str(server.make_url("/"))[:-1]
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=str(CHROMIUM),
                    headless=True,
                    args=[
                        "--disable-gpu",
                        "--no-first-run",
                        "--disable-background-networking",
                        "--autoplay-policy=no-user-gesture-required",
                    ],
                )
                try:
                    # Anonymous: a call page goes to the login form, the API is refused.
                    anonymous = await browser.new_page()
                    await anonymous.goto(f"{base}/console/calls/{DETAIL}")
                    assert "/login" in anonymous.url
                    await shot(anonymous, "login")
                    for path in ("/api/v1/calls", f"/api/calls/{DETAIL}/recording"):
                        assert (await anonymous.request.get(f"{base}{path}")).status == 401
                    await anonymous.close()

                    # The operator.
                    page = await browser.new_page(viewport={"width": 1366, "height": 900})
                    await page.goto(f"{base}/console")
                    assert "/login" in page.url
                    await log_in_as(page, base, "olive", PASSWORD, "/console")
                    await shot(page, "calls")
                    await page.fill("input[name=number]", "0142")
                    await page.click("form.filters button[type=submit]")
                    await page.wait_for_url(re.compile(r".*number=0142.*"))
                    assert await page.locator("table.calls tbody tr").count() == 2
                    await shot(page, "filtered")
                    await page.click(f'tr[data-call="{DETAIL}"] a')
                    await page.wait_for_url(f"{base}/console/calls/{DETAIL}")
                    assert await page.locator("#transcript li").count() == 7
                    bar = page.locator('.wf-row[data-turn="1"] .bar[data-part="llm_ttft_ms"]')
                    assert (await bar.bounding_box())["width"] > 10
                    # The recording plays (served in ranges from the file store).
                    await page.evaluate("document.querySelector('#recording audio').play()")
                    # (Polled from here: the page's CSP forbids evaluating strings in it.)
                    played = 0.0
                    for _ in range(150):
                        played = await page.evaluate("document.querySelector('audio').currentTime")
                        if played > 0.5:
                            break
                        await asyncio.sleep(0.1)
                    assert played > 0.5, "the recording did not play"
                    duration = await page.evaluate("document.querySelector('audio').duration")
                    assert abs(duration - 3.0) < 0.1
                    await shot(page, "call")
                    await page.goto(f"{base}/console/queues")
                    await shot(page, "queues")
                    await page.goto(f"{base}/console/live")
                    await page.wait_for_selector("#live-status:has-text('live')")
                    await shot(page, "live")
                    # No admin pages, no owner dashboard: refused, and not in the menu.
                    assert (await page.goto(f"{base}/console/users")).status == 403
                    assert (await page.goto(f"{base}/console/dashboard")).status == 403
                    await page.goto(f"{base}/console")
                    assert await page.locator('nav a[href="/console/users"]').count() == 0
                    await page.click("header.top button[type=submit]")
                    await page.wait_for_url(re.compile(r".*/login.*"))

                    # The owner: the charts are drawn (Chart.js, vendored at build time).
                    await log_in_as(
                        page, base, "owen", "a long owner password!", "/console/dashboard"
                    )
                    for chart in ("cost-chart", "latency-chart", "fallback-chart"):
                        drawn = await page.evaluate(f"!!Chart.getChart('{chart}')")
                        assert drawn, f"{chart} was not drawn"
                    await shot(page, "dashboard")
                    await page.goto(f"{base}/console/audit")
                    assert await page.locator("table.audit td", has_text="view_call").count() >= 1
                    await shot(page, "audit")
                    await page.click("header.top button[type=submit]")

                    # The admin: the users, and no call.
                    await log_in_as(page, base, "adam", "a long admin password!", "/console/users")
                    await shot(page, "users")
                    assert (await page.goto(f"{base}/console/calls/{DETAIL}")).status == 403
                finally:
                    await browser.close()
    finally:
        await runtime.__aexit__(None, None, None)
    pages = ["login", "calls", "filtered", "call", "queues", "live", "dashboard", "audit", "users"]
    assert taken == pages
    assert all((shots / f"{name}.png").stat().st_size > 5_000 for name in pages)
