"""The audit log: who viewed or changed what, and when.

A view is recorded before its data is sent, in a transaction of its own: if
the log cannot be written the handler fails and nothing is shown, so no one
reads a call without leaving a trace.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from aiohttp import web
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from agent.console.context import ENGINE, current_user, now
from agent.models import AuditEntry


def write(
    engine: Engine,
    *,
    at: dt.datetime,
    user_id: int | None,
    action: str,
    object_id: str | None,
    ip: str | None,
) -> None:
    """Write one entry in a transaction of its own."""
    with Session(engine) as session, session.begin():
        session.add(AuditEntry(at=at, user_id=user_id, action=action, object_id=object_id, ip=ip))


async def audit(request: web.Request, action: str, object_id: str | None) -> None:
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
    )
