"""Console accounts (agent.console.users) and ``python -m agent users`` on both backends."""

from __future__ import annotations

import argparse
import datetime as dt
import io

import pytest
from argon2 import PasswordHasher
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.console.cli import add_users_parser, run_users_command
from agent.console.sessions import SessionPolicy, SessionStore
from agent.console.users import UserError, Users
from agent.models import AuditEntry, Role, User, UserSession
from agent.store import create_engine_for

#: Cheap argon2 parameters: the tests check behaviour, not cost.
FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
PASSWORD = "correct horse battery"


@pytest.fixture
def users(db_engine: Engine) -> Users:
    return Users(db_engine, FAST)


def test_an_added_user_logs_in_with_the_password_only(users: Users) -> None:
    added = users.add("Ann@Example.com", PASSWORD, "operator")
    assert (added.username, added.role, added.disabled) == ("ann@example.com", Role.OPERATOR, False)
    assert added.created_at.tzinfo is not None

    assert users.authenticate("ann@example.com", PASSWORD) == added
    assert users.authenticate("  ANN@example.com ", PASSWORD) == added
    assert users.authenticate("ann@example.com", PASSWORD + "x") is None
    assert users.authenticate("bob@example.com", PASSWORD) is None
    assert users.authenticate("not a name", PASSWORD) is None
    assert users.list() == [added]


def test_the_password_is_stored_as_an_argon2id_hash(users: Users, db_engine: Engine) -> None:
    users.add("ann", PASSWORD, "owner")
    with Session(db_engine) as session:
        stored = session.scalars(select(User.password_hash)).one()
    assert stored.startswith("$argon2id$") and PASSWORD not in stored


def test_a_duplicate_user_is_refused(users: Users) -> None:
    users.add("ann", PASSWORD, "operator")
    with pytest.raises(UserError, match="'ann' already exists"):
        users.add("ANN", "another long password", "admin")
    assert len(users.list()) == 1


def test_a_disabled_user_cannot_log_in_and_loses_their_sessions(
    users: Users, db_engine: Engine
) -> None:
    ann = users.add("ann", PASSWORD, "operator")
    sessions = SessionStore(db_engine, SessionPolicy())
    now = dt.datetime.now(dt.UTC)
    token = sessions.create(ann.id, now)
    assert sessions.load(token, now) == ann

    disabled = users.disable("Ann")
    assert disabled.disabled
    assert users.authenticate("ann", PASSWORD) is None
    assert sessions.load(token, now) is None
    with Session(db_engine) as session:
        assert session.scalars(select(UserSession)).all() == []
        actions = session.scalars(select(AuditEntry.action).order_by(AuditEntry.id)).all()
    assert actions == ["user_add", "user_disable"]
    with pytest.raises(UserError, match="no user 'bob'"):
        users.disable("bob")


def test_a_hash_under_old_parameters_is_replaced_at_login(db_engine: Engine) -> None:
    Users(db_engine, FAST).add("ann", PASSWORD, "admin")
    stronger = PasswordHasher(time_cost=2, memory_cost=16, parallelism=1)
    assert Users(db_engine, stronger).authenticate("ann", PASSWORD) is not None
    with Session(db_engine) as session:
        stored = session.scalars(select(User.password_hash)).one()
    assert "m=16,t=2,p=1" in stored
    assert not stronger.check_needs_rehash(stored)
    assert Users(db_engine, stronger).authenticate("ann", PASSWORD) is not None


@pytest.mark.parametrize(
    ("username", "password", "role", "message"),
    [
        ("ann", "", "operator", "the password is empty"),
        ("ann", "            ", "operator", "the password is empty"),
        ("ann", "short", "operator", "too short: at least 12"),
        ("ann", "x" * 1025, "operator", "too long"),
        ("annabelle123", "ANNABELLE123", "operator", "must not be the username"),
        ("ann", PASSWORD, "superuser", "unknown role 'superuser': one of operator, owner, admin"),
        ("", PASSWORD, "operator", "bad username"),
        ("ann smith", PASSWORD, "operator", "bad username"),
    ],
)
def test_bad_accounts_are_refused_with_the_reason(
    username: str, password: str, role: str, message: str
) -> None:
    engine = create_engine_for("sqlite://")  # refused before the database is asked
    try:
        with pytest.raises(UserError, match=message):
            Users(engine, FAST).add(username, password, role)
    finally:
        engine.dispose()


# -- the command line ---------------------------------------------------------


@pytest.fixture(autouse=True)
def fast_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's accounts hash with the cheap parameters too."""
    monkeypatch.setattr("agent.console.cli.Users", lambda engine: Users(engine, FAST))


def users_command(db_url: str, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_users_parser(parser.add_subparsers(dest="command", required=True))
    return run_users_command(Settings.from_env({"DATABASE_URL": db_url}), parser.parse_args(argv))


def test_the_command_adds_lists_and_disables(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert users_command(db_url, "users", "add", "ann", "--role", "owner", "--password-stdin") == 0
    assert capsys.readouterr().out == "added ann (owner)\n"

    prompts = iter([PASSWORD, PASSWORD])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(prompts))
    assert users_command(db_url, "users", "add", "bob", "--role", "operator") == 0

    assert users_command(db_url, "users", "disable", "bob") == 0
    assert users_command(db_url, "users", "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "added bob (operator)"
    assert lines[1] == "disabled bob; their sessions have ended"
    assert [line.split("\t")[:3] for line in lines[2:]] == [
        ["ann", "owner", "active"],
        ["bob", "operator", "disabled"],
    ]
    engine = create_engine_for(db_url)
    try:
        assert Users(engine, FAST).authenticate("ann", PASSWORD) is not None
    finally:
        engine.dispose()


def test_the_command_says_why_it_refused(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = iter([PASSWORD, PASSWORD + "!"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(prompts))
    assert users_command(db_url, "users", "add", "ann", "--role", "admin") == 1
    assert capsys.readouterr().err == "users add: the passwords differ\n"

    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert users_command(db_url, "users", "add", "ann", "--role", "admin", "--password-stdin") == 1
    assert "too short" in capsys.readouterr().err

    assert users_command(db_url, "users", "disable", "nobody") == 1
    assert capsys.readouterr().err == "users disable: no user 'nobody'\n"
    with pytest.raises(SystemExit):  # argparse refuses an unknown role itself
        users_command(db_url, "users", "add", "ann", "--role", "root")
