"""Every route declares who may use it, and each guard refuses those it should.

The inventory is read from the applications themselves (the worker's and the
supervisor's), so a route added tomorrow is covered without touching this file; a
route that declares no guard makes ``check_routes`` refuse the app.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from agent.access import Anonymous, Loopback, check_routes, guard, inventory, rules_of
from agent.config import Settings
from agent.console.auth import Roles
from agent.console.users import Users
from agent.runtime.context import AgentRuntime
from agent.runtime.supervisor import Supervisor
from agent.server.app import make_app
from agent.store.tables import Role

PASSWORD = "vT9#qLm2 ruck ozel pane"
#: Sent with every request: the test client is on loopback, a real attacker is not.
ELSEWHERE = {"X-Forwarded-For": "203.0.113.9"}
#: The state-changing routes anyone may use, each for a reason its guard states. A new one
#: must be added here on purpose.
ANONYMOUS_WRITES = {"POST /login", "POST /api/offer"}
#: Every way in configured, so that each guard is met, not a "not configured".
EVERY_WAY_IN = {
    "PUBLIC_URL": "https://agent.example.com",
    "SECURE_COOKIES": "0",  # the test client speaks plain HTTP
    "TWILIO_ACCOUNT_SID": "AC" + "0" * 32,
    "TWILIO_AUTH_TOKEN": "a-twilio-auth-token",
    "TELNYX_API_KEY": "a-telnyx-api-key",
    "TELNYX_PUBLIC_KEY": base64.b64encode(bytes(32)).decode(),
    "LIVEKIT_URL": "wss://livekit.example.com",
    "LIVEKIT_API_KEY": "a-livekit-key",
    "LIVEKIT_API_SECRET": "a-livekit-secret-of-some-length-0000",
}
#: Path parameters as a request would give them.
PARAMETERS = {
    "call_id": "0" * 32,
    "carrier": "twilio",
    "campaign_id": "0" * 16,
    "username": "nobody",
    "id": "1",
    "debt_id": "1",
}
SAFE = {"GET", "HEAD", "OPTIONS"}


@pytest.fixture
async def app(tmp_path) -> AsyncIterator[web.Application]:
    settings = Settings.from_env(
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
            "DATA_DIR": str(tmp_path),
            "TRUST_FORWARDED_FOR": "1",
            **EVERY_WAY_IN,
        }
    )
    async with AgentRuntime(settings, stub_models=True) as ctx:
        users = Users(ctx.engine)
        for role in Role:
            await asyncio.to_thread(users.add, f"a-{role}", PASSWORD, role)
        yield make_app(ctx)


@pytest.fixture
async def client(app: web.Application) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(app)) as client:
        yield client


def routes(app: web.Application) -> list[tuple[str, str, tuple]]:
    found = [(m, p, r) for m, p, r in inventory(app) if m != "HEAD"]
    assert found, "the app has no routes"
    return found


def url(path: str) -> str:
    return re.sub(r"\{(\w+)(:[^}]*)?\}", lambda m: PARAMETERS.get(m.group(1), "x"), path)


async def log_in(client: TestClient, role: Role) -> str:
    """Log in as the user of ``role``; its session's CSRF token."""
    client.session.cookie_jar.clear()
    form = await client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    assert token is not None
    fields = {"username": f"a-{role}", "password": PASSWORD, "csrf_token": token.group(1)}
    done = await client.post("/login", data=fields, allow_redirects=False, headers=ELSEWHERE)
    assert done.status == 303, await done.text()
    page = await client.get("/console/users" if role is Role.ADMIN else "/console")
    found = re.search(r'name="csrf_token" value="([^"]+)"', await page.text())
    assert found is not None, "a logged-in page carries the session's CSRF token"
    return found.group(1)


def roles_rule(rules: tuple) -> Roles | None:
    return next((rule for rule in rules if isinstance(rule, Roles)), None)


async def test_every_route_of_the_worker_and_the_entry_declares_its_guard(
    app: web.Application, tmp_path
) -> None:
    supervisor = Supervisor(
        Settings.from_env({"DATA_DIR": str(tmp_path)}), 1, {"STT_URL": "", "LLM_URL": ""}
    )
    for application in (app, supervisor.app()):
        undeclared = [f"{m} {p}" for m, p, rules in routes(application) if not rules]
        assert undeclared == []


def test_an_app_with_an_unguarded_route_is_refused() -> None:
    async def bare(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.router.add_get("/guarded", guard(Anonymous("a test"))(bare))
    check_routes(app)
    app.router.add_post("/bare", bare)
    with pytest.raises(RuntimeError, match="POST /bare"):
        check_routes(app)


def test_only_the_declared_routes_change_state_for_anyone(app: web.Application) -> None:
    anonymous_writes = {
        f"{m} {p}"
        for m, p, rules in routes(app)
        if m not in SAFE and any(isinstance(rule, Anonymous) for rule in rules)
    }
    assert anonymous_writes == ANONYMOUS_WRITES


async def test_every_guarded_route_refuses_an_anonymous_request_from_elsewhere(
    app: web.Application, client: TestClient
) -> None:
    let_in = []
    for method, path, rules in routes(app):
        if any(isinstance(rule, Anonymous) for rule in rules):
            continue
        response = await client.request(method, url(path), headers=ELSEWHERE, allow_redirects=False)
        refused = response.status in (401, 403) or (
            response.status == 303 and response.headers["Location"].startswith("/login")
        )
        if not refused:
            let_in.append(f"{method} {path}: {response.status}")
    assert let_in == []


async def test_every_role_guarded_route_refuses_the_other_roles(
    app: web.Application, client: TestClient
) -> None:
    let_in = []
    for role in Role:
        await log_in(client, role)
        for method, path, rules in routes(app):
            rule = roles_rule(rules)
            if rule is None or role in rule.roles:
                continue
            response = await client.request(
                method, url(path), headers=ELSEWHERE, allow_redirects=False
            )
            if response.status != 403:
                let_in.append(f"{role}: {method} {path}: {response.status}")
    assert let_in == []


async def test_every_role_guarded_change_needs_the_csrf_token(
    app: web.Application, client: TestClient
) -> None:
    let_in = []
    for method, path, rules in routes(app):
        rule = roles_rule(rules)
        if rule is None or method in SAFE:
            continue
        await log_in(client, min(rule.roles))
        for body in ({}, {"csrf_token": "not-the-token"}):
            response = await client.request(
                method, url(path), data=body, headers=ELSEWHERE, allow_redirects=False
            )
            if response.status != 403:
                let_in.append(f"{method} {path} {body}: {response.status}")
    assert let_in == []


async def test_loopback_admits_the_workers_own_host_only() -> None:
    rule = Loopback()
    for host, admitted in (("127.0.0.1", True), ("::1", True), ("203.0.113.9", False)):
        request = make_mocked_request("POST", "/drain")
        request = request.clone(remote=host)
        assert (await rule.check(request) is None) is admitted
    assert rules_of(object()) is None


def documented_roles() -> list[tuple[str | None, str, frozenset[Role]]]:
    """docs/console.md's role table: (method or None, path, the roles marked yes) for each
    path it names; a path ending in ``...`` stands for those under it."""
    text = (Path(__file__).parent.parent / "docs" / "console.md").read_text()
    header = "| | operator | owner | admin |"
    table = text[text.index(header) :].split("\n\n")[0].splitlines()[2:]
    found = []
    for row in table:
        what, *marks = (cell.strip() for cell in row.strip("|").split("|"))
        roles = frozenset(r for r, m in zip(Role, marks, strict=True) if m == "yes")
        for method, path in re.findall(r"`(?:(GET|POST) )?(/[^`]*)`", what):
            found.append((method or None, path, roles))
    assert found, "docs/console.md has no role table"
    return found


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_the_docs_role_table_says_what_the_guards_do(app: web.Application) -> None:
    guarded = [(m, _shape(p), roles_rule(r)) for m, p, r in routes(app) if roles_rule(r)]
    wrong = []
    for method, path, roles in documented_roles():
        shape = _shape(path)
        matches = [
            (m, p, rule)
            for m, p, rule in guarded
            if method in (None, m)
            and (p == shape or shape.endswith("...") and p.startswith(shape[:-3]))
        ]
        if not matches:
            wrong.append(f"{path}: no route with a role guard")
        wrong += [f"{m} {p}: {sorted(rule.roles)}" for m, p, rule in matches if rule.roles != roles]
    assert wrong == []
