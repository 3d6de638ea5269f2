"""The console's front door for aiohttp: sessions from cookies, login, logout, roles.

``setup_auth`` installs a middleware that turns the session cookie into the
request's user, and the ``/login`` and ``/logout`` routes; ``require_role``
guards a handler. Anonymous requests to ``/api/`` get a 401 in JSON, to pages
a redirect to the login form; a user without the role gets a 403 (JSON, or a
page in the console's layout). The guard also checks the CSRF token of every
state-changing request, and marks what it serves ``no-store`` so personal data
stays out of caches. Failed logins are slowed (``ratelimit``) and audited. See
docs/console.md.
"""

from __future__ import annotations

import asyncio
import functools
import html
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template
from urllib.parse import quote

from aiohttp import web
from argon2 import PasswordHasher
from sqlalchemy import Engine

from agent.access import Anonymous, Refusal, guard
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
from agent.console.layout import e, page
from agent.console.nav import home
from agent.console.ratelimit import LoginLimits, LoginThrottle
from agent.console.sessions import SessionPolicy, SessionStore
from agent.console.users import Users
from agent.store.tables import Role

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Said for an unknown user, a wrong password and a disabled account alike.
_BAD_LOGIN = "Wrong username or password."
_LOGIN_PAGE = Path(__file__).parent / "templates" / "login.html"
#: The login page's own policy: no script at all, its form posts only here.
_LOGIN_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


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
        self.throttle = LoginThrottle(limits)
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
        Users(engine, hasher, clock),
        SessionStore(engine, session_policy or SessionPolicy()),
        limits or LoginLimits(),
        secure_cookies,
    )
    app[ENGINE] = engine
    app[CLOCK] = clock
    app.middlewares.append(_session_middleware)
    login = guard(Anonymous("the login form: a double-submit CSRF token, throttled"))
    app.router.add_get("/login", login(_login_form))
    app.router.add_post("/login", login(_login))
    app.router.add_post("/logout", guard(Roles(*Role))(_logout))


@web.middleware
async def _session_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Load the user of the session cookie, if any; clear a cookie whose session is over,
    unless the response sets a new one (a login from a browser with an ended session)."""
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
    if ended and not response.prepared and auth.session_cookie not in response.cookies:
        auth.del_cookie(response, auth.session_cookie)
    return response


@dataclass(frozen=True, init=False)
class Roles:
    """A logged-in user with one of ``roles`` (no role implies another), and for a
    state-changing request the session's CSRF token. What it serves is ``no-store``."""

    roles: frozenset[Role]

    def __init__(self, *roles: Role) -> None:
        if not roles:
            raise ValueError("Roles needs at least one role")
        object.__setattr__(self, "roles", frozenset(Role(role) for role in roles))

    @property
    def name(self) -> str:
        return "role " + "/".join(sorted(self.roles)) + " with CSRF for state changes"

    async def check(self, request: web.Request) -> Refusal | None:
        if AUTH not in request.app:
            raise RuntimeError("a Roles guard on an app without setup_auth")
        user = current_user(request)
        if user is None:
            return Refusal(_anonymous(request))
        if user.role not in self.roles:
            return Refusal(_forbidden(request, user.role), presented=True)
        if request.method not in _SAFE_METHODS and not await csrf.session_request_ok(request):
            message = f"missing or wrong CSRF token ({csrf.HEADER} or {csrf.FIELD})"
            return Refusal(_error(403, message), presented=True)
        return None


def require_role(*roles: Role) -> Callable[[Handler], Handler]:
    """Let only users with one of ``roles`` through to the handler (``Roles``)."""
    rule = Roles(*roles)

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def no_store(request: web.Request) -> web.StreamResponse:
            response = await handler(request)
            if not response.prepared:
                response.headers.setdefault("Cache-Control", "no-store")
            return response

        return guard(rule)(no_store)

    return decorate


def _anonymous(request: web.Request) -> web.Response:
    if request.path.startswith("/api/"):
        return _error(401, "log in first: POST /login")
    return _redirect(f"/login?next={quote(request.path_qs, safe='')}")


def _forbidden(request: web.Request, role: Role) -> web.Response:
    """A user without the route's role: JSON for the API, a page in the console's layout."""
    message = f"a {role} may not see this"
    if request.path.startswith("/api/"):
        return _error(403, message)
    body = (
        f"<h1>Not for your role</h1><p>{e(request.path)} is not open to the {e(role)} role.</p>"
        f'<p><a href="{e(home(role))}">Back to your start page</a></p>'
    )
    return page(request, "Not for your role", body, status=403)


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
    address = request.remote or "unknown"
    account_key = username.strip().lower()[:254]
    wait = auth.throttle.retry_after(account_key, address, at)
    if wait is not None:
        logger.warning("console login from %s refused: too many failures", address)
        seconds = math.ceil(wait)
        message = f"Too many failed logins: try again in {seconds} seconds."
        response = _login_page(token, next_path, message, status=429)
        response.headers["Retry-After"] = str(seconds)
        return response
    # Counted before it is judged, so concurrent guesses cannot all slip under the limit.
    auth.throttle.failed(account_key, address, at)

    attempt = await asyncio.to_thread(auth.users.authenticate, username, password)
    account = attempt.account
    if account is None:
        logger.info("failed console login from %s", address)
        # The account the name is of, never the name typed: that is sometimes a password.
        await asyncio.to_thread(
            write_audit,
            request.app[ENGINE],
            at=at,
            user_id=None,
            action="login_failed",
            object_id=None if attempt.user_id is None else str(attempt.user_id),
            ip=request.remote,
            detail=attempt.why,
        )
        return _login_page(token, next_path, _BAD_LOGIN, status=401)
    auth.throttle.succeeded(account_key, address, at)

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
    logger.info("user %s logged in to the console from %s", account.username, address)
    response = _redirect(next_path or home(account.role))
    auth.set_cookie(response, auth.session_cookie, session_token)
    auth.del_cookie(response, auth.csrf_cookie)
    return response


async def _logout(request: web.Request) -> web.Response:
    auth = request.app[AUTH]
    user = current_user(request)
    token = request.get(SESSION_TOKEN)
    assert user is not None and token is not None  # behind Roles
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


@functools.cache
def _login_template() -> Template:
    return Template(_LOGIN_PAGE.read_text(encoding="utf-8"))


def _login_page(
    token: str | None, next_path: str | None, message: str | None = None, status: int = 200
) -> web.Response:
    """The login form. Without a token (a stale form) it only asks for a reload."""
    note = f'<p class="flag" role="alert">{html.escape(message)}</p>' if message else ""
    form = ""
    if token is not None:
        hidden = (
            f'<input type="hidden" name="next" value="{html.escape(next_path)}">'
            if next_path
            else ""
        )
        form = f"""<form class="login" method="post" action="/login">
<input type="hidden" name="{csrf.FIELD}" value="{html.escape(token)}">{hidden}
<label>Username <input name="username" autocomplete="username" maxlength="254" required
 autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password"
 maxlength="1024" required></label>
<button type="submit">Log in</button>
</form>"""
    return web.Response(
        text=_login_template().substitute(note=note, form=form),
        content_type="text/html",
        status=status,
        headers={"Cache-Control": "no-store", "Content-Security-Policy": _LOGIN_CSP},
    )
