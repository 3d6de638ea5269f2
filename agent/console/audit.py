"""The audit log: who viewed or changed what, from where, and when.

A view is recorded before its data is sent, in a transaction of its own: if
the log cannot be written the handler fails and nothing is shown, so no one
reads a call without leaving a trace. Changes to accounts are recorded in the
change's own transaction (``entry``), so neither exists without the other.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass

from aiohttp import web
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from agent.console.context import ENGINE, current_user, now
from agent.store.tables import AuditEntry

#: The ``ip`` of what was done at the command line on the server.
COMMAND_LINE = "cli"
#: The longest ``detail``, ``object_id`` and ``ip`` the table keeps (longer ones are cut:
#: an address from a proxy's header is whatever the proxy was sent).
MAX_DETAIL = 255
MAX_OBJECT_ID = 64
MAX_IP = 45


@dataclass(frozen=True)
class Actor:
    """Who did it, from where: a console user at an address; no user at the command line
    (``ip`` ``cli``) or when no one is logged in (a failed login)."""

    user_id: int | None
    ip: str | None


#: The command line on the server: no console user.
BY_COMMAND_LINE = Actor(None, COMMAND_LINE)
#: Neither a user nor an address: code that sets accounts up (a benchmark, a test).
BY_CODE = Actor(None, None)


def entry(
    at: dt.datetime,
    action: str,
    object_id: str | None,
    by: Actor,
    detail: str | None = None,
) -> AuditEntry:
    """One entry, to add to a session; its text cut to what the table keeps."""
    return AuditEntry(
        at=at,
        user_id=by.user_id,
        action=action,
        object_id=_cut(object_id, MAX_OBJECT_ID),
        ip=_cut(by.ip, MAX_IP),
        detail=_cut(detail, MAX_DETAIL),
    )


def _cut(value: str | None, length: int) -> str | None:
    return value[:length] if value is not None else None


def write(
    engine: Engine,
    *,
    at: dt.datetime,
    user_id: int | None,
    action: str,
    object_id: str | None,
    ip: str | None,
    detail: str | None = None,
) -> None:
    """Write one entry in a transaction of its own."""
    with Session(engine) as session, session.begin():
        session.add(entry(at, action, object_id, Actor(user_id, ip), detail))


async def audit(
    request: web.Request, action: str, object_id: str | None, detail: str | None = None
) -> None:
    """Record that the request's user did ``action`` on ``object_id`` (``view_call``, call id).

    Only behind ``require_role``: a view by no one known is a bug, not an entry.
    """
    user = current_user(request)
    if user is None:
        raise RuntimeError(f"audit({action!r}) on a request with no user: use require_role")
    await asyncio.to_thread(
        write,
        request.app[ENGINE],
        at=now(request.app),
        user_id=user.id,
        action=action,
        object_id=object_id,
        ip=request.remote,
        detail=detail,
    )
