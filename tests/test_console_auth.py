"""The console's login, sessions, CSRF, rate limit, roles and audit, over HTTP.

A small app with dummy protected handlers stands in for the console; time is
a clock the tests move, so windows and expiries need no waiting.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientResponse, CookieJar, web
from aiohttp.test_utils import TestClient, TestServer
from argon2 import PasswordHasher
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.console.audit import audit
from agent.console.auth import Handler, require_role, setup_auth
from agent.console.context import current_user
from agent.console.csrf import csrf_token
from agent.console.users import Account, Users
from agent.store.tables import AuditEntry, Role

FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
PASSWORD = "correct horse battery"
START = dt.datetime(2026, 12, 9, 9, 0, tzinfo=dt.UTC)


class Clock:
    """Time that moves only when told to."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


@require_role(Role.OPERATOR, Role.OWNER)
async def call_record(request: web.Request) -> web.Response:
    call_id = request.match_info["call_id"]
    await audit(request, "view_call", call_id)
    return web.json_response({"id": call_id})


@require_role(Role.OPERATOR, Role.OWNER)
async def call_page(request: web.Request) -> web.Response:
    return web.Response(text=f"call {request.match_info['call_id']}")


@require_role(Role.OPERATOR)
async def add_note(request: web.Request) -> web.Response:
    return web.json_response({"noted": True})


@require_role(Role.ADMIN)
async def admin_only(request: web.Request) -> web.Response:
    return web.json_response({"admin": True})


async def console_page(request: web.Request) -> web.Response:
    """A logged-in page with the logout form, carrying its session-bound CSRF token."""
    user = current_user(request)
    assert user is not None
    return web.Response(
        text=f'<p>{user.username}</p><form method="post" action="/logout">'
        f'<input type="hidden" name="csrf_token" value="{csrf_token(request)}"></form>',
        content_type="text/html",
    )


@web.middleware
async def remote_from_header(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The client's address as ``X-Test-Remote`` says: guessers at many addresses."""
    remote = request.headers.get("X-Test-Remote")
    return await handler(request.clone(remote=remote) if remote else request)


def console_app(engine: Engine, clock: Clock, *, secure_cookies: bool = False) -> web.Application:
    app = web.Application(middlewares=[remote_from_header])
    setup_auth(app, engine, secure_cookies=secure_cookies, clock=clock, hasher=FAST)
    app.router.add_get("/api/calls/{call_id}", call_record)
    app.router.add_post("/api/calls/{call_id}/notes", add_note)
    app.router.add_get("/calls/{call_id}", call_page)
    app.router.add_get("/api/admin", admin_only)
    app.router.add_get("/console", require_role(*Role)(console_page))
    return app


@pytest.fixture
def people(db_engine: Engine) -> dict[str, Account]:
    users = Users(db_engine, FAST)
    return {
        role: users.add(name, PASSWORD, role)
        for name, role in (("ann", "operator"), ("olga", "owner"), ("adam", "admin"))
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(
    db_engine: Engine, clock: Clock, people: dict[str, Account]
) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async with TestClient(TestServer(console_app(db_engine, clock))) as client:
        yield client


Client = TestClient[web.Request, web.Application]


def hidden(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no {name} in {html}"
    return found.group(1)


async def login(
    client: Client, username: str, password: str = PASSWORD, *, at: str = "", **extra: str
) -> ClientResponse:
    """Log in through the form; ``at``: from that address (else the loopback)."""
    headers = {"X-Test-Remote": at} if at else {}
    params = {k: v for k, v in extra.items() if k == "next"}
    form = await client.get("/login", params=params, headers=headers)
    token = hidden(await form.text(), "csrf_token")
    data = {"username": username, "password": password, "csrf_token": token, **extra}
    return await client.post("/login", data=data, headers=headers, allow_redirects=False)


def session_cookie(response: ClientResponse, name: str = "console_session") -> str:
    (header,) = [h for h in response.headers.getall("Set-Cookie") if h.startswith(f"{name}=")]
    return header


def jar_token(client: Client, name: str = "console_session") -> str:
    return next(c.value for c in client.session.cookie_jar if c.key == name)


async def logout_token(client: Client) -> str:
    page = await client.get("/console")
    assert page.status == 200
    return hidden(await page.text(), "csrf_token")


# -- login --------------------------------------------------------------------


async def test_a_login_sets_a_session_cookie_with_the_right_flags(client: Client) -> None:
    response = await login(client, "ann")
    assert response.status == 303 and response.headers["Location"] == "/console"
    cookie = session_cookie(response)
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # secure_cookies=False: a developer's http://127.0.0.1
    assert (await client.get("/api/calls/c1")).status == 200


async def test_secure_cookies_are_secure_and_host_prefixed(
    db_engine: Engine, clock: Clock, people: dict[str, Account]
) -> None:
    server = TestServer(console_app(db_engine, clock, secure_cookies=True))
    await server.start_server()
    jar = CookieJar(unsafe=True, treat_as_secure_origin=[str(server.make_url("/"))])
    async with TestClient(server, cookie_jar=jar) as client:
        form = await client.get("/login")
        assert "Secure" in session_cookie(form, "__Host-console_csrf")
        response = await login(client, "olga")
        assert response.status == 303
        cookie = session_cookie(response, "__Host-console_session")
        for flag in ("Secure", "HttpOnly", "SameSite=Lax", "Path=/"):
            assert flag in cookie
        assert "Domain" not in cookie
        assert (await client.get("/api/calls/c1")).status == 200


async def test_unknown_user_and_wrong_password_get_the_same_401(client: Client) -> None:
    wrong = await login(client, "ann", "not the password at all")
    unknown = await login(client, "nobody")
    assert wrong.status == unknown.status == 401
    message = "Wrong username or password."
    assert message in await wrong.text() and message in await unknown.text()
    assert (await wrong.text()) == (await unknown.text())
    assert not any(h.startswith("console_session=") for h in wrong.headers.getall("Set-Cookie", []))
    assert (await client.get("/api/calls/c1")).status == 401


async def test_a_disabled_user_cannot_log_in(client: Client, db_engine: Engine) -> None:
    Users(db_engine, FAST).disable("ann")
    assert (await login(client, "ann")).status == 401


async def test_login_goes_back_to_a_local_next_only(client: Client) -> None:
    response = await login(client, "ann", next="/calls/c1")
    assert response.headers["Location"] == "/calls/c1"
    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        response = await login(client, "ann", next=elsewhere)
        assert response.status == 303 and response.headers["Location"] == "/console"


async def test_each_role_lands_on_its_own_first_section(client: Client) -> None:
    homes = {"ann": "/console", "olga": "/console/dashboard", "adam": "/console/users"}
    for name, home in homes.items():
        response = await login(client, name)
        assert response.status == 303 and response.headers["Location"] == home


async def test_a_login_over_an_ended_session_keeps_its_new_cookie(
    client: Client, clock: Clock
) -> None:
    await login(client, "ann")
    ended = jar_token(client)
    clock.advance(minutes=31)  # the session is over; the browser still holds its cookie
    form = await client.get("/login")
    client.session.cookie_jar.update_cookies({"console_session": ended})
    data = {
        "username": "ann",
        "password": PASSWORD,
        "csrf_token": hidden(await form.text(), "csrf_token"),
    }
    response = await client.post("/login", data=data, allow_redirects=False)
    assert response.status == 303
    assert not session_cookie(response).startswith('console_session="";')
    assert jar_token(client) != ended
    assert (await client.get("/api/calls/c1")).status == 200


async def test_the_login_page_looks_like_the_console_and_cannot_be_framed(
    client: Client,
) -> None:
    form = await client.get("/login")
    page = await form.text()
    assert '<header class="top"><span class="brand">Console</span>' in page
    assert '<form class="login" method="post" action="/login">' in page
    policy = form.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "script-src" not in policy
    refused = await login(client, "ann", WRONG)
    assert '<p class="flag" role="alert">Wrong username or password.</p>' in await refused.text()


async def test_a_new_login_replaces_the_old_session(client: Client) -> None:
    await login(client, "ann")
    first = jar_token(client)
    await login(client, "olga")
    assert jar_token(client) != first
    client.session.cookie_jar.clear()
    stale = await client.get("/api/calls/c1", headers={"Cookie": f"console_session={first}"})
    assert stale.status == 401


# -- CSRF ---------------------------------------------------------------------


async def test_login_without_the_right_csrf_token_is_403(client: Client) -> None:
    form = await client.get("/login")
    token = hidden(await form.text(), "csrf_token")
    fields = {"username": "ann", "password": PASSWORD}
    missing = await client.post("/login", data=fields, allow_redirects=False)
    wrong = await client.post(
        "/login", data={**fields, "csrf_token": token + "x"}, allow_redirects=False
    )
    client.session.cookie_jar.clear()  # a cross-site form: the token, but not the cookie
    no_cookie = await client.post(
        "/login", data={**fields, "csrf_token": token}, allow_redirects=False
    )
    assert missing.status == wrong.status == no_cookie.status == 403
    assert (await client.get("/api/calls/c1")).status == 401


async def test_state_changing_requests_need_the_session_token(client: Client) -> None:
    await login(client, "ann")
    token = await logout_token(client)
    assert (await client.post("/api/calls/c1/notes")).status == 403
    changed = ("y" if token[0] == "x" else "x") + token[1:]  # always a different token
    wrong = await client.post("/api/calls/c1/notes", headers={"X-CSRF-Token": changed})
    assert wrong.status == 403
    right = await client.post("/api/calls/c1/notes", headers={"X-CSRF-Token": token})
    assert right.status == 200
    as_field = await client.post("/api/calls/c1/notes", data={"csrf_token": token})
    assert as_field.status == 200
    assert (await client.post("/logout", allow_redirects=False)).status == 403
    assert (await client.get("/api/calls/c1")).status == 200  # still logged in


# -- slowing guessers down ---------------------------------------------------------

WRONG = "not the password at all"


async def retry_after(response: ClientResponse) -> int:
    assert response.status == 429, await response.text()
    return int(response.headers["Retry-After"])


async def test_a_guesser_at_one_address_waits_longer_after_each_failure(
    client: Client, clock: Clock
) -> None:
    home = "198.51.100.4"
    assert (await login(client, "ann", at=home)).status == 303
    for _ in range(5):
        assert (await login(client, "ann", WRONG)).status == 401
    assert await retry_after(await login(client, "ann")) == 30  # even the right password waits
    for wait in (30, 60, 120, 240, 480, 900, 900):
        clock.advance(seconds=wait - 1)
        assert await retry_after(await login(client, "ann", WRONG)) == 1
        clock.advance(seconds=1)
        assert (await login(client, "ann", WRONG)).status == 401
    assert await retry_after(await login(client, "ann")) == 900  # at most a quarter hour

    # The owner, where they log in from, is not locked out; nor are the address's other
    # accounts.
    assert (await login(client, "ann", at=home)).status == 303
    assert (await login(client, "olga")).status == 303

    clock.advance(hours=1)  # an hour without a failure: forgiven
    assert (await login(client, "ann")).status == 303


async def test_a_guesser_at_many_addresses_slows_the_account_not_its_owner(
    client: Client, clock: Clock
) -> None:
    home = "198.51.100.4"
    assert (await login(client, "ann", at=home)).status == 303
    for n in range(10):
        assert (await login(client, "ann", WRONG, at=f"203.0.113.{n}")).status == 401
    assert await retry_after(await login(client, "ann", WRONG, at="203.0.113.99")) == 5
    assert (await login(client, "ann", at=home)).status == 303  # where ann logs in from

    waits = []
    for n in range(10, 20):
        wait = await retry_after(await login(client, "ann", WRONG, at=f"203.0.113.{n}"))
        waits.append(wait)
        clock.advance(seconds=wait)
        assert (await login(client, "ann", WRONG, at=f"203.0.113.{n}")).status == 401
    assert waits == [5, 10, 20, 40, 80, 120, 120, 120, 120, 120]

    # From an address the account never used, the owner waits, but two minutes at most.
    laptop = "192.0.2.50"
    assert await retry_after(await login(client, "ann", at=laptop)) == 120
    assert (await login(client, "ann", at=home)).status == 303
    clock.advance(minutes=2)
    assert (await login(client, "ann", at=laptop)).status == 303


async def test_spraying_many_accounts_from_one_address_is_slowed(
    client: Client, clock: Clock
) -> None:
    for n in range(20):
        assert (await login(client, f"guess{n}", WRONG)).status == 401
    assert await retry_after(await login(client, "ann")) == 30
    assert (await login(client, "ann", at="198.51.100.4")).status == 303


async def test_a_success_clears_its_address_for_that_account(client: Client) -> None:
    for _ in range(4):
        await login(client, "ann", WRONG)
    assert (await login(client, "ann")).status == 303
    for _ in range(5):
        assert (await login(client, "ann", WRONG)).status == 401
    assert (await login(client, "ann")).status == 429


async def test_failed_logins_are_audited_without_the_name_typed(
    client: Client, db_engine: Engine, people: dict[str, Account]
) -> None:
    ann = people["operator"]
    await login(client, "ann", WRONG, at="203.0.113.7")
    await login(client, "Tr0ub4dor&3-typed-as-a-name")
    Users(db_engine, FAST).disable("adam")
    await login(client, "adam")
    for _ in range(4):
        await login(client, "ann", WRONG, at="203.0.113.7")
    assert (await login(client, "ann", at="203.0.113.7")).status == 429  # not judged
    await login(client, "ann")

    with Session(db_engine) as session:
        rows = [
            (e.user_id, e.action, e.object_id, e.ip, e.detail)
            for e in session.scalars(
                select(AuditEntry)
                .where(AuditEntry.action.in_(["login_failed", "login"]))
                .order_by(AuditEntry.id)
            )
        ]
        kept = " ".join(
            str(v) for e in session.scalars(select(AuditEntry)) for v in vars(e).values()
        )
    wrong = (None, "login_failed", str(ann.id), "203.0.113.7", "wrong password")
    assert rows == [
        wrong,
        (None, "login_failed", None, "127.0.0.1", "unknown username"),
        (None, "login_failed", str(people["admin"].id), "127.0.0.1", "account disabled"),
        *[wrong] * 4,
        (ann.id, "login", None, "127.0.0.1", None),
    ]
    assert "Tr0ub4dor" not in kept


# -- sessions -----------------------------------------------------------------


async def test_logout_ends_the_session(client: Client) -> None:
    await login(client, "ann")
    session_token = jar_token(client)
    response = await client.post(
        "/logout", data={"csrf_token": await logout_token(client)}, allow_redirects=False
    )
    assert response.status == 303 and response.headers["Location"] == "/login"
    assert 'console_session=""' in session_cookie(response)
    assert (await client.get("/api/calls/c1")).status == 401
    client.session.cookie_jar.clear()
    replayed = await client.get(
        "/api/calls/c1", headers={"Cookie": f"console_session={session_token}"}
    )
    assert replayed.status == 401


async def test_an_idle_session_expires(client: Client, clock: Clock) -> None:
    await login(client, "ann")
    clock.advance(minutes=29)
    assert (await client.get("/api/calls/c1")).status == 200
    clock.advance(minutes=29)  # 58 minutes after login, 29 after the last request
    assert (await client.get("/api/calls/c1")).status == 200
    clock.advance(minutes=31)
    expired = await client.get("/api/calls/c1")
    assert expired.status == 401
    assert 'console_session=""' in session_cookie(expired)  # the dead cookie is cleared


async def test_a_busy_session_still_ends_after_its_lifetime(client: Client, clock: Clock) -> None:
    await login(client, "ann")
    for _ in range(11 * 3):  # a request every 20 minutes for 11 hours
        clock.advance(minutes=20)
        assert (await client.get("/api/calls/c1")).status == 200
    clock.advance(minutes=61)
    assert (await client.get("/api/calls/c1")).status == 401


async def test_disabling_a_user_ends_their_session(client: Client, db_engine: Engine) -> None:
    await login(client, "ann")
    Users(db_engine, FAST).disable("ann")
    assert (await client.get("/api/calls/c1")).status == 401


# -- roles ----------------------------------------------------------------------


async def test_anonymous_api_gets_401_and_anonymous_page_the_login(client: Client) -> None:
    api = await client.get("/api/calls/c1")
    assert api.status == 401 and "log in" in (await api.json())["error"]
    page = await client.get("/calls/c1?tab=transcript", allow_redirects=False)
    assert page.status == 303
    assert page.headers["Location"] == "/login?next=%2Fcalls%2Fc1%3Ftab%3Dtranscript"
    followed = await client.get("/calls/c1")
    assert followed.status == 200 and 'name="password"' in await followed.text()


#: Who gets what: operators and owners read calls, only admins the admin route.
ACCESS = [
    ("ann", "/api/calls/c1", 200),
    ("ann", "/calls/c1", 200),
    ("ann", "/api/admin", 403),
    ("olga", "/api/calls/c1", 200),
    ("olga", "/calls/c1", 200),
    ("olga", "/api/admin", 403),
    ("adam", "/api/admin", 200),
    ("adam", "/api/calls/c1", 403),
    ("adam", "/calls/c1", 403),
]


async def test_each_role_sees_its_routes_only(client: Client) -> None:
    seen = []
    for username, path, _ in ACCESS:
        await login(client, username)
        response = await client.get(path)
        assert response.headers["Cache-Control"] == "no-store"
        seen.append((username, path, response.status))
    assert seen == ACCESS


async def test_a_page_refused_to_a_role_says_so_in_the_console(client: Client) -> None:
    await login(client, "adam")
    refused = await client.get("/calls/c1")
    assert refused.status == 403 and refused.content_type == "text/html"
    page = await refused.text()
    assert "<h1>Not for your role</h1>" in page and '<header class="top">' in page
    assert "/calls/c1 is not open to the admin role." in page
    assert '<a href="/console/users">Back to your start page</a>' in page
    assert "frame-ancestors 'none'" in refused.headers["Content-Security-Policy"]
    api = await client.get("/api/calls/c1")
    assert api.status == 403 and (await api.json()) == {"error": "a admin may not see this"}


def test_require_role_needs_a_role() -> None:
    with pytest.raises(ValueError, match="at least one role"):
        require_role()
    with pytest.raises(ValueError):
        require_role("root")  # type: ignore[arg-type]


# -- audit ------------------------------------------------------------------------


async def test_every_view_of_a_call_is_audited(
    client: Client, db_engine: Engine, clock: Clock, people: dict[str, Account]
) -> None:
    await login(client, "ann")
    clock.advance(seconds=5)
    await client.get("/api/calls/c1")
    clock.advance(seconds=5)
    await client.get("/api/calls/c2")
    await login(client, "adam")
    assert (await client.get("/api/calls/c3")).status == 403  # refused: not a view

    with Session(db_engine) as session:
        entries = session.scalars(
            select(AuditEntry)
            .where(AuditEntry.action.in_(["view_call", "login"]))
            .order_by(AuditEntry.id)
        )
        rows = [(e.user_id, e.action, e.object_id, e.ip, e.at) for e in entries]
    ann = people["operator"].id
    assert rows == [
        (ann, "login", None, "127.0.0.1", START),
        (ann, "view_call", "c1", "127.0.0.1", START + dt.timedelta(seconds=5)),
        (ann, "view_call", "c2", "127.0.0.1", START + dt.timedelta(seconds=10)),
        (people["admin"].id, "login", None, "127.0.0.1", START + dt.timedelta(seconds=10)),
    ]
