"""RtpSession over real UDP on 127.0.0.1, against raw sockets and another session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiortc.rtp import RtpPacket

from telephony.rtp import g711
from telephony.rtp.sender import LatenessHistogram
from telephony.rtp.session import (
    Gap,
    JitterBuffer,
    Latch,
    RtpClosed,
    RtpSession,
    RtpStats,
    behind_nat,
)
from tests.pcap import SIPP_PCAPS, read_pcap_udp_payloads

HOST = "127.0.0.1"


class Peer(asyncio.DatagramProtocol):
    """A raw UDP endpoint: collects what it receives, sends what a test builds."""

    def __init__(self) -> None:
        self.packets: asyncio.Queue[RtpPacket] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.packets.put_nowait(RtpPacket.parse(data))

    @property
    def address(self) -> tuple[str, int]:
        return self.transport.get_extra_info("sockname")[:2]  # type: ignore[no-any-return]


async def peer() -> Peer:
    _, protocol = await asyncio.get_running_loop().create_datagram_endpoint(
        Peer, local_addr=(HOST, 0)
    )
    return protocol


def audio_packet(seq: int, payload: bytes = b"\xff" * 160, ssrc: int = 7, pt: int = 0) -> bytes:
    return RtpPacket(pt, 0, seq & 0xFFFF, seq * 160, ssrc, payload).serialize()


def tone(samples: int) -> bytes:
    t = np.arange(samples)
    return (6000 * np.sin(2 * np.pi * 440 * t / 8000)).astype("<i2").tobytes()


@pytest.fixture
async def session() -> AsyncIterator[RtpSession]:
    s = await RtpSession.open(HOST)
    yield s
    await s.close()


async def test_mu_law_bytes_arrive_unchanged_and_in_order(session: RtpSession) -> None:
    caller = await peer()
    session.start(caller.address, "PCMU", 101)
    coded = g711.encode("PCMU", tone(160 * 10))
    for i in range(10):
        caller.transport.sendto(
            audio_packet(100 + i, coded[i * 160 : (i + 1) * 160]), session.local_address
        )
    frames = [await session.read() for _ in range(10)]
    assert b"".join(f.payload for f in frames) == coded
    assert b"".join(f.pcm for f in frames) == g711.decode("PCMU", coded)
    caller.transport.close()


async def test_reordered_duplicated_and_lost_packets(session: RtpSession) -> None:
    caller = await peer()
    session.start(caller.address, "PCMA", None)
    for seq in [1, 3, 2, 3, 2, 5, 6, 7, 8]:  # 4 lost, 2 and 3 duplicated
        caller.transport.sendto(audio_packet(seq, bytes([seq]) * 160, pt=8), session.local_address)
    frames = [await session.read() for _ in range(8)]
    assert [f.payload[0] for f in frames] == [1, 2, 3, 0xD5, 5, 6, 7, 8]
    assert frames[3].concealed
    assert session.stats.duplicates == 2 and session.stats.lost == 1
    caller.transport.close()


def test_jitter_buffer_drops_late_packets_and_follows_a_new_ssrc() -> None:
    stats = RtpStats()
    buffer = JitterBuffer(stats, depth=2)

    def push(seq: int, ssrc: int = 1) -> list[int | str]:
        out = buffer.push(RtpPacket(0, 0, seq & 0xFFFF, 0, ssrc, b""))
        return [f"gap{i.count}" if isinstance(i, Gap) else i.sequence_number for i in out]

    assert push(65534) == [65534]
    assert push(1) == []  # 65535 and 0 missing
    assert push(2) == []
    assert push(3) == ["gap2", 1, 2, 3]  # the sequence number wrapped
    assert push(0) == [] and stats.late == 1
    assert push(500, ssrc=2) == [500] and stats.ssrc_changes == 1
    assert push(501, ssrc=2) == [501]


async def test_the_gap_timer_releases_packets_behind_a_loss(session: RtpSession) -> None:
    caller = await peer()
    session.start(caller.address, "PCMU", None)
    caller.transport.sendto(audio_packet(10), session.local_address)
    caller.transport.sendto(audio_packet(12), session.local_address)
    frames = [await session.read() for _ in range(3)]
    assert [f.concealed for f in frames] == [False, True, False]
    caller.transport.close()


async def test_pacing_sends_consecutive_sequence_and_timestamps(session: RtpSession) -> None:
    callee = await peer()
    # Queued first: the sender sends the first slot the moment the session starts.
    session.write(tone(160 * 3))
    session.start(callee.address, "PCMU", 101)
    packets = [await callee.packets.get() for _ in range(6)]
    seqs = [p.sequence_number for p in packets]
    assert seqs == [(seqs[0] + i) & 0xFFFF for i in range(6)]
    assert [p.timestamp - packets[0].timestamp for p in packets] == [160 * i for i in range(6)]
    assert [p.marker for p in packets] == [1, 0, 0, 0, 0, 0]
    assert b"".join(p.payload for p in packets[:3]) == g711.encode("PCMU", tone(160 * 3))
    assert packets[3].payload == b"\xff" * 160  # silence while idle
    assert (await session.refresh_stats()).lateness.count >= 6
    callee.transport.close()


async def test_clear_drops_queued_audio(session: RtpSession) -> None:
    session.write(tone(8000))
    session.clear()
    assert session.queued_s == 0


async def test_hold_stops_sending_and_resume_sets_the_marker(session: RtpSession) -> None:
    callee = await peer()
    session.start(callee.address, "PCMU", None)
    first = await callee.packets.get()
    session.update(direction="recvonly")
    await asyncio.sleep(0.1)
    while not callee.packets.empty():
        callee.packets.get_nowait()
    sent = (await session.refresh_stats()).packets_out
    await asyncio.sleep(0.1)
    assert (await session.refresh_stats()).packets_out == sent and callee.packets.empty()
    session.update(direction="sendrecv")
    resumed = await callee.packets.get()
    assert resumed.marker == 1 and first.marker == 1
    assert resumed.timestamp - first.timestamp > 160 * 5  # the clock ran on during hold
    callee.transport.close()


async def test_silent_returns_once_the_callers_rtp_stops_and_fails_once_closed() -> None:
    session = await RtpSession.open(HOST, timeout_s=0.1)
    caller = await peer()
    session.start(caller.address, "PCMU", None)
    caller.transport.sendto(audio_packet(1), session.local_address)
    await session.read()
    await asyncio.wait_for(session.silent(), 5)
    await session.close()
    with pytest.raises(RtpClosed):
        await session.silent()
    caller.transport.close()


async def test_dtmf_both_ways_between_two_sessions() -> None:
    a = await RtpSession.open(HOST)
    b = await RtpSession.open(HOST)
    a.start(b.local_address, "PCMA", 101)
    b.start(a.local_address, "PCMA", 101)
    await a.send_dtmf("7")
    await b.send_dtmf("#")
    assert await b.read_dtmf() == "7"
    assert await a.read_dtmf() == "#"
    await a.close()
    await b.close()


async def test_sent_dtmf_event_shape(session: RtpSession) -> None:
    callee = await peer()
    session.start(callee.address, "PCMU", 101)
    await session.send_dtmf("3", duration_ms=40)
    packets: list[RtpPacket] = []
    while len(packets) < 5:
        p = await callee.packets.get()
        if p.payload_type == 101:
            packets.append(p)
    assert len({p.timestamp for p in packets}) == 1
    assert [p.marker for p in packets] == [1, 0, 0, 0, 0]
    assert [p.payload[1] & 0x80 for p in packets] == [0, 0, 0x80, 0x80, 0x80]
    callee.transport.close()


async def test_strangers_and_malformed_datagrams_are_ignored(session: RtpSession) -> None:
    caller, stranger = await peer(), await peer()
    session.start(caller.address, "PCMU", None)
    stranger.transport.sendto(audio_packet(1, b"\x01" * 160), session.local_address)
    for junk in [b"", b"\x00" * 5, b"\x40" + b"\x00" * 20, audio_packet(1, pt=18)]:
        caller.transport.sendto(junk, session.local_address)
    caller.transport.sendto(audio_packet(1, b"\x02" * 160), session.local_address)
    frame = await session.read()
    assert frame.payload == b"\x02" * 160
    assert session.stats.strangers == 1 and session.stats.malformed >= 3  # some stacks drop b""
    caller.transport.close()
    stranger.transport.close()


async def test_port_range_and_bad_parameters() -> None:
    probe = await RtpSession.open(HOST)
    port = probe.local_address[1]
    await probe.close()
    s = await RtpSession.open(HOST, port_range=(port - port % 2, port - port % 2 + 20))
    assert s.local_address[1] % 2 == 0
    with pytest.raises(ValueError, match="unsupported codec"):
        s.start((HOST, 9), "G729")
    with pytest.raises(ValueError, match="unknown direction"):
        s.update(direction="sideways")
    with pytest.raises(ValueError, match="not negotiated"):
        s.update(dtmf_payload_type=None)
        await s.send_dtmf("1")
    await s.close()


def test_lateness_histogram_percentiles() -> None:
    h = LatenessHistogram()
    for _ in range(999):
        h.record(0.00025)
    h.record(0.2)
    assert h.percentile(99.9) == pytest.approx(0.0003)
    assert h.percentile(100) == pytest.approx(0.2)
    assert h.fraction_within(0.005) == pytest.approx(0.999)


@pytest.mark.skipif(not SIPP_PCAPS.is_dir(), reason="sip-tester (sipp) is not installed")
async def test_sipps_rfc2833_pcap_replayed_over_udp_gives_its_digit(session: RtpSession) -> None:
    caller = await peer()
    session.start(caller.address, "PCMA", 101)
    for raw in read_pcap_udp_payloads(SIPP_PCAPS / "dtmf_2833_pound.pcap"):
        caller.transport.sendto(raw, session.local_address)
    for raw in read_pcap_udp_payloads(SIPP_PCAPS / "dtmf_2833_4.pcap"):
        caller.transport.sendto(raw, session.local_address)
    assert [await session.read_dtmf(), await session.read_dtmf()] == ["#", "4"]
    caller.transport.close()


# -- symmetric RTP (latching, RFC 7362) -----------------------------------------------------


@pytest.mark.parametrize(
    ("connection", "signalling", "latching"),
    [
        ("192.168.1.20", "203.0.113.5", True),  # RFC 1918
        ("10.1.2.3", "10.1.2.3", True),
        ("172.20.0.4", None, True),
        ("100.64.7.1", "203.0.113.5", True),  # RFC 6598, carrier-grade NAT
        ("169.254.3.3", "203.0.113.5", True),  # link-local
        ("fd00::5", "2001:db8::1", True),  # RFC 4193
        ("203.0.113.5", "203.0.113.5", False),  # public, where the INVITE came from
        ("203.0.113.5", "198.51.100.9", True),  # public, another host than the signalling
        ("203.0.113.5", None, False),  # a call we placed: only the address tells
    ],
)
def test_latching_applies_behind_nat(
    connection: str, signalling: str | None, latching: bool
) -> None:
    assert behind_nat(connection, signalling) is latching


SDP_SAID = ("192.168.1.20", 4000)


def test_the_first_source_latches_and_an_attacker_after_it_is_ignored() -> None:
    latch = Latch(SDP_SAID, silence_s=1.0, packets=3)
    caller, attacker = ("198.51.100.9", 4000), ("192.0.2.66", 9)
    assert latch.admit(caller, ssrc=7, now=0.0) and latch.source == caller
    assert not any(latch.admit(attacker, ssrc=7, now=0.01 * i) for i in range(100))
    assert latch.admit(caller, ssrc=7, now=1.5) and latch.source == caller


def test_a_silent_source_is_replaced_only_by_consecutive_packets_of_its_stream() -> None:
    latch, old, new, other = Latch(SDP_SAID, silence_s=1.0, packets=3), ("h", 1), ("h", 2), ("h", 3)
    latch.admit(old, ssrc=7, now=0.0)
    assert not latch.admit(new, ssrc=7, now=0.5)  # the latched source is not silent yet
    assert not any(latch.admit(new, ssrc=8, now=2 + i) for i in range(10))  # another stream
    assert not latch.admit(new, ssrc=7, now=2.0) and not latch.admit(new, ssrc=7, now=2.02)
    assert not latch.admit(other, ssrc=7, now=2.04)  # not in a row: counting starts again
    assert not latch.admit(new, ssrc=7, now=2.06) and not latch.admit(new, ssrc=7, now=2.08)
    assert latch.admit(new, ssrc=7, now=2.1) and latch.source == new
    assert not latch.admit(old, ssrc=7, now=2.12)  # the old binding is gone for good


def test_the_sdp_address_itself_always_latches() -> None:
    latch, first = Latch(SDP_SAID), ("192.0.2.66", 9)
    assert latch.admit(first, ssrc=1, now=0.0)  # won the race to the port
    assert latch.admit(SDP_SAID, ssrc=7, now=0.01) and latch.source == SDP_SAID
    assert not latch.admit(first, ssrc=1, now=0.02)


async def test_behind_nat_rtp_is_latched_and_ours_goes_where_it_comes_from(
    session: RtpSession,
) -> None:
    advertised, caller, attacker = await peer(), await peer(), await peer()
    session.signalling = "192.0.2.1"  # the INVITE came from another host than its SDP
    session.start(advertised.address, "PCMU", 101)
    await advertised.packets.get()  # before any packet came, ours go to the SDP's address
    caller.transport.sendto(audio_packet(1, b"\x01" * 160), session.local_address)
    assert (await session.read()).payload == b"\x01" * 160
    assert session.destination == caller.address and session.latch is not None
    assert (await caller.packets.get()).payload_type == 0  # our RTP reaches the real port
    session.latch.silence_s = 3600  # the caller stays alive, however slow this machine is
    for seq in range(2, 12):
        attacker.transport.sendto(audio_packet(seq, b"\x66" * 160), session.local_address)
    caller.transport.sendto(audio_packet(2, b"\x02" * 160), session.local_address)
    assert (await session.read()).payload == b"\x02" * 160  # none of the attacker's
    assert session.destination == caller.address and session.stats.strangers == 10
    for p in (advertised, caller, attacker):
        p.transport.close()


async def test_without_nat_only_the_sdp_address_is_heard() -> None:
    session = await RtpSession.open(HOST)  # auto
    advertised, other_port = await peer(), await peer()
    session.signalling = HOST  # the SDP's public address is where the INVITE came from
    session.start(advertised.address, "PCMU", None)
    assert session.latch is None
    other_port.transport.sendto(audio_packet(1, b"\x01" * 160), session.local_address)
    advertised.transport.sendto(audio_packet(1, b"\x02" * 160), session.local_address)
    assert (await session.read()).payload == b"\x02" * 160
    assert session.stats.strangers == 1 and session.destination == advertised.address
    await session.close()
    forced = await RtpSession.open(HOST, symmetric_rtp="on")
    forced.start(advertised.address, "PCMU", None)
    assert forced.latch is not None
    await forced.close()
    with pytest.raises(ValueError, match="symmetric_rtp"):
        await RtpSession.open(HOST, symmetric_rtp="sometimes")
    for p in (advertised, other_port):
        p.transport.close()
