"""Who may use each route: every route of the agent server declares its guard.

A route's handler is wrapped by ``guard(*rules)``: the request goes through when one of
the rules admits it, and is refused otherwise. The rules are the ways in that the
server knows: anyone (``Anonymous``, with the reason why anyone may), the worker's own
host (``Loopback``), a console role with CSRF for state changes
(``agent.console.auth.Role``), a machine's API token (``agent.console.tokens``), the
caller's own call token, a carrier's signature. ``check_routes`` refuses an app with a
route whose handler declares no rules, so a route cannot be added unguarded.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The attribute on a guarded handler that holds its rules.
_RULES = "__access_rules__"


@dataclass(frozen=True)
class Refusal:
    """Why a rule did not admit a request: the answer it would give, and whether the
    request presented this rule's kind of credential (then its answer is the one given)."""

    response: web.StreamResponse
    presented: bool = False


class Rule(Protocol):
    """One way in. ``check`` answers None to admit the request, else a ``Refusal``."""

    @property
    def name(self) -> str: ...

    async def check(self, request: web.Request) -> Refusal | None: ...


def refuse(status: int, message: str, presented: bool = False) -> Refusal:
    """A JSON refusal, never cached."""
    response = web.json_response(
        {"error": message}, status=status, headers={"Cache-Control": "no-store"}
    )
    return Refusal(response, presented)


@dataclass(frozen=True)
class Anonymous:
    """Anyone may: ``why`` says why that is safe (it is shown by the route inventory)."""

    why: str

    @property
    def name(self) -> str:
        return f"anonymous ({self.why})"

    async def check(self, request: web.Request) -> Refusal | None:
        return None


@dataclass(frozen=True)
class Loopback:
    """Only the worker's own host (a pod's preStop hook, a local scraper)."""

    name: str = "loopback"

    async def check(self, request: web.Request) -> Refusal | None:
        if is_loopback(request.remote or ""):
            return None
        return refuse(403, f"{request.path} is only taken from the worker's own host")


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def guard(*rules: Rule) -> Callable[[Handler], Handler]:
    """Let a request through to the handler when one of ``rules`` admits it.

    Refused, the answer is that of the first rule whose credential the request
    presented (a wrong token says so), else that of the first rule.
    """
    if not rules:
        raise ValueError("guard needs at least one rule (Anonymous says that anyone may)")

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(request: web.Request) -> web.StreamResponse:
            refusals = []
            for rule in rules:
                refusal = await rule.check(request)
                if refusal is None:
                    return await handler(request)
                refusals.append(refusal)
            presented = [r for r in refusals if r.presented]
            return (presented or refusals)[0].response

        setattr(guarded, _RULES, tuple(rules))
        return guarded

    return decorate


def rules_of(handler: object) -> tuple[Rule, ...] | None:
    """The rules ``handler`` was guarded with, or None if it declares none."""
    return getattr(handler, _RULES, None)


#: Static files are served to anyone: the call page's script and the console's assets.
STATIC = (Anonymous("static files: scripts and styles, no data"),)


def inventory(app: web.Application) -> Iterator[tuple[str, str, tuple[Rule, ...] | None]]:
    """Each route of ``app`` as (method, path, its rules or None)."""
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = str(info.get("formatter") or info.get("path") or info.get("prefix") or "?")
        if isinstance(route.resource, web.StaticResource):
            yield route.method, path, STATIC
        else:
            yield route.method, path, rules_of(route.handler)


def check_routes(app: web.Application) -> None:
    """Refuse an app with a route that declares no guard (raises ``RuntimeError``)."""
    missing = [f"{method} {path}" for method, path, rules in inventory(app) if rules is None]
    if missing:
        raise RuntimeError(
            "routes without a declared guard (wrap the handler in agent.access.guard): "
            + ", ".join(missing)
        )
