"""The console's JSON API, version 1: calls, turns, costs and KPIs for other tools.

Read-only routes under ``/api/v1``, described by the OpenAPI 3.1 document
that ``agent.console.openapi`` builds and ``GET /api/openapi.json`` serves:

    GET /api/v1/calls                    calls, newest first, filtered, keyset-paged
    GET /api/v1/calls/{call_id}          one call: record, turns, cost lines, events, promises
    GET /api/v1/calls/{call_id}/turns    its turns only
    GET /api/v1/costs?from=&to=          cost by day and component
    GET /api/v1/kpis?from=&to=           the dashboard's figures (the same as /api/kpis)
    GET /api/calls/{call_id}             the older path of one call, kept for its callers

Calls are personal data (operators and owners); costs and KPIs are the
dashboard's aggregates (owners, as ``/api/kpis``). Viewing a call is written
to the audit log before it is sent. The data come from the console's own
queries (``agent.console.calls``, ``agent.console.kpis``); this module only
checks the input, strictly (a bad parameter is a 400 that names it, never an
empty page or a 500), and writes JSON. See docs/console.md, "JSON API".
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from aiohttp import web

from agent.access import Anonymous, guard
from agent.campaigns import Ledger, masked
from agent.console.audit import audit
from agent.console.auth import AUTH, Handler, require_role
from agent.console.calls import (
    DISPOSITIONS,
    CallFilter,
    CallRow,
    CallView,
    find_calls,
    load_call,
)
from agent.console.context import ENGINE, now
from agent.console.dashboard import MAX_DAYS, TARGET, parse_range, provisioning
from agent.console.kpis import DayCost, components, cost_by_day, figures
from agent.console.openapi import document
from agent.console.query import CONTROL_CHARS, FIRST_DAY, LAST_DAY, QueryError
from agent.ledger.records import CALL_ID_LENGTH, FLAG_KINDS
from agent.store.tables import Call, CallEvent, CostLine, Promise, Role, Turn

PREFIX = "/api/v1"
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_CALL_ID = CALL_ID_LENGTH
OPENAPI = web.AppKey("console_openapi", dict[str, Any])

_CONTROL = re.compile(CONTROL_CHARS)
_WHOLE = re.compile(r"[0-9]{1,6}")


def add_api(app: web.Application) -> None:
    """Add the ``/api/v1`` routes, the older ``/api/calls/{call_id}`` and the OpenAPI document.

    After ``setup_auth`` and ``add_dashboard`` (it uses their engine, cookie name and the
    dashboard's cost target).
    """
    if AUTH not in app or ENGINE not in app:
        raise RuntimeError("add_api needs setup_auth first")
    if TARGET not in app:
        raise RuntimeError("add_api needs add_dashboard first (the KPIs' cost target)")
    app[OPENAPI] = document(
        session_cookie=app[AUTH].session_cookie,
        prefix=PREFIX,
        dispositions=DISPOSITIONS,
        default_limit=DEFAULT_LIMIT,
        max_limit=MAX_LIMIT,
        max_call_id=MAX_CALL_ID,
        first_day=FIRST_DAY.isoformat(),
        last_day=LAST_DAY.isoformat(),
        max_days=MAX_DAYS,
    )
    app.middlewares.append(_json_errors)
    app.router.add_get("/api/openapi.json", openapi_json)
    app.router.add_get(f"{PREFIX}/calls", call_list)
    app.router.add_get(f"{PREFIX}/calls/{{call_id}}", call_record)
    app.router.add_get(f"{PREFIX}/calls/{{call_id}}/turns", call_turns)
    app.router.add_get(f"{PREFIX}/costs", costs)
    app.router.add_get(f"{PREFIX}/kpis", kpis)
    # The older path of one call (tests/test_server.py, scripts): the same handler.
    app.router.add_get("/api/calls/{call_id}", call_record)


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    response = web.json_response({"error": message}, status=status, headers=headers)
    response.headers["Cache-Control"] = "no-store"
    return response


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bad input anywhere in the API is a 400; aiohttp's own 404 and 405 under /api/v1 JSON."""
    try:
        return await handler(request)
    except QueryError as exc:
        return _error(400, str(exc))
    except web.HTTPException as exc:
        if not request.path.startswith(f"{PREFIX}/") or exc.status < 400:
            raise
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        if exc.status == 404:
            message = f"no route {request.path} (the routes: GET /api/openapi.json)"
        else:
            message = f"{exc.reason.lower()}: {request.method} {request.path}"
        return _error(exc.status, message, allow)


@guard(Anonymous("the API's description: routes, not data"))
async def openapi_json(request: web.Request) -> web.Response:
    """The API's OpenAPI document; public (it describes routes, not data)."""
    return web.json_response(request.app[OPENAPI])


# -- reading the input -----------------------------------------------------------


def _limit(query: Mapping[str, str]) -> int:
    value = query.get("limit", "")
    if not value:
        return DEFAULT_LIMIT
    if not _WHOLE.fullmatch(value) or not 1 <= int(value) <= MAX_LIMIT:
        raise QueryError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(value)


def _call_id(request: web.Request) -> str:
    call_id = request.match_info["call_id"]
    if not 1 <= len(call_id) <= MAX_CALL_ID or _CONTROL.search(call_id):
        raise QueryError(
            f"call_id must be 1 to {MAX_CALL_ID} characters, without control characters"
        )
    return call_id


def _range(request: web.Request) -> tuple[dt.date, dt.date]:
    """``from`` and ``to``, checked strictly, with the dashboard's defaults and limit."""
    return parse_range(request.query, now(request.app).astimezone(dt.UTC).date())


# -- writing JSON -----------------------------------------------------------------


def _iso(value: dt.datetime | dt.date | None) -> str | None:
    return value.isoformat() if value is not None else None


def _masked(number: str | None) -> str | None:
    return masked(number) if number else None


def _call_url(call_id: str) -> str:
    return f"{PREFIX}/calls/{quote(call_id, safe='')}"


def summary_json(row: CallRow) -> dict[str, Any]:
    """A call of the list."""
    return {
        "id": row.id,
        "url": _call_url(row.id),
        "started_at": _iso(row.started_at),
        "transport": row.transport,
        "direction": row.direction,
        "disposition": row.disposition,
        "duration_s": row.duration_s,
        "cost_usd": row.cost_usd,
        "consumer": row.consumer,
        "number": _masked(row.number),
        "flagged": row.flagged,
        "debt_id": row.debt_id,
        "campaign": row.campaign,
    }


def turn_json(t: Turn) -> dict[str, Any]:
    return {
        "number": t.number,
        "started_at": _iso(t.started_at),
        "ended_at": _iso(t.ended_at),
        "user_text": t.user_text,
        "agent_text": t.agent_text,
        "interrupted": bool(t.interrupted),
        "endpointing_ms": t.endpointing_ms,
        "stt_ms": t.stt_ms,
        "llm_ttft_ms": t.llm_ttft_ms,
        "tts_ttfb_ms": t.tts_ttfb_ms,
        "transport_out_ms": t.transport_out_ms,
        "response_ms": t.response_ms,
        "voice_to_voice_ms": t.voice_to_voice_ms,
        "latency_definition": t.latency_definition,
        "stt_audio_s": t.stt_audio_s,
        "llm_prompt_tokens": t.llm_prompt_tokens,
        "llm_completion_tokens": t.llm_completion_tokens,
        "tts_characters": t.tts_characters,
    }


def _cost_line_json(c: CostLine) -> dict[str, Any]:
    return {
        "component": c.component,
        "quantity": c.quantity,
        "unit": c.unit,
        "unit_price_usd": c.unit_price_usd,
        "amount_usd": c.amount_usd,
        "price_book_version": c.price_book_version,
    }


def _event_json(e: CallEvent) -> dict[str, Any]:
    return {"id": e.id, "at": _iso(e.at), "kind": e.kind, "detail": e.detail or {}}


def _promise_json(p: Promise) -> dict[str, Any]:
    return {
        "id": p.id,
        "debt_id": p.debt_id,
        "amount_cents": p.amount_cents,
        "due_date": _iso(p.due_date),
        "method": p.method,
        "status": p.status,
        "created_at": _iso(p.created_at),
    }


def _ledger_json(ledger: Ledger | None) -> dict[str, Any] | None:
    if ledger is None:
        return None
    return {
        "attempts_used_7d": ledger.attempts_used_7d,
        "limit": ledger.limit,
        "next_allowed_at": _iso(ledger.next_allowed_at),
        "last_conversation_at": _iso(ledger.last_conversation_at),
    }


def call_json(view: CallView) -> dict[str, Any]:
    """One call with everything it left behind: the API's record of a call."""
    row: Call = view.call
    # calls.number (caller id inbound, the number dialled outbound) where the schema has it;
    # else the number of the call's contact attempt, as the console page shows.
    number = getattr(row, "number", None) or view.number
    consumer = view.consumer
    return {
        "id": row.id,
        "transport": row.transport,
        "direction": row.direction,
        "scenario": row.scenario,
        "status": row.status,
        "started_at": _iso(row.started_at),
        "ended_at": _iso(row.ended_at),
        "duration_s": row.duration_s,
        "end_reason": row.end_reason,
        "stt_model": row.stt_model,
        "llm_model": row.llm_model,
        "tts_voice": row.tts_voice,
        "prompt_version": row.prompt_version,
        "price_book_version": row.price_book_version,
        "cost_usd": float(row.cost_usd) if row.cost_usd is not None else None,
        "cost_per_minute_usd": row.cost_per_minute_usd,
        "party": row.party,
        "disposition": row.disposition,
        "verified_at": _iso(row.verified_at),
        "debt_id": row.debt_id,
        "consumer": {"id": consumer.id, "name": consumer.name} if consumer else None,
        "number": _masked(number),
        "campaign": getattr(row, "campaign", None),
        "recording_uri": getattr(row, "recording_uri", None),
        "flagged": any(e.kind in FLAG_KINDS for e in row.events),
        "turns": [turn_json(t) for t in row.turns],
        "cost_lines": [_cost_line_json(c) for c in row.cost_lines],
        "events": [_event_json(e) for e in row.events],
        "promises": [_promise_json(p) for p in view.promises],
        "contact_ledger": _ledger_json(view.ledger),
    }


def _day_cost_json(day: DayCost) -> dict[str, Any]:
    return {**dataclasses.asdict(day), "day": day.day.isoformat()}


# -- the routes -----------------------------------------------------------------


@require_role(Role.OPERATOR, Role.OWNER)
async def call_list(request: web.Request) -> web.Response:
    f, limit = CallFilter.from_query(request.query), _limit(request.query)
    rows, cursor = await asyncio.to_thread(find_calls, request.app[ENGINE], f, limit)
    next_url = None
    if cursor:
        next_url = f"{PREFIX}/calls?{f.query_string(before=cursor, limit=str(limit))}"
    return web.json_response(
        {"calls": [summary_json(r) for r in rows], "next": next_url, "next_cursor": cursor}
    )


async def _view(request: web.Request, call_id: str) -> CallView | None:
    try:
        return await asyncio.to_thread(load_call, request.app[ENGINE], call_id, now(request.app))
    except LookupError:
        return None


@require_role(Role.OPERATOR, Role.OWNER)
async def call_record(request: web.Request) -> web.Response:
    call_id = _call_id(request)
    view = await _view(request, call_id)
    if view is None:
        return _error(404, f"no call {call_id!r}")
    await audit(request, "view_call", call_id)
    return web.json_response(call_json(view))


@require_role(Role.OPERATOR, Role.OWNER)
async def call_turns(request: web.Request) -> web.Response:
    call_id = _call_id(request)
    view = await _view(request, call_id)
    if view is None:
        return _error(404, f"no call {call_id!r}")
    await audit(request, "view_transcript", call_id)
    return web.json_response(
        {"call_id": view.call.id, "turns": [turn_json(t) for t in view.call.turns]}
    )


@require_role(Role.OWNER)
async def costs(request: web.Request) -> web.Response:
    start, end = _range(request)
    days = await asyncio.to_thread(
        cost_by_day, request.app[ENGINE], start, end, provisioning(request.app)
    )
    return web.json_response(
        {
            "from": start.isoformat(),
            "to": end.isoformat(),
            "components": components(days),
            "days": [_day_cost_json(d) for d in days],
        }
    )


@require_role(Role.OWNER)
async def kpis(request: web.Request) -> web.Response:
    start, end = _range(request)
    result = await asyncio.to_thread(
        figures, request.app[ENGINE], start, end, request.app[TARGET], provisioning(request.app)
    )
    return web.json_response(result.to_json())
