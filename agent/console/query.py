"""Reading the console's parameters: one strict reader for the pages and the API.

A parameter the console cannot use is refused with a message that names it
(the pages answer 400 with the form and the message, the API a JSON 400),
never read as something else and never left to fail deeper down as a 500:
dates are checked against a range with room on both sides (a day after the
last still exists), text and path segments against their length and control
characters (which PostgreSQL refuses in strings), flags against the words for
yes and no. ``agent.server.hygiene`` refuses the worst of it for every route first;
these checks are the handlers' own, with each parameter's own limit.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

#: The days a ``from``/``to`` may name: wide, but far enough from date.min and date.max
#: that a day before or after them (the ranges' ends) still exists.
FIRST_DAY = dt.date(1900, 1, 1)
LAST_DAY = dt.date(9999, 12, 30)
#: Characters no parameter may hold (C0 and C1 controls, DEL); OpenAPI's patterns use it too.
CONTROL_CHARS = r"[\x00-\x1f\x7f-\x9f]"
TRUE = frozenset({"1", "true", "on"})
FALSE = frozenset({"0", "false", "off"})

_CONTROL = re.compile(CONTROL_CHARS)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class QueryError(ValueError):
    """A parameter the console cannot use; the message is what the 400 says."""


def shown(value: str) -> str:
    """``value`` as an error message quotes it: cut short when long."""
    return repr(value if len(value) <= 40 else value[:40] + "...")


def text(query: Mapping[str, str], name: str, max_length: int) -> str:
    value = query.get(name, "")
    if len(value) > max_length:
        raise QueryError(f"{name} is longer than {max_length} characters")
    if _CONTROL.search(value):
        raise QueryError(f"{name} must not contain control characters")
    return value.strip()


def segment(match_info: Mapping[str, str], name: str, max_length: int) -> str:
    """A path parameter (``/console/calls/{call_id}``): 1 to ``max_length`` characters."""
    value = match_info.get(name, "")
    if not 1 <= len(value) <= max_length or _CONTROL.search(value):
        raise QueryError(f"{name} must be 1 to {max_length} characters, without control characters")
    return value


def day(query: Mapping[str, str], name: str) -> dt.date | None:
    """An ISO date (``YYYY-MM-DD``) between ``FIRST_DAY`` and ``LAST_DAY``; None when absent."""
    value = query.get(name, "")
    if not value:
        return None
    try:
        if not _DAY.fullmatch(value):
            raise ValueError(value)
        found = dt.date.fromisoformat(value)
    except ValueError:
        raise QueryError(f"{name}={shown(value)} is not a date (YYYY-MM-DD)") from None
    if not FIRST_DAY <= found <= LAST_DAY:
        raise QueryError(f"{name}={value} is outside {FIRST_DAY} to {LAST_DAY}")
    return found


def flag(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name, "").strip().lower()
    if value in TRUE:
        return True
    if value in FALSE or not value:
        return False
    raise QueryError(f"{name} must be true or false")
