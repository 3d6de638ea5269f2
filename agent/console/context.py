"""What the console keeps on the aiohttp app and on each request.

Apart from ``auth`` so that ``audit`` and the server's handlers can read the
logged-in user without importing the login machinery.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from sqlalchemy import Engine

if TYPE_CHECKING:  # users writes audit entries, which read this module
    from agent.console.users import Account

Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


#: The database of users, sessions and the audit log.
ENGINE = web.AppKey("console_engine", Engine)
#: Injectable so tests can move time through session expiry and rate-limit windows.
CLOCK = web.AppKey[Clock]("console_clock")
#: The logged-in user, set by the session middleware; absent for anonymous requests.
USER = web.RequestKey["Account"]("console_user")
#: The raw session token from the cookie (never logged); the CSRF token derives from it.
SESSION_TOKEN = web.RequestKey("console_session_token", str)


def current_user(request: web.Request) -> Account | None:
    """The logged-in user of ``request``, or None."""
    return request.get(USER)


def now(app: web.Application) -> dt.datetime:
    return app[CLOCK]()
