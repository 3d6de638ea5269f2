"""RFC 3261 transactions over loopback UDP (telephony/sip/transaction.py)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from telephony.sip.message import SipRequest, SipResponse, make_response, parse
from telephony.sip.ratelimit import Quarantine
from telephony.sip.transaction import (
    ServerTransaction,
    Timers,
    TransactionLayer,
    TransactionTimeout,
)

FAST = Timers(t1=0.02, t2=0.08, t4=0.1)


class Peer(asyncio.DatagramProtocol):
    """A bare UDP socket that records what it receives."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[SipRequest | SipResponse] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.received.put_nowait(parse(data))


async def open_pair(
    on_request: object, quarantine: Quarantine | None = None, peer_host: str = "127.0.0.1"
) -> tuple[TransactionLayer, Peer, tuple[str, int], tuple[str, int]]:
    loop = asyncio.get_running_loop()
    _, layer = await loop.create_datagram_endpoint(
        lambda: TransactionLayer(
            on_request,  # type: ignore[arg-type]
            lambda m, a: None,
            FAST,
            quarantine=quarantine,
        ),
        local_addr=("127.0.0.1", 0),
    )
    _, peer = await loop.create_datagram_endpoint(Peer, local_addr=(peer_host, 0))
    assert layer.transport is not None and peer.transport is not None
    return (
        layer,
        peer,
        layer.transport.get_extra_info("sockname")[:2],
        peer.transport.get_extra_info("sockname")[:2],
    )


def request(method: str, peer_address: tuple[str, int], branch: str = "z9hG4bK1") -> bytes:
    host, port = peer_address
    return (
        f"{method} sip:agent@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP {host}:{port};branch={branch}\r\n"
        f"From: <sip:a@x>;tag=1\r\nTo: <sip:agent@y>;tag=2\r\nCall-ID: c1\r\n"
        f"CSeq: 2 {method}\r\nContent-Length: 0\r\n\r\n"
    ).encode()


async def test_retransmitted_bye_is_answered_from_the_transaction() -> None:
    seen: list[ServerTransaction] = []

    def on_request(txn: ServerTransaction) -> None:
        seen.append(txn)
        txn.respond(make_response(txn.request, 200))

    layer, peer, address, peer_address = await open_pair(on_request)
    assert peer.transport is not None
    try:
        for _ in range(2):
            peer.transport.sendto(request("BYE", peer_address), address)
            response = await asyncio.wait_for(peer.received.get(), 5)
            assert isinstance(response, SipResponse) and response.status == 200
        assert len(seen) == 1  # the retransmission never reached the application
    finally:
        layer.close()
        peer.transport.close()


async def test_malformed_request_gets_400_and_the_layer_keeps_serving() -> None:
    layer, peer, address, peer_address = await open_pair(
        lambda txn: txn.respond(make_response(txn.request, 200))
    )
    assert peer.transport is not None
    try:
        peer.transport.sendto(
            request("BYE", peer_address).replace(b"Call-ID", b"Not a header\r\nCall-ID"), address
        )
        bad = await asyncio.wait_for(peer.received.get(), 5)
        assert isinstance(bad, SipResponse) and bad.status == 400
        peer.transport.sendto(request("OPTIONS", peer_address, "z9hG4bK2"), address)
        good = await asyncio.wait_for(peer.received.get(), 5)
        assert isinstance(good, SipResponse) and good.status == 200
    finally:
        layer.close()
        peer.transport.close()


async def test_non_2xx_invite_response_is_retransmitted_until_ack() -> None:
    layer, peer, address, peer_address = await open_pair(
        lambda txn: txn.respond(make_response(txn.request, 486, to_tag="t"))
    )
    assert peer.transport is not None
    try:
        peer.transport.sendto(request("INVITE", peer_address), address)
        statuses: list[int] = []
        while len(statuses) < 3:  # 100 Trying, 486, then the timer G retransmission
            message = await asyncio.wait_for(peer.received.get(), 5)
            assert isinstance(message, SipResponse)
            statuses.append(message.status)
        assert statuses == [100, 486, 486]
        peer.transport.sendto(request("ACK", peer_address), address)
        key = next(iter(layer.server))
        await asyncio.wait_for(layer.server[key].acked.wait(), 5)
    finally:
        layer.close()
        peer.transport.close()


async def test_a_transaction_refuses_a_second_final_response() -> None:
    """RFC 3261 §17.2.1: a 200 after the 487 (a CANCEL won) is refused, not sent."""
    sent: list[bool] = []

    def on_request(txn: ServerTransaction) -> None:
        sent.append(txn.respond(make_response(txn.request, 487, to_tag="t")))
        sent.append(txn.respond(make_response(txn.request, 200, to_tag="t")))

    layer, peer, address, peer_address = await open_pair(on_request)
    assert peer.transport is not None
    try:
        peer.transport.sendto(request("INVITE", peer_address), address)
        statuses: list[int] = []
        while len(statuses) < 3:  # 100 Trying, 487, then the timer G retransmission: no 200
            message = await asyncio.wait_for(peer.received.get(), 5)
            assert isinstance(message, SipResponse)
            statuses.append(message.status)
        assert statuses == [100, 487, 487] and sent == [True, False]
        peer.transport.sendto(request("ACK", peer_address), address)
    finally:
        layer.close()
        peer.transport.close()


async def test_client_request_retransmits_then_times_out() -> None:
    layer, peer, _, peer_address = await open_pair(lambda txn: None)
    assert peer.transport is not None
    try:
        bye = parse(request("BYE", ("127.0.0.1", 1)))
        assert isinstance(bye, SipRequest)
        txn = layer.request(bye, peer_address)
        with pytest.raises(TransactionTimeout):
            await txn.final
        assert peer.received.qsize() >= 3  # timer E fired before timer F
    finally:
        layer.close()
        peer.transport.close()


async def open_peer(host: str) -> tuple[Peer, tuple[str, int]]:
    """Another source: Linux routes all of 127/8 to loopback, so each host is its own address."""
    _, peer = await asyncio.get_running_loop().create_datagram_endpoint(Peer, local_addr=(host, 0))
    assert peer.transport is not None
    return peer, peer.transport.get_extra_info("sockname")[:2]


async def answered(peer: Peer, within: float) -> SipResponse | None:
    try:
        response = await asyncio.wait_for(peer.received.get(), within)
    except TimeoutError:
        return None
    assert isinstance(response, SipResponse)
    return response


async def test_a_flood_of_junk_is_cut_off_unread_and_logged_in_a_few_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """2,000 unreadable datagrams from one source: a few are answered 400 and logged, then the
    source is ignored for the ban window; another source is served throughout."""
    caplog.set_level(logging.INFO, logger="telephony")
    ban_s = 2.0
    quarantine = Quarantine(burst=5, rate=0.1, ban_s=ban_s, log_interval_s=60)
    layer, flooder, address, flooder_address = await open_pair(
        lambda txn: txn.respond(make_response(txn.request, 200)), quarantine, "127.0.0.2"
    )
    other, other_address = await open_peer("127.0.0.3")
    assert flooder.transport is not None and other.transport is not None
    junk = request("OPTIONS", flooder_address).replace(b"Call-ID", b"Not a header\r\nCall-ID")
    try:
        for n in range(2000):
            flooder.transport.sendto(junk, address)
            if n % 50 == 49:
                # Paced, so the socket's receive buffer does not overflow: the kernel would
                # drop the other source's requests too, which no application can help.
                await asyncio.sleep(0.002)
            if n == 1000:
                other.transport.sendto(request("OPTIONS", other_address, "z9hG4bKmid"), address)
        flood_over = time.monotonic()
        await asyncio.sleep(0.05)
        other.transport.sendto(request("OPTIONS", other_address, "z9hG4bKafter"), address)
        statuses = []
        while (response := await answered(other, 5)) is not None:
            statuses.append(response.status)
            if len(statuses) == 2:
                break
        assert statuses == [200, 200]  # during and after the flood
        refused = 0
        while (response := await answered(flooder, 0.2)) is not None:
            assert response.status == 400
            refused += 1
        assert 1 <= refused <= 5  # the budget, then silence
        # Banned: even a well-formed request goes unread...
        flooder.transport.sendto(request("OPTIONS", flooder_address, "z9hG4bKbanned"), address)
        assert await answered(flooder, 0.3) is None
        # ...for the ban window only.
        while time.monotonic() - flood_over < ban_s + 3:
            flooder.transport.sendto(request("OPTIONS", flooder_address, "z9hG4bKlater"), address)
            if (response := await answered(flooder, 0.2)) is not None:
                break
        assert response is not None and response.status == 200
        assert time.monotonic() - flood_over >= ban_s - 0.5
    finally:
        layer.close()
        flooder.transport.close()
        other.transport.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert 1 <= len(warnings) <= 4, warnings
    assert any("ignoring it" in w for w in warnings)


def test_the_quarantine_logs_once_per_interval_with_a_count() -> None:
    quarantine = Quarantine(burst=100, rate=0, log_interval_s=60)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("telephony.sip.ratelimit")
    logger.addHandler(handler)
    try:
        for _ in range(50):
            assert quarantine.unreadable("192.0.2.1", "192.0.2.1:5060", "bad start line")
        assert records == ["unreadable SIP datagram from 192.0.2.1:5060: bad start line"]
        quarantine._logged["192.0.2.1"] = (time.monotonic() - 61, 49)  # the interval passes
        quarantine.unreadable("192.0.2.1", "192.0.2.1:5060", "bad start line")
        assert records[-1].endswith("(49 more from 192.0.2.1 suppressed)")
        # Spoofed from everywhere: at most max_warnings an interval over all sources.
        for n in range(100):
            quarantine.unreadable(f"198.51.100.{n}", "x", "junk")
        assert len(records) == quarantine.max_warnings
    finally:
        logger.removeHandler(handler)
