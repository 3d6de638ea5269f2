"""``python -m agent users``: add, list and disable console accounts.

The password is never an argument (it would sit in the shell's history and in
``ps``): it is asked for twice without echo, or read from standard input with
``--password-stdin`` for scripts.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from agent.config import Settings
from agent.console.users import UserError, Users, normalise_username
from agent.models import Role


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
    from agent.store import create_engine_for, upgrade

    upgrade(settings.database_url)
    engine = create_engine_for(settings.database_url)
    try:
        users = Users(engine)
        if args.users == "add":
            normalise_username(args.user)  # a bad name is refused before the prompt
            password = _read_password(args.password_stdin)
            account = users.add(args.user, password, args.role)
            _say(f"added {account.username} ({account.role.value})")
        elif args.users == "disable":
            account = users.disable(args.user)
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


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != password:
        raise UserError("the passwords differ")
    return password


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
