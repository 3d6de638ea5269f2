"""The RTP sender: a small process of its own that sends every call's packets on time.

A worker process carries many calls' pipelines, and whatever holds its interpreter holds
anything else in it that wants to run: the cyclic garbage collector (a full collection
takes tens of milliseconds with twenty calls up), a long call set-up, a burst of frames.
Measured with ``bench capacity``, a thread sending the packets inside the worker left 1 in
300 of them more than 5 ms late at eight calls on a core, most of them behind a
collection or behind the kernel giving the core to the worker's other threads first.

So the worker hands each call's audio to this process (``RtpSession.write``) and the
process keeps the 20 ms schedule: one thread, a few thousand objects, waiting in
``select`` for the earliest deadline (``telephony.rtp.pacer``) or a message from the worker.
It asks the kernel for real-time priority (``SCHED_FIFO``, as Asterisk's ``-p`` and
FreeSWITCH's ``-rp`` do for their media timers), so a packet's deadline takes the core
from any ordinary thread at once; without the privilege (``CAP_SYS_NICE``) it runs as an
ordinary process and says so.

Messages go over a ``SOCK_SEQPACKET`` pair (one pickled tuple each, the call's RTP
socket passed along with ``SCM_RIGHTS``); the worker keeps reading on its own copy of
that socket. Barge-in clears the audio queued here at once, so the worker may keep a
little more audio ahead of the wire. If the process dies the worker starts another and
hands it every call again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import logging
import math
import os
import pickle
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from telephony.rtp import dtmf, g711
from telephony.rtp.pacer import Pacer, Schedule

logger = logging.getLogger(__name__)

PACKET_S = 0.020
SAMPLES_PER_PACKET = 160
PCM_BYTES_PER_PACKET = SAMPLES_PER_PACKET * 2
#: Behind schedule by more than this many packets, a stream skips ahead instead of bursting.
MAX_CATCH_UP = 10
#: Audio that resumes within this many slots of running dry was late, not a pause: the
#: silent slots between count as underruns.
MAX_UNDERRUN_SLOTS = 10
#: The sender's real-time priority (SCHED_FIFO 1-99): the lowest, above every ordinary task.
REALTIME_PRIORITY = 1
#: Largest message either way (the worker cuts longer audio into several).
MAX_MESSAGE = 65536
AUDIO_CHUNK = 32000
#: A worker whose sender has not taken a message for this long starts another.
SEND_TIMEOUT_S = 2.0
#: How long a worker waits for the sender's answer (statistics, a DTMF key sent).
REPLY_TIMEOUT_S = 5.0
#: Messages handled per wake-up before the due slots are looked at again.
MESSAGES_PER_WAKE = 64


class RtpSenderError(ConnectionError):
    """The sender process did not answer (it died, or the stream is gone)."""


class LatenessHistogram:
    """How late each outgoing packet left, in 0.1 ms buckets up to 100 ms (then one bucket)."""

    BUCKET_S = 0.0001
    BUCKETS = 1000

    def __init__(self) -> None:
        self.counts = [0] * (self.BUCKETS + 1)
        self.count = 0
        self.max_s = 0.0

    @classmethod
    def from_counts(cls, counts: Sequence[int], max_s: float) -> LatenessHistogram:
        histogram = cls()
        histogram.counts = list(counts)
        histogram.count = sum(counts)
        histogram.max_s = max_s
        return histogram

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
class SenderStats:
    """One stream's outgoing side, as the sender counts it."""

    packets_out: int = 0
    #: Slots skipped after the machine stalled past MAX_CATCH_UP packets.
    skipped: int = 0
    #: Slots sent as silence inside the agent's speech: the worker's audio came too late.
    underruns: int = 0
    lateness: LatenessHistogram = field(default_factory=LatenessHistogram)

    def dump(self) -> tuple[int, int, int, list[int], float]:
        h = self.lateness
        return (self.packets_out, self.skipped, self.underruns, h.counts, h.max_s)

    @classmethod
    def load(cls, data: tuple[int, int, int, list[int], float]) -> SenderStats:
        packets_out, skipped, underruns, counts, max_s = data
        return cls(packets_out, skipped, underruns, LatenessHistogram.from_counts(counts, max_s))


@dataclass(frozen=True)
class StreamConfig:
    """What one outgoing stream is sent with (the offer/answer's outcome and our RTP ids)."""

    remote: tuple[str, int] | None
    codec: str
    dtmf_payload_type: int | None
    direction: str
    ssrc: int
    seq: int
    ts0: int

    @property
    def sending(self) -> bool:
        return self.direction in ("sendrecv", "sendonly") and self.remote is not None


# --- in the sender process ----------------------------------------------------------------


class OutboundStream:
    """One call's outgoing packets: its audio queue, DTMF keys, RTP counters."""

    def __init__(
        self, sock: socket.socket, config: StreamConfig, reply: Callable[[tuple[Any, ...]], None]
    ) -> None:
        self.sock = sock
        self.config = config
        self.stats = SenderStats()
        self._reply = reply
        self._audio = bytearray()
        self._dtmf: deque[tuple[int, list[dtmf.TelephoneEvent]]] = deque()
        self._seq = config.seq
        self._marker = True
        self._event_ts: int | None = None
        self._last_slot = -1
        self._speaking = False
        #: The first silent slot since the agent's audio ran dry mid-packet-stream.
        self._dry_since: int | None = None

    def update(self, config: StreamConfig) -> None:
        if not self.config.sending and config.sending:
            self._marker = True  # resumed after hold (RFC 3551 4.1)
        self.config = config

    def write(self, pcm: bytes, next_slot: int) -> None:
        if self._dry_since is not None:
            if next_slot - self._dry_since <= MAX_UNDERRUN_SLOTS:
                self.stats.underruns += next_slot - self._dry_since
            self._dry_since = None
        self._audio.extend(pcm)

    def clear(self) -> None:
        """Barge-in: what was queued is dropped; silence from here is no underrun."""
        self._audio.clear()
        self._speaking = False
        self._dry_since = None

    def send_dtmf(self, request: int, digit: str, duration_ms: int) -> None:
        self._dtmf.append((request, dtmf.event_payloads(digit, duration_ms)))

    def close(self) -> None:
        for request, _ in self._dtmf:
            self._reply(("dtmf", request, "closed"))
        self._dtmf.clear()
        self.sock.close()

    def send_slot(self, slot: int, late_s: float) -> None:
        """Slot ``slot``'s packet: a DTMF event if a key is queued, else audio or silence."""
        if slot != self._last_slot + 1 and self._last_slot >= 0:
            self.stats.skipped += slot - self._last_slot - 1
            self._marker = True
        self._last_slot = slot
        config = self.config
        timestamp = (config.ts0 + slot * SAMPLES_PER_PACKET) & 0xFFFFFFFF
        if self._dtmf:
            self._send_event(timestamp, late_s)
            return
        chunk = bytes(self._audio[:PCM_BYTES_PER_PACKET])
        del self._audio[:PCM_BYTES_PER_PACKET]
        if len(chunk) == PCM_BYTES_PER_PACKET:
            self._speaking = True
        else:
            if self._speaking and not chunk:
                self._dry_since = slot  # ran dry: resumed soon, it was late
            self._speaking = False
            chunk = chunk.ljust(PCM_BYTES_PER_PACKET, b"\0")
        if not config.sending:
            return
        payload = g711.encode(config.codec, chunk)
        self._send(g711.PAYLOAD_TYPES[config.codec], timestamp, payload, late_s)

    def _send_event(self, timestamp: int, late_s: float) -> None:
        request, events = self._dtmf[0]
        pt = self.config.dtmf_payload_type
        if not self.config.sending or pt is None:
            self._dtmf.popleft()
            self._reply(("dtmf", request, "hold"))
            return
        first = self._event_ts is None
        if self._event_ts is None:
            self._event_ts = timestamp
        self._marker = first
        self._send(pt, self._event_ts, events.pop(0).pack(), late_s)
        if not events:
            self._dtmf.popleft()
            self._event_ts = None
            self._reply(("dtmf", request, None))

    def _send(self, pt: int, timestamp: int, payload: bytes, late_s: float) -> None:
        config = self.config
        assert config.remote is not None
        marker, self._marker = self._marker, False
        header = struct.pack(
            "!BBHII", 0x80, (0x80 if marker else 0) | pt, self._seq, timestamp, config.ssrc
        )
        self._seq = (self._seq + 1) & 0xFFFF
        try:
            self.sock.sendto(header + payload, config.remote)
        except OSError as e:  # a full buffer or an unreachable peer: this packet is lost
            logger.debug("RTP packet to %s not sent: %s", config.remote, e)
            return
        self.stats.packets_out += 1
        self.stats.lateness.record(late_s)


def take_realtime_priority() -> str | None:
    """SCHED_FIFO for this thread (not inherited by children); why not, when refused."""
    try:
        policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
        os.sched_setscheduler(0, policy, os.sched_param(REALTIME_PRIORITY))
    except AttributeError:
        return "not Linux"
    except OSError as e:
        return f"{e.strerror} (needs CAP_SYS_NICE)"
    return None


class SenderLoop:
    """The sender process's one thread: the worker's messages and the streams' deadlines."""

    def __init__(self, control: socket.socket) -> None:
        control.setblocking(False)
        self._control = control
        self._pacer = Pacer()
        self._streams: dict[int, tuple[OutboundStream, Schedule]] = {}
        self._outbox: deque[bytes] = deque()

    def run(self) -> None:
        """Until the worker closes its end."""
        while True:
            writers = [self._control] if self._outbox else []
            readable, writable, _ = select.select(
                [self._control], writers, [], self._pacer.wait_s()
            )
            self._pacer.run_due()
            if writable:
                self._flush()
            if readable and not self._receive():
                return

    def reply(self, message: tuple[Any, ...]) -> None:
        self._outbox.append(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        self._flush()

    def _flush(self) -> None:
        while self._outbox:
            try:
                self._control.send(self._outbox[0])
            except BlockingIOError:
                return
            self._outbox.popleft()

    def _receive(self) -> bool:
        """Handle what has arrived; False once the worker is gone."""
        for _ in range(MESSAGES_PER_WAKE):
            try:
                data, fds, _, _ = socket.recv_fds(self._control, MAX_MESSAGE, 1)
            except BlockingIOError:
                return True
            except ConnectionError:
                return False
            if not data:
                return False
            try:
                self.handle(pickle.loads(data), fds)
            except Exception:
                logger.exception("a message from the worker could not be handled")
        return True

    def handle(self, message: tuple[Any, ...], fds: Sequence[int] = ()) -> None:
        op, sid, *args = message
        if op == "open":
            config, start, audio = args
            stream = OutboundStream(socket.socket(fileno=fds[0]), config, self.reply)
            stream.write(audio, 0)
            schedule = self._pacer.add(stream, PACKET_S, MAX_CATCH_UP, start)
            self._streams[sid] = (stream, schedule)
            return
        for fd in fds:  # only an open passes a socket
            os.close(fd)
        opened = self._streams.get(sid)
        if opened is None:
            if op in ("stats", "close"):
                self.reply(("stats", args[0], None))
            elif op == "dtmf":
                self.reply(("dtmf", args[0], "closed"))
            return
        stream, schedule = opened
        if op == "audio":
            stream.write(args[0], schedule.slot)
        elif op == "clear":
            stream.clear()
        elif op == "update":
            stream.update(args[0])
        elif op == "dtmf":
            stream.send_dtmf(*args)
        elif op == "stats":
            self.reply(("stats", args[0], stream.stats.dump()))
        elif op == "close":
            self._pacer.remove(schedule)
            del self._streams[sid]
            stream.close()
            self.reply(("stats", args[0], stream.stats.dump()))
        else:
            raise ValueError(f"unknown message {op!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m telephony.rtp.sender FD``: serve the worker on the socket FD."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fd", type=int, help="the worker's end of the control socket")
    args = parser.parse_args(argv)
    # The worker decides when we stop (it closes the socket): a drain's SIGTERM to the
    # process group must not cut its calls' audio.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="rtp-sender %(levelname)s %(message)s")
    control = socket.socket(fileno=args.fd)
    refused = take_realtime_priority()
    gc.collect()
    gc.freeze()  # what is here now lives as long as the process: never scanned again
    loop = SenderLoop(control)
    loop.reply(("ready", None, refused))
    loop.run()
    return 0


# --- in the worker ------------------------------------------------------------------------


@dataclass
class _Opened:
    """A stream as the worker registered it: enough to hand it to a new sender."""

    sock: socket.socket
    config: StreamConfig
    start: float


class RtpSender:
    """The worker's handle on its sender process: started on first use, again if it dies.

    Safe to call from any thread or event loop; answers come back on the loop that asked.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._streams: dict[int, _Opened] = {}
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._ids = itertools.count(1)
        #: Why the sender runs without real-time priority ("" until it has said; None: it has it).
        self.refused: str | None = ""
        self._ready_event = threading.Event()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the process now, not with the first call, and wait until it has said
        whether it has real-time priority (``refused``)."""
        with self._lock:
            if self._control is None:
                self._start()
            ready = self._ready_event
        if not ready.wait(timeout_s):
            raise RtpSenderError(f"the RTP sender did not start in {timeout_s:g} s")

    def open(
        self, sock: socket.socket, config: StreamConfig, start: float, audio: bytes = b""
    ) -> int:
        """Hand ``sock`` to the sender: slot 0 is due at ``start`` and carries the start
        of ``audio`` (at most AUDIO_CHUNK bytes); the stream's id."""
        sid = next(self._ids)
        with self._lock:
            self._send_locked(("open", sid, config, start, audio), [sock.fileno()])
            self._streams[sid] = _Opened(sock, config, start)
        return sid

    def update(self, sid: int, config: StreamConfig) -> None:
        with self._lock:
            opened = self._streams.get(sid)
            if opened is not None:
                opened.config = config
        self._send(("update", sid, config))

    def write(self, sid: int, pcm: bytes) -> None:
        for i in range(0, len(pcm), AUDIO_CHUNK):
            self._send(("audio", sid, pcm[i : i + AUDIO_CHUNK]))

    def clear(self, sid: int) -> None:
        self._send(("clear", sid))

    async def send_dtmf(self, sid: int, digit: str, duration_ms: int) -> str | None:
        """Once the key's packets are out: None, or why not ("hold", "closed")."""
        result: str | None = await self._request("dtmf", sid, digit, duration_ms)
        return result

    async def stats(self, sid: int) -> SenderStats:
        return SenderStats.load(await self._request("stats", sid))

    async def close(self, sid: int) -> SenderStats | None:
        """Stop the stream; its final counters (None if the sender could not give them)."""
        with self._lock:
            if self._streams.pop(sid, None) is None:
                return None
        try:
            return SenderStats.load(await self._request("close", sid))
        except (RtpSenderError, TypeError):
            return None

    async def _request(self, op: str, sid: int, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        request = next(self._ids)
        self._waiting[request] = (loop, future)
        try:
            self._send((op, sid, request, *args))
            return await asyncio.wait_for(future, REPLY_TIMEOUT_S)
        except TimeoutError:
            raise RtpSenderError(f"the RTP sender did not answer {op!r}") from None
        finally:
            self._waiting.pop(request, None)

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._send_locked(message)

    def _send_locked(self, message: tuple[Any, ...], fds: Sequence[int] = ()) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        if self._control is None:
            self._start()
        assert self._control is not None
        try:
            socket.send_fds(self._control, [data], fds) if fds else self._control.send(data)
        except OSError as e:  # dead (EPIPE) or stuck (timeout): another one has it all
            logger.error("the RTP sender did not take a message (%s); starting another", e)
            self._stop_locked()
            self._start()
            assert self._control is not None
            socket.send_fds(self._control, [data], fds) if fds else self._control.send(data)

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "telephony.rtp.sender", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            process_group=0,  # the worker's group signals (drain, Ctrl-C) are not for it
        )
        theirs.close()
        ours.settimeout(SEND_TIMEOUT_S)
        self._control = ours
        self._ready_event = threading.Event()
        threading.Thread(
            target=self._read,
            args=(ours, self._process, self._ready_event),
            name="rtp-sender-replies",
            daemon=True,
        ).start()
        for sid, opened in self._streams.items():
            # A new sequence start: the far end takes the jump for a restarted stream
            # (RFC 3550 A.1), where numbers sent before would be dropped as duplicates.
            config = replace(opened.config, seq=random.getrandbits(16))
            message = pickle.dumps(
                ("open", sid, config, opened.start, b""), pickle.HIGHEST_PROTOCOL
            )
            socket.send_fds(ours, [message], [opened.sock.fileno()])

    def _stop_locked(self) -> None:
        control, process = self._control, self._process
        self._control = self._process = None
        if control is not None:
            with contextlib.suppress(OSError):
                control.shutdown(socket.SHUT_RDWR)  # wakes its replies thread
            control.close()
        if process is not None and process.poll() is None:
            process.kill()

    def _read(
        self, control: socket.socket, process: subprocess.Popen[bytes], ready: threading.Event
    ) -> None:
        """The replies thread of one sender process, until it is gone."""
        while True:
            try:
                data = control.recv(MAX_MESSAGE)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            kind, request, payload = pickle.loads(data)
            if kind == "ready":
                self._ready(payload)
                ready.set()
                continue
            waiting = self._waiting.pop(request, None)
            if waiting is not None:
                loop, future = waiting
                loop.call_soon_threadsafe(_resolve, future, payload)
        with self._lock:
            if self._control is not control:
                return  # replaced or stopped on purpose
            code = process.poll()
            logger.error("the RTP sender process ended (exit %s); starting another", code)
            self._stop_locked()
            if self._streams:
                self._start()

    def _ready(self, refused: str | None) -> None:
        if refused and refused != self.refused:
            logger.warning(
                "the RTP sender runs without real-time priority: %s; its packets may leave "
                "late while the worker's core is busy",
                refused,
            )
        self.refused = refused


def _resolve(future: asyncio.Future[Any], payload: Any) -> None:
    if not future.done():
        future.set_result(payload)


#: The sender every RTP session of this process hands its packets to.
SENDER = RtpSender()


if __name__ == "__main__":
    sys.exit(main())
