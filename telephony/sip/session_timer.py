"""SIP session timers (RFC 4028): a dialog that must be refreshed, or it ends.

A peer that vanishes without a BYE (a crashed PBX, a trunk that lost its state) leaves a
call that RTP alone cannot always tell from one on hold. With a session timer one side, the
*refresher*, sends a re-INVITE or UPDATE every half interval; when none has come by the
interval's end the other side hangs up. The negotiation is a few pure functions over
headers (read, choose the interval and the refresher, write); :class:`SessionTimer` runs the
clock of one dialog. ``uac`` and ``uas`` in the headers name the roles in the transaction
that carries them, so a negotiated :class:`Session` stores whether *we* refresh instead.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from telephony.sip.message import Headers

log = logging.getLogger(__name__)

#: The absolute minimum interval (RFC 4028 §4): a Min-SE below it is not asked for.
RFC_MIN_SE = 90
#: The end reason of a call whose session was not refreshed in time.
SESSION_EXPIRED = "session_expired"
_DELTA = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class SessionTimers:
    """Our side's settings: the interval we ask for and the least we accept (seconds).

    RFC 4028's values (1800 s, 90 s) by default; tests shrink them as they shrink ``Timers``.
    """

    expires: int = 1800
    min_se: int = RFC_MIN_SE

    def __post_init__(self) -> None:
        if not 0 < self.min_se <= self.expires:
            raise ValueError(f"need 0 < min_se <= expires, got {self.min_se}, {self.expires}")


@dataclass(frozen=True)
class Session:
    """A negotiated session timer: its interval and whether we are the refresher."""

    interval: int
    ours: bool

    def refresh_after(self) -> float:
        """When the refresher sends its refresh (§10: half the interval is recommended)."""
        return self.interval / 2

    def expires_after(self) -> float:
        """When the side that does not refresh gives up: ahead of the interval's end by a
        third of it or 32 s, whichever is less (§10), so its BYE beats the refresher's."""
        if self.ours:
            return float(self.interval)
        return self.interval - min(32.0, self.interval / 3)


class TimerRefusal(Exception):
    """A request whose session timer we refuse: 400 (malformed) or 422 (interval too small,
    with our ``Min-SE``)."""

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]]) -> None:
        super().__init__(f"{status} {reason}")
        self.status, self.reason, self.headers = status, reason, headers


class SessionGone(Exception):
    """A refresh nothing answered, or answered 408 or 481: the dialog is over (RFC 3261
    §12.2.1.2), and the session expires at once."""


# -- reading --------------------------------------------------------------------------------


def _values(headers: Headers, name: str, compact: str | None = None) -> list[str]:
    values = headers.get_all(name) + (headers.get_all(compact) if compact else [])
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def supports_timer(headers: Headers) -> bool:
    """Whether the message says ``Supported: timer`` (or ``Require: timer``)."""
    tags = _values(headers, "Supported") + _values(headers, "Require")
    return any(tag.lower() == "timer" for tag in tags)


def allows(headers: Headers, method: str) -> bool:
    """Whether the message's ``Allow`` lists ``method``."""
    return method.upper() in (m.upper() for m in _values(headers, "Allow"))


def _delta(text: str, name: str) -> int:
    value = text.strip()
    if not _DELTA.fullmatch(value):
        raise ValueError(f"malformed {name}: {text[:40]!r}")
    return int(value)


def session_expires(headers: Headers) -> tuple[int, str | None] | None:
    """``Session-Expires`` (compact ``x``): its interval and refresher (``uac``, ``uas`` or
    None); None when absent. ValueError when malformed."""
    values = headers.get_all("Session-Expires") + headers.get_all("x")
    if not values:
        return None
    delta, *params = values[0].split(";")
    interval = _delta(delta, "Session-Expires")
    refresher = None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "refresher":
            refresher = value.strip().lower()
            if refresher not in ("uac", "uas"):
                raise ValueError(f"malformed Session-Expires refresher: {value[:20]!r}")
    return interval, refresher


def min_se(headers: Headers) -> int | None:
    """``Min-SE``'s interval; None when absent. ValueError when malformed."""
    value = headers.get("Min-SE")
    if value is None:
        return None
    return _delta(value.split(";")[0], "Min-SE")


# -- choosing -------------------------------------------------------------------------------


def answer(request: Headers, settings: SessionTimers) -> tuple[Session, list[tuple[str, str]]]:
    """As the UAS of an INVITE or UPDATE (§9): the session and the headers for our 2xx.

    A peer that supports timers and asks for less than our ``Min-SE`` gets 422; one that
    does not (a proxy added the header) gets the interval raised instead, as it cannot
    understand a 422. The refresher is the one the request named, else the peer when it
    supports timers (it asked), else us. ``TimerRefusal`` for 400 or 422.
    """
    try:
        asked = session_expires(request)
        floor = min_se(request) or 0
    except ValueError as exc:
        warning = str(exc).replace('"', "'")
        raise TimerRefusal(400, "Bad Request", [("Warning", f'399 - "{warning}"')]) from None
    supported = supports_timer(request)
    if asked is not None and asked[0] < settings.min_se and supported:
        raise TimerRefusal(422, "Session Interval Too Small", [("Min-SE", str(settings.min_se))])
    wanted = settings.expires if asked is None else min(asked[0], settings.expires)
    interval = max(wanted, floor, settings.min_se)
    refresher = asked[1] if asked is not None and asked[1] and supported else None
    if refresher is None:
        refresher = "uac" if supported else "uas"
    headers = [("Session-Expires", f"{interval};refresher={refresher}")]
    if supported:
        headers.append(("Require", "timer"))
    return Session(interval, ours=refresher == "uas"), headers


def offer(settings: SessionTimers, session: Session | None = None) -> list[tuple[str, str]]:
    """As the UAC of an INVITE or UPDATE (§7): what we ask for. A request within a session
    keeps its interval and refresher (ours: ``uac``, the peer's: ``uas``); a new INVITE
    leaves the refresher to the UAS."""
    if session is None:
        expires = str(settings.expires)
    else:
        expires = f"{session.interval};refresher={'uac' if session.ours else 'uas'}"
    return [
        ("Supported", "timer"),
        ("Session-Expires", expires),
        ("Min-SE", str(settings.min_se)),
    ]


def retry_after_422(response: Headers, settings: SessionTimers) -> SessionTimers | None:
    """What to ask for again after a 422 (§7.1): the UAS's ``Min-SE`` as both our interval
    and our minimum; None when the 422 gives no usable ``Min-SE`` above what we asked."""
    try:
        floor = min_se(response)
    except ValueError:
        return None
    if floor is None or floor <= settings.expires:
        return None
    return SessionTimers(expires=floor, min_se=floor)


def accepted(response: Headers) -> Session | None:
    """As the UAC, from a 2xx (§7.2): the session its ``Session-Expires`` sets, if any
    (``refresher=uac``, or none named: we refresh). A malformed one is ignored (a response
    is not answered), and there is no session timer."""
    try:
        given = session_expires(response)
    except ValueError as exc:
        log.warning("session timer ignored: %s", exc)
        return None
    if given is None or given[0] <= 0:
        return None
    return Session(given[0], ours=given[1] in (None, "uac"))


# -- the clock ------------------------------------------------------------------------------


class SessionTimer:
    """One dialog's session timer. :meth:`arm` (re)starts it for a session: as the refresher
    it calls ``refresh`` every half interval (the renewed session; None when refused, so
    the session lasts to its end; ``SessionGone`` to end it now); else, or once refreshing
    failed, it calls ``expire`` when the session runs out. A refresh that arrives from the
    peer re-arms it."""

    def __init__(
        self,
        refresh: Callable[[Session], Awaitable[Session | None]],
        expire: Callable[[], Awaitable[None]],
    ) -> None:
        self._refresh, self._expire = refresh, expire
        self.session: Session | None = None
        self._task: asyncio.Task[None] | None = None

    def arm(self, session: Session | None) -> None:
        """Run the clock for ``session`` from now (None: no timer)."""
        self.stop()
        self.session = session
        if session is not None:
            self._task = asyncio.ensure_future(self._run(session))

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _run(self, session: Session) -> None:
        loop = asyncio.get_running_loop()
        ends = loop.time() + session.expires_after()
        while session.ours:
            await asyncio.sleep(session.refresh_after())
            try:
                renewed = await self._refresh(session)
            except SessionGone as exc:
                log.info("session refresh failed: %s", exc)
                ends = loop.time()
                break
            if renewed is None:
                break  # it lasts to its end unless the peer refreshes it
            session = self.session = renewed
            ends = loop.time() + session.expires_after()
        await asyncio.sleep(max(0.0, ends - loop.time()))
        self._task = None  # expiring: the call's end must not cancel its own BYE
        await self._expire()
