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
import shutil
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.console.users import Users
from agent.models import (
    AuditEntry,
    Call,
    CallEvent,
    Consumer,
    ContactAttempt,
    Debt,
    Phone,
    Promise,
    Turn,
)
from agent.runtime import AgentRuntime
from agent.server import make_app

PASSWORD = "a long operator password"
CHROMIUM = Path("/usr/bin/chromium")
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
#: The call the detail tests open.
DETAIL = "c-detail-0001"
#: 60 filler calls, so the list has two pages.
FILLER = 60


def _consumer(session: Session, ref: str, name: str, number: str) -> tuple[Debt, Phone]:
    consumer = Consumer(
        external_ref=ref,
        name=name,
        address="12 Elm St, Springfield",
        state="IL",
        city="Springfield",
        time_zone="America/Chicago",
    )
    phone = Phone(number=number, kind="personal", consent_source="creditor_provided")
    debt = Debt(
        account_ref=f"acct-{ref}",
        account_last4="4321",
        creditor="First Example Bank",
        balance_cents=125_000,
        statute_status="within",
        tenant_type="third_party_collector",
        max_discount_pct=20,
        min_installment_cents=5_000,
        max_term_months=12,
    )
    consumer.phones.append(phone)
    consumer.debts.append(debt)
    session.add(consumer)
    session.flush()
    return debt, phone


def _call(
    session: Session,
    call_id: str,
    debt: Debt,
    phone: Phone,
    started_at: dt.datetime,
    disposition: str,
    transport: str = "sip",
) -> Call:
    call = Call(
        id=call_id,
        transport=transport,
        direction="outbound",
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
        jordan, jordan_phone = _consumer(session, "c1", "Jordan <b>Smith</b>", "+16175550142")
        maria, maria_phone = _consumer(session, "c2", "Maria Lopez", "+13125559876")
        lee, lee_phone = _consumer(session, "c3", "Lee Chen", "+14155550999")
        for i in range(FILLER):
            _call(
                session,
                f"c-fill-{i:04d}",
                maria,
                maria_phone,
                NOW - dt.timedelta(days=3, minutes=i),
                "no_commitment" if i % 2 else "refused",
                transport="webrtc" if i % 3 == 0 else "sip",
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
        sam, sam_phone = _consumer(session, "c4", "Sam Park", "+12065550123")
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


@pytest.fixture
async def console(db_url, tmp_path):
    runtime, ctx = await _runtime_client(db_url, tmp_path)
    try:
        async with TestClient(TestServer(make_app(ctx))) as client:
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
    total = FILLER + 7
    assert len(second) == total - 50 and not set(ids) & set(second)

    by_disposition = _call_ids(await (await client.get("/console?disposition=dispute")).text())
    assert by_disposition == ["c-dispute"]
    by_number = _call_ids(await (await client.get("/console?number=0142")).text())
    assert sorted(by_number) == sorted([DETAIL, "c-callback"])
    by_name = _call_ids(await (await client.get("/console?name=lee+chen")).text())
    assert sorted(by_name) == sorted(["c-dispute", "c-escalated", "c-callback-later"])
    flagged = _call_ids(await (await client.get("/console?flagged=1")).text())
    assert flagged == [DETAIL]
    webrtc = _call_ids(await (await client.get("/console?transport=webrtc")).text())
    assert len(webrtc) == FILLER // 3
    # What the request said comes back escaped; nonsense in the query is ignored.
    hostile = await client.get('/console?name="><script>x</script>&before=junk&from=nope')
    assert hostile.status == 200
    text = await hostile.text()
    assert "<script>x" not in text and "&quot;&gt;&lt;script&gt;x&lt;/script&gt;" in text
    day = (NOW - dt.timedelta(days=3)).date().isoformat()
    in_range = _call_ids(await (await client.get(f"/console?from={day}&to={day}")).text())
    assert all(i.startswith("c-fill-") for i in in_range) and len(in_range) >= FILLER - 30


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
    assert "voice to voice 940 ms" in page
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
    assert _call_ids(sections["escalations"]) == ["c-escalated"]
    # c-callback was due yesterday, but a later call (the detail call) reached that debt;
    # c-callback-later is not due yet.
    assert _call_ids(sections["callbacks"]) == ["c-callback-due"]
    assert "asked for" in sections["callbacks"]
    assert _call_ids(sections["broken"]) == ["c-old-promise"]
    assert "No payments are recorded" in sections["broken"]


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")
async def test_in_a_browser(tmp_path):
    from playwright.async_api import async_playwright

    runtime, ctx = await _runtime_client(f"sqlite:///{tmp_path / 'agent.db'}", tmp_path)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        async with TestServer(make_app(ctx), host="127.0.0.1") as server:
            base = str(server.make_url("/"))[:-1]
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=str(CHROMIUM),
                    headless=True,
                    args=["--disable-gpu", "--no-first-run", "--disable-background-networking"],
                )
                try:
                    page = await browser.new_page(viewport={"width": 1366, "height": 900})
                    await page.goto(f"{base}/console")
                    assert "/login" in page.url
                    await page.fill("input[name=username]", "olive")
                    await page.fill("input[name=password]", PASSWORD)
                    await page.click("button[type=submit]")
                    await page.wait_for_url(f"{base}/console")
                    await page.screenshot(path=str(shots / "calls.png"), full_page=True)
                    await page.fill("input[name=number]", "0142")
                    await page.click("form.filters button[type=submit]")
                    await page.wait_for_url(re.compile(r".*number=0142.*"))
                    assert await page.locator("table.calls tbody tr").count() == 2
                    await page.screenshot(path=str(shots / "filtered.png"), full_page=True)
                    await page.click(f'tr[data-call="{DETAIL}"] a')
                    await page.wait_for_url(f"{base}/console/calls/{DETAIL}")
                    assert await page.locator("#transcript li").count() == 7
                    bar = page.locator('.wf-row[data-turn="1"] .bar[data-part="llm_ttft_ms"]')
                    assert (await bar.bounding_box())["width"] > 10
                    await page.screenshot(path=str(shots / "call.png"), full_page=True)
                    await page.goto(f"{base}/console/queues")
                    await page.screenshot(path=str(shots / "queues.png"), full_page=True)
                    await page.click("header.top button[type=submit]")
                    await page.wait_for_url(re.compile(r".*/login.*"))
                finally:
                    await browser.close()
    finally:
        await runtime.__aexit__(None, None, None)
    assert sorted(p.name for p in shots.iterdir()) == [
        "call.png",
        "calls.png",
        "filtered.png",
        "queues.png",
    ]
    if target := os.environ.get("CONSOLE_SCREENSHOTS"):
        Path(target).mkdir(parents=True, exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy(shot, Path(target) / shot.name)
