"""RTP media for one SIP call: G.711 audio and RFC 4733 DTMF over UDP on asyncio.

The SIP user agent opens a session (``await RtpSession.open(host, port)``), puts its port in
the SDP, and after offer/answer calls ``start(remote, codec, dtmf_payload_type)``; a
re-INVITE calls ``update(...)``. Packets are parsed and built with aiortc's ``RtpPacket``.

Inbound, a jitter buffer puts packets back in sequence order, drops duplicates and packets
that arrive after their turn, and tolerates a new SSRC; audio comes out of ``read()`` as one
frame per packet (16-bit PCM at 8 kHz plus the G.711 bytes as received), DTMF digits out of
``read_dtmf()``. Only packets from the negotiated remote address are accepted.

Outbound, one packet leaves every 20 ms on absolute monotonic deadlines, sent from the
process's pacer thread (``telephony.pacer``) so that a busy event loop does not make it
late; what the loop and that thread share is behind a lock. When the agent is
not speaking the session sends G.711 silence rather than nothing: PBXs and carriers hang up
calls whose RTP stops (Asterisk's ``rtptimeout``, trunk media-inactivity timers), NAT bindings
expire, and sipp's ``-rtp_echo`` has nothing to echo otherwise. So the stream is continuous
and the marker bit is set only where it starts (RFC 3551 4.1), at the start and after hold.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import random
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from aiortc.rtp import RtpPacket, is_rtcp

from telephony import dtmf, g711
from telephony.pacer import PACER, Schedule

logger = logging.getLogger(__name__)

PACKET_S = 0.020
SAMPLES_PER_PACKET = 160
PCM_BYTES_PER_PACKET = SAMPLES_PER_PACKET * 2
DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
#: RFC 3550 appendix A.1: a jump larger than this (or older than MAX_MISORDER) is a restart.
MAX_DROPOUT = 3000
MAX_MISORDER = 100
#: Behind schedule by more than this many packets, the sender skips ahead instead of bursting.
MAX_CATCH_UP = 10
#: A lost packet is concealed with silence for gaps up to this many packets.
MAX_CONCEALED = 5


class RtpClosed(ConnectionError):
    """The session was closed; no more frames will come."""


class LatenessHistogram:
    """How late each outgoing packet left, in 0.1 ms buckets up to 100 ms (then one bucket)."""

    BUCKET_S = 0.0001
    BUCKETS = 1000

    def __init__(self) -> None:
        self.counts = [0] * (self.BUCKETS + 1)
        self.count = 0
        self.max_s = 0.0

    def record(self, late_s: float) -> None:
        late_s = max(0.0, late_s)
        self.counts[min(int(late_s / self.BUCKET_S), self.BUCKETS)] += 1
        self.count += 1
        self.max_s = max(self.max_s, late_s)

    def percentile(self, p: float) -> float:
        """Upper edge (seconds) of the bucket holding the ``p``-th percentile (0-100)."""
        if not self.count:
            return 0.0
        rank = math.ceil(p / 100 * self.count - 1e-9)
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank and n:
                return self.max_s if i == self.BUCKETS else (i + 1) * self.BUCKET_S
        return self.max_s

    def fraction_within(self, limit_s: float) -> float:
        """Share of packets that left at most ``limit_s`` late (bucket resolution)."""
        if not self.count:
            return 1.0
        return sum(self.counts[: int(limit_s / self.BUCKET_S)]) / self.count


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
    #: Outgoing slots skipped after the machine stalled past MAX_CATCH_UP packets.
    skipped: int = 0
    lateness: LatenessHistogram = field(default_factory=LatenessHistogram)


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
    ) -> None:
        self._transport = transport
        #: The pacer thread sends on the socket itself: asyncio's transport is the loop's.
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
        self._out = bytearray()
        #: Held by the pacer thread while it sends a slot, and by the loop to change what
        #: that reads: the audio queued, and whether the socket is still open.
        self._lock = threading.Lock()
        self._room = asyncio.Event()
        #: ``wait_queued_below``'s threshold while it waits (the pacer sets ``_room``).
        self._room_below: float | None = None
        self._dtmf_out: deque[tuple[list[dtmf.TelephoneEvent], asyncio.Future[None]]] = deque()
        self._ssrc = random.getrandbits(32)
        self._seq = random.getrandbits(16)
        self._ts0 = random.getrandbits(32)
        self._marker = True
        self._event_ts: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._schedule: Schedule | None = None
        self._last_slot = -1
        self._closed = False

    @classmethod
    async def open(
        cls, host: str, port: int = 0, *, port_range: tuple[int, int] | None = None
    ) -> RtpSession:
        """Bind ``host:port`` (0: any free port), or the first free even port in
        ``port_range`` (inclusive); ``OSError`` when none is free."""
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
            session = cls(transport, sock)
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
        if self._schedule is None and not self._closed:
            self._loop = asyncio.get_running_loop()
            self._schedule = PACER.add(self, PACKET_S, MAX_CATCH_UP)

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
            if self.direction in ("recvonly", "inactive") and direction in DIRECTIONS[:2]:
                self._marker = True
            self.direction = direction
        if dtmf_payload_type is not False:
            if dtmf_payload_type is not None and not 96 <= int(dtmf_payload_type) <= 127:
                raise ValueError(
                    f"telephone-event payload type must be 96-127, got {dtmf_payload_type}"
                )
            self.dtmf_payload_type = None if dtmf_payload_type is None else int(dtmf_payload_type)
        if remote is not None:
            self.remote = _address(remote)

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
        if source != self.remote:
            self.stats.strangers += 1
            if source not in self._strangers_seen:
                self._strangers_seen.add(source)
                logger.warning(
                    "RTP from unexpected %s:%d ignored (remote is %s:%d)", *source, *self.remote
                )
            return
        if self.direction in ("sendonly", "inactive"):
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
        self.stats.packets_in += 1
        self._deliver(self._jitter.push(packet))

    def _deliver(self, released: list[RtpPacket | Gap]) -> None:
        for item in released:
            if isinstance(item, Gap):
                silence = bytes([g711.SILENCE[self.codec]]) * SAMPLES_PER_PACKET
                for _ in range(min(item.count, MAX_CONCEALED)):
                    self._put_frame(RtpFrame(0, silence, bytes(PCM_BYTES_PER_PACKET), True))
            elif item.payload_type == self.dtmf_payload_type:
                for digit in self._dtmf_in.feed(item.timestamp, item.payload):
                    logger.info("DTMF %s received", digit)
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
        with self._lock:
            self._out.extend(pcm16_8k)
        self._room.clear()

    @property
    def queued_s(self) -> float:
        return len(self._out) / 2 / 8000

    async def wait_queued_below(self, seconds: float) -> None:
        """Return once less than ``seconds`` of audio waits to be sent (back-pressure)."""
        while self.queued_s >= seconds and not self._closed:
            self._room.clear()
            self._room_below = seconds
            await self._room.wait()

    def clear(self) -> None:
        """Drop the audio not yet sent (barge-in)."""
        with self._lock:
            self._out.clear()
        self._room.set()

    async def send_dtmf(self, digit: str, duration_ms: int = 100) -> None:
        """Send one key press as RFC 4733 events; returns when its end packets are out.
        ``ValueError`` for a bad digit or when no telephone-event was negotiated."""
        if self.dtmf_payload_type is None:
            raise ValueError("telephone-event was not negotiated on this call")
        events = dtmf.event_payloads(digit, duration_ms)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._dtmf_out.append((events, done))
        await done

    def _on_loop(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the session's event loop (from the pacer thread)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback)

    def _settle(self, done: asyncio.Future[None], error: Exception | None = None) -> None:
        def settle() -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        self._on_loop(settle)

    def send_slot(self, slot: int, late_s: float) -> None:
        """Send slot ``slot``'s packet; the pacer thread calls it every 20 ms."""
        with self._lock:
            if not self._closed:
                self._send_slot(slot, late_s)

    def _send_slot(self, slot: int, late_s: float) -> None:
        if slot != self._last_slot + 1 and self._last_slot >= 0:
            self.stats.skipped += slot - self._last_slot - 1
            self._marker = True
        self._last_slot = slot
        timestamp = (self._ts0 + slot * SAMPLES_PER_PACKET) & 0xFFFFFFFF
        sending = self.direction in ("sendrecv", "sendonly") and self.remote is not None
        if self._dtmf_out:
            events, done = self._dtmf_out[0]
            if not sending or self.dtmf_payload_type is None:
                self._dtmf_out.popleft()
                self._settle(done, ValueError("the call is on hold; DTMF not sent"))
                return
            first = self._event_ts is None
            if self._event_ts is None:
                self._event_ts = timestamp
            event = events.pop(0)
            self._send(
                self.dtmf_payload_type, self._event_ts, event.pack(), marker=first, late=late_s
            )
            if not events:
                self._dtmf_out.popleft()
                self._event_ts = None
                self._settle(done)
            return
        chunk = bytes(self._out[:PCM_BYTES_PER_PACKET]).ljust(PCM_BYTES_PER_PACKET, b"\0")
        del self._out[:PCM_BYTES_PER_PACKET]
        below = self._room_below
        if below is not None and self.queued_s < below:
            self._room_below = None
            self._on_loop(self._room.set)
        if not sending:
            return
        marker, self._marker = self._marker, False
        self._send(
            g711.PAYLOAD_TYPES[self.codec],
            timestamp,
            g711.encode(self.codec, chunk),
            marker=marker,
            late=late_s,
        )

    def _send(self, pt: int, timestamp: int, payload: bytes, *, marker: bool, late: float) -> None:
        remote = self.remote
        assert remote is not None
        packet = RtpPacket(pt, int(marker), self._seq, timestamp, self._ssrc, payload)
        self._seq = (self._seq + 1) & 0xFFFF
        try:
            self._socket.sendto(packet.serialize(), remote)
        except OSError as e:  # a full buffer or an unreachable peer: this packet is lost
            logger.debug("RTP packet to %s not sent: %s", remote, e)
            return
        self.stats.packets_out += 1
        self.stats.lateness.record(late)

    async def close(self) -> None:
        """Stop sending, release the port, and end ``read()``/``read_dtmf()``."""
        if self._closed:
            return
        with self._lock:  # no packet is on its way out once this is set
            self._closed = True
        if self._gap_timer is not None:
            self._gap_timer.cancel()
        if self._schedule is not None:
            PACER.remove(self._schedule)
        for _, done in self._dtmf_out:
            if not done.done():
                done.set_exception(RtpClosed("the RTP session is closed"))
        self._dtmf_out.clear()
        self._room.set()
        self._transport.close()
        self._frames.put_nowait(None)
        self._digits.put_nowait(None)
