"""RTP media for one SIP call: G.711 audio and RFC 4733 DTMF over UDP on asyncio.

The SIP user agent opens a session (``await RtpSession.open(host, port)``), puts its port in
the SDP, and after offer/answer calls ``start(remote, codec, dtmf_payload_type)``; a
re-INVITE calls ``update(...)``. Packets are parsed and built with aiortc's ``RtpPacket``.

Inbound, a jitter buffer puts packets back in sequence order, drops duplicates and packets
that arrive after their turn, and tolerates a new SSRC; audio comes out of ``read()`` as one
frame per packet (16-bit PCM at 8 kHz plus the G.711 bytes as received), DTMF digits out of
``read_dtmf()``. Only packets from the negotiated remote address are accepted, unless the
caller is behind NAT: then the session latches (symmetric RTP, RFC 7362) to where the
caller's RTP really comes from, and sends there too (see ``Latch``). A caller whose
network vanished sends neither RTP nor a BYE: ``silent()`` returns once its RTP has stopped
for ``timeout_s`` while the call is not on hold, so that the call can be ended.

Outbound, one packet leaves every 20 ms on absolute monotonic deadlines, sent by the
worker's RTP sender process (``telephony.rtp.sender``) on a copy of the session's socket, so
that nothing the worker's interpreter does makes it late; ``write`` hands it the agent's
audio. When the agent is not speaking the session sends G.711 silence rather than nothing:
PBXs and carriers hang up calls whose RTP stops (Asterisk's ``rtptimeout``, trunk
media-inactivity timers), NAT bindings expire, and sipp's ``-rtp_echo`` has nothing to echo
otherwise. So the stream is continuous and the marker bit is set only where it starts (RFC
3551 4.1), at the start and after hold.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiortc.rtp import RtpPacket, is_rtcp

from telephony.rtp import dtmf, g711
from telephony.rtp.sender import (
    AUDIO_CHUNK,
    PACKET_S,
    PCM_BYTES_PER_PACKET,
    SAMPLES_PER_PACKET,
    SENDER,
    LatenessHistogram,
    RtpSenderError,
    SenderStats,
    StreamConfig,
)

logger = logging.getLogger(__name__)

DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
#: RFC 3550 appendix A.1: a jump larger than this (or older than MAX_MISORDER) is a restart.
MAX_DROPOUT = 3000
MAX_MISORDER = 100
#: A lost packet is concealed with silence for gaps up to this many packets.
MAX_CONCEALED = 5
#: ``symmetric_rtp``: latch when the caller looks to be behind NAT, always, or never.
SYMMETRIC_RTP = ("auto", "on", "off")
#: Connection addresses a caller behind NAT puts in its SDP, which nobody outside its own
#: network can send to: RFC 1918, RFC 6598 (carrier-grade NAT), link-local (RFC 3927,
#: RFC 4291), and IPv6 unique local addresses (RFC 4193).
NAT_NETWORKS = tuple(
    ipaddress.ip_network(net)
    for net in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "fc00::/7",
        "fe80::/10",
    )
)
#: A latched source silent this long may be replaced (a NAT binding that changed mid-call)...
RELATCH_SILENCE_S = 1.0
#: ...by a new source that sends this many valid packets in a row.
RELATCH_PACKETS = 5
#: The caller's RTP stopped this long (not on hold): its network is gone (``silent``).
TIMEOUT_S = 30.0


class RtpClosed(ConnectionError):
    """The session was closed; no more frames will come."""


@dataclass
class RtpStats:
    packets_in: int = 0
    packets_out: int = 0
    lost: int = 0
    late: int = 0
    duplicates: int = 0
    malformed: int = 0
    strangers: int = 0
    ssrc_changes: int = 0
    #: Inbound frames dropped because nobody was reading.
    overflow: int = 0
    #: The outgoing side, as the sender process last reported it (``refresh_stats``).
    skipped: int = 0
    underruns: int = 0
    lateness: LatenessHistogram = field(default_factory=LatenessHistogram)

    def take(self, sent: SenderStats) -> None:
        """The sender's counters of the outgoing side in place of the last ones."""
        self.packets_out, self.skipped = sent.packets_out, sent.skipped
        self.underruns, self.lateness = sent.underruns, sent.lateness


@dataclass(frozen=True)
class Gap:
    """Packets that never came (or came too late) between two released ones."""

    count: int


class JitterBuffer:
    """Reorders one stream by sequence number, holding at most ``depth`` packets.

    aiortc's ``JitterBuffer`` waits for a whole window after a loss before moving on (it is
    built for video frames); a phone call must not stall, so here a gap is skipped as soon as
    ``depth`` later packets are waiting, or when the session's gap timer calls ``skip_gap``.
    """

    def __init__(self, stats: RtpStats, depth: int = 3) -> None:
        self.depth = depth
        self._stats = stats
        self._ssrc: int | None = None
        self._next = 0  # extended sequence number released next
        self._highest = 0
        self._pending: dict[int, RtpPacket] = {}
        self._released: deque[int] = deque(maxlen=128)
        self._restart_candidate: int | None = None

    @property
    def waiting(self) -> bool:
        """True while packets wait behind a missing one."""
        return bool(self._pending)

    def push(self, packet: RtpPacket) -> list[RtpPacket | Gap]:
        out: list[RtpPacket | Gap] = []
        seq = packet.sequence_number
        if packet.ssrc != self._ssrc:
            if self._ssrc is not None:
                self._stats.ssrc_changes += 1
                out += self.flush()
            self._reset(packet.ssrc, seq)
        delta = ((seq - (self._highest & 0xFFFF) + 0x8000) & 0xFFFF) - 0x8000
        ext = self._highest + delta
        if delta > MAX_DROPOUT or ext < self._next - MAX_MISORDER:
            if self._restart_candidate != seq:
                self._restart_candidate = (seq + 1) & 0xFFFF
                self._stats.late += 1
                return out
            out += self.flush()
            self._reset(packet.ssrc, seq)
            ext = seq
        self._restart_candidate = None
        if ext < self._next or ext in self._pending:
            if ext in self._pending or ext in self._released:
                self._stats.duplicates += 1
            else:
                self._stats.late += 1
            return out
        self._pending[ext] = packet
        self._highest = max(self._highest, ext)
        out += self._release()
        while len(self._pending) > self.depth:
            out += self.skip_gap()
        return out

    def skip_gap(self) -> list[RtpPacket | Gap]:
        """Give up on the missing packets at the head and release what follows them."""
        if not self._pending:
            return []
        first = min(self._pending)
        missing = first - self._next
        self._stats.lost += missing
        self._next = first
        return [Gap(missing), *self._release()]

    def flush(self) -> list[RtpPacket | Gap]:
        out: list[RtpPacket | Gap] = []
        while self._pending:
            out += self.skip_gap()
        return out

    def _reset(self, ssrc: int, seq: int) -> None:
        self._ssrc = ssrc
        self._next = self._highest = seq
        self._pending.clear()
        self._released.clear()

    def _release(self) -> list[RtpPacket | Gap]:
        out: list[RtpPacket | Gap] = []
        while self._next in self._pending:
            out.append(self._pending.pop(self._next))
            self._released.append(self._next)
            self._next += 1
        return out


@dataclass(frozen=True)
class RtpFrame:
    """One packet's audio: ``payload`` as received (G.711), ``pcm`` 16-bit 8 kHz."""

    timestamp: int
    payload: bytes
    pcm: bytes
    #: Silence standing in for a lost packet.
    concealed: bool = False


def _address(addr: tuple[str, int]) -> tuple[str, int]:
    return (str(ipaddress.ip_address(addr[0])), int(addr[1]))


def behind_nat(connection: str, signalling: str | None) -> bool:
    """Whether the SDP's connection address is likely not where the caller's RTP comes
    from: a private address (``NAT_NETWORKS``), or another host than the one the SIP
    request came from (``signalling``; None when unknown, as for calls we place)."""
    address = ipaddress.ip_address(connection)
    if any(address in net for net in NAT_NETWORKS):
        return True
    return signalling is not None and address != ipaddress.ip_address(signalling)


class Latch:
    """Where the caller's RTP comes from, learnt from the packets (RFC 7362 latching).

    The first valid packet (RTP version 2, a negotiated payload type) from any source
    latches, and so does one from the SDP's own address, which is what the caller said.
    Packets from anywhere else are then ignored, so that someone spraying packets at our
    port cannot take over a stream that flows and hear the agent. Only after the latched
    source has been silent for ``silence_s`` (its NAT binding changed) does a new source
    latch, once it has sent ``packets`` valid packets in a row of the latched stream's SSRC,
    which a phone keeps across a rebinding and a blind attacker does not know. Before the
    first packet nothing protects the stream (RFC 7362 section 5): the port is random and
    the window short.
    """

    def __init__(
        self,
        advertised: tuple[str, int],
        silence_s: float = RELATCH_SILENCE_S,
        packets: int = RELATCH_PACKETS,
    ) -> None:
        self.advertised, self.silence_s, self.packets = advertised, silence_s, packets
        self.source: tuple[str, int] | None = None
        self.ssrc: int | None = None
        self._heard = 0.0  # when the latched source last sent, monotonic
        self._candidate: tuple[str, int] | None = None
        self._count = 0

    def admit(self, source: tuple[str, int], ssrc: int, now: float) -> bool:
        """Whether a valid packet from ``source`` received at ``now`` is the caller's;
        latches to it when it is the first, or replaces a source that went silent."""
        if self.source is None or source in (self.source, self.advertised):
            self._latch(source, ssrc, now)
            return True
        if ssrc != self.ssrc or now - self._heard < self.silence_s:
            self._candidate = None
            return False
        if source != self._candidate:
            self._candidate, self._count = source, 0
        self._count += 1
        if self._count < self.packets:
            return False
        self._latch(source, ssrc, now)
        return True

    def _latch(self, source: tuple[str, int], ssrc: int, now: float) -> None:
        self.source, self.ssrc, self._heard, self._candidate = source, ssrc, now, None


class _Protocol(asyncio.DatagramProtocol):
    session: RtpSession | None = None

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.session is not None:
            self.session._received(data, addr)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable while the peer is not listening yet: not fatal for RTP.
        logger.debug("rtp socket error: %s", exc)


class RtpSession:
    """One call's RTP stream; see the module docstring."""

    def __init__(
        self,
        transport: asyncio.DatagramTransport,
        sock: socket.socket,
        max_queued_frames: int = 50,
        symmetric_rtp: str = "auto",
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.symmetric_rtp = symmetric_rtp
        self.timeout_s = timeout_s
        #: The host the call's INVITE came from, set before ``start`` (None: unknown, as
        #: for calls we place); an SDP address elsewhere means NAT.
        self.signalling: str | None = None
        #: Where the caller's RTP comes from, when latching applies to this call.
        self.latch: Latch | None = None
        self._transport = transport
        #: Handed to the sender process, which sends on its own copy of it.
        self._socket = sock
        self.stats = RtpStats()
        self.remote: tuple[str, int] | None = None
        self.codec = "PCMU"
        self.dtmf_payload_type: int | None = None
        self.direction = "sendrecv"
        self.gap_timeout_s = 3 * PACKET_S
        self._jitter = JitterBuffer(self.stats)
        self._dtmf_in = dtmf.DtmfReceiver()
        self._frames: asyncio.Queue[RtpFrame | None] = asyncio.Queue()
        self._digits: asyncio.Queue[str | None] = asyncio.Queue()
        self._max_queued = max_queued_frames
        self._gap_timer: asyncio.TimerHandle | None = None
        self._strangers_seen: set[tuple[str, int]] = set()
        #: When the caller's RTP last came, or the media started or went on or off hold.
        self._heard = time.monotonic()
        #: Agent audio written before ``start``: handed to the sender when it starts.
        self._unsent = bytearray()
        #: When the audio handed to the sender will have been sent (monotonic), as both
        #: sides count it: a 20 ms slot per 320 bytes from when it was written.
        self._queued_until = 0.0
        self._ssrc = random.getrandbits(32)
        self._seq0 = random.getrandbits(16)
        self._ts0 = random.getrandbits(32)
        #: The stream's id at the sender, once started.
        self._stream: int | None = None
        self._closed = False

    @classmethod
    async def open(
        cls,
        host: str,
        port: int = 0,
        *,
        port_range: tuple[int, int] | None = None,
        symmetric_rtp: str = "auto",
        timeout_s: float = TIMEOUT_S,
    ) -> RtpSession:
        """Bind ``host:port`` (0: any free port), or the first free even port in
        ``port_range`` (inclusive); ``OSError`` when none is free. ``symmetric_rtp``: latch
        to the caller's real RTP source when it looks to be behind NAT, always, or never.
        ``timeout_s``: how long the caller's RTP may stop before ``silent()`` returns."""
        if symmetric_rtp not in SYMMETRIC_RTP:
            raise ValueError(f"symmetric_rtp must be one of {SYMMETRIC_RTP}, got {symmetric_rtp!r}")
        loop = asyncio.get_running_loop()
        ports = (
            [port]
            if port_range is None
            else list(range(port_range[0] + port_range[0] % 2, port_range[1] + 1, 2))
        )
        error: OSError | None = None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        for candidate in ports:
            sock = socket.socket(family, socket.SOCK_DGRAM)
            try:
                sock.bind((host, candidate))
                sock.setblocking(False)
                transport, protocol = await loop.create_datagram_endpoint(_Protocol, sock=sock)
            except OSError as e:
                sock.close()
                error = e
                continue
            session = cls(transport, sock, symmetric_rtp=symmetric_rtp, timeout_s=timeout_s)
            protocol.session = session
            return session
        raise OSError(f"no free RTP port on {host} in {port_range or port}: {error}")

    @property
    def local_address(self) -> tuple[str, int]:
        host, port = self._transport.get_extra_info("sockname")[:2]
        return (host, port)

    def start(
        self,
        remote: tuple[str, int],
        codec: str = "PCMU",
        dtmf_payload_type: int | None = 101,
        direction: str = "sendrecv",
    ) -> None:
        """Begin the call's media with the negotiated parameters; starts the 20 ms sender."""
        self.update(
            remote=remote, codec=codec, dtmf_payload_type=dtmf_payload_type, direction=direction
        )
        if self._stream is None and not self._closed:
            now = self._heard = time.monotonic()
            unsent, self._unsent = bytes(self._unsent), bytearray()
            first, rest = unsent[:AUDIO_CHUNK], unsent[AUDIO_CHUNK:]
            self._stream = SENDER.open(self._socket, self._config(), now, first)
            self._queued_until = now + len(first) / 2 / 8000
            if rest:
                self.write(rest)

    def update(
        self,
        *,
        remote: tuple[str, int] | None = None,
        codec: str | None = None,
        dtmf_payload_type: int | None | bool = False,
        direction: str | None = None,
    ) -> None:
        """Apply a re-INVITE's answer (only the arguments given change;
        ``dtmf_payload_type=None`` turns DTMF events off)."""
        if codec is not None:
            self.codec = g711.check_codec(codec)
        if direction is not None:
            if direction not in DIRECTIONS:
                raise ValueError(f"unknown direction {direction!r}; expected one of {DIRECTIONS}")
            if direction != self.direction:
                self._heard = time.monotonic()  # the silence of a hold does not count
            self.direction = direction
        if dtmf_payload_type is not False:
            if dtmf_payload_type is not None and not 96 <= int(dtmf_payload_type) <= 127:
                raise ValueError(
                    f"telephone-event payload type must be 96-127, got {dtmf_payload_type}"
                )
            self.dtmf_payload_type = None if dtmf_payload_type is None else int(dtmf_payload_type)
        if remote is not None:
            self.remote = _address(remote)
            latching = self.symmetric_rtp == "on" or (
                self.symmetric_rtp == "auto" and behind_nat(self.remote[0], self.signalling)
            )
            self.latch = Latch(self.remote) if latching else None  # learnt anew
        if self._stream is not None:
            SENDER.update(self._stream, self._config())

    @property
    def destination(self) -> tuple[str, int] | None:
        """Where our RTP goes: the latched source, else the SDP's address."""
        if self.latch is not None and self.latch.source is not None:
            return self.latch.source
        return self.remote

    def _config(self) -> StreamConfig:
        return StreamConfig(
            self.destination,
            self.codec,
            self.dtmf_payload_type,
            self.direction,
            self._ssrc,
            self._seq0,
            self._ts0,
        )

    # --- inbound ---------------------------------------------------------------------

    async def read(self) -> RtpFrame:
        """The next audio frame in sequence order; ``RtpClosed`` once the session closed."""
        frame = await self._frames.get()
        if frame is None:
            self._frames.put_nowait(None)
            raise RtpClosed("the RTP session is closed")
        return frame

    async def read_dtmf(self) -> str:
        """The next DTMF digit the caller pressed; ``RtpClosed`` once the session closed."""
        digit = await self._digits.get()
        if digit is None:
            self._digits.put_nowait(None)
            raise RtpClosed("the RTP session is closed")
        return digit

    async def __aiter__(self) -> AsyncIterator[RtpFrame]:
        while True:
            try:
                yield await self.read()
            except RtpClosed:
                return

    def _received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self._closed or self.remote is None:
            return
        source = _address(addr)
        if self.latch is None and source != self.remote:
            self._stranger(source)
            return
        try:
            if is_rtcp(data):
                raise ValueError("RTCP on the RTP port")
            packet = RtpPacket.parse(data)
        except ValueError as e:
            self.stats.malformed += 1
            logger.debug("malformed RTP datagram from %s:%d ignored: %s", *source, e)
            return
        if packet.payload_type not in (g711.PAYLOAD_TYPES[self.codec], self.dtmf_payload_type):
            self.stats.malformed += 1
            logger.debug("RTP payload type %d not negotiated; ignored", packet.payload_type)
            return
        if self.latch is not None:
            latched = self.latch.source
            if not self.latch.admit(source, packet.ssrc, time.monotonic()):
                self._stranger(source)
                return
            if source != latched:
                logger.info("RTP latched to %s:%d (SDP said %s:%d)", *source, *self.remote)
                if self._stream is not None:
                    SENDER.update(self._stream, self._config())
        self._heard = time.monotonic()
        if self.direction in ("sendonly", "inactive"):
            return
        self.stats.packets_in += 1
        self._deliver(self._jitter.push(packet))

    async def silent(self) -> None:
        """Return once no RTP has come from the caller for ``timeout_s`` while it should
        (``sendrecv``: on hold either side may send nothing, RFC 3264 section 8.4);
        ``RtpClosed`` once the session closed."""
        while not self._closed:
            left = self._heard + self.timeout_s - time.monotonic()
            if self.direction != "sendrecv":
                left = self.timeout_s  # look again: the hold may end
            elif left <= 0:
                return
            await asyncio.sleep(left)
        raise RtpClosed("the RTP session is closed")

    def _stranger(self, source: tuple[str, int]) -> None:
        self.stats.strangers += 1
        if source not in self._strangers_seen:
            self._strangers_seen.add(source)
            expected = self.destination
            assert expected is not None
            logger.warning(
                "RTP from unexpected %s:%d ignored (remote is %s:%d)", *source, *expected
            )

    def _deliver(self, released: list[RtpPacket | Gap]) -> None:
        for item in released:
            if isinstance(item, Gap):
                silence = bytes([g711.SILENCE[self.codec]]) * SAMPLES_PER_PACKET
                for _ in range(min(item.count, MAX_CONCEALED)):
                    self._put_frame(RtpFrame(0, silence, bytes(PCM_BYTES_PER_PACKET), True))
            elif item.payload_type == self.dtmf_payload_type:
                for digit in self._dtmf_in.feed(item.timestamp, item.payload):
                    # Never the digit itself: keyed digits may be card data (rule C11).
                    logger.debug("DTMF key received")
                    self._digits.put_nowait(digit)
            else:
                pcm = g711.decode(self.codec, item.payload)
                self._put_frame(RtpFrame(item.timestamp, item.payload, pcm))
        if self._gap_timer is not None:
            self._gap_timer.cancel()
            self._gap_timer = None
        if self._jitter.waiting:
            loop = asyncio.get_running_loop()
            self._gap_timer = loop.call_later(self.gap_timeout_s, self._gap_expired)

    def _gap_expired(self) -> None:
        self._gap_timer = None
        if not self._closed:
            self._deliver(self._jitter.skip_gap())

    def _put_frame(self, frame: RtpFrame) -> None:
        if self._frames.qsize() >= self._max_queued:
            self._frames.get_nowait()
            self.stats.overflow += 1
        self._frames.put_nowait(frame)

    # --- outbound --------------------------------------------------------------------

    def write(self, pcm16_8k: bytes) -> None:
        """Queue agent audio (16-bit little-endian mono at 8 kHz) to be sent in order."""
        if self._closed:
            return
        if self._stream is None:
            self._unsent.extend(pcm16_8k)
            return
        SENDER.write(self._stream, pcm16_8k)
        start = max(self._queued_until, time.monotonic())
        self._queued_until = start + len(pcm16_8k) / 2 / 8000

    @property
    def queued_s(self) -> float:
        """Audio written and not yet sent, in seconds."""
        if self._stream is None:
            return len(self._unsent) / 2 / 8000
        return max(0.0, self._queued_until - time.monotonic())

    async def wait_queued_below(self, seconds: float) -> None:
        """Return once less than ``seconds`` of audio waits to be sent (back-pressure)."""
        while (excess := self.queued_s - seconds) >= 0 and not self._closed:
            await asyncio.sleep(excess + 0.001)

    def clear(self) -> None:
        """Drop the audio not yet sent (barge-in)."""
        self._unsent.clear()
        self._queued_until = 0.0
        if self._stream is not None:
            SENDER.clear(self._stream)

    async def send_dtmf(self, digit: str, duration_ms: int = 100) -> None:
        """Send one key press as RFC 4733 events; returns when its end packets are out.
        ``ValueError`` for a bad digit or when no telephone-event was negotiated, or the
        call is on hold."""
        if self.dtmf_payload_type is None:
            raise ValueError("telephone-event was not negotiated on this call")
        dtmf.event_payloads(digit, duration_ms)  # a bad digit or duration fails here
        if self._stream is None or self._closed:
            raise RtpClosed("the RTP session is not sending")
        refused = await SENDER.send_dtmf(self._stream, digit, duration_ms)
        if refused == "hold":
            raise ValueError("the call is on hold; DTMF not sent")
        if refused is not None:
            raise RtpClosed("the RTP session is closed")

    async def refresh_stats(self) -> RtpStats:
        """``stats`` with the outgoing side as the sender counts it now."""
        if self._stream is not None and not self._closed:
            self.stats.take(await SENDER.stats(self._stream))
        return self.stats

    async def close(self) -> None:
        """Stop sending, release the port, and end ``read()``/``read_dtmf()``."""
        if self._closed:
            return
        self._closed = True
        if self._gap_timer is not None:
            self._gap_timer.cancel()
        self._transport.close()
        self._frames.put_nowait(None)
        self._digits.put_nowait(None)
        if self._stream is not None:
            try:
                final = await SENDER.close(self._stream)
            except RtpSenderError as e:
                logger.warning("the RTP sender's last counters were lost: %s", e)
                final = None
            if final is not None:
                self.stats.take(final)
