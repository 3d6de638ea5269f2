"""Live calls: the calls in progress, on a page that follows them without a reload.

The rows come from the database (``calls.status = 'active'``), so the page
lists every worker's calls; the stage a call is at and its last line come from
this process's registry (``agent.pipeline.live_calls``) when it is the one holding the call.
``GET /console/live`` renders the table as it is now; its script then listens
to ``GET /console/live/events`` (server-sent events), which sends the whole
list again whenever it changes, polled every ``POLL_S``. Without the script
the page is still right, as of its loading.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from dataclasses import asdict, dataclass

from aiohttp import web
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.console.auth import require_role
from agent.console.context import ENGINE, now
from agent.console.layout import e, masked_number, page
from agent.pipeline.live_calls import CALLS, LiveCalls
from agent.store.tables import Call, CallStatus, Consumer, Debt, Role

#: How often the events stream looks for a change.
POLL_S = 1.0
#: A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0
#: The most calls the page lists (a worker carries a few dozen at most).
MAX_ROWS = 500
#: The longest last line shown, in characters.
LINE_CHARS = 120


#: Set at shutdown: the event streams end, so the server does not wait on them.
_CLOSING = web.AppKey("live_calls_closing", asyncio.Event)


def add_live_calls(app: web.Application) -> None:
    """Add ``/console/live`` and ``/console/live/events`` (after setup_auth)."""
    app[_CLOSING] = asyncio.Event()
    app.router.add_get("/console/live", live_page)
    app.router.add_get("/console/live/events", live_events)

    async def close_streams(app: web.Application) -> None:
        app[_CLOSING].set()

    app.on_shutdown.append(close_streams)


@dataclass(frozen=True)
class LiveRow:
    """One call in progress, as the page shows it (all strings, ready for the script)."""

    id: str
    started_at: str
    elapsed: str
    transport: str
    direction: str
    consumer: str
    number: str
    campaign: str
    #: The conversation's stage, and its last line ("agent: ..."), when this process holds it.
    stage: str
    last_line: str


def live_rows(engine: Engine, calls: LiveCalls | None, at: dt.datetime) -> list[LiveRow]:
    """The calls in progress, newest first."""
    query = (
        select(
            Call.id,
            Call.started_at,
            Call.transport,
            Call.direction,
            Call.number,
            Call.campaign,
            Consumer.name,
        )
        .outerjoin(Debt, Debt.id == Call.debt_id)
        .outerjoin(Consumer, Consumer.id == Debt.consumer_id)
        .where(Call.status == CallStatus.ACTIVE.value)
        .order_by(Call.started_at.desc(), Call.id.desc())
        .limit(MAX_ROWS)
    )
    with Session(engine) as session:
        found = list(session.execute(query))
    rows = []
    for r in found:
        live = calls.get(r.id) if calls is not None else None
        stage, last, consumer = "", "", r.name or ""
        if live is not None:
            policy = live.call.policy
            if policy is not None:
                stage = str(policy.stage)
                consumer = consumer or policy.account.consumer_name
            if live.lines:
                line = live.lines[-1]
                last = f"{line['speaker']}: {line['text']}"[:LINE_CHARS]
        seconds = max(0, int((at - r.started_at).total_seconds()))
        rows.append(
            LiveRow(
                id=r.id,
                started_at=r.started_at.astimezone(dt.UTC).strftime("%H:%M:%S"),
                elapsed=f"{seconds // 60}:{seconds % 60:02d}",
                transport=r.transport,
                direction=r.direction,
                consumer=consumer,
                number=masked_number(r.number),
                campaign=r.campaign or "",
                stage=stage,
                last_line=last,
            )
        )
    return rows


async def _rows(request: web.Request) -> list[LiveRow]:
    app = request.app
    return await asyncio.to_thread(live_rows, app[ENGINE], app.get(CALLS), now(app))


COLUMNS = (
    ("started_at", "Started (UTC)"),
    ("elapsed", "Elapsed"),
    ("consumer", "Consumer"),
    ("number", "Number"),
    ("transport", "Transport"),
    ("direction", "Direction"),
    ("campaign", "Campaign"),
    ("stage", "Stage"),
    ("last_line", "Last line"),
)


def _table(rows: list[LiveRow]) -> str:
    head = "".join(f"<th>{e(title)}</th>" for _, title in COLUMNS)
    body = "".join(
        f'<tr data-call="{e(row.id)}">'
        f'<td><a href="/console/calls/{e(row.id)}">{e(row.started_at)}</a></td>'
        + "".join(f"<td>{e(getattr(row, key))}</td>" for key, _ in COLUMNS[1:])
        + "</tr>"
        for row in rows
    )
    empty = "" if rows else " hidden"
    return (
        f'<p class="empty" id="no-live-calls"{empty}>No calls in progress.</p>'
        f'<table class="calls live"><thead><tr>{head}</tr></thead>'
        f'<tbody id="live-calls">{body}</tbody></table>'
    )


@require_role(Role.OPERATOR, Role.OWNER)
async def live_page(request: web.Request) -> web.StreamResponse:
    rows = await _rows(request)
    columns = json.dumps([key for key, _ in COLUMNS])
    body = (
        '<h1>Live calls <span class="note" id="live-status">(as of loading)</span></h1>'
        f"{_table(rows)}"
        f"<script src=\"/static/console/live.js\" data-columns='{e(columns)}'></script>"
    )
    return page(request, "Live calls", body, script=True)


@require_role(Role.OPERATOR, Role.OWNER)
async def live_events(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    closing = request.app[_CLOSING]
    sent: str | None = None
    quiet = 0.0
    try:
        while not closing.is_set():
            snapshot = json.dumps([asdict(row) for row in await _rows(request)])
            if snapshot != sent:
                await response.write(f"data: {snapshot}\n\n".encode())
                sent, quiet = snapshot, 0.0
            elif quiet >= KEEPALIVE_S:
                await response.write(b": keep-alive\n\n")
                quiet = 0.0
            try:
                await asyncio.wait_for(closing.wait(), POLL_S)
            except TimeoutError:
                quiet += POLL_S
    except ConnectionResetError:
        pass  # the page was closed
    return response
