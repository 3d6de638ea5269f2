"""The operator's pages: the call list, a call's detail, the work queues, and the one action
the queues take: a disputed debt's verification sent (which lifts the gate's D9).

Server-rendered HTML, no JavaScript: ``string.Template`` for the layout and
``html.escape`` on every value that comes from the database or the request.
What the pages show is read by ``agent.console.calls``; this module renders it
and handles the requests. Each page is behind ``require_role(Role.OPERATOR,
Role.OWNER)`` (calls are personal data: an admin gets 403), and the call detail
writes ``view_call`` to the audit log before it is sent. See docs/console.md,
"Operator pages".
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiohttp import web

from agent.campaigns import Ledger
from agent.campaigns.contact_history import record_dispute_verified
from agent.console import query as q
from agent.console.audit import audit
from agent.console.auth import require_role
from agent.console.calls import (
    DISPOSITIONS,
    CallFilter,
    CallRow,
    QueueItem,
    find_calls,
    load_call,
    load_queues,
)
from agent.console.context import ENGINE, now
from agent.console.csrf import FIELD, csrf_token
from agent.console.layout import e, masked_number, page, when
from agent.console.query import QueryError
from agent.ledger.latency import DEFINITION
from agent.ledger.records import CALL_ID_LENGTH, FLAG_KINDS
from agent.store.tables import Call, Consumer, Promise, Role

#: A turn's latency parts, in the order they happen, with their bar colours.
WATERFALL = (
    ("endpointing_ms", "endpointing", "#9aa5b1"),
    ("stt_ms", "STT", "#4c8bf5"),
    ("llm_ttft_ms", "LLM first token", "#f29d38"),
    ("tts_ttfb_ms", "TTS first byte", "#3fb27f"),
    ("transport_out_ms", "transport out", "#a46fd8"),
)


def add_console_pages(app: web.Application) -> None:
    """Add ``/console``, ``/console/calls/{call_id}`` and ``/console/queues`` (after setup_auth)."""
    app.router.add_get("/console", call_list)
    app.router.add_get("/console/calls/{call_id}", call_detail)
    app.router.add_get("/console/queues", queues)
    app.router.add_post("/console/debts/{debt_id:[0-9]{1,9}}/dispute-verified", dispute_verified)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    whole = int(round(seconds))
    return f"{whole // 60}:{whole % 60:02d}"


def _money(usd: float | None) -> str:
    return "" if usd is None else f"${usd:.4f}"


def _cents(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


# -- the call list ---------------------------------------------------------------


def _options(values: Iterable[str]) -> str:
    return "".join(f'<option value="{e(v)}"></option>' for v in values)


def _call_table(
    rows: list[CallRow],
    empty: str = "No calls match.",
    action: Callable[[CallRow], str] = lambda row: "",
) -> str:
    """The calls as a table; ``action`` gives each row's last cell (a form, or nothing)."""
    if not rows:
        return f'<p class="empty">{e(empty)}</p>'
    lines = []
    for row in rows:
        flag = '<span class="flag" title="compliance flag">⚑ flagged</span>' if row.flagged else ""
        flag += action(row)
        lines.append(
            f'<tr data-call="{e(row.id)}">'
            f'<td><a href="/console/calls/{e(row.id)}">{e(when(row.started_at))}</a></td>'
            f"<td>{e(row.consumer)}</td><td>{e(masked_number(row.number))}</td>"
            f"<td>{e(row.transport)} / {e(row.direction)}</td>"
            f'<td class="disposition">{e(row.disposition)}</td>'
            f'<td class="num">{e(_duration(row.duration_s))}</td>'
            f'<td class="num">{e(_money(row.cost_usd))}</td><td>{flag}</td></tr>'
        )
    return (
        '<table class="calls"><thead><tr><th>When</th><th>Consumer</th><th>Number</th>'
        "<th>Transport</th><th>Disposition</th><th>Duration</th><th>Cost</th><th></th>"
        f"</tr></thead><tbody>{''.join(lines)}</tbody></table>"
    )


def _filter_form(query: Mapping[str, str]) -> str:
    """The list's filters, holding what the request asked for (as typed, so a refused value
    can be corrected)."""

    def v(name: str) -> str:
        return e(query.get(name, ""))

    checked = " checked" if query.get("flagged", "").lower() in q.TRUE else ""
    return f"""<form method="get" action="/console" class="filters">
<label>Number ends in <input name="number" value="{v("number")}" inputmode="numeric"
 size="8"></label>
<label>Consumer <input name="name" value="{v("name")}" size="14"></label>
<label>Disposition <input name="disposition" value="{v("disposition")}" list="dispositions"
 size="16"></label><datalist id="dispositions">{_options(DISPOSITIONS)}</datalist>
<label>Campaign <input name="campaign" value="{v("campaign")}" size="14"></label>
<label>Transport <input name="transport" value="{v("transport")}" size="8"></label>
<label>From <input type="date" name="from" value="{v("from")}"></label>
<label>To <input type="date" name="to" value="{v("to")}"></label>
<label><input type="checkbox" name="flagged" value="1"{checked}> compliance flag</label>
<button type="submit">Filter</button> <a href="/console">Clear</a>
</form>"""


@require_role(Role.OPERATOR, Role.OWNER)
async def call_list(request: web.Request) -> web.StreamResponse:
    form = _filter_form(request.query)
    try:
        f = CallFilter.from_query(request.query)
    except QueryError as exc:
        note = f'<p class="flag" role="alert">{e(exc)}</p>'
        return page(request, "Calls", f"<h1>Calls</h1>{form}{note}", status=400)
    rows, cursor = await asyncio.to_thread(find_calls, request.app[ENGINE], f)
    pager = []
    if f.before:
        pager.append(f'<a href="/console?{e(f.query_string())}">« Newest</a>')
    if cursor:
        older = f.query_string(before=cursor)
        pager.append(f'<a rel="next" class="older" href="/console?{e(older)}">Older »</a>')
    nav = f'<p class="pager">{" ".join(pager)}</p>' if pager else ""
    body = f"<h1>Calls</h1>{form}{_call_table(rows)}{nav}"
    return page(request, "Calls", body)


# -- one call --------------------------------------------------------------------


def _player(call: Call) -> str:
    """The stereo recording (caller left, agent right), streamed with range requests."""
    if call.recording_uri is None:
        why = (
            "The consumer objected to recording."
            if any(event.kind == "recording_stopped" for event in call.events)
            else "No recording was kept of this call."
        )
        return f'<p class="empty">{e(why)}</p>'
    return (
        f'<audio controls preload="metadata" src="/api/calls/{e(call.id)}/recording"></audio>'
        '<p class="note">Left: the caller; right: the agent. Card numbers and the payment '
        "step are silence (C11).</p>"
    )


def _ledger(ledger: Ledger | None) -> str:
    if ledger is None:
        return '<p class="empty">This call is about no stored debt.</p>'
    if ledger.next_allowed_at is None:
        next_call = "none of the consumer's numbers may be called"
    else:
        next_call = when(ledger.next_allowed_at)
    items = [
        ("Attempts in 7 days", f"{ledger.attempts_used_7d} of {ledger.limit}"),
        ("Next allowed call", next_call),
        ("Last conversation", when(ledger.last_conversation_at)),
    ]
    cells = "".join(f"<div><dt>{e(k)}</dt><dd>{e(v)}</dd></div>" for k, v in items)
    return f'<dl class="header">{cells}</dl>'


def _header(call: Call, consumer: Consumer | None, number: str | None) -> str:
    items = [
        ("When", when(call.started_at)),
        ("Transport", call.transport),
        ("Direction", call.direction),
        ("Number", masked_number(number)),
        ("Consumer", consumer.name if consumer else ""),
        ("Party", call.party or ""),
        ("Disposition", call.disposition or ""),
        ("Duration", _duration(call.duration_s)),
        ("Cost", _money(call.cost_usd)),
        ("Status", call.status),
    ]
    cells = "".join(f"<div><dt>{e(k)}</dt><dd>{e(v)}</dd></div>" for k, v in items)
    return f'<dl class="header">{cells}</dl>'


def _transcript(call: Call) -> str:
    if not call.turns:
        return '<p class="empty">No turns.</p>'
    lines = []
    for turn in call.turns:
        if turn.user_text:
            lines.append(
                f'<li class="caller"><span class="who">Caller</span> {e(turn.user_text)}</li>'
            )
        if turn.agent_text:
            cut = ' <span class="note">(interrupted)</span>' if turn.interrupted else ""
            lines.append(
                f'<li class="agent"><span class="who">Agent</span> {e(turn.agent_text)}{cut}</li>'
            )
    return f'<ol class="transcript">{"".join(lines)}</ol>'


def _offset(call: Call, at: dt.datetime) -> str:
    seconds = (at - call.started_at).total_seconds()
    sign = "-" if seconds < 0 else "+"
    whole = int(abs(seconds))
    return f"{sign}{whole // 60}:{whole % 60:02d}"


def _timeline(call: Call) -> str:
    if not call.events:
        return '<p class="empty">No events.</p>'
    lines = []
    for event in sorted(call.events, key=lambda ev: (ev.at, ev.id)):
        detail = json.dumps(event.detail, sort_keys=True, default=str) if event.detail else ""
        cls = " flag" if event.kind in FLAG_KINDS else ""
        lines.append(
            f'<li class="event{cls}" data-kind="{e(event.kind)}">'
            f'<time datetime="{e(event.at.isoformat())}">{e(_offset(call, event.at))}</time> '
            f'<span class="kind">{e(event.kind)}</span> '
            f'<code class="detail">{e(detail)}</code></li>'
        )
    return f'<ol class="timeline">{"".join(lines)}</ol>'


#: How a turn stored before agent.ledger.latency's definitions names its response figure.
_LEGACY_RESPONSE = "response (legacy: from the turn's commit)"


def _waterfall(call: Call) -> str:
    turns = [t for t in call.turns if any(getattr(t, key) is not None for key, _, _ in WATERFALL)]
    if not turns:
        return '<p class="empty">No latency recorded.</p>'

    def total(turn: Any) -> float:
        parts = sum(getattr(turn, key) or 0.0 for key, _, _ in WATERFALL)
        return max(parts, turn.voice_to_voice_ms or 0.0, turn.response_ms or 0.0)

    scale = max(total(t) for t in turns) or 1.0
    legend = "".join(
        f'<span><i style="background:{colour}"></i>{e(label)}</span>'
        for _, label, colour in WATERFALL
    )
    rows = []
    for turn in turns:
        start = 0.0
        bars = []
        for key, label, colour in WATERFALL:
            value = getattr(turn, key)
            if value is None:
                continue
            left, width = 100 * start / scale, 100 * value / scale
            bars.append(
                f'<div class="bar" data-part="{e(key)}" title="{e(label)}: {e(_ms(value))}" '
                f'style="left:{left:.2f}%;width:{width:.2f}%;background:{colour}"></div>'
            )
            start += value
        response = "response" if turn.latency_definition == DEFINITION else _LEGACY_RESPONSE
        rows.append(
            f'<div class="wf-row" data-turn="{turn.number}"><div class="wf-label">turn '
            f"{turn.number}</div>"
            f'<div class="wf-track">{"".join(bars)}</div>'
            f'<div class="wf-totals">{response} {e(_ms(turn.response_ms))} · voice-to-voice '
            f"{e(_ms(turn.voice_to_voice_ms))}</div></div>"
        )
    return (
        f'<div class="legend">{legend}</div><div class="waterfall">{"".join(rows)}</div>'
        f'<p class="note">Full width = {e(_ms(scale))}.</p>'
    )


def _promises(promises: list[Any]) -> str:
    if not promises:
        return '<p class="empty">No promise on this call.</p>'
    rows = "".join(
        f"<tr><td>{e(_cents(p.amount_cents))}</td><td>{e(p.due_date.isoformat())}</td>"
        f"<td>{e(p.method)}</td><td>{e(p.status)}</td></tr>"
        for p in promises
    )
    return (
        '<table class="promises"><thead><tr><th>Amount</th><th>Due</th><th>Method</th>'
        f"<th>Status</th></tr></thead><tbody>{rows}</tbody></table>"
    )


@require_role(Role.OPERATOR, Role.OWNER)
async def call_detail(request: web.Request) -> web.StreamResponse:
    try:
        call_id = q.segment(request.match_info, "call_id", CALL_ID_LENGTH)
    except QueryError as exc:
        body = f'<h1>No such call</h1><p>{e(exc)}.</p><p><a href="/console">Back to calls</a></p>'
        return page(request, "No such call", body, status=400)
    try:
        view = await asyncio.to_thread(load_call, request.app[ENGINE], call_id, now(request.app))
    except LookupError:
        body = (
            f"<h1>No such call</h1><p>There is no call {e(call_id)}.</p>"
            '<p><a href="/console">Back to the calls</a></p>'
        )
        return page(request, "No such call", body, status=404)
    call = view.call
    await audit(request, "view_call", call.id)
    body = (
        f'<p><a href="/console">« Calls</a></p><h1>Call {e(call.id)}</h1>'
        f"{_header(call, view.consumer, view.number)}"
        f'<section id="promise"><h2>Promise</h2>{_promises(view.promises)}</section>'
        f'<section id="ledger"><h2>Contact ledger (pre-dial gate)</h2>{_ledger(view.ledger)}'
        "</section>"
        f'<section id="recording"><h2>Recording</h2>{_player(call)}</section>'
        f'<div class="columns"><section id="transcript"><h2>Transcript</h2>'
        f"{_transcript(call)}</section>"
        f'<section id="timeline"><h2>Compliance timeline</h2>{_timeline(call)}</section></div>'
        f'<section id="latency"><h2>Latency per turn</h2>{_waterfall(call)}</section>'
    )
    return page(request, f"Call {call.id}", body)


# -- queues ----------------------------------------------------------------------


def _callback_table(items: list[QueueItem]) -> str:
    if not items:
        return '<p class="empty">No callbacks due.</p>'
    rows = "".join(
        f'<tr data-call="{e(i.row.id)}"><td><a href="/console/calls/{e(i.row.id)}">'
        f"{e(when(i.row.started_at))}</a></td><td>{e(i.row.consumer)}</td>"
        f"<td>{e(masked_number(i.row.number))}</td><td>{e(i.note)}</td></tr>"
        for i in items
    )
    return (
        '<table class="calls"><thead><tr><th>Call</th><th>Consumer</th><th>Number</th>'
        f"<th>Callback</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _broken_table(broken: list[tuple[Promise, str, str]], today: dt.date) -> str:
    if not broken:
        return '<p class="empty">No promise past due.</p>'
    rows = "".join(
        f'<tr data-call="{e(p.call_id)}"><td>{e(p.due_date.isoformat())}'
        f" ({(today - p.due_date).days} days ago)</td><td>{e(name)}</td><td>{e(ref)}</td>"
        f"<td>{e(_cents(p.amount_cents))}</td><td>{e(p.method)}</td><td>{e(p.status)}</td>"
        f'<td><a href="/console/calls/{e(p.call_id)}">the call</a></td></tr>'
        for p, name, ref in broken
    )
    return (
        '<table class="promises"><thead><tr><th>Due</th><th>Consumer</th><th>Account</th>'
        "<th>Amount</th><th>Method</th><th>Status</th><th></th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


@require_role(Role.OPERATOR, Role.OWNER)
async def queues(request: web.Request) -> web.StreamResponse:
    today = now(request.app).astimezone(dt.UTC).date()
    q = await asyncio.to_thread(load_queues, request.app[ENGINE], today)
    csrf = f'<input type="hidden" name="{e(FIELD)}" value="{e(csrf_token(request))}">'

    def verified(row: CallRow) -> str:
        if row.debt_id is None:
            return ""
        return (
            f'<form method="post" action="/console/debts/{row.debt_id}/dispute-verified">'
            f'{csrf}<button type="submit">Verification sent</button></form>'
        )

    body = (
        "<h1>Queues</h1>"
        '<section id="disputes"><h2>Disputes awaiting verification</h2>'
        '<p class="note">The agent stops collecting a disputed debt (the pre-dial gate\'s D9) '
        "until its verification is sent; mark it sent here and calls may resume.</p>"
        f"{_call_table(q.disputes, 'No disputes.', verified)}</section>"
        f'<section id="callbacks"><h2>Callbacks due</h2>{_callback_table(q.callbacks)}</section>'
        f'<section id="escalations"><h2>Escalations to a person</h2>'
        f"{_call_table(q.escalations, 'No escalations.')}</section>"
        f'<section id="broken"><h2>Promises past due</h2>'
        '<p class="note">No payments are recorded yet, so this lists open promises whose due '
        "date has passed (and those already marked broken), not checked against payments.</p>"
        f"{_broken_table(q.broken, today)}</section>"
    )
    return page(request, "Queues", body)


@require_role(Role.OPERATOR, Role.OWNER)
async def dispute_verified(request: web.Request) -> web.StreamResponse:
    """An operator sent the disputed debt's verification: the gate may call about it again."""
    debt_id = int(request.match_info["debt_id"])
    try:
        disputed = await asyncio.to_thread(
            record_dispute_verified, request.app[ENGINE], debt_id, now(request.app)
        )
    except LookupError as exc:
        raise web.HTTPNotFound(text=str(exc)) from None
    await audit(request, "dispute_verified", str(debt_id), None if disputed else "not disputed")
    raise web.HTTPSeeOther("/console/queues")
