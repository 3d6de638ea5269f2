"""RFC 3261 §17 transactions over UDP, with their timers (A, B, D, E, F, G, H, I, J, K).

The layer owns the socket: it parses datagrams, answers retransmitted requests from the last
response sent (so a BYE retransmitted after the call ended still gets its 200), retransmits our
requests and non-2xx final responses, and hands the transaction user (the UA) new requests, ACKs
for 2xx and responses that match no transaction (2xx retransmissions).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from telephony.sip.message import (
    SipParseError,
    SipRequest,
    SipResponse,
    make_response,
    parse,
)
from telephony.sip.ratelimit import Quarantine

log = logging.getLogger(__name__)
Address = tuple[str, int]


@dataclass(frozen=True)
class Timers:
    """RFC 3261 base timers in seconds; tests shrink them."""

    t1: float = 0.5
    t2: float = 4.0
    t4: float = 5.0

    @property
    def timeout(self) -> float:
        return 64 * self.t1  # timers B, F, H, J


class TransactionTimeout(TimeoutError):
    """No final response before timer B or F fired."""


class ServerTransaction:
    """One request we received; :meth:`respond` sends (and for non-2xx, retransmits) answers."""

    def __init__(self, layer: TransactionLayer, request: SipRequest, source: Address) -> None:
        self.layer, self.request, self.source = layer, request, source
        self.last: SipResponse | None = None
        self.final = False
        self.acked = asyncio.Event()
        self._timers: list[asyncio.TimerHandle] = []

    @property
    def key(self) -> tuple[str, str, str]:
        via = self.request.top_via()
        method = self.request.method
        return (via.branch, via.sent_by, "INVITE" if method == "ACK" else method)

    def respond(self, response: SipResponse) -> bool:
        """Send ``response``; False, sending nothing, once a final one has gone out: a request
        gets one final response (RFC 3261 §17.2.1), so a 200 racing a CANCEL's 487 is refused
        here rather than by every caller remembering to look."""
        if self.final:
            log.debug("late response %d refused for %s", response.status, self.request.method)
            return False
        self.last = response
        self.layer.send(response, self.source)
        if response.status < 200:
            return True
        self.final = True
        timers = self.layer.timers
        if self.request.method != "INVITE":
            self._later(timers.timeout, self._terminate)  # timer J
        elif response.status >= 300:
            self._later(timers.t1, self._retransmit, timers.t1)  # timer G
            self._later(timers.timeout, self._terminate)  # timer H
        else:
            # RFC 6026 Accepted: absorb INVITE retransmissions; the UA retransmits the 2xx.
            self._later(timers.timeout, self._terminate)
        return True

    def _later(self, delay: float, callback: Callable[..., None], *args: float) -> None:
        self._timers.append(self.layer.loop.call_later(delay, callback, *args))

    def _retransmit(self, interval: float) -> None:
        if self.acked.is_set() or self.last is None:
            return
        self.layer.send(self.last, self.source)
        interval = min(2 * interval, self.layer.timers.t2)
        self._later(interval, self._retransmit, interval)

    def on_retransmission(self, request: SipRequest) -> None:
        if request.method == "ACK":
            if not self.acked.is_set():
                self.acked.set()
                self._later(self.layer.timers.t4, self._terminate)  # timer I
        elif self.last is not None:
            self.layer.send(self.last, self.source)

    def _terminate(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self.layer.server.pop(self.key, None)


class ClientTransaction:
    """One request we sent; ``final`` resolves with its final response or TransactionTimeout."""

    def __init__(
        self,
        layer: TransactionLayer,
        request: SipRequest,
        destination: Address,
        on_provisional: Callable[[SipResponse], None] | None,
    ) -> None:
        self.layer, self.request, self.destination = layer, request, destination
        self.on_provisional = on_provisional
        self.final: asyncio.Future[SipResponse] = layer.loop.create_future()
        self.proceeding = False
        self._timers: list[asyncio.TimerHandle] = []
        self._ack: SipRequest | None = None
        timers = layer.timers
        layer.send(request, destination)
        self._later(timers.t1, self._retransmit, timers.t1)  # timer A / E
        self._later(timers.timeout, self._timeout)  # timer B / F

    @property
    def key(self) -> tuple[str, str]:
        return (self.request.top_via().branch, self.request.method)

    def _later(self, delay: float, callback: Callable[..., None], *args: float) -> None:
        self._timers.append(self.layer.loop.call_later(delay, callback, *args))

    def _retransmit(self, interval: float) -> None:
        if self.final.done() or (self.proceeding and self.request.method == "INVITE"):
            return
        self.layer.send(self.request, self.destination)
        if self.request.method == "INVITE":
            interval = 2 * interval
        else:
            interval = (
                self.layer.timers.t2 if self.proceeding else min(2 * interval, self.layer.timers.t2)
            )
        self._later(interval, self._retransmit, interval)

    def _timeout(self) -> None:
        if not self.final.done():
            self.final.set_exception(TransactionTimeout(f"no answer to {self.request.method}"))
        self._terminate()

    def on_response(self, response: SipResponse) -> None:
        if response.status < 200:
            self.proceeding = True
            if self.on_provisional is not None and not self.final.done():
                self.on_provisional(response)
            return
        if self.request.method == "INVITE" and response.status >= 300:
            self._send_ack(response)  # also re-sent for retransmitted finals (timer D)
        if self.final.done():
            return
        self.final.set_result(response)
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        timers = self.layer.timers
        linger = 32.0 if self.request.method == "INVITE" else timers.t4  # timer D / K
        if self.request.method == "INVITE" and response.status < 300:
            linger = 0.0
        self._later(linger, self._terminate)

    def _send_ack(self, response: SipResponse) -> None:
        if self._ack is None:
            ack = SipRequest(method="ACK", uri=self.request.uri)
            ack.headers.add("Via", self.request.headers.get_all("Via")[0])
            for name in ("From", "Call-ID", "Route"):
                for value in self.request.headers.get_all(name):
                    ack.headers.add(name, value)
            ack.headers.add("To", response.headers.get("To") or "")
            ack.headers.add("CSeq", f"{self.request.cseq[0]} ACK")
            ack.headers.add("Max-Forwards", "70")
            self._ack = ack
        self.layer.send(self._ack, self.destination)

    def _terminate(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self.layer.client.pop(self.key, None)


class TransactionLayer(asyncio.DatagramProtocol):
    """The UDP socket and the transaction tables; see the module docstring.

    ``accept(source)`` is asked before each new server transaction (not for retransmissions,
    which the transaction absorbs, nor for ACKs): False answers a stateless 503 with
    Retry-After and keeps nothing, so a flood costs no memory (the endpoint's rate limit).
    ``quarantine`` meters unreadable datagrams per source before anything is parsed: past its
    budget a source is ignored for a while, and the warnings they cause are rate-limited.
    """

    def __init__(
        self,
        on_request: Callable[[ServerTransaction], None],
        on_stray: Callable[[SipRequest | SipResponse, Address], None],
        timers: Timers | None = None,
        accept: Callable[[Address], bool] | None = None,
        quarantine: Quarantine | None = None,
    ) -> None:
        self.on_request, self.on_stray = on_request, on_stray
        self.accept = accept
        self.quarantine = quarantine or Quarantine()
        self.timers = timers or Timers()
        self.loop = asyncio.get_running_loop()
        self.server: dict[tuple[str, str, str], ServerTransaction] = {}
        self.client: dict[tuple[str, str], ClientTransaction] = {}
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, message: SipRequest | SipResponse, address: Address) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(message.serialize(), address)

    def request(
        self,
        request: SipRequest,
        destination: Address,
        on_provisional: Callable[[SipResponse], None] | None = None,
    ) -> ClientTransaction:
        transaction = ClientTransaction(self, request, destination, on_provisional)
        self.client[transaction.key] = transaction
        return transaction

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:  # type: ignore[override]
        if self.quarantine.ignored(str(addr[0])):
            return  # before any parsing: a source that sent too much junk lately
        source: Address = (str(addr[0]), int(addr[1]))
        if data.strip(b"\r\n") == b"":
            return  # RFC 5626 keep-alive
        try:
            message = parse(data)
        except SipParseError as exc:
            if not self.quarantine.unreadable(source[0], f"{source[0]}:{source[1]}", exc):
                return
            if exc.partial is not None and exc.partial.method != "ACK":
                try:
                    self.send(
                        make_response(
                            exc.partial,
                            exc.status,
                            headers=[("Warning", f'399 - "{str(exc)[:100]}"')],
                        ),
                        source,
                    )
                except SipParseError:
                    log.debug("cannot even answer 400 to %s", source)
            return
        try:
            self._dispatch(message, source)
        except Exception:
            log.exception("error handling SIP message from %s", source)
            if isinstance(message, SipRequest) and message.method != "ACK":
                self.send(make_response(message, 500), source)

    def _dispatch(self, message: SipRequest | SipResponse, source: Address) -> None:
        if isinstance(message, SipResponse):
            key = (message.top_via().branch, message.cseq[1])
            client = self.client.get(key)
            if client is not None:
                client.on_response(message)
            else:
                self.on_stray(message, source)
            return
        via = message.top_via()
        method = "INVITE" if message.method == "ACK" else message.method
        existing = self.server.get((via.branch, via.sent_by, method))
        if existing is not None:
            if message.method != "ACK" or (existing.last and existing.last.status >= 300):
                existing.on_retransmission(message)
                return
        if message.method == "ACK":
            self.on_stray(message, source)
            return
        if self.accept is not None and not self.accept(source):
            self.send(make_response(message, 503, headers=[("Retry-After", "1")]), source)
            return
        transaction = ServerTransaction(self, message, source)
        self.server[transaction.key] = transaction
        if message.method == "INVITE":
            transaction.respond(make_response(message, 100))
        self.on_request(transaction)

    def close(self) -> None:
        for server in list(self.server.values()):
            server._terminate()
        for client in list(self.client.values()):
            if not client.final.done():
                client.final.set_exception(TransactionTimeout("endpoint closed"))
            client._terminate()
        if self.transport is not None:
            self.transport.close()
