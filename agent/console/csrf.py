"""CSRF tokens for the console's forms and state-changing API calls.

Logged in, the token is session-bound and stored nowhere: an HMAC of the
session token (which lives only in the HttpOnly cookie), so another site can
neither read nor forge it, and it changes with every login. Before login
there is no session to bind to, so the login form uses a double-submit
cookie: a random value in its own cookie and the same value in the form, which
a cross-site form cannot know. Both are compared in constant time. SameSite=Lax
on the cookies is the second wall, not the only one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from aiohttp import web

from agent.console.context import SESSION_TOKEN

#: The form field and the header (for ``fetch``) that carry the token.
FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def new_login_token() -> str:
    """A fresh double-submit value for the login form's cookie and field."""
    return secrets.token_urlsafe(32)


def session_token_for(session_token: str) -> str:
    """The CSRF token bound to a session."""
    digest = hmac.new(session_token.encode(), b"console-csrf-v1", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def csrf_token(request: web.Request) -> str:
    """The token a page served to this logged-in request must put in its forms.

    Raises ``LookupError`` on an anonymous request (only ``/login`` has forms then).
    """
    session_token = request.get(SESSION_TOKEN)
    if session_token is None:
        raise LookupError("no session: only a logged-in page has a session-bound CSRF token")
    return session_token_for(session_token)


async def submitted(request: web.Request) -> str | None:
    """The token the request sent: the header, else the form field."""
    token = request.headers.get(HEADER)
    if token is None and request.content_type in _FORM_TYPES:
        value = (await request.post()).get(FIELD)
        token = value if isinstance(value, str) else None
    return token


def matches(expected: str | None, token: str | None) -> bool:
    if not expected or not token:
        return False
    return hmac.compare_digest(expected.encode(), token.encode())


async def session_request_ok(request: web.Request) -> bool:
    """Whether a logged-in request carries its session's token."""
    session_token = request.get(SESSION_TOKEN)
    expected = session_token_for(session_token) if session_token is not None else None
    return matches(expected, await submitted(request))
