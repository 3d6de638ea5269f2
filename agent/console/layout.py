"""The console's frame: every page in one layout, with its security headers, and HTML escaping.

Server-rendered HTML, no JavaScript of the page's own unless it asks (``script``):
``string.Template`` for the layout and ``html.escape`` (``e``) on every value that comes
from the database or the request. Apart from the pages so that the route guards
(``agent.console.auth``) can answer in the layout without importing the pages they guard.
"""

from __future__ import annotations

import datetime as dt
import functools
import html
from pathlib import Path
from string import Template

from aiohttp import web

from agent.campaigns import masked
from agent.console.context import current_user
from agent.console.csrf import FIELD, csrf_token
from agent.console.nav import NAV
from agent.store.tables import Role

_TEMPLATES = Path(__file__).parent / "templates"
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "media-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
}
#: For a page with a script of ours (``/static/...``) that reads the server's events.
_SCRIPT_CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def e(value: object) -> str:
    """``value`` as HTML text (quotes too, so it is safe in attributes); None is empty."""
    return "" if value is None else html.escape(str(value), quote=True)


@functools.cache
def _layout() -> Template:
    return Template((_TEMPLATES / "layout.html").read_text(encoding="utf-8"))


def page(
    request: web.Request,
    title: str,
    body: str,
    status: int = 200,
    *,
    script: bool = False,
    csp: str | None = None,
) -> web.Response:
    """``body`` in the console's layout; ``script``: the page loads a script of ours;
    ``csp``: the page's own Content-Security-Policy (one with a nonce for inline script)."""
    user = current_user(request)
    text = _layout().substitute(
        title=e(title),
        username=e(user.username if user else ""),
        role=e(user.role if user else ""),
        nav=_nav(user.role if user else None),
        csrf_field=e(FIELD),
        csrf_token=e(csrf_token(request)),
        body=body,
    )
    headers = _HEADERS
    if csp or script:
        headers = {**_HEADERS, "Content-Security-Policy": csp or _SCRIPT_CSP}
    return web.Response(text=text, content_type="text/html", status=status, headers=headers)


def _nav(role: Role | None) -> str:
    return "".join(
        f'<a href="{e(path)}">{e(label)}</a>' for path, label, roles in NAV if role in roles
    )


def masked_number(number: str | None) -> str:
    """A phone number as the console shows it: its last four digits only."""
    return masked(number) if number else ""


def when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""
