"""Security headers on every response, and parameters no route could use refused
(agent.server.hygiene).

The walk reads the worker's routes from the app itself, so a route added tomorrow is
walked too: each path parameter and query gets a NUL and an oversized value, logged in
as each role, on SQLite and PostgreSQL. With the middleware every one is a 400; without
it (the handlers' own checks, under the net) none is a 500.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agent.config import Settings
from agent.console.nav import home
from agent.console.users import Users
from agent.runtime.context import AgentRuntime
from agent.server.app import make_app
from agent.server.hygiene import (
    CSP,
    HSTS,
    MAX_QUERY_VALUE,
    MAX_SEGMENT,
    add_security,
    refuse_unusable,
)
from agent.store.tables import Role
from tests.console import PEOPLE, hidden
from tests.test_access import EVERY_WAY_IN

Client = TestClient[web.Request, web.Application]

# -- the headers -------------------------------------------------------------------


async def plain(request: web.Request) -> web.Response:
    return web.Response(text="hello")


async def own_policy(request: web.Request) -> web.Response:
    return web.Response(text="mine", headers={"Content-Security-Policy": "default-src 'none'"})


async def fails(request: web.Request) -> web.Response:
    raise RuntimeError("a bug")


async def redirects(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/")


async def things(request: web.Request) -> web.Response:
    return web.json_response({"id": request.match_info["id"]})


def small_app(public_url: str | None, static: Path) -> web.Application:
    app = web.Application()
    add_security(app, public_url)
    app.router.add_get("/", plain)
    app.router.add_get("/own", own_policy)
    app.router.add_get("/fails", fails)
    app.router.add_get("/redirects", redirects)
    app.router.add_get("/api/things/{id}", things)
    app.router.add_get("/things/{id}", things)
    app.router.add_static("/static", static)
    return app


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    (tmp_path / "call.js").write_text("// the call page's script\n")
    async with TestClient(TestServer(small_app("https://agent.example", tmp_path))) as client:
        yield client


async def test_every_response_gets_the_security_headers(client: Client) -> None:
    for path, status in [
        ("/", 200),
        ("/static/call.js", 200),
        ("/nowhere", 404),
        ("/fails", 500),
        ("/redirects", 303),
        ("/things/a%00b", 400),
    ]:
        response = await client.get(path, allow_redirects=False)
        assert response.status == status, path
        headers = response.headers
        assert headers["Content-Security-Policy"] == CSP, path
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "same-origin"
        assert "microphone=(self)" in headers["Permissions-Policy"]
        assert headers["Strict-Transport-Security"] == HSTS


def test_the_default_policy_lets_the_call_page_work_and_nothing_frame_it() -> None:
    policy = dict(part.strip().split(" ", 1) for part in CSP.split(";"))
    assert policy["default-src"] == "'none'"
    assert policy["frame-ancestors"] == "'none'"
    assert policy["script-src"] == "'self'"  # /static/call.js, no inline script
    assert policy["connect-src"] == "'self'"  # fetch("/api/offer"), the transcript's events
    page = (Path(__file__).parent.parent / "agent" / "server" / "web" / "index.html").read_text()
    assert re.findall(r"<script\b[^>]*>", page) == ['<script src="/static/call.js">']
    assert "<style>" in page and "'unsafe-inline'" in policy["style-src"]


async def test_a_handler_keeps_its_own_policy(client: Client) -> None:
    response = await client.get("/own")
    assert response.headers["Content-Security-Policy"] == "default-src 'none'"
    assert response.headers["X-Frame-Options"] == "DENY"


async def test_no_hsts_without_an_https_public_url(tmp_path: Path) -> None:
    for public_url in (None, "http://127.0.0.1:8080"):
        async with TestClient(TestServer(small_app(public_url, tmp_path))) as client:
            response = await client.get("/")
            assert "Strict-Transport-Security" not in response.headers
            assert response.headers["Content-Security-Policy"] == CSP


# -- unusable parameters ------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/things/a%00b", "id must be free of control characters"),
        ("/nowhere/a%00b", "the path holds control characters"),
        ("/things/" + "x" * (MAX_SEGMENT + 1), "a path segment is longer than 256"),
        ("/nowhere/" + "x" * (MAX_SEGMENT + 1), "a path segment is longer than 256"),
        ("/?q=%00", "q must not contain control characters"),
        ("/?q=a%0Ab", "q must not contain control characters"),
        ("/?q=%C2%85", "q must not contain control characters"),  # C1: NEL
        ("/?q=" + "x" * (MAX_QUERY_VALUE + 1), "q is longer than 2048 characters"),
        ("/?%00=1", "a query parameter's name is too long or holds control characters"),
        ("/?" + "&".join(f"p{n}=1" for n in range(33)), "more than 32 query parameters"),
    ],
)
async def test_unusable_requests_are_400_before_the_handler(
    client: Client, path: str, why: str
) -> None:
    response = await client.get(path)
    assert response.status == 400 and why in await response.text()


async def test_the_api_is_told_in_json(client: Client) -> None:
    response = await client.get("/api/things/a%00b")
    assert response.status == 400
    assert await response.json() == {"error": "id must be free of control characters"}
    fine = await client.get("/api/things/" + "x" * MAX_SEGMENT + "?q=caf%C3%A9&r=")
    assert fine.status == 200


# -- the walk over the worker's routes ---------------------------------------------------

NUL = "a\x00b"
LONG = "x" * 3000
#: The query parameters each route reads (the handlers' own checks are walked with them).
QUERIES = {
    "/console": ("number", "name", "disposition", "campaign", "transport", "from", "before"),
    "/api/v1/calls": ("number", "name", "disposition", "limit", "before", "flagged"),
    "/console/audit": ("object",),
    "/console/dashboard": ("from", "to"),
    "/api/kpis": ("from", "to"),
    "/api/v1/kpis": ("from", "to"),
    "/api/v1/costs": ("from", "to"),
    "/login": ("next",),
    "/api/calls/{call_id}/transcript": ("token",),
}
#: Routes that change the worker or open a stream: not walked.
SKIPPED = {
    "POST /logout",
    "POST /drain",
    "POST /api/offer",
    "POST /api/campaigns",
    "GET /console/live/events",
}
_PARAMETER = re.compile(r"\{(\w+)(?::[^}]*)?\}")


def requests_of(app: web.Application) -> Iterator[tuple[str, str]]:
    """(method, URL) of each route with a NUL, then an oversized value, in each parameter."""
    for route in app.router.routes():
        method, info = route.method, route.resource.get_info() if route.resource else {}
        template = str(info.get("formatter") or info.get("path") or info.get("prefix"))
        if method == "HEAD" or f"{method} {template}" in SKIPPED:
            continue
        if isinstance(route.resource, web.StaticResource):
            template += "/{filename}"
        for bad in (NUL, LONG):
            names = _PARAMETER.findall(template)
            if names:
                yield method, _PARAMETER.sub(quote(bad, safe=""), template)
            good = _PARAMETER.sub("c1", template)
            for name in QUERIES.get(template, ("q",)):
                yield method, f"{good}?{name}={quote(bad, safe='')}"


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "DATABASE_URL": db_url,
            "DATA_DIR": str(tmp_path),
            "RECORDING_STORE": str(tmp_path / "recordings"),
            **EVERY_WAY_IN,  # so that every route is there to walk
        }
    )


async def walk(app: web.Application) -> dict[tuple[str, str, str], int]:
    """The status of every request of ``requests_of``, as each person (and no one)."""
    seen = {}
    async with TestClient(TestServer(app)) as client:
        for person in (None, *PEOPLE):
            client.session.cookie_jar.clear()
            headers = {}
            if person is not None:
                form = await client.get("/login")
                data = {"username": person, "password": PEOPLE[person][0]}
                data["csrf_token"] = hidden(await form.text())
                done = await client.post("/login", data=data)
                assert done.status == 200, await done.text()
                start = await client.get(home(Role(PEOPLE[person][1])))
                headers["X-CSRF-Token"] = hidden(await start.text())
            for method, url in requests_of(app):
                response = await client.request(method, url, headers=headers, allow_redirects=False)
                await response.read()
                seen[(person or "anonymous", method, url)] = response.status
    return seen


def shown(key: tuple[str, str, str]) -> tuple[str, str, str]:
    """``key`` with its URL cut short, for a readable failure."""
    person, method, url = key
    return person, method, url[: url.index(LONG) + 20] if LONG in url else url


async def test_no_route_answers_500_to_nul_or_oversized_parameters(settings: Settings) -> None:
    async with AgentRuntime(settings, stub_models=True) as ctx:
        users = Users(ctx.engine)
        for name, (password, role) in PEOPLE.items():
            await asyncio.to_thread(users.add, name, password, role)

        app = make_app(ctx)
        if refuse_unusable not in app.middlewares:  # until make_app installs it itself
            add_security(app, settings.public_url)
        netted = await walk(app)
        assert netted and [shown(k) for k, status in netted.items() if status != 400] == []

        bare = make_app(ctx)
        if refuse_unusable in bare.middlewares:
            bare.middlewares.remove(refuse_unusable)
        own = await walk(bare)
        assert own.keys() == netted.keys()
        # aiohttp's static files answer 500 to a name longer than the file system takes
        # (ENAMETOOLONG): one reason for the net. Every handler of ours stays under 500.
        failed = [shown(k) for k, status in own.items() if status >= 500]
        assert failed == [(p, "GET", f"/static/{LONG[:20]}") for p in ("anonymous", *PEOPLE)]
        # The handlers' own checks, where the person may use the route.
        for key in [
            ("olive", "GET", "/console/calls/a%00b"),
            ("olive", "GET", "/api/calls/a%00b/recording"),
            ("olive", "GET", "/api/v1/calls/a%00b"),
            ("olive", "GET", "/console?name=a%00b"),
            ("owen", "GET", "/console/audit?object=a%00b"),
            ("owen", "GET", f"/console/audit?object={LONG}"),
            ("owen", "GET", "/api/v1/kpis?from=a%00b"),
        ]:
            assert own[key] == 400, key
