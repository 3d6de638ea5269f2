"""API tokens: made, found and revoked in the store; the ``Token`` rule over HTTP; the
command line; the admin's page. Time is a clock the tests move."""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from argon2 import PasswordHasher
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.access import check_routes, guard
from agent.config import Settings
from agent.console.admin import add_admin_pages
from agent.console.audit import BY_COMMAND_LINE as CLI
from agent.console.audit import Actor
from agent.console.auth import Roles, setup_auth
from agent.console.cli import add_tokens_parser, run_tokens_command
from agent.console.tokens import (
    API_TOKEN,
    PREFIX,
    SCOPES,
    TOUCH_EVERY,
    Token,
    TokenError,
    Tokens,
)
from agent.console.users import Users
from agent.store.database import create_engine_for
from agent.store.tables import ApiToken, AuditEntry, Role, User
from tests.console import PEOPLE, hidden, log_in

START = dt.datetime(2026, 12, 10, 9, 0, tzinfo=dt.UTC)
FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
PASSWORD = "correct horse battery"


class Clock:
    """Time that moves only when told to."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


def audit_rows(engine: Engine) -> list[tuple[object, ...]]:
    """The token entries: who, what, on which, from where, and the detail."""
    with Session(engine) as session:
        entries = session.scalars(
            select(AuditEntry).where(AuditEntry.action.like("token_%")).order_by(AuditEntry.id)
        )
        return [(a.user_id, a.action, a.object_id, a.ip, a.detail) for a in entries]


# -- the store -------------------------------------------------------------------


def test_a_token_is_kept_only_as_its_hash(db_engine: Engine) -> None:
    token, info = Tokens(db_engine).create("ci-dialer", ["campaigns:write"], START, by=CLI)
    assert token.startswith(PREFIX) and len(token) >= len(PREFIX) + 43  # 256 random bits
    assert info.name == "ci-dialer" and info.scopes == ("campaigns:write",)
    assert info.created_by is None and info.created_at == START and info.last_used_at is None
    with Session(db_engine) as session:
        row = session.scalars(select(ApiToken)).one()
        stored = [getattr(row, column.key) for column in ApiToken.__table__.columns]
        assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert not any(isinstance(v, str) and token[len(PREFIX) :] in v for v in stored)
    again, _ = Tokens(db_engine).create("ci-dialer", ["campaigns:write"], START, by=CLI)
    assert again != token


def test_a_token_is_found_by_itself_only(db_engine: Engine) -> None:
    tokens = Tokens(db_engine)
    token, info = tokens.create("scraper", ["metrics:read"], START, by=CLI)
    found = tokens.look_up(token, START)
    assert found is not None and found.id == info.id and not found.revoked
    assert tokens.look_up(token[:-1] + ("A" if token[-1] != "A" else "B"), START) is None
    assert tokens.look_up(token[len(PREFIX) :], START) is None  # without its prefix
    assert tokens.look_up(token + "x" * 200, START) is None


def test_last_use_is_written_at_most_once_a_minute(db_engine: Engine) -> None:
    tokens = Tokens(db_engine)
    token, _ = tokens.create("scraper", ["metrics:read"], START, by=CLI)
    first = tokens.look_up(token, START + dt.timedelta(seconds=5))
    assert first is not None and first.last_used_at == START + dt.timedelta(seconds=5)
    soon = tokens.look_up(token, START + dt.timedelta(seconds=50))
    assert soon is not None and soon.last_used_at == START + dt.timedelta(seconds=5)
    later = START + dt.timedelta(seconds=5) + TOUCH_EVERY
    assert (found := tokens.look_up(token, later)) is not None and found.last_used_at == later
    (listed,) = tokens.list()
    assert listed.last_used_at == later


def test_revoking_takes_effect_at_once_and_is_audited(db_engine: Engine) -> None:
    admin = Users(db_engine, FAST).add("adam", PASSWORD, "admin")
    tokens = Tokens(db_engine)
    token, info = tokens.create("ci", ["campaigns:read"], START, by=Actor(admin.id, "10.0.0.7"))
    assert info.created_by == "adam"
    revoked = tokens.revoke(info.id, START + dt.timedelta(hours=1), by=Actor(admin.id, "10.0.0.7"))
    assert revoked.revoked_at == START + dt.timedelta(hours=1)
    found = tokens.look_up(token, START + dt.timedelta(hours=2))
    assert found is not None and found.revoked and found.last_used_at is None
    with pytest.raises(TokenError, match="already revoked"):
        tokens.revoke(info.id, START, by=CLI)
    with pytest.raises(TokenError, match="no token 999"):
        tokens.revoke(999, START, by=CLI)
    object_id = f"token:{info.id}"
    assert audit_rows(db_engine) == [
        (admin.id, "token_create", object_id, "10.0.0.7", "ci: campaigns:read"),
        (admin.id, "token_revoke", object_id, "10.0.0.7", "ci"),
    ]


@pytest.mark.parametrize(
    ("name", "scopes", "message"),
    [
        ("ci", ["campaigns:admin"], "unknown scope 'campaigns:admin': one of campaigns:write"),
        ("ci", [], "at least one scope"),
        ("  ", ["metrics:read"], "needs a name"),
        ("x" * 101, ["metrics:read"], "too long"),
        ("ci\n", ["metrics:read", "nope"], "unknown scope 'nope'"),
        ("c\x1bi", ["metrics:read"], "control characters"),
    ],
)
def test_bad_tokens_are_refused_with_the_reason(name: str, scopes: list[str], message: str) -> None:
    engine = create_engine_for("sqlite://")  # refused before the database is asked
    try:
        with pytest.raises(TokenError, match=message):
            Tokens(engine).create(name, scopes, START, by=CLI)
    finally:
        engine.dispose()


def test_scopes_are_kept_sorted_once_each(db_engine: Engine) -> None:
    _, info = Tokens(db_engine).create(
        "ci", ["metrics:read", "campaigns:read", "metrics:read"], START, by=CLI
    )
    assert info.scopes == ("campaigns:read", "metrics:read")


def test_a_route_cannot_name_an_unknown_scope() -> None:
    with pytest.raises(ValueError, match="unknown scope 'campaign:write'"):
        Token("campaign:write")
    assert set(SCOPES) == {"campaigns:write", "campaigns:read", "livekit:dispatch", "metrics:read"}


# -- the rule over HTTP -------------------------------------------------------------


@guard(Token("campaigns:write"))
async def start_campaign(request: web.Request) -> web.Response:
    return web.json_response({"by": request[API_TOKEN].name})


@guard(Roles(Role.OWNER), Token("campaigns:read"))
async def campaign(request: web.Request) -> web.Response:
    token = request.get(API_TOKEN)
    return web.json_response({"by": token.name if token else "a person"})


Client = TestClient[web.Request, web.Application]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(db_engine: Engine, clock: Clock) -> AsyncIterator[Client]:
    app = web.Application()
    setup_auth(app, db_engine, secure_cookies=False, clock=clock, hasher=FAST)
    app.router.add_post("/api/campaigns", start_campaign)
    app.router.add_get("/api/campaigns/{id}", campaign)
    async with TestClient(TestServer(app)) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_the_rule_answers_each_kind_of_request(
    client: Client, db_engine: Engine, clock: Clock
) -> None:
    tokens = Tokens(db_engine)
    writer, _ = tokens.create("ci-dialer", ["campaigns:write"], START, by=CLI)
    reader, _ = tokens.create("report", ["campaigns:read"], START, by=CLI)
    revoked, info = tokens.create("old", ["campaigns:write"], START, by=CLI)
    tokens.revoke(info.id, START, by=CLI)

    none = await client.post("/api/campaigns")
    assert none.status == 401 and "Authorization: Bearer agt_" in (await none.json())["error"]
    assert none.headers["WWW-Authenticate"] == 'Bearer scope="campaigns:write"'
    assert none.headers["Cache-Control"] == "no-store"

    wrong = await client.post("/api/campaigns", headers=bearer(PREFIX + "x" * 43))
    assert wrong.status == 401 and (await wrong.json())["error"] == "unknown API token"
    assert 'error="invalid_token"' in wrong.headers["WWW-Authenticate"]

    gone = await client.post("/api/campaigns", headers=bearer(revoked))
    assert gone.status == 401 and "revoked" in (await gone.json())["error"]

    scope = await client.post("/api/campaigns", headers=bearer(reader))
    assert scope.status == 403
    assert (await scope.json())["error"] == "this API token lacks the scope campaigns:write"
    assert 'error="insufficient_scope"' in scope.headers["WWW-Authenticate"]

    # A POST with a token needs no CSRF token: there is no cookie to ride on.
    right = await client.post("/api/campaigns", headers=bearer(writer))
    assert right.status == 200 and await right.json() == {"by": "ci-dialer"}
    lower = await client.post("/api/campaigns", headers={"Authorization": f"bearer  {writer}"})
    assert lower.status == 200


async def test_a_token_sent_under_another_scheme_is_told_so(client: Client) -> None:
    other = await client.post("/api/campaigns", headers={"Authorization": f"Token {PREFIX}abc"})
    assert other.status == 401 and "Bearer" in (await other.json())["error"]
    assert 'error="invalid_token"' in other.headers["WWW-Authenticate"]


async def test_beside_a_role_the_presented_credential_answers(
    client: Client, db_engine: Engine
) -> None:
    reader, _ = Tokens(db_engine).create("report", ["campaigns:read"], START, by=CLI)
    writer, _ = Tokens(db_engine).create("ci", ["campaigns:write"], START, by=CLI)
    # Nothing presented: the first rule (the console's) says to log in.
    anonymous = await client.get("/api/campaigns/c1")
    assert anonymous.status == 401 and "log in" in (await anonymous.json())["error"]
    # A token presented: its answer is the one given.
    scope = await client.get("/api/campaigns/c1", headers=bearer(writer))
    assert scope.status == 403 and "campaigns:read" in (await scope.json())["error"]
    right = await client.get("/api/campaigns/c1", headers=bearer(reader))
    assert right.status == 200 and await right.json() == {"by": "report"}


async def test_a_request_records_the_last_use(
    client: Client, db_engine: Engine, clock: Clock
) -> None:
    token, _ = Tokens(db_engine).create("ci", ["campaigns:write"], START, by=CLI)
    clock.advance(minutes=5)
    assert (await client.post("/api/campaigns", headers=bearer(token))).status == 200
    (info,) = Tokens(db_engine).list()
    assert info.last_used_at == START + dt.timedelta(minutes=5)


# -- the command line ---------------------------------------------------------------


def tokens_command(db_url: str, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_tokens_parser(parser.add_subparsers(dest="command", required=True))
    settings = Settings.from_env({"DATABASE_URL": db_url})
    return run_tokens_command(settings, parser.parse_args(argv), clock=lambda: START)


def test_the_command_creates_lists_and_revokes(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("tokens", "create", "--name", "ci", "--scope", "campaigns:write")
    assert tokens_command(db_url, *argv, "--scope", "campaigns:read") == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert out == token + "\n" and token.startswith(PREFIX)  # only the token: $(...) takes it
    assert "will not be shown again" in err
    assert "campaigns:read campaigns:write" in err

    assert tokens_command(db_url, "tokens", "list") == 0
    listed = capsys.readouterr().out
    assert token not in listed
    assert listed.split("\t")[:4] == ["1", "ci", "campaigns:read,campaigns:write", "active"]
    assert "by the command line" in listed and "never used" in listed

    assert tokens_command(db_url, "tokens", "revoke", "1") == 0
    assert capsys.readouterr().out == "revoked token 1 (ci)\n"
    assert tokens_command(db_url, "tokens", "list") == 0
    assert "\trevoked 2026-12-10 09:00 UTC\t" in capsys.readouterr().out

    engine = create_engine_for(db_url)
    try:
        assert audit_rows(engine) == [
            (None, "token_create", "token:1", "cli", "ci: campaigns:read campaigns:write"),
            (None, "token_revoke", "token:1", "cli", "ci"),
        ]
    finally:
        engine.dispose()


def test_the_command_says_why_it_refused(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert tokens_command(db_url, "tokens", "create", "--name", "ci", "--scope", "root") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("tokens create: unknown scope 'root': one of campaigns:write")
    assert tokens_command(db_url, "tokens", "revoke", "7") == 1
    assert capsys.readouterr().err == "tokens revoke: no token 7\n"


# -- the admin's page ---------------------------------------------------------------


@pytest.fixture
async def console(db_engine: Engine, clock: Clock) -> AsyncIterator[tuple[Client, Engine]]:
    """The console's login and admin pages, with ``PEOPLE``."""
    users = Users(db_engine, FAST)
    for name, (password, role) in PEOPLE.items():
        users.add(name, password, role)
    app = web.Application()
    setup_auth(app, db_engine, secure_cookies=False, clock=clock, hasher=FAST)
    add_admin_pages(app)
    check_routes(app)  # the token pages are guarded like every other
    async with TestClient(TestServer(app)) as client:
        yield client, db_engine


async def test_an_admin_creates_sees_once_and_revokes_a_token(
    console: tuple[Client, Engine],
) -> None:
    client, engine = console
    await log_in(client, "adam")
    page = await (await client.get("/console/tokens")).text()
    assert "No API tokens." in page and all(scope in page for scope in SCOPES)
    created = await client.post(
        "/console/tokens",
        data={
            "name": "prometheus",
            "scope": ["metrics:read", "campaigns:read"],
            "csrf_token": hidden(page),
        },
    )
    assert created.status == 200 and created.headers["Cache-Control"] == "no-store"
    shown = await created.text()
    token = shown.split('<code id="new-token">')[1].split("</code>")[0]
    assert token.startswith(PREFIX) and "will not be shown again" in shown
    found = Tokens(engine).look_up(token, START)
    assert found is not None and found.scopes == ("campaigns:read", "metrics:read")

    page = await (await client.get("/console/tokens")).text()
    assert token not in page and token[len(PREFIX) :] not in page  # shown once only
    assert 'data-token="1"' in page and "prometheus" in page and "adam" in page
    revoked = await client.post(
        "/console/tokens/1/revoke", data={"csrf_token": hidden(page)}, allow_redirects=False
    )
    assert revoked.status == 303 and revoked.headers["Location"] == "/console/tokens"
    page = await (await client.get("/console/tokens")).text()
    assert "revoked 2026-12-10 09:00:00 UTC" in page and "/console/tokens/1/revoke" not in page

    with Session(engine) as session:
        adam = session.scalar(select(User.id).where(User.username == "adam"))
    assert [(who, what, ip) for who, what, _, ip, _ in audit_rows(engine)] == [
        (adam, "token_create", "127.0.0.1"),
        (adam, "token_revoke", "127.0.0.1"),
    ]


async def test_bad_token_forms_are_refused_with_the_reason(console: tuple[Client, Engine]) -> None:
    client, _ = console
    await log_in(client, "adam")
    token = hidden(await (await client.get("/console/tokens")).text())
    cases = [
        ({"name": "ci"}, "at least one scope"),
        ({"name": "ci", "scope": "campaigns:delete"}, "unknown scope"),
        ({"name": " ", "scope": "metrics:read"}, "needs a name"),
    ]
    for form, reason in cases:
        response = await client.post("/console/tokens", data={**form, "csrf_token": token})
        assert response.status == 400 and reason in await response.text()
    twice = await client.post("/console/tokens/999/revoke", data={"csrf_token": token})
    assert twice.status == 400 and "no token 999" in await twice.text()
    no_csrf = await client.post("/console/tokens", data={"name": "ci", "scope": "metrics:read"})
    assert no_csrf.status == 403
    no_csrf = await client.post("/console/tokens/1/revoke")
    assert no_csrf.status == 403


async def test_only_admins_reach_the_token_page(console: tuple[Client, Engine]) -> None:
    client, _ = console
    anonymous = await client.get("/console/tokens", allow_redirects=False)
    assert anonymous.status == 303
    for name in ("olive", "owen"):
        await log_in(client, name)
        assert (await client.get("/console/tokens")).status == 403
        assert (await client.post("/console/tokens", data={"name": "x"})).status == 403
    await log_in(client, "adam")
    page = await (await client.get("/console/tokens")).text()
    assert 'href="/console/tokens"' in page  # in the admin's menu
