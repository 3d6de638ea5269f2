"""A caller behind NAT: its SDP advertises one address, its RTP comes from another, and
the call's audio still flows both ways (symmetric RTP, telephony/rtp/session.py's ``Latch``)."""

from __future__ import annotations

import asyncio

from aiortc.rtp import RtpPacket

from telephony.rtp.session import RtpSession
from telephony.sip import sdp
from telephony.sip.call import SipCall
from telephony.sip.message import SipResponse, parse
from telephony.sip.transaction import Timers
from telephony.sip.ua import SipEndpoint

HOST = "127.0.0.1"
#: Not where the INVITE comes from (HOST): the SDP's address says NAT.
ADVERTISED = "127.0.0.2"
FAST = Timers(t1=0.05, t2=0.2, t4=0.2)


class Udp(asyncio.DatagramProtocol):
    """A bare UDP socket of the caller's: queues what it receives."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.received.put_nowait(data)

    @property
    def address(self) -> tuple[str, int]:
        return self.transport.get_extra_info("sockname")[:2]  # type: ignore[no-any-return]


async def udp(host: str = HOST) -> Udp:
    _, protocol = await asyncio.get_running_loop().create_datagram_endpoint(
        Udp, local_addr=(host, 0)
    )
    return protocol


def request(method: str, signalling: Udp, body: bytes = b"", to_tag: str = "") -> bytes:
    host, port = signalling.address
    to = f"<sip:agent@{HOST}>" + (f";tag={to_tag}" if to_tag else "")
    return (
        f"{method} sip:agent@{HOST} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP {host}:{port};branch=z9hG4bKnat{method}\r\n"
        f"From: <sip:caller@{host}>;tag=nat1\r\nTo: {to}\r\n"
        f"Call-ID: nat@{host}\r\nCSeq: 1 {method}\r\nContact: <sip:caller@{host}:{port}>\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def test_the_agent_answers_the_port_a_caller_behind_nat_sends_from() -> None:
    calls: list[SipCall] = []

    async def answer(call: SipCall) -> None:
        calls.append(call)
        await call.answer()

    ua = SipEndpoint(HOST, 0, on_call=answer, timers=FAST)
    await ua.start()
    signalling, rtp = await udp(), await udp()
    advertised = await udp(ADVERTISED)  # port A, in the SDP; the caller sends from port B
    try:
        offer = sdp.LocalSession(ADVERTISED, advertised.address[1]).offer()
        signalling.transport.sendto(request("INVITE", signalling, offer), (HOST, ua.port))
        while True:
            response = parse(await asyncio.wait_for(signalling.received.get(), 5))
            assert isinstance(response, SipResponse)
            if response.status == 200:
                break
        to_tag = (response.headers.get("To") or "").split("tag=")[1]
        signalling.transport.sendto(request("ACK", signalling, to_tag=to_tag), (HOST, ua.port))
        answered = sdp.parse(response.body)
        agent_rtp = (answered.ip, answered.port)
        [call] = calls
        assert isinstance(call.media, RtpSession) and call.media.latch is not None
        voice = RtpPacket(0, 0, 1, 160, 7, b"\x42" * 160).serialize()
        rtp.transport.sendto(voice, agent_rtp)
        assert (await asyncio.wait_for(call.media.read(), 5)).payload == b"\x42" * 160
        ours = RtpPacket.parse(await asyncio.wait_for(rtp.received.get(), 5))
        assert ours.payload_type == 0  # the agent's RTP reaches port B
        assert call.media.destination == rtp.address
    finally:
        await ua.close()
        for p in (signalling, rtp, advertised):
            p.transport.close()
