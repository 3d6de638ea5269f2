"""The user agent dialing itself over loopback (telephony/sip/ua.py): outbound outcomes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import pytest

from telephony.line import LineBusy, LineError
from telephony.sip import ratelimit, sdp
from telephony.sip.call import MediaSession, SipCall
from telephony.sip.media import SipTransport
from telephony.sip.message import SipRequest, SipResponse, make_response, parse
from telephony.sip.ratelimit import RateLimiter
from telephony.sip.transaction import Timers
from telephony.sip.ua import SipEndpoint

FAST = Timers(t1=0.05, t2=0.2, t4=0.2)


def callee_app(call: SipCall) -> Awaitable[None]:
    """Asked before the call rings: ``busy`` is refused there; the rest ring."""
    if call.info.local_number == "busy":
        raise LineBusy("this worker is full (1 calls)")
    return ringing(call)


async def ringing(call: SipCall) -> None:
    action = call.info.local_number
    if action == "ring":
        await call.ended.wait()
    elif action == "decline":
        await call.hang_up()
    elif action == "full":  # found full only once it rang
        raise LineBusy("this worker is full (1 calls)")
    else:
        await call.answer()


@pytest.fixture
async def callee() -> AsyncIterator[SipEndpoint]:
    ua = SipEndpoint("127.0.0.1", 0, on_call=callee_app, credentials={"trunk": "pw"}, timers=FAST)
    await ua.start()
    yield ua
    await ua.close()


async def caller(auth: tuple[str, str] | None) -> SipEndpoint:
    async def never(call: SipCall) -> None:
        raise AssertionError("no inbound calls expected")

    ua = SipEndpoint("127.0.0.1", 0, on_call=never, trunk_auth=auth, timers=FAST)
    await ua.start()
    return ua


async def test_answered_hold_and_hang_up(callee: SipEndpoint) -> None:
    ua = await caller(("trunk", "pw"))
    try:
        result = await ua.invite(f"sip:answer@127.0.0.1:{callee.port}")
        assert result.outcome == "answered" and result.call is not None
        call = result.call
        assert call.info.direction == "outbound" and call.info.remote_number == "answer"
        assert isinstance(call.transport(), SipTransport) and call.transport() is call.transport()
        (inbound,) = callee.calls.values()
        await call.hold(True)
        assert inbound.direction == "recvonly" and call.direction == "sendonly"
        await call.hold(False)
        assert inbound.direction == "sendrecv"
        await call.hang_up()
        await asyncio.wait_for(inbound.ended.wait(), 5)
        assert inbound.end_reason == "hung up by the caller"
        with pytest.raises(LineError):
            await call.hold(True)
    finally:
        await ua.close()


async def test_unauthenticated_caller_is_refused(callee: SipEndpoint) -> None:
    ua = await caller(None)
    try:
        result = await ua.invite(f"sip:answer@127.0.0.1:{callee.port}")
        assert (result.outcome, result.status) == ("failed", 401)
    finally:
        await ua.close()


async def test_declined_and_no_answer(callee: SipEndpoint) -> None:
    ua = await caller(("trunk", "pw"))
    try:
        declined = await ua.invite(f"sip:decline@127.0.0.1:{callee.port}")
        assert (declined.outcome, declined.status) == ("failed", 603)
        # A full or draining worker: 503, so the edge tries another.
        for user in ("busy", "full"):
            busy = await ua.invite(f"sip:{user}@127.0.0.1:{callee.port}")
            assert busy.status == 503
        unanswered = await ua.invite(f"sip:ring@127.0.0.1:{callee.port}", ring_timeout=0.3)
        assert (unanswered.outcome, unanswered.status) == ("no_answer", 487)
        for call in list(callee.calls.values()):
            await asyncio.wait_for(call.ended.wait(), 5)
        assert callee.calls == {}
    finally:
        await ua.close()


async def test_a_dial_given_up_while_ringing_stops_the_ringing(callee: SipEndpoint) -> None:
    ua = await caller(("trunk", "pw"))
    try:
        dialing = asyncio.ensure_future(ua.invite(f"sip:ring@127.0.0.1:{callee.port}"))
        for _ in range(500):
            if callee.calls:
                break
            await asyncio.sleep(0.01)
        [ringing] = callee.calls.values()
        dialing.cancel()
        await asyncio.wait_for(ringing.ended.wait(), 5)  # our CANCEL reached it
        assert ringing.end_reason and callee.calls == {}
    finally:
        await ua.close()


async def test_unreachable_uri_fails_cleanly() -> None:
    ua = await caller(None)
    try:
        result = await ua.invite("tel:+15551234567")
        assert result.outcome == "failed" and "cannot reach" in result.reason
    finally:
        await ua.close()


# -- limits on what comes in (docs/protocols.md, "Hardening") ---------------------------------


class RawPeer(asyncio.DatagramProtocol):
    """A bare UDP socket: sends what a test writes, queues the responses and requests it gets."""

    def __init__(self) -> None:
        self.responses: asyncio.Queue[SipResponse] = asyncio.Queue()
        self.requests: asyncio.Queue[SipRequest] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        message = parse(data)
        if isinstance(message, SipResponse):
            self.responses.put_nowait(message)
        else:
            self.requests.put_nowait(message)


def raw_request(method: str, branch: str, contact: str = "<sip:caller@127.0.0.1:5070>") -> bytes:
    body = sdp.LocalSession("127.0.0.1", 4000).offer() if method == "INVITE" else b""
    return (
        f"{method} sip:answer@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK{branch}\r\n"
        f"From: <sip:caller@127.0.0.1>;tag=c1\r\nTo: <sip:answer@127.0.0.1>\r\n"
        f"Call-ID: {branch}@127.0.0.1\r\nCSeq: 1 {method}\r\nContact: {contact}\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def raw_peer() -> tuple[asyncio.DatagramTransport, RawPeer]:
    loop = asyncio.get_running_loop()
    return await loop.create_datagram_endpoint(RawPeer, local_addr=("127.0.0.1", 0))


async def test_over_the_rate_a_source_gets_a_stateless_503() -> None:
    ua = SipEndpoint("127.0.0.1", 0, on_call=callee_app, timers=FAST, rate=0.001, burst=2)
    await ua.start()
    transport, peer = await raw_peer()
    try:
        statuses, retry_after = [], []
        # Two new requests, one over the burst, then a retransmission of the first.
        for branch in ("r1", "r2", "r3", "r1"):
            transport.sendto(raw_request("OPTIONS", branch), ("127.0.0.1", ua.port))
            response = await asyncio.wait_for(peer.responses.get(), 5)
            statuses.append(response.status)
            retry_after.append(response.headers.get("Retry-After"))
        assert statuses == [200, 200, 503, 200]  # a retransmission is its transaction's, free
        assert retry_after == [None, None, "1", None]
        assert len(ua.layer.server) == 2  # the refused request left nothing behind
    finally:
        transport.close()
        await ua.close()


def test_rate_limiter_refills_and_forgets_only_quiet_sources(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: now[0])
    limiter = RateLimiter(rate=1.0, burst=2.0, max_sources=2)
    assert [limiter.allow("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert limiter.allow("10.0.0.2")
    now[0] += 1.0  # .1 has one token back; .2 is full again, the same as never seen
    assert limiter.allow("10.0.0.3")  # a third source: the table is full, .2 goes
    assert set(limiter._buckets) == {"10.0.0.1", "10.0.0.3"}
    assert [limiter.allow("10.0.0.1") for _ in range(2)] == [True, False]


@pytest.mark.parametrize("contact", ["<tel:+15551234567>", "<sips:caller@127.0.0.1>"])
async def test_an_invite_we_could_not_hang_up_on_is_refused_before_media(contact: str) -> None:
    async def media(host: str) -> MediaSession:
        raise AssertionError("no RTP session for a call we cannot reach")

    ua = SipEndpoint("127.0.0.1", 0, on_call=callee_app, timers=FAST, media=media)
    await ua.start()
    transport, peer = await raw_peer()
    try:
        transport.sendto(raw_request("INVITE", "c1", contact), ("127.0.0.1", ua.port))
        statuses = [(await asyncio.wait_for(peer.responses.get(), 5)).status for _ in range(2)]
        assert statuses == [100, 400] and ua.calls == {}
    finally:
        transport.close()
        await ua.close()


class Media:
    """A stand-in RTP session that says whether it was closed."""

    local_address = ("127.0.0.1", 4002)

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    def start(
        self, remote: tuple[str, int], codec: str, dtmf_payload_type: int | None, direction: str
    ) -> None:
        raise AssertionError("no media for a call that was never answered")

    def update(
        self, *, remote: tuple[str, int] | None = None, direction: str | None = None
    ) -> None:
        raise AssertionError("no media for a call that was never answered")

    async def close(self) -> None:
        self.closed.set()


@pytest.mark.parametrize(
    ("refusal", "status"), [(LineBusy("this worker is full (1 calls)"), 503), (KeyError("x"), 500)]
)
async def test_a_call_refused_before_it_rings_never_rings(refusal: Exception, status: int) -> None:
    opened: list[Media] = []

    async def media(host: str) -> MediaSession:
        opened.append(Media())
        return opened[-1]

    def refuse(call: SipCall) -> Awaitable[None]:
        raise refusal

    ua = SipEndpoint("127.0.0.1", 0, on_call=refuse, timers=FAST, media=media)
    await ua.start()
    transport, peer = await raw_peer()
    try:
        transport.sendto(raw_request("INVITE", "f1"), ("127.0.0.1", ua.port))
        responses = [await asyncio.wait_for(peer.responses.get(), 5) for _ in range(2)]
        assert [r.status for r in responses] == [100, status]  # no 180 before it
        retry_after = responses[1].headers.get("Retry-After")
        assert retry_after == ("5" if status == 503 else None)
        [session] = opened
        await asyncio.wait_for(session.closed.wait(), 5)  # its RTP port is not kept
        assert ua.calls == {}
    finally:
        transport.close()
        await ua.close()


async def test_an_invite_cancelled_while_its_media_opens_is_never_offered() -> None:
    cancelled, opened, offered = asyncio.Event(), Media(), []

    async def media(host: str) -> MediaSession:
        await cancelled.wait()
        return opened

    def offer(call: SipCall) -> Awaitable[None]:
        offered.append(call)
        return call.answer()

    ua = SipEndpoint("127.0.0.1", 0, on_call=offer, timers=FAST, media=media)
    await ua.start()
    transport, peer = await raw_peer()
    try:
        transport.sendto(raw_request("INVITE", "m1"), ("127.0.0.1", ua.port))
        assert (await asyncio.wait_for(peer.responses.get(), 5)).status == 100
        transport.sendto(raw_request("CANCEL", "m1"), ("127.0.0.1", ua.port))
        responses = [await asyncio.wait_for(peer.responses.get(), 5) for _ in range(2)]
        assert sorted((r.cseq[1], r.status) for r in responses) == [
            ("CANCEL", 200),
            ("INVITE", 487),
        ]
        cancelled.set()  # the RTP port is open now, the INVITE long over
        await asyncio.wait_for(opened.closed.wait(), 5)
        assert offered == [] and ua.calls == {}
    finally:
        transport.close()
        await ua.close()


class AnsweredMedia(Media):
    """A stand-in RTP session for a call that is answered."""

    def start(
        self, remote: tuple[str, int], codec: str, dtmf_payload_type: int | None, direction: str
    ) -> None:
        pass


@pytest.mark.parametrize("during", [False, True], ids=["before-answering", "while-answering"])
async def test_a_cancel_racing_the_answer_gets_one_final_response(
    during: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RFC 3261 §9.2: once the 487 has gone out, the INVITE gets no 200 (nor its resends)."""
    hold, holding, answered, offered = asyncio.Event(), asyncio.Event(), asyncio.Event(), []
    start_media = SipCall._start_media

    async def held_start_media(call: SipCall, media: sdp.Media) -> None:
        holding.set()
        await hold.wait()
        await start_media(call, media)

    if during:
        monkeypatch.setattr(SipCall, "_start_media", held_start_media)

    async def media(host: str) -> MediaSession:
        return AnsweredMedia()

    async def answer(call: SipCall) -> None:
        offered.append(call)
        if not during:
            holding.set()
            await hold.wait()
        await call.answer()
        answered.set()

    ua = SipEndpoint("127.0.0.1", 0, on_call=answer, timers=FAST, media=media)
    await ua.start()
    sent: list[SipRequest | SipResponse] = []
    send = ua.layer.send

    def spy(message: SipRequest | SipResponse, address: tuple[str, int]) -> None:
        sent.append(message)
        send(message, address)

    monkeypatch.setattr(ua.layer, "send", spy)
    transport, peer = await raw_peer()
    try:
        transport.sendto(raw_request("INVITE", "x1"), ("127.0.0.1", ua.port))
        await asyncio.wait_for(holding.wait(), 5)
        transport.sendto(raw_request("CANCEL", "x1"), ("127.0.0.1", ua.port))
        [call] = offered
        await asyncio.wait_for(call.ended.wait(), 5)
        hold.set()
        await asyncio.wait_for(answered.wait(), 5)  # answer() is over: nothing more to resend
        finals = [
            (m.cseq[1], m.status) for m in sent if isinstance(m, SipResponse) and m.status >= 200
        ]
        assert finals == [("CANCEL", 200), ("INVITE", 487)]
        assert call.state == "ended" and call.end_reason == "cancelled by the caller"
        assert ua.cancelled_answers == (1 if during else 0) and ua.calls == {}
    finally:
        transport.close()
        await ua.close()


async def test_an_answer_never_acknowledged_ends_with_a_bye_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answered: list[SipCall] = []

    async def media(host: str) -> MediaSession:
        return AnsweredMedia()

    async def answer(call: SipCall) -> None:
        answered.append(call)
        await call.answer()

    ua = SipEndpoint("127.0.0.1", 0, on_call=answer, timers=FAST, media=media)
    await ua.start()
    transport, peer = await raw_peer()
    contact = f"<sip:caller@127.0.0.1:{transport.get_extra_info('sockname')[1]}>"
    try:
        transport.sendto(raw_request("INVITE", "h1", contact), ("127.0.0.1", ua.port))
        statuses = [(await asyncio.wait_for(peer.responses.get(), 5)).status for _ in range(3)]
        assert statuses == [100, 180, 200]  # and no ACK: timer H fires
        bye = await asyncio.wait_for(peer.requests.get(), 10)
        assert bye.method == "BYE"
        transport.sendto(make_response(bye, 200).serialize(), ("127.0.0.1", ua.port))
        [call] = answered
        await asyncio.wait_for(call.ended.wait(), 5)
        assert call.end_reason == "no ACK for our 200 (timer H)" and ua.calls == {}
        assert ua.unacked_2xx == 1
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("never acknowledged" in w for w in warnings)
        assert not [r for r in caplog.records if r.exc_info]  # no traceback
    finally:
        transport.close()
        await ua.close()
