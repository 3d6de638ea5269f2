"""HTTP hygiene for every route: security headers on every response, and requests that no
route could use refused before any handler sees them.

``add_security(app, public_url)`` installs both:

- The headers are set as each response is prepared (``on_response_prepare``), not in a
  middleware, so that aiohttp's own answers get them too: a 404 or 405, the 500 of an
  exception, a static file. A header the handler set is kept (the console's pages and
  the login form have stricter policies of their own). The default policy is the call
  page's (agent/server/web/index.html): its script and its ``fetch`` and ``EventSource`` to
  this host, its inline ``<style>``, the microphone; no framing by anyone. HSTS is sent
  when the public URL is https (TLS may end at a proxy, so the request's own scheme
  does not say).
- A middleware, outermost, answers 400 to a request whose path or query hold control
  characters (NUL among them, which PostgreSQL refuses in strings and
  would answer with a 500), or are longer than any route takes. The handlers still check
  each parameter against its own limit (``agent.console.query``): this is the net under
  them, for routes written later too.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from agent.console.query import CONTROL_CHARS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The longest path segment a route takes (a call id, a carrier's media token, a file
#: under /static); longer ones are nobody's.
MAX_SEGMENT = 256
#: The longest query value (a ``next`` path, a cursor, a name filter) and name.
MAX_QUERY_VALUE = 2048
MAX_QUERY_NAME = 64
#: The most query parameters a request may carry (the call list's filter has nine).
MAX_QUERY_PARAMETERS = 32

#: The call page's needs: its script and its requests to this host, its inline style,
#: the agent's audio; nothing else, and no framing.
CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self'; media-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: The microphone for this host's pages (the call page), no other device.
PERMISSIONS = "microphone=(self), camera=(), geolocation=(), payment=(), usb=()"
#: A year, the subdomains too (ASVS 14.4.5): sent only when the public URL is https.
HSTS = "max-age=31536000; includeSubDomains"

_CONTROL = re.compile(CONTROL_CHARS)


def security_headers(public_url: str | None) -> dict[str, str]:
    """The headers every response gets unless its handler set its own."""
    headers = {
        "Content-Security-Policy": CSP,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "Permissions-Policy": PERMISSIONS,
    }
    if (public_url or "").lower().startswith("https://"):
        headers["Strict-Transport-Security"] = HSTS
    return headers


def add_security(app: web.Application, public_url: str | None) -> None:
    """Set the security headers on every response of ``app``, and put ``refuse_unusable``
    before its other middlewares. ``public_url``: the agent's (``PUBLIC_URL``)."""
    headers = security_headers(public_url)

    async def set_headers(request: web.Request, response: web.StreamResponse) -> None:
        for name, value in headers.items():
            response.headers.setdefault(name, value)

    app.on_response_prepare.append(set_headers)
    app.middlewares.insert(0, refuse_unusable)


def unusable(request: web.Request) -> str | None:
    """Why no route could use ``request``'s path or query, or None; said as the handlers'
    own checks say it (``agent.console.query``), naming the parameter."""
    for name, value in request.match_info.items():
        if _CONTROL.search(value):
            return f"{name} must be free of control characters"
    if _CONTROL.search(request.path):
        return "the path holds control characters"
    if any(len(segment) > MAX_SEGMENT for segment in request.path.split("/")):
        return f"a path segment is longer than {MAX_SEGMENT} characters"
    return _unusable_query(request.query)


def _unusable_query(query: Mapping[str, str]) -> str | None:
    if len(query) > MAX_QUERY_PARAMETERS:
        return f"more than {MAX_QUERY_PARAMETERS} query parameters"
    for name, value in query.items():
        if len(name) > MAX_QUERY_NAME or _CONTROL.search(name):
            return "a query parameter's name is too long or holds control characters"
        if len(value) > MAX_QUERY_VALUE:
            return f"{name} is longer than {MAX_QUERY_VALUE} characters"
        if _CONTROL.search(value):
            return f"{name} must not contain control characters"
    return None


@web.middleware
async def refuse_unusable(request: web.Request, handler: Handler) -> web.StreamResponse:
    """400 for a request whose path or query no route could use (``unusable``)."""
    why = unusable(request)
    if why is None:
        return await handler(request)
    if request.path.startswith("/api/"):
        return web.json_response({"error": why}, status=400, headers={"Cache-Control": "no-store"})
    return web.Response(text=why + "\n", status=400, headers={"Cache-Control": "no-store"})
