"""The callers of ``bench soak``: a seeded plan of calls, each placed by an endpoint of its own.

``churn_plan`` draws the calls (ended by a BYE, RTP stopping before the BYE, abandoned,
cancelled at once); ``Callers`` keeps ``calls`` slots busy placing them, each call its own
``SipEndpoint`` with a small RTP sender of the caller's voice (``_CallerMedia``), and
tallies how each ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import struct
import sys
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from telephony.rtp import g711
from telephony.sip.message import SipRequest, SipResponse

if TYPE_CHECKING:  # the RTP engine and the UA (pipecat's transports) when a soak runs only
    from telephony.sip.call import MediaSession, SipCall
    from telephony.sip.ua import SipEndpoint

#: The ways a call goes, and how often after the first of each (the plan's first calls are
#: one of each kind, so that even a short soak has them all).
KINDS = {
    "bye": "answered, held, ended by the caller's BYE",
    "rtp_stop_bye": "answered, held; the caller's RTP stops, then its BYE a moment later",
    "abandon": "answered, held; the caller's RTP and signalling just stop (no BYE)",
    "cancel": "cancelled before the answer: CANCEL right behind the INVITE",
}
WEIGHTS = {"bye": 0.5, "rtp_stop_bye": 0.2, "abandon": 0.15, "cancel": 0.15}
#: A call is held this long (seconds, uniform), the caller speaking all along; the plan's
#: first calls (one of each kind) up to FIRST_S, before the agent could end them itself.
CALL_S = (2.0, 20.0)
FIRST_S = 6.0
#: RTP stops this long (seconds, uniform) before the BYE: under RTP_TIMEOUT_S.
RTP_STOP_S = (0.5, 3.0)
#: The worker's RTP inactivity timeout for the soak (the default is 30 s).
RTP_TIMEOUT_S = 5.0
#: A refused call (503: the worker still held the place) is tried again after this long.
RETRY_S = 1.0
SIP_HOST = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class PlannedCall:
    """One call of the plan: its kind, how long it is held, how long before its BYE its
    RTP stops (``rtp_stop_bye`` only)."""

    index: int
    kind: str
    hold_s: float
    rtp_stop_s: float

    @property
    def number(self) -> str:
        """The caller's number (its From user): the call's row in the worker's database
        carries it."""
        return f"+1202{self.index % 10_000_000:07d}"


def churn_plan(seed: int) -> Iterator[PlannedCall]:
    """The calls to place, in order, from ``seed``: first one of each kind (shuffled, held
    at most ``FIRST_S``), then kinds drawn by ``WEIGHTS``."""
    rng = random.Random(seed)
    first = list(KINDS)
    rng.shuffle(first)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    index = 0
    while True:
        kind = first[index] if index < len(first) else rng.choices(kinds, weights)[0]
        hold_s = round(rng.uniform(CALL_S[0], FIRST_S if index < len(first) else CALL_S[1]), 2)
        rtp_stop_s = round(rng.uniform(*RTP_STOP_S), 2)
        yield PlannedCall(index, kind, hold_s, rtp_stop_s)
        index += 1


class _CallerMedia:
    """A caller's RTP (the UA's ``MediaSession``): its voice looped, a packet every 20 ms
    from ``start`` until ``stop``; the agent's packets are read and counted."""

    def __init__(self, transport: asyncio.DatagramTransport, audio: bytes) -> None:
        self._transport = transport
        self._audio = audio
        self._sending: asyncio.Task[None] | None = None
        self.remote: tuple[str, int] | None = None
        self.received = 0
        self.closed = asyncio.Event()

    @classmethod
    async def open(cls, host: str, audio: bytes) -> _CallerMedia:
        loop = asyncio.get_running_loop()
        protocol = _Counting()
        transport, _ = await loop.create_datagram_endpoint(lambda: protocol, local_addr=(host, 0))
        media = cls(transport, audio)
        protocol.media = media
        return media

    @property
    def local_address(self) -> tuple[str, int]:
        host, port = self._transport.get_extra_info("sockname")[:2]
        return str(host), int(port)

    def start(
        self, remote: tuple[str, int], codec: str, dtmf_payload_type: int | None, direction: str
    ) -> None:
        self.remote = remote
        audio = self._audio
        if codec != "PCMU":
            audio = g711.encode(codec, g711.decode("PCMU", audio))
        payload_type = 0 if codec == "PCMU" else 8
        self._sending = asyncio.create_task(self._send(audio, payload_type), name="caller-rtp")

    def update(
        self, *, remote: tuple[str, int] | None = None, direction: str | None = None
    ) -> None:
        if remote is not None:
            self.remote = remote

    def stop(self) -> None:
        """The caller's RTP stops (its signalling may go on)."""
        if self._sending is not None:
            self._sending.cancel()

    async def close(self) -> None:
        self.stop()
        if self._sending is not None:
            await asyncio.gather(self._sending, return_exceptions=True)
        self._transport.close()
        self.closed.set()

    async def _send(self, audio: bytes, payload_type: int) -> None:
        loop = asyncio.get_running_loop()
        ssrc, seq, timestamp = random.getrandbits(32), random.getrandbits(16), 0
        frame = 160  # 20 ms of G.711 at 8 kHz
        start = loop.time()
        for slot in range(sys.maxsize):
            delay = start + slot * 0.02 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            offset = slot * frame % len(audio)
            header = struct.pack("!BBHII", 0x80, payload_type, seq, timestamp, ssrc)
            if self.remote is not None:
                self._transport.sendto(header + audio[offset : offset + frame], self.remote)
            seq, timestamp = (seq + 1) & 0xFFFF, (timestamp + frame) & 0xFFFFFFFF


class _Counting(asyncio.DatagramProtocol):
    media: _CallerMedia | None = None

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.media is not None:
            self.media.received += 1


def cancel_at_once(endpoint: SipEndpoint) -> None:
    """Have ``endpoint`` send a CANCEL right behind its next INVITE, in the same turn of the
    loop (RFC 3261 §9.1: the INVITE's Request-URI, top Via, From, To, Call-ID, Route and
    CSeq number). The agent answers at once, so only a CANCEL that arrives with the INVITE
    is before the answer; its 487 (or the 200 that won) is ``invite``'s outcome."""
    layer = endpoint.layer
    send = layer.send

    def send_then_cancel(message: SipRequest | SipResponse, address: tuple[str, int]) -> None:
        send(message, address)
        if not isinstance(message, SipRequest) or message.method != "INVITE":
            return
        setattr(layer, "send", send)  # noqa: B010 (once)
        cancel = SipRequest(method="CANCEL", uri=message.uri)
        cancel.headers.add("Via", message.headers.get_all("Via")[0])
        for name in ("From", "To", "Call-ID", "Route"):
            for value in message.headers.get_all(name):
                cancel.headers.add(name, value)
        cancel.headers.add("CSeq", f"{message.cseq[0]} CANCEL")
        cancel.headers.add("Max-Forwards", "70")
        layer.request(cancel, address).final.add_done_callback(_read_outcome)

    setattr(layer, "send", send_then_cancel)  # noqa: B010 (an instance's, for one INVITE)


def _read_outcome(future: asyncio.Future[SipResponse]) -> None:
    if not future.cancelled():
        future.exception()


async def _refuse(call: SipCall) -> None:
    raise RuntimeError("a soak caller takes no calls")


@dataclasses.dataclass
class Tally:
    """What the callers did and saw."""

    placed: int = 0
    answered: int = 0
    #: CANCELs that ended the INVITE (487); those the answer beat are answered calls
    #: ended "cancel" (the caller BYEs them at once).
    cancelled: int = 0
    #: 503: the worker was still holding the place of a call that had just ended.
    refused: int = 0
    failed: int = 0
    #: Answered calls by how they were ended: bye, rtp_stop_bye, abandon, cancel (the
    #: answer beat the CANCEL: BYE at once), or agent (the agent hung up first).
    ended: Counter[str] = dataclasses.field(default_factory=Counter)
    #: Answered calls: the caller's number, how the call ended.
    numbers: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Agent packets the callers received.
    packets_in: int = 0


class Callers:
    """``slots`` callers placing the plan's calls at the worker's SIP port."""

    def __init__(self, sip_port: int, audio: bytes, plan: Iterator[PlannedCall]) -> None:
        self.uri = f"sip:agent@{SIP_HOST}:{sip_port}"
        self.audio = audio
        self.plan = plan
        self.tally = Tally()
        self.stopping = asyncio.Event()
        self.in_flight = 0

    async def run(self, slots: int) -> None:
        """Call after call in each slot until ``stopping``."""
        await asyncio.gather(*(self._slot() for _ in range(slots)))

    async def warm_up(self, slots: int, hold_s: float) -> None:
        """One call per slot, held ``hold_s`` and ended by a BYE (not counted)."""
        calls = [PlannedCall(-1 - i, "bye", hold_s, 0.0) for i in range(slots)]
        tally, self.tally = self.tally, Tally()
        try:
            await asyncio.gather(*(self.place(call) for call in calls))
        finally:
            self.tally = tally

    async def _slot(self) -> None:
        while not self.stopping.is_set():
            wait_s = await self.place(next(self.plan))
            if wait_s and not self.stopping.is_set():
                await self._wait(None, wait_s)

    async def place(self, plan: PlannedCall) -> float:
        """Place one call and end it as planned; returns how long the slot should wait
        before its next call (the worker still holds an abandoned call's place)."""
        opened: list[_CallerMedia] = []

        async def media(host: str) -> MediaSession:
            session = await _CallerMedia.open(host, self.audio)
            opened.append(session)
            return session

        from telephony.sip.ua import SipEndpoint

        endpoint = SipEndpoint(SIP_HOST, 0, on_call=_refuse, media=media)
        await endpoint.start()
        self.tally.placed += 1
        self.in_flight += 1
        try:
            return await self._call(endpoint, plan, opened)
        finally:
            self.in_flight -= 1
            self.tally.packets_in += sum(m.received for m in opened)
            await endpoint.close()
            for session in opened:
                await session.close()

    async def _call(
        self, endpoint: SipEndpoint, plan: PlannedCall, opened: list[_CallerMedia]
    ) -> float:
        tally = self.tally
        if plan.kind == "cancel":
            cancel_at_once(endpoint)
        result = await endpoint.invite(self.uri, caller=plan.number, ring_timeout=10.0)
        if result.call is None:
            if result.status == 487:
                tally.cancelled += 1
            elif result.status == 503:
                tally.refused += 1
                return RETRY_S
            else:
                tally.failed += 1
            return 0.0
        call, caller_media = result.call, opened[0]
        tally.answered += 1
        ended = await self._end(call, caller_media, plan)
        tally.ended[ended] += 1
        tally.numbers[plan.number] = ended
        if ended == "abandon":
            # The caller forgets the call without a word (no BYE; its session timer stopped),
            # and its endpoint's socket closes below: the worker's BYE goes unanswered.
            await call._end("abandoned by the caller")
            return RTP_TIMEOUT_S + 1.0  # the worker holds its place until it notices
        return 0.0

    async def _end(self, call: SipCall, media: _CallerMedia, plan: PlannedCall) -> str:
        """Hold the call and end it as planned; how it ended (the plan's kind, or "agent"
        when the agent hung up first, or "cancel" when a CANCEL was beaten by the answer)."""
        if plan.kind == "cancel":
            await call.hang_up()
            return "cancel"
        if await self._wait(call, plan.hold_s):
            return "agent"
        if plan.kind == "abandon":
            media.stop()
            return "abandon"
        if plan.kind == "rtp_stop_bye":
            media.stop()
            if await self._wait(call, plan.rtp_stop_s):
                return "agent"
        await call.hang_up()
        return plan.kind

    async def _wait(self, call: SipCall | None, seconds: float) -> bool:
        """Wait ``seconds``, or until the call ends or the soak stops; True if it ended."""
        waits = [asyncio.ensure_future(self.stopping.wait())]
        if call is not None:
            waits.append(asyncio.ensure_future(call.ended.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        return call is not None and call.ended.is_set()
