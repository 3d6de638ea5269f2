"""``python -m agent users`` and ``tokens``: console accounts and API tokens.

The password is never an argument (it would sit in the shell's history and in
``ps``): it is asked for twice without echo, or read from standard input with
``--password-stdin`` for scripts. A new API token is the only thing ``tokens
create`` writes to standard output, so a script can take it (``$(...)``); what a
person should read goes to standard error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import sys
from typing import Any

from agent.config import Settings
from agent.console.audit import BY_COMMAND_LINE
from agent.console.context import Clock, utc_now
from agent.console.tokens import SCOPES, TokenError, TokenInfo, Tokens
from agent.console.users import UserError, Users, normalise_username
from agent.store.tables import Role


def add_users_parser(subparsers: Any) -> None:
    """Add the ``users`` command to ``subparsers`` (an ``argparse`` sub-parsers action)."""
    users = subparsers.add_parser("users", help="console accounts: add, list, disable")
    actions = users.add_subparsers(dest="users", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add", help="add an account; the password is asked for (or --password-stdin)"
    )
    add.add_argument("user", help="login name or e-mail address")
    add.add_argument(
        "--role", required=True, choices=[r.value for r in Role], help="what the user may see"
    )
    add.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input",
    )
    actions.add_parser("list", help="list the accounts")
    disable = actions.add_parser("disable", help="disable an account and end its sessions")
    disable.add_argument("user")


def run_users_command(settings: Settings, args: argparse.Namespace) -> int:
    """Run ``users add|list|disable``; 0 on success, 1 when refused (the reason on stderr)."""
    from agent.store.database import create_engine_for, upgrade

    upgrade(settings.database_url)
    engine = create_engine_for(settings.database_url)
    try:
        users = Users(engine)
        if args.users == "add":
            normalise_username(args.user)  # a bad name is refused before the prompt
            password = _read_password(args.password_stdin)
            account = users.add(args.user, password, args.role, by=BY_COMMAND_LINE)
            _say(f"added {account.username} ({account.role.value})")
        elif args.users == "disable":
            account = users.disable(args.user, by=BY_COMMAND_LINE)
            _say(f"disabled {account.username}; their sessions have ended")
        else:
            for account in users.list():
                state = "disabled" if account.disabled else "active"
                created = account.created_at.strftime("%Y-%m-%d %H:%M UTC")
                _say(f"{account.username}\t{account.role.value}\t{state}\t{created}")
        return 0
    except UserError as e:
        sys.stderr.write(f"users {args.users}: {e}\n")
        return 1
    finally:
        engine.dispose()


def add_tokens_parser(subparsers: Any) -> None:
    """Add the ``tokens`` command to ``subparsers`` (an ``argparse`` sub-parsers action)."""
    scopes = "\n".join(f"  {scope:<18}{what}" for scope, what in SCOPES.items())
    epilog = f"scopes (no scope implies another):\n{scopes}\n"
    tokens = subparsers.add_parser(
        "tokens",
        help="API tokens for machine clients: create, list, revoke",
        description="API tokens let a machine (a CI job, a scraper) call the agent's API,\n"
        "sent as 'Authorization: Bearer agt_...'; each token carries scopes.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = tokens.add_subparsers(dest="tokens", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        help="create a token and print it, once",
        description="Create a token and print it on standard output. It is not stored and\n"
        "cannot be shown again: copy it now, or revoke it and create another.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    create.add_argument("--name", required=True, help="what uses it, e.g. ci-dialer")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        metavar="SCOPE",
        help="what it may do (repeat for several): " + ", ".join(SCOPES),
    )
    actions.add_parser("list", help="list the tokens (never their secrets)")
    revoke = actions.add_parser("revoke", help="revoke a token at once")
    revoke.add_argument("id", type=int, help="the token's id, from 'tokens list'")


def run_tokens_command(settings: Settings, args: argparse.Namespace, clock: Clock = utc_now) -> int:
    """Run ``tokens create|list|revoke``; 0 on success, 1 when refused (the reason on stderr).

    Changes are audited as the command line's (``audit.BY_COMMAND_LINE``: no user, from ``cli``)."""
    from agent.store.database import create_engine_for, upgrade

    upgrade(settings.database_url)
    engine = create_engine_for(settings.database_url)
    try:
        tokens = Tokens(engine)
        if args.tokens == "create":
            token, info = tokens.create(args.name, args.scope, clock(), by=BY_COMMAND_LINE)
            _say(token)
            sys.stderr.write(
                f"created token {info.id} ({info.name}) with {' '.join(info.scopes)}.\n"
                "Copy it now: it is not stored and will not be shown again.\n"
            )
        elif args.tokens == "revoke":
            info = tokens.revoke(args.id, clock(), by=BY_COMMAND_LINE)
            _say(f"revoked token {info.id} ({info.name})")
        else:
            for info in tokens.list():
                _say(_token_line(info))
        return 0
    except TokenError as e:
        sys.stderr.write(f"tokens {args.tokens}: {e}\n")
        return 1
    finally:
        engine.dispose()


def _token_line(info: TokenInfo) -> str:
    state = f"revoked {_minute(info.revoked_at)}" if info.revoked_at else "active"
    used = f"used {_minute(info.last_used_at)}" if info.last_used_at else "never used"
    return "\t".join(
        (
            str(info.id),
            info.name,
            ",".join(info.scopes),
            state,
            f"created {_minute(info.created_at)} by {info.created_by or 'the command line'}",
            used,
        )
    )


def _minute(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != password:
        raise UserError("the passwords differ")
    return password


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
