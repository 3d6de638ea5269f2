"""The admin's pages (user accounts, API tokens) and the audit log.

``/console/users`` is for admins only: the accounts, a form to add one, a
button to disable one (disabling ends that user's sessions at once; accounts
are never deleted, so the audit log keeps pointing at someone).
``/console/tokens``, admins only too: the API tokens (never their secrets), a
form to create one, which is shown once, and a button to revoke one. ``/console/audit``
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

from agent.console import query as q
from agent.console.audit import COMMAND_LINE, MAX_OBJECT_ID, Actor
from agent.console.auth import AUTH, require_role
from agent.console.context import ENGINE, current_user, now
from agent.console.csrf import FIELD, csrf_token
from agent.console.layout import e, page, when
from agent.console.query import QueryError
from agent.console.tokens import SCOPES, TokenError, TokenInfo, Tokens
from agent.console.users import Account, UserError
from agent.store.tables import AuditEntry, Role, User

#: Audit entries a page shows.
AUDIT_PAGE = 200


def add_admin_pages(app: web.Application) -> None:
    """Add ``/console/users``, ``/console/tokens`` and ``/console/audit`` (after setup_auth)."""
    app.router.add_get("/console/users", users_page)
    app.router.add_post("/console/users", add_user)
    app.router.add_post("/console/users/{username}/disable", disable_user)
    app.router.add_get("/console/tokens", tokens_page)
    app.router.add_post("/console/tokens", create_token)
    app.router.add_post("/console/tokens/{id:[0-9]{1,9}}/revoke", revoke_token)
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
        by = Actor(_admin_id(request), request.remote)
        await asyncio.to_thread(users.add, username, password, role, by)
    except UserError as exc:
        return await _users_response(request, str(exc), status=400)
    raise web.HTTPSeeOther("/console/users")


@require_role(Role.ADMIN)
async def disable_user(request: web.Request) -> web.Response:
    users = request.app[AUTH].users
    try:
        by = Actor(_admin_id(request), request.remote)
        await asyncio.to_thread(users.disable, request.match_info["username"], by)
    except UserError as exc:
        return await _users_response(request, str(exc), status=400)
    raise web.HTTPSeeOther("/console/users")


# -- API tokens ------------------------------------------------------------------


def _tokens_body(
    request: web.Request, tokens: list[TokenInfo], message: str = "", new: str = ""
) -> str:
    csrf = f'<input type="hidden" name="{e(FIELD)}" value="{e(csrf_token(request))}">'
    rows = []
    for t in tokens:
        state = (
            f"revoked {e(when(t.revoked_at))}"
            if t.revoked_at
            else f'<form method="post" action="/console/tokens/{t.id}/revoke">'
            f'{csrf}<button type="submit">Revoke</button></form>'
        )
        rows.append(
            f'<tr data-token="{t.id}"><td>{t.id}</td><td>{e(t.name)}</td>'
            f"<td>{e(' '.join(t.scopes))}</td><td>{e(t.created_by or 'command line')}</td>"
            f"<td>{e(when(t.created_at))}</td><td>{e(when(t.last_used_at)) or 'never'}</td>"
            f"<td>{state}</td></tr>"
        )
    table = (
        '<table class="tokens"><thead><tr><th>Id</th><th>Name</th><th>Scopes</th><th>By</th>'
        f"<th>Created</th><th>Last used</th><th></th></tr></thead><tbody>{''.join(rows)}"
        "</tbody></table>"
        if tokens
        else '<p class="empty">No API tokens.</p>'
    )
    shown = (
        '<section class="new-token"><p role="alert">Copy this token now: it is not stored and '
        f'will not be shown again.</p><p><code id="new-token">{e(new)}</code></p></section>'
        if new
        else ""
    )
    note = f'<p class="flag" role="alert">{e(message)}</p>' if message else ""
    scopes = "".join(
        f'<label><input type="checkbox" name="scope" value="{e(s)}"> {e(s)}: {e(what)}</label>'
        for s, what in SCOPES.items()
    )
    return f"""<h1>API tokens</h1>{note}{shown}
<p>For machine clients: <code>Authorization: Bearer agt_...</code>. See docs/console.md.</p>
{table}
<h2>Create a token</h2>
<form method="post" action="/console/tokens" class="filters">{csrf}
<label>Name (what uses it) <input name="name" required maxlength="100" autocomplete="off"></label>
<fieldset><legend>Scopes</legend>{scopes}</fieldset>
<button type="submit">Create</button></form>"""


async def _tokens_response(
    request: web.Request, message: str = "", status: int = 200, new: str = ""
) -> web.Response:
    tokens = await asyncio.to_thread(Tokens(request.app[ENGINE]).list)
    body = _tokens_body(request, tokens, message, new)
    return page(request, "API tokens", body, status=status)


@require_role(Role.ADMIN)
async def tokens_page(request: web.Request) -> web.Response:
    return await _tokens_response(request)


@require_role(Role.ADMIN)
async def create_token(request: web.Request) -> web.Response:
    """The new token is in this response only: no redirect, and never cached."""
    form = await request.post()
    name = str(form.get("name", ""))
    scopes = [str(scope) for scope in form.getall("scope", [])]
    tokens = Tokens(request.app[ENGINE])
    try:
        token, _ = await asyncio.to_thread(
            tokens.create,
            name,
            scopes,
            now(request.app),
            by=Actor(_admin_id(request), request.remote),
        )
    except TokenError as exc:
        return await _tokens_response(request, str(exc), status=400)
    return await _tokens_response(request, new=token)


@require_role(Role.ADMIN)
async def revoke_token(request: web.Request) -> web.Response:
    tokens = Tokens(request.app[ENGINE])
    token_id = int(request.match_info["id"])
    try:
        await asyncio.to_thread(
            tokens.revoke, token_id, now(request.app), by=Actor(_admin_id(request), request.remote)
        )
    except TokenError as exc:
        return await _tokens_response(request, str(exc), status=400)
    raise web.HTTPSeeOther("/console/tokens")


# -- the audit log ----------------------------------------------------------------


@dataclass(frozen=True)
class AuditRow:
    at: dt.datetime
    username: str | None
    action: str
    object_id: str | None
    ip: str | None
    detail: str | None = None

    @property
    def who(self) -> str:
        """The user; else the command line, or no one logged in (a failed login)."""
        if self.username:
            return self.username
        return "command line" if self.ip in (None, COMMAND_LINE) else "anonymous"


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
            AuditRow(entry.at, username, entry.action, entry.object_id, entry.ip, entry.detail)
            for entry, username in session.execute(query)
        ]


@require_role(Role.OWNER, Role.ADMIN)
async def audit_page(request: web.Request) -> web.Response:
    try:
        object_id = q.text(request.query, "object", MAX_OBJECT_ID)
    except QueryError as exc:
        note = f'<p class="flag" role="alert">{e(exc)}</p>'
        return page(request, "Audit log", f"<h1>Audit log</h1>{_audit_form('')}{note}", 400)
    rows = await asyncio.to_thread(audit_entries, request.app[ENGINE], object_id)
    lines = "".join(
        f"<tr><td>{e(when(r.at))}</td><td>{e(r.who)}</td>"
        f"<td>{e(r.action)}</td><td>{e(r.object_id)}</td><td>{e(r.detail)}</td>"
        f"<td>{e(r.ip)}</td></tr>"
        for r in rows
    )
    table = (
        '<table class="audit"><thead><tr><th>When</th><th>Who</th><th>What</th><th>Object</th>'
        f"<th>Detail</th><th>From</th></tr></thead><tbody>{lines}</tbody></table>"
        if rows
        else '<p class="empty">No entries.</p>'
    )
    return page(request, "Audit log", f"<h1>Audit log</h1>{_audit_form(object_id)}{table}")


def _audit_form(object_id: str) -> str:
    return f"""<form method="get" action="/console/audit" class="filters">
<label>Object (call id, user id) <input name="object" value="{e(object_id)}" size="34"
 maxlength="{MAX_OBJECT_ID}"></label>
<button type="submit">Filter</button> <a href="/console/audit">Clear</a></form>"""
