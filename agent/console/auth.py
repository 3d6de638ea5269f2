"""The console's front door for aiohttp: sessions from cookies, login, logout, roles.

``setup_auth`` installs a middleware that turns the session cookie into the
request's user, and the ``/login`` and ``/logout`` routes; ``require_role``
guards a handler. Anonymous requests to ``/api/`` get a 401 in JSON, to pages
a redirect to the login form; a user without the role gets a 403. The guard
also checks the CSRF token of every state-changing request, and marks what it
serves ``no-store`` so personal data stays out of caches. See docs/console.md.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import html
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web
from argon2 import PasswordHasher
from sqlalchemy import Engine

from agent.console import csrf
from agent.console.audit import write as write_audit
from agent.console.context import (
    CLOCK,
    ENGINE,
    SESSION_TOKEN,
    USER,
    Clock,
    current_user,
    now,
    utc_now,
)
from agent.console.nav import home
from agent.console.ratelimit import FailureLimiter, Limit
from agent.console.sessions import SessionPolicy, SessionStore
from agent.console.users import Users
from agent.models import Role

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Said for an unknown user, a wrong password and a disabled account alike.
_BAD_LOGIN = "Wrong username or password."
_FIFTEEN_MINUTES = dt.timedelta(minutes=15)


@dataclass(frozen=True)
class LoginLimits:
    """Failed logins allowed before ``/login`` answers 429.

    Per username, against guessing one account's password from anywhere; per IP
    address, looser because an office shares one, against spraying many accounts.
    """

    per_username: Limit = Limit(5, _FIFTEEN_MINUTES)
    per_ip: Limit = Limit(20, _FIFTEEN_MINUTES)


class Auth:
    """What ``setup_auth`` installed on the app."""

    def __init__(
        self,
        users: Users,
        sessions: SessionStore,
        limits: LoginLimits,
        secure_cookies: bool,
    ) -> None:
        self.users = users
        self.sessions = sessions
        self.by_username = FailureLimiter(limits.per_username)
        self.by_ip = FailureLimiter(limits.per_ip)
        self.secure_cookies = secure_cookies
        # __Host-: the browser takes it only with Secure and Path=/ and no Domain, so a
        # sibling subdomain cannot plant one (the weak spot of double-submit cookies).
        prefix = "__Host-" if secure_cookies else ""
        self.session_cookie = f"{prefix}console_session"
        self.csrf_cookie = f"{prefix}console_csrf"

    def set_cookie(self, response: web.StreamResponse, name: str, value: str) -> None:
        response.set_cookie(
            name,
            value,
            max_age=int(self.sessions.policy.lifetime.total_seconds()),
            path="/",
            secure=self.secure_cookies,
            httponly=True,
            samesite="Lax",
        )

    def del_cookie(self, response: web.StreamResponse, name: str) -> None:
        response.del_cookie(
            name, path="/", secure=self.secure_cookies, httponly=True, samesite="Lax"
        )


AUTH = web.AppKey("console_auth", Auth)


def setup_auth(
    app: web.Application,
    engine: Engine,
    *,
    secure_cookies: bool,
    session_policy: SessionPolicy | None = None,
    limits: LoginLimits | None = None,
    clock: Clock = utc_now,
    hasher: PasswordHasher | None = None,
) -> None:
    """Install the session middleware and the ``/login`` and ``/logout`` routes.

    ``secure_cookies``: behind HTTPS (always, but on a developer's loopback), so
    cookies are ``Secure`` and ``__Host-`` prefixed. ``clock`` and ``hasher`` are
    for tests: time that moves on demand, argon2 parameters that cost little.
    """
    app[AUTH] = Auth(
        Users(engine, hasher),
        SessionStore(engine, session_policy or SessionPolicy()),
        limits or LoginLimits(),
        secure_cookies,
    )
    app[ENGINE] = engine
    app[CLOCK] = clock
    app.middlewares.append(_session_middleware)
    app.router.add_get("/login", _login_form)
    app.router.add_post("/login", _login)
    app.router.add_post("/logout", _logout)


@web.middleware
async def _session_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Load the user of the session cookie, if any; clear a cookie whose session is over."""
    auth = request.app[AUTH]
    token = request.cookies.get(auth.session_cookie)
    ended = False
    if token:
        account = await asyncio.to_thread(auth.sessions.load, token, now(request.app))
        if account is None:
            ended = True
        else:
            request[USER] = account
            request[SESSION_TOKEN] = token
    response = await handler(request)
    if ended and not response.prepared:
        auth.del_cookie(response, auth.session_cookie)
    return response


def require_role(*roles: Role) -> Callable[[Handler], Handler]:
    """Let only users with one of ``roles`` through to the handler (no role implies another)."""
    if not roles:
        raise ValueError("require_role needs at least one role")
    allowed = frozenset(Role(role) for role in roles)

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(request: web.Request) -> web.StreamResponse:
            if AUTH not in request.app:
                raise RuntimeError("require_role on an app without setup_auth")
            user = current_user(request)
            if user is None:
                return _anonymous(request)
            if user.role not in allowed:
                return _error(403, f"a {user.role} may not see this")
            if request.method not in _SAFE_METHODS and not await csrf.session_request_ok(request):
                return _error(403, f"missing or wrong CSRF token ({csrf.HEADER} or {csrf.FIELD})")
            response = await handler(request)
            if not response.prepared:
                response.headers.setdefault("Cache-Control", "no-store")
            return response

        return guarded

    return decorate


def _anonymous(request: web.Request) -> web.Response:
    if request.path.startswith("/api/"):
        return _error(401, "log in first: POST /login")
    return _redirect(f"/login?next={quote(request.path_qs, safe='')}")


async def _login_form(request: web.Request) -> web.Response:
    auth = request.app[AUTH]
    # Kept if the browser has one, so two tabs with the form both work.
    token = request.cookies.get(auth.csrf_cookie) or csrf.new_login_token()
    response = _login_page(token, _local_path(request.query.get("next")))
    auth.set_cookie(response, auth.csrf_cookie, token)
    return response


async def _login(request: web.Request) -> web.Response:
    auth = request.app[AUTH]
    form = await request.post()
    username = _field(form.get("username"))
    password = _field(form.get("password"))
    next_path = _local_path(_field(form.get("next")))
    token = request.cookies.get(auth.csrf_cookie)
    if token is None or not csrf.matches(token, _field(form.get(csrf.FIELD))):
        return _login_page(None, next_path, "The form expired: reload the page.", status=403)

    at = now(request.app)
    ip = request.remote or "unknown"
    user_key = username.strip().lower()[:254]
    waits = [auth.by_ip.retry_after(ip, at), auth.by_username.retry_after(user_key, at)]
    wait = max((w for w in waits if w is not None), default=None)
    if wait is not None:
        logger.warning("console login from %s refused: too many failures", ip)
        response = _login_page(token, next_path, "Too many failed logins: wait.", status=429)
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response
    # Counted before it is judged, so concurrent guesses cannot all slip under the limit.
    auth.by_ip.failed(ip, at)
    auth.by_username.failed(user_key, at)

    account = await asyncio.to_thread(auth.users.authenticate, username, password)
    if account is None:
        logger.info("failed console login from %s", ip)
        return _login_page(token, next_path, _BAD_LOGIN, status=401)
    auth.by_ip.forgive(ip, at)
    auth.by_username.reset(user_key)

    session_token = await asyncio.to_thread(
        auth.sessions.create,
        account.id,
        at,
        replacing=request.cookies.get(auth.session_cookie),
        user_agent=request.headers.get("User-Agent"),
        ip=request.remote,
    )
    await asyncio.to_thread(
        write_audit,
        request.app[ENGINE],
        at=at,
        user_id=account.id,
        action="login",
        object_id=None,
        ip=request.remote,
    )
    logger.info("user %s logged in to the console from %s", account.username, ip)
    response = _redirect(next_path or home(account.role))
    auth.set_cookie(response, auth.session_cookie, session_token)
    auth.del_cookie(response, auth.csrf_cookie)
    return response


async def _logout(request: web.Request) -> web.Response:
    auth = request.app[AUTH]
    user = current_user(request)
    token = request.get(SESSION_TOKEN)
    if user is None or token is None:
        return _redirect("/login")
    if not await csrf.session_request_ok(request):
        return _error(403, f"missing or wrong CSRF token ({csrf.FIELD})")
    await asyncio.to_thread(auth.sessions.end, token)
    await asyncio.to_thread(
        write_audit,
        request.app[ENGINE],
        at=now(request.app),
        user_id=user.id,
        action="logout",
        object_id=None,
        ip=request.remote,
    )
    response = _redirect("/login")
    auth.del_cookie(response, auth.session_cookie)
    return response


def _field(value: object) -> str:
    return value if isinstance(value, str) else ""


def _local_path(value: str | None) -> str | None:
    """``value`` if it is a path on this server, else None: ``next`` is no open redirect."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return None
    if any(ord(c) < 0x20 or c == "\\" for c in value):
        return None
    return value


def _error(status: int, message: str) -> web.Response:
    response = web.json_response({"error": message}, status=status)
    response.headers["Cache-Control"] = "no-store"
    return response


def _redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store"})


def _login_page(
    token: str | None, next_path: str | None, message: str | None = None, status: int = 200
) -> web.Response:
    """The plain login form. Without a token (a stale form) it only asks for a reload."""
    note = f'<p role="alert">{html.escape(message)}</p>' if message else ""
    form = ""
    if token is not None:
        hidden = (
            f'<input type="hidden" name="next" value="{html.escape(next_path)}">'
            if (next_path)
            else ""
        )
        form = f"""<form method="post" action="/login">
<input type="hidden" name="{csrf.FIELD}" value="{html.escape(token)}">{hidden}
<label>Username <input name="username" autocomplete="username" required autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required>
</label>
<button type="submit">Log in</button>
</form>"""
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Console: log in</title>
<style>body{{font-family:system-ui,sans-serif;max-width:22rem;margin:4rem auto}}
label{{display:block;margin:.8rem 0}}input{{width:100%}}</style></head>
<body><h1>Console</h1>{note}{form}</body></html>
"""
    return web.Response(
        text=body,
        content_type="text/html",
        status=status,
        headers={
            "Cache-Control": "no-store",
            "X-Frame-Options": "DENY",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
            "form-action 'self'; frame-ancestors 'none'",
        },
    )
