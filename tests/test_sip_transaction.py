"""RFC 3261 transactions over loopback UDP (telephony/sip/transaction.py)."""

from __future__ import annotations

import asyncio

import pytest

from telephony.sip.message import SipRequest, SipResponse, make_response, parse
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
    on_request: object,
) -> tuple[TransactionLayer, Peer, tuple[str, int], tuple[str, int]]:
    loop = asyncio.get_running_loop()
    _, layer = await loop.create_datagram_endpoint(
        lambda: TransactionLayer(on_request, lambda m, a: None, FAST),  # type: ignore[arg-type]
        local_addr=("127.0.0.1", 0),
    )
    _, peer = await loop.create_datagram_endpoint(Peer, local_addr=("127.0.0.1", 0))
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
