"""The admin's pages (user accounts) and the audit log.

``/console/users`` is for admins only: the accounts, a form to add one, a
button to disable one (disabling ends that user's sessions at once; accounts
are never deleted, so the audit log keeps pointing at someone). ``/console/audit``
is the audit log, newest first, for owners and admins: who viewed which call,
who logged in, who changed which account. See docs/console.md.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass

from aiohttp import web
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.console.auth import AUTH, require_role
from agent.console.context import ENGINE, current_user
from agent.console.csrf import FIELD, csrf_token
from agent.console.pages import e, page, when
from agent.console.users import Account, UserError
from agent.models import AuditEntry, Role, User

#: Audit entries a page shows.
AUDIT_PAGE = 200


def add_admin_pages(app: web.Application) -> None:
    """Add ``/console/users`` and ``/console/audit`` (after setup_auth)."""
    app.router.add_get("/console/users", users_page)
    app.router.add_post("/console/users", add_user)
    app.router.add_post("/console/users/{username}/disable", disable_user)
    app.router.add_get("/console/audit", audit_page)


# -- users -----------------------------------------------------------------------


def _users_body(request: web.Request, accounts: list[Account], message: str = "") -> str:
    token = f'<input type="hidden" name="{e(FIELD)}" value="{e(csrf_token(request))}">'
    rows = []
    for a in accounts:
        action = (
            "disabled"
            if a.disabled
            else f'<form method="post" action="/console/users/{e(a.username)}/disable">'
            f'{token}<button type="submit">Disable</button></form>'
        )
        rows.append(
            f'<tr data-user="{e(a.username)}"><td>{e(a.username)}</td><td>{e(a.role)}</td>'
            f"<td>{e(when(a.created_at))}</td><td>{action}</td></tr>"
        )
    roles = "".join(f'<option value="{e(r)}">{e(r)}</option>' for r in Role)
    note = f'<p class="flag" role="alert">{e(message)}</p>' if message else ""
    return f"""<h1>Users</h1>{note}
<table class="users"><thead><tr><th>Username</th><th>Role</th><th>Added</th><th></th></tr>
</thead><tbody>{"".join(rows)}</tbody></table>
<h2>Add a user</h2>
<form method="post" action="/console/users" class="filters">{token}
<label>Username <input name="username" required maxlength="254" autocomplete="off"></label>
<label>Role <select name="role">{roles}</select></label>
<label>Password (12 characters or more) <input type="password" name="password" required
 minlength="12" maxlength="1024" autocomplete="new-password"></label>
<button type="submit">Add</button></form>"""


async def _users_response(
    request: web.Request, message: str = "", status: int = 200
) -> web.Response:
    accounts = await asyncio.to_thread(request.app[AUTH].users.list)
    return page(request, "Users", _users_body(request, accounts, message), status=status)


@require_role(Role.ADMIN)
async def users_page(request: web.Request) -> web.Response:
    return await _users_response(request)


def _admin_id(request: web.Request) -> int:
    user = current_user(request)
    assert user is not None  # behind require_role
    return user.id


@require_role(Role.ADMIN)
async def add_user(request: web.Request) -> web.Response:
    form = await request.post()
    username, password, role = (str(form.get(k, "")) for k in ("username", "password", "role"))
    users = request.app[AUTH].users
    try:
        await asyncio.to_thread(users.add, username, password, role, _admin_id(request))
    except UserError as exc:
        return await _users_response(request, str(exc), status=400)
    raise web.HTTPSeeOther("/console/users")


@require_role(Role.ADMIN)
async def disable_user(request: web.Request) -> web.Response:
    users = request.app[AUTH].users
    try:
        await asyncio.to_thread(users.disable, request.match_info["username"], _admin_id(request))
    except UserError as exc:
        return await _users_response(request, str(exc), status=400)
    raise web.HTTPSeeOther("/console/users")


# -- the audit log ----------------------------------------------------------------


@dataclass(frozen=True)
class AuditRow:
    at: dt.datetime
    username: str | None
    action: str
    object_id: str | None
    ip: str | None


def audit_entries(engine: Engine, object_id: str = "", limit: int = AUDIT_PAGE) -> list[AuditRow]:
    """The newest entries, about ``object_id`` only when one is given."""
    query = (
        select(AuditEntry, User.username)
        .outerjoin(User, User.id == AuditEntry.user_id)
        .order_by(AuditEntry.at.desc(), AuditEntry.id.desc())
        .limit(limit)
    )
    if object_id:
        query = query.where(AuditEntry.object_id == object_id)
    with Session(engine) as session:
        return [
            AuditRow(entry.at, username, entry.action, entry.object_id, entry.ip)
            for entry, username in session.execute(query)
        ]


@require_role(Role.OWNER, Role.ADMIN)
async def audit_page(request: web.Request) -> web.Response:
    object_id = request.query.get("object", "").strip()[:64]
    rows = await asyncio.to_thread(audit_entries, request.app[ENGINE], object_id)
    lines = "".join(
        f"<tr><td>{e(when(r.at))}</td><td>{e(r.username or 'command line')}</td>"
        f"<td>{e(r.action)}</td><td>{e(r.object_id)}</td><td>{e(r.ip)}</td></tr>"
        for r in rows
    )
    table = (
        '<table class="audit"><thead><tr><th>When</th><th>Who</th><th>What</th><th>Object</th>'
        f"<th>From</th></tr></thead><tbody>{lines}</tbody></table>"
        if rows
        else '<p class="empty">No entries.</p>'
    )
    form = f"""<form method="get" action="/console/audit" class="filters">
<label>Object (call id, user id) <input name="object" value="{e(object_id)}" size="34"></label>
<button type="submit">Filter</button> <a href="/console/audit">Clear</a></form>"""
    return page(request, "Audit log", f"<h1>Audit log</h1>{form}{table}")
