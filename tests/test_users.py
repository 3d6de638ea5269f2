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
from agent.console.audit import BY_COMMAND_LINE, Actor
from agent.console.cli import add_users_parser, run_users_command
from agent.console.sessions import SessionPolicy, SessionStore
from agent.console.users import Attempt, UserError, Users, check_password
from agent.store.database import create_engine_for
from agent.store.tables import AuditEntry, Role, User, UserSession

#: Cheap argon2 parameters: the tests check behaviour, not cost.
FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
PASSWORD = "correct horse battery"
NOW = dt.datetime(2026, 12, 9, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def users(db_engine: Engine) -> Users:
    return Users(db_engine, FAST, clock=lambda: NOW)


def test_an_added_user_logs_in_with_the_password_only(users: Users) -> None:
    added = users.add("Ann@Example.com", PASSWORD, "operator")
    assert (added.username, added.role, added.disabled) == ("ann@example.com", Role.OPERATOR, False)
    assert added.created_at == NOW

    assert users.authenticate("ann@example.com", PASSWORD) == Attempt(added, added.id)
    assert users.authenticate("  ANN@example.com ", PASSWORD).account == added
    wrong = Attempt(None, added.id, "wrong password")
    assert users.authenticate("ann@example.com", PASSWORD + "x") == wrong
    unknown = Attempt(None, None, "unknown username")
    assert users.authenticate("bob@example.com", PASSWORD) == unknown
    assert users.authenticate("not a name", PASSWORD) == unknown
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
    assert users.authenticate("ann", PASSWORD) == Attempt(None, ann.id, "account disabled")
    assert users.authenticate("ann", "a wrong password").why == "wrong password"
    assert sessions.load(token, now) is None
    with Session(db_engine) as session:
        assert session.scalars(select(UserSession)).all() == []
        actions = session.scalars(select(AuditEntry.action).order_by(AuditEntry.id)).all()
    assert actions == ["user_add", "user_disable"]
    with pytest.raises(UserError, match="no user 'bob'"):
        users.disable("bob")


def test_account_changes_are_audited_with_who_from_where_and_the_role(
    users: Users, db_engine: Engine
) -> None:
    adam = users.add("adam", PASSWORD, "admin")
    olga = users.add("olga", PASSWORD, "owner", by=Actor(adam.id, "192.0.2.7"))
    users.disable("olga", by=Actor(adam.id, "192.0.2.7"))
    with pytest.raises(UserError, match="your own account"):
        users.disable("adam", by=Actor(adam.id, "192.0.2.7"))
    with Session(db_engine) as session:
        rows = [
            (e.at, e.user_id, e.action, e.object_id, e.ip, e.detail)
            for e in session.scalars(select(AuditEntry).order_by(AuditEntry.id))
        ]
    assert rows == [
        (NOW, None, "user_add", str(adam.id), None, "role admin"),
        (NOW, adam.id, "user_add", str(olga.id), "192.0.2.7", "role owner"),
        (NOW, adam.id, "user_disable", str(olga.id), "192.0.2.7", None),
    ]


def test_a_hash_under_old_parameters_is_replaced_at_login(db_engine: Engine) -> None:
    Users(db_engine, FAST).add("ann", PASSWORD, "admin")
    stronger = PasswordHasher(time_cost=2, memory_cost=16, parallelism=1)
    assert Users(db_engine, stronger).authenticate("ann", PASSWORD).account is not None
    with Session(db_engine) as session:
        stored = session.scalars(select(User.password_hash)).one()
    assert "m=16,t=2,p=1" in stored
    assert not stronger.check_needs_rehash(stored)
    assert Users(db_engine, stronger).authenticate("ann", PASSWORD).account is not None


@pytest.mark.parametrize(
    "password",
    [
        PASSWORD,
        "  " + PASSWORD + "  ",
        "a long operator password",
        "Tr0ub4dor&3-horse",
        "n" + "9x!Kq" * 200,  # long: judged by its start
    ],
)
def test_passwords_that_are_hard_to_guess_are_taken(password: str) -> None:
    check_password(password, "ann")


@pytest.mark.parametrize(
    ("username", "password", "role", "message"),
    [
        ("ann", "", "operator", "the password is empty"),
        ("ann", "            ", "operator", "the password is empty"),
        ("ann", "short", "operator", "too short: at least 12"),
        ("ann", " " * 12 + "a", "operator", "too short: at least 12 characters, not counting"),
        ("ann", "   a b c d   ", "operator", "too short"),
        ("ann", "x" * 1025, "operator", "too long"),
        ("ann", "aaaaaaaaaaaaaaab", "operator", "mostly one character"),
        ("ann", "Zz.zzzzz.zzzz.zz", "operator", "mostly one character"),
        ("annabelle123", "ANNABELLE123", "operator", "must not contain the username"),
        ("ann@agency.example", "my name is Ann, hello", "operator", "must not contain"),
        ("ann", "password1234", "operator", "too easy to guess: this is a very common password"),
        ("ann", "Password1234!", "operator", "too easy to guess"),
        ("ann", "qwertyuiopasdf", "operator", "too easy to guess"),
        ("ann", "abcdefghijklmnop", "operator", "too easy to guess"),
        ("ann", "1234567890123456", "operator", "too easy to guess"),
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
        assert Users(engine, FAST).authenticate("ann", PASSWORD).account is not None
        with Session(engine) as session:
            rows = [
                (e.user_id, e.ip, e.action, e.detail)
                for e in session.scalars(select(AuditEntry).order_by(AuditEntry.id))
            ]
    finally:
        engine.dispose()
    command_line = (None, BY_COMMAND_LINE.ip)
    assert rows == [
        (*command_line, "user_add", "role owner"),
        (*command_line, "user_add", "role operator"),
        (*command_line, "user_disable", None),
    ]


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
