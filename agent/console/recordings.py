"""``GET /api/calls/{id}/recording``: a call's recording, played in the console.

Operators and owners only; served from whichever store holds it (``agent.store.recordings``)
with HTTP range requests, so the call page's audio element can seek. Every request that
reaches the store is in the audit log, with the range it asked for.
"""

from __future__ import annotations

import asyncio

from aiohttp import hdrs, web
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.console.audit import audit
from agent.console.auth import require_role
from agent.console.context import ENGINE
from agent.console.query import QueryError, segment
from agent.ledger.records import CALL_ID_LENGTH
from agent.store.recordings import error_response, store_for_uri
from agent.store.tables import Call as CallRow
from agent.store.tables import Role

SETTINGS = web.AppKey("recording_settings", Settings)


def _recording_uri(engine: Engine, call_id: str) -> str | None:
    with Session(engine) as session:
        return session.scalar(select(CallRow.recording_uri).where(CallRow.id == call_id))


@require_role(Role.OPERATOR, Role.OWNER)
async def play_recording(request: web.Request) -> web.StreamResponse:
    """``GET /api/calls/{call_id}/recording``: the call's WAV, with range requests.

    Every request that reaches the store is audited, with the range it asked for: which
    range reads the whole file is the store's reading of the header (``bytes=00-``,
    ``bytes=-999999999``), not something to guess here. A player that seeks leaves
    several entries for one playing."""
    try:
        call_id = segment(request.match_info, "call_id", CALL_ID_LENGTH)
    except QueryError as exc:
        return error_response(400, str(exc))
    uri = await asyncio.to_thread(_recording_uri, request.app[ENGINE], call_id)
    if uri is None:
        return error_response(404, f"no recording of call {call_id!r}")
    store = store_for_uri(uri, request.app[SETTINGS])
    await audit(request, "play_recording", call_id, request.headers.get(hdrs.RANGE))
    return await store.respond(request, uri)


def add_recording_routes(app: web.Application, settings: Settings) -> None:
    """Serve the calls' recordings to the console (after ``setup_auth``)."""
    app[SETTINGS] = settings
    app.router.add_get("/api/calls/{call_id}/recording", play_recording)
