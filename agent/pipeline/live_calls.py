"""The calls this process is carrying, as the call page and the console follow them.

A call's row in the database says that it is in progress (any worker's);
what it says right now (its transcript so far, the stage it is at) only the
process holding the call knows. This is that process's registry: the call
page and the console stream a call's transcript from it, and the live-calls
page adds its stage and last line to the database's rows.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from telephony.line import LineBusy

if TYPE_CHECKING:
    from agent.pipeline.call import Call


@dataclass
class LiveCall:
    """A call in progress as the pages see it: transcript lines and their listeners."""

    call: Call
    lines: list[dict[str, str]] = field(default_factory=list, repr=False)
    listeners: set[asyncio.Queue[dict[str, str] | None]] = field(default_factory=set)
    task: asyncio.Task[Any] | None = None
    #: What the caller's own page shows to follow its live transcript without a login.
    caller_token: str = field(default_factory=lambda: secrets.token_urlsafe(16), repr=False)
    #: The call has ended (its task may still be writing its record).
    finished: bool = False
    #: The address that started it from the call page; None for calls from elsewhere.
    page_address: str | None = None

    def publish(self, speaker: str, text: str) -> None:
        line = {"speaker": speaker, "text": text}
        self.lines.append(line)
        for queue in self.listeners:
            queue.put_nowait(line)

    def close(self) -> None:
        for queue in self.listeners:
            queue.put_nowait(None)


class Reservation:
    """A place among the worker's calls, taken when a call is offered (before a SIP INVITE
    rings, before a WebRTC offer is answered) and held while it is answered.

    The call then occupies this very place (``LiveCalls.add``), so calls offered together
    cannot all pass the check before the first is registered, and a caller is never answered
    only to be refused. Every other way out (cancelled while ringing, never acknowledged, an
    error) releases it, with ``release()`` or at the end of a ``with`` block; once the call
    has the place, releasing it does nothing.
    """

    def __init__(self, calls: LiveCalls, page_address: str | None = None) -> None:
        self._calls = calls
        #: The address that asked from the call page, for its limits (``page_calls``).
        self.page_address = page_address
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self._calls._vacate(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class LiveCalls:
    """Calls this process is carrying, by id; each is dropped a while after it ends.

    It is also what decides whether the worker takes another call: at most
    ``capacity`` at once, places reserved for calls being answered included, and
    none once it is draining (shutting down: the calls in progress finish, no new
    one starts), so a load balancer reading ``/ready`` sends calls elsewhere.
    """

    def __init__(self, capacity: int = 1_000_000, keep_ended_s: float = 300.0) -> None:
        self._calls: dict[str, LiveCall] = {}
        self._keep_ended_s = keep_ended_s
        self.capacity = capacity
        self.draining = False
        self._reserved: set[Reservation] = set()
        self._deadline: float | None = None
        self._changed = asyncio.Event()

    @property
    def active(self) -> int:
        """Calls in progress (started and not yet ended) and calls being answered (reserved)."""
        return len(self._reserved) + sum(not live.finished for live in self._calls.values())

    @property
    def accepting(self) -> bool:
        return not self.draining and self.active < self.capacity

    def get(self, call_id: str) -> LiveCall | None:
        return self._calls.get(call_id)

    def reserve(self, page_address: str | None = None) -> Reservation:
        """A place for a call about to be answered (``page_address``: asked for from the
        call page, by that address); ``LineBusy`` when the worker is full or draining."""
        if self.draining:
            raise LineBusy("this worker is shutting down: no new calls")
        if self.active >= self.capacity:
            raise LineBusy(f"this worker is full ({self.capacity} calls)")
        reservation = Reservation(self, page_address)
        self._reserved.add(reservation)
        return reservation

    def add(self, live: LiveCall, reservation: Reservation) -> None:
        """Register ``live`` in the place ``reservation`` held for it."""
        if not reservation.held:
            raise RuntimeError("a call can only take a place reserved and not yet released")
        reservation.held = False
        self._reserved.discard(reservation)
        live.page_address = reservation.page_address
        self._calls[live.call.id] = live

    def _vacate(self, reservation: Reservation) -> None:
        self._reserved.discard(reservation)
        self._changed.set()

    async def drain(self, timeout_s: float) -> int:
        """Take no new calls; wait up to ``timeout_s`` for those in progress to end.
        Returns how many are still going. A second drain (``POST /drain``, then SIGTERM)
        keeps the first one's deadline: the calls get ``timeout_s`` once, not twice."""
        self.draining = True
        loop = asyncio.get_running_loop()
        if self._deadline is None:
            self._deadline = loop.time() + timeout_s
        deadline = self._deadline
        while self.active and loop.time() < deadline:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - loop.time())
            except TimeoutError:
                break
        return self.active

    def ended(self, call_id: str) -> None:
        live = self._calls.get(call_id)
        if live is not None:
            live.finished = True
            self._changed.set()
            live.close()
            asyncio.get_running_loop().call_later(
                self._keep_ended_s, self._calls.pop, call_id, None
            )

    def page_calls(self, address: str | None = None) -> int:
        """Call-page calls from ``address`` (or from anyone): in progress, or being answered."""
        pages = [call.page_address for call in self.in_progress()]
        pages += [reservation.page_address for reservation in self._reserved]
        return sum(page is not None and address in (None, page) for page in pages)

    def in_progress(self) -> list[LiveCall]:
        return [live for live in self._calls.values() if not live.finished]

    def tasks(self) -> list[asyncio.Task[Any]]:
        return [c.task for c in self._calls.values() if c.task and not c.task.done()]


CALLS = web.AppKey("calls", LiveCalls)
