"""RFC 4028 session timers (telephony/sip/session_timer.py and their wiring in ua.py).

The negotiation is pure and tested as such; the calls run with intervals of a few seconds
(``SipEndpoint(session_timers=...)``, as ``Timers`` shrinks the RFC 3261 timers), against a
bare UDP peer that writes exactly the headers a case needs, against our own UA, against
sipp and through the agent server, whose call record must say ``session_expired``. Waits
are on events with generous bounds: nothing here asserts how fast anything is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.config import ConfigError, Settings
from agent.runtime.context import AgentRuntime
from agent.server.app import CALLS, SIP, make_app
from infra.stub_server import create_app
from telephony.sip import sdp
from telephony.sip.call import MediaSession, SipCall
from telephony.sip.message import Headers, NameAddr, SipRequest, SipResponse, make_response, parse
from telephony.sip.session_timer import (
    SESSION_EXPIRED,
    Session,
    SessionTimers,
    TimerRefusal,
    accepted,
    answer,
    offer,
    retry_after_422,
    session_expires,
)
from telephony.sip.transaction import Timers
from telephony.sip.ua import SipEndpoint
from tests.test_sip_admission import Phone, sip_calls
from tests.test_sipp import sipp

HOST = "127.0.0.1"
FAST = Timers(t1=0.05, t2=0.2, t4=0.2)
#: A session of 3 s whose peer refreshes: we hang up 2 s after the last refresh (3 - 3/3).
SHORT = SessionTimers(expires=3, min_se=2)
Address = tuple[str, int]
OFFER = sdp.LocalSession(HOST, 4000).offer()


def headers(*items: tuple[str, str]) -> Headers:
    return Headers(list(items))


# -- the negotiation ------------------------------------------------------------------------


def test_an_interval_below_our_min_se_is_answered_422_with_our_min_se() -> None:
    with pytest.raises(TimerRefusal) as refused:
        answer(headers(("Supported", "timer"), ("Session-Expires", "60")), SessionTimers())
    assert (refused.value.status, refused.value.headers) == (422, [("Min-SE", "90")])


def test_a_caller_without_timer_support_is_raised_not_refused() -> None:
    """A Session-Expires a proxy added: the caller could not read a 422."""
    session, extra = answer(headers(("Session-Expires", "60")), SessionTimers())
    assert session == Session(90, ours=True)
    assert extra == [("Session-Expires", "90;refresher=uas")]  # and no Require: timer


@pytest.mark.parametrize(
    ("request_headers", "interval", "refresher"),
    [
        ([("Supported", "timer")], 1800, "uac"),  # supports, asks nothing: it refreshes
        ([("Supported", "timer"), ("Session-Expires", "600")], 600, "uac"),
        ([("Supported", "timer"), ("Session-Expires", "600;refresher=uas")], 600, "uas"),
        ([("Supported", "100rel, timer"), ("Session-Expires", "600;Refresher=UAC")], 600, "uac"),
        ([("Require", "timer"), ("Session-Expires", "3600")], 1800, "uac"),  # at most ours
        ([("Supported", "timer"), ("Session-Expires", "4000"), ("Min-SE", "2400")], 2400, "uac"),
        ([], 1800, "uas"),  # no support: we apply one and refresh it ourselves
        ([("Session-Expires", "600;refresher=uac")], 600, "uas"),  # it cannot refresh
    ],
)
def test_the_interval_and_the_refresher(
    request_headers: list[tuple[str, str]], interval: int, refresher: str
) -> None:
    session, extra = answer(headers(*request_headers), SessionTimers())
    assert session == Session(interval, ours=refresher == "uas")
    assert extra[0] == ("Session-Expires", f"{interval};refresher={refresher}")
    supported = any(name in ("Supported", "Require") for name, _ in request_headers)
    assert (("Require", "timer") in extra) == supported


def test_compact_forms_are_read_from_the_wire() -> None:
    request = parse(
        b"INVITE sip:answer@127.0.0.1 SIP/2.0\r\n"
        b"v: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKc1\r\n"
        b"f: <sip:caller@127.0.0.1>;tag=c1\r\nt: <sip:answer@127.0.0.1>\r\n"
        b"i: compact@127.0.0.1\r\nCSeq: 1 INVITE\r\nk: timer\r\nx: 1000;refresher=uas\r\n"
        b"l: 0\r\n\r\n"
    )
    assert isinstance(request, SipRequest)
    assert session_expires(request.headers) == (1000, "uas")
    session, extra = answer(request.headers, SessionTimers())
    assert session == Session(1000, ours=True) and ("Require", "timer") in extra


@pytest.mark.parametrize(
    "bad",
    [
        [("Session-Expires", "soon")],
        [("x", "")],
        [("Session-Expires", "-5")],
        [("Session-Expires", "1800;refresher=both")],
        [("Session-Expires", "99999999999")],
        [("Supported", "timer"), ("Session-Expires", "1800"), ("Min-SE", "ninety")],
    ],
)
def test_a_malformed_session_expires_or_min_se_is_answered_400(
    bad: list[tuple[str, str]],
) -> None:
    with pytest.raises(TimerRefusal) as refused:
        answer(headers(*bad), SessionTimers())
    assert refused.value.status == 400
    [(name, warning)] = refused.value.headers
    assert name == "Warning" and warning.count('"') == 2


def test_what_we_ask_for_and_what_a_2xx_gives() -> None:
    assert offer(SessionTimers()) == [
        ("Supported", "timer"),
        ("Session-Expires", "1800"),
        ("Min-SE", "90"),
    ]
    assert ("Session-Expires", "600;refresher=uac") in offer(SessionTimers(), Session(600, True))
    assert ("Session-Expires", "600;refresher=uas") in offer(SessionTimers(), Session(600, False))
    assert accepted(headers(("Session-Expires", "600;refresher=uac"))) == Session(600, True)
    assert accepted(headers(("x", "600;refresher=uas"))) == Session(600, False)
    assert accepted(headers(("Session-Expires", "600"))) == Session(600, True)
    assert accepted(headers()) is None  # no timer: the UAS did not want one
    assert accepted(headers(("Session-Expires", "later"))) is None  # a response is not answered


def test_a_422_is_honoured_with_its_min_se_once() -> None:
    ours = SessionTimers()
    assert retry_after_422(headers(("Min-SE", "3600")), ours) == SessionTimers(3600, 3600)
    assert retry_after_422(headers(), ours) is None  # nothing to go by
    assert retry_after_422(headers(("Min-SE", "900")), ours) is None  # we asked for more
    assert retry_after_422(headers(("Min-SE", "an hour")), ours) is None


def test_when_each_side_acts() -> None:
    assert Session(1800, ours=True).refresh_after() == 900
    assert Session(1800, ours=True).expires_after() == 1800
    assert Session(1800, ours=False).expires_after() == 1800 - 32  # §10: min(32, SE/3)
    assert Session(90, ours=False).expires_after() == 60
    with pytest.raises(ValueError):
        SessionTimers(expires=60, min_se=90)


def test_the_settings_and_their_limits() -> None:
    defaults = Settings.from_env({})
    assert (defaults.sip_session_expires_s, defaults.sip_min_se_s) == (1800, 90)
    settings = Settings.from_env({"SIP_SESSION_EXPIRES_S": "600", "SIP_MIN_SE_S": "120"})
    assert (settings.sip_session_expires_s, settings.sip_min_se_s) == (600, 120)
    assert Settings.from_env({"SIP_MIN_SE_S": "3600"}).sip_session_expires_s == 3600
    for env, message in [
        ({"SIP_MIN_SE_S": "30"}, "SIP_MIN_SE_S must be at least 90"),
        ({"SIP_SESSION_EXPIRES_S": "60"}, "SIP_SESSION_EXPIRES_S must be at least"),
        ({"SIP_SESSION_EXPIRES_S": "half an hour"}, "SIP_SESSION_EXPIRES_S must be an integer"),
    ]:
        with pytest.raises(ConfigError, match=message):
            Settings.from_env(env)


# -- calls against a bare peer ----------------------------------------------------------------


class Media:
    """A stand-in RTP session: the call's media is not what these tests look at."""

    local_address = (HOST, 4002)

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    def start(
        self, remote: Address, codec: str, dtmf_payload_type: int | None, direction: str
    ) -> None:
        pass

    def update(self, *, remote: Address | None = None, direction: str | None = None) -> None:
        pass

    async def close(self) -> None:
        self.closed.set()


class Peer(asyncio.DatagramProtocol):
    """A bare SIP peer on one UDP socket: it sends what a test writes, with the headers the
    test gives, and queues what comes back. It answers our in-dialog requests as told
    (``answer_with``: 200 by default, with an SDP answer to an offer) and ACKs 2xx to its
    INVITEs. Retransmissions are answered (or ACKed) again but queued once."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.responses: asyncio.Queue[SipResponse] = asyncio.Queue()
        self.requests: asyncio.Queue[SipRequest] = asyncio.Queue()
        self.answer_with = 200
        self.extra: list[tuple[str, str]] = []
        self.cseq = 0
        self.agent: Address = (HOST, 0)
        self.answer: SipResponse | None = None
        self._seen: set[tuple[object, ...]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])

    def datagram_received(self, data: bytes, addr: Address) -> None:
        message = parse(data)
        if isinstance(message, SipResponse):
            if message.cseq[1] == "INVITE" and message.status >= 200:
                to_tag = NameAddr.parse(message.headers.get("To") or "").tag
                self._send("ACK", message.cseq[0], to_tag)
            if self._first(message.cseq, message.status):
                self.responses.put_nowait(message)
            return
        if self._first(message.top_via().branch, message.method):
            self.requests.put_nowait(message)
        if message.method == "ACK":
            return
        status = 200 if message.method == "BYE" else self.answer_with
        body = sdp.LocalSession(HOST, 4000).offer() if message.body and status == 200 else b""
        reply = make_response(message, status, body=body, headers=self.extra)
        assert self.transport is not None
        self.transport.sendto(reply.serialize(), addr)

    def _first(self, *key: object) -> bool:
        seen = key in self._seen
        self._seen.add(key)
        return not seen

    def invite(self, agent: Address, *extra: tuple[str, str]) -> None:
        self.agent = agent
        self._send("INVITE", 1, None, list(extra), OFFER)

    def refresh(self, method: str, *extra: tuple[str, str], body: bytes | None = None) -> None:
        """A re-INVITE or UPDATE in the dialog; with ``body``, else a re-INVITE with an
        offer and an UPDATE with none."""
        assert self.answer is not None
        to_tag = NameAddr.parse(self.answer.headers.get("To") or "").tag
        if body is None:
            body = OFFER if method == "INVITE" else b""
        self._send(method, self.cseq + 1, to_tag, list(extra), body)

    async def final(self) -> SipResponse:
        """The next final response; the INVITE's 200 is kept for in-dialog requests."""
        while (response := await asyncio.wait_for(self.responses.get(), 10)).status < 200:
            pass
        if response.cseq == (1, "INVITE") and response.status == 200:
            self.answer = response
        return response

    async def request(self, method: str, timeout_s: float = 15) -> SipRequest:
        """The next request of ``method`` we get (ACKs and others are skipped)."""
        while (request := await asyncio.wait_for(self.requests.get(), timeout_s)).method != method:
            pass
        return request

    def _send(
        self,
        method: str,
        cseq: int,
        to_tag: str | None,
        extra: list[tuple[str, str]] | None = None,
        body: bytes = b"",
    ) -> None:
        self.cseq = max(self.cseq, cseq)
        to = f"<sip:answer@{HOST}>" + (f";tag={to_tag}" if to_tag else "")
        lines = [
            f"{method} sip:answer@{HOST}:{self.agent[1]} SIP/2.0",
            f"Via: SIP/2.0/UDP {HOST}:{self.port};branch=z9hG4bK{secrets.token_hex(6)}",
            f"From: <sip:caller@{HOST}>;tag=c1",
            f"To: {to}",
            f"Call-ID: timer-{self.port}@{HOST}",
            f"CSeq: {cseq} {method}",
            f"Contact: <sip:caller@{HOST}:{self.port}>",
            "Max-Forwards: 70",
        ]
        lines += [f"{name}: {value}" for name, value in extra or []]
        if body:
            lines.append("Content-Type: application/sdp")
        lines.append(f"Content-Length: {len(body)}")
        assert self.transport is not None
        self.transport.sendto(("\r\n".join(lines) + "\r\n\r\n").encode() + body, self.agent)


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(Peer, local_addr=(HOST, 0))
    yield protocol
    transport.close()


class Answerer:
    """Our side: an endpoint that answers every call (or refuses nothing), and its calls."""

    def __init__(self) -> None:
        self.calls: list[SipCall] = []
        self.opened: list[Media] = []

    async def media(self, host: str) -> MediaSession:
        self.opened.append(Media())
        return self.opened[-1]

    async def on_call(self, call: SipCall) -> None:
        self.calls.append(call)
        await call.answer()


@pytest.fixture
async def ours() -> AsyncIterator[Callable[..., Awaitable[tuple[SipEndpoint, Answerer]]]]:
    endpoints: list[SipEndpoint] = []

    async def start(timers: SessionTimers = SHORT) -> tuple[SipEndpoint, Answerer]:
        answerer = Answerer()
        ua = SipEndpoint(
            HOST, 0, on_call=answerer.on_call, timers=FAST, media=answerer.media,
            session_timers=timers,
        )  # fmt: skip
        await ua.start()
        endpoints.append(ua)
        return ua, answerer

    yield start
    for ua in endpoints:
        await ua.close()


async def test_a_peer_that_stops_refreshing_is_hung_up_session_expired(peer, ours) -> None:
    ua, answerer = await ours()
    peer.invite((HOST, ua.port), ("Supported", "timer"), ("Session-Expires", "3;refresher=uac"))
    answer = await peer.final()
    assert answer.status == 200
    assert answer.headers.get("Session-Expires") == "3;refresher=uac"
    assert answer.headers.get("Require") == "timer"
    assert "timer" in answer.headers.get_all("Supported")
    assert "UPDATE" in answer.headers.get_all("Allow")
    started = asyncio.get_running_loop().time()
    bye = await peer.request("BYE")  # and no refresh from the peer: 3 - 1 s later
    assert asyncio.get_running_loop().time() - started >= 1.5  # not before its time
    [call] = answerer.calls
    await asyncio.wait_for(call.ended.wait(), 10)
    assert call.end_reason == SESSION_EXPIRED and ua.calls == {}
    assert bye.call_id == answer.call_id


@pytest.mark.parametrize(
    ("method", "offer_first"),
    [("INVITE", True), ("UPDATE", False), ("UPDATE", True)],
    ids=["reinvite", "update", "update-with-offer"],
)
async def test_a_peer_refresh_keeps_the_call_up_past_its_first_expiry(
    peer, ours, method: str, offer_first: bool
) -> None:
    ua, answerer = await ours()
    timer = (("Supported", "timer"), ("Session-Expires", "3;refresher=uac"))
    peer.invite((HOST, ua.port), *timer)
    assert (await peer.final()).status == 200
    [call] = answerer.calls
    loop = asyncio.get_running_loop()
    first_expiry = loop.time() + 2
    for n in range(4):  # every second for 4 s: twice the first session's life
        await asyncio.sleep(1)
        peer.refresh(method, *timer, body=OFFER if offer_first and n == 0 else None)
        refreshed = await peer.final()
        assert (refreshed.status, refreshed.cseq[1]) == (200, method)
        assert refreshed.headers.get("Session-Expires") == "3;refresher=uac"
        has_answer = method == "INVITE" or (offer_first and n == 0)
        assert bool(refreshed.body) == has_answer  # an offer is answered, else no body
        assert call.state == "confirmed"
    assert loop.time() > first_expiry
    got = [peer.requests.get_nowait().method for _ in range(peer.requests.qsize())]
    assert "BYE" not in got
    await peer.request("BYE")  # it stops refreshing: it is hung up after all
    await asyncio.wait_for(call.ended.wait(), 10)
    assert call.end_reason == SESSION_EXPIRED


async def test_an_update_with_an_unusable_offer_gets_488_and_the_call_goes_on(peer, ours) -> None:
    ua, answerer = await ours(SessionTimers(expires=1800, min_se=90))
    peer.invite((HOST, ua.port))
    assert (await peer.final()).status == 200
    peer.refresh("UPDATE", body=b"v=0\r\nc=IN IP4 example.com\r\nm=audio 4000 RTP/AVP 0\r\n")
    assert (await peer.final()).status == 488
    peer.refresh("UPDATE")
    assert (await peer.final()).status == 200
    [call] = answerer.calls
    assert call.state == "confirmed"


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ((("Supported", "timer"), ("Session-Expires", "1")), 422),
        ((("Supported", "timer"), ("x", "soon")), 400),
        ((("Session-Expires", "3;refresher=nobody"),), 400),
    ],
    ids=["too-small", "malformed-compact", "bad-refresher"],
)
async def test_a_refused_session_timer_is_answered_before_anything_is_taken(
    peer, ours, extra: tuple[tuple[str, str], ...], status: int
) -> None:
    ua, answerer = await ours()
    peer.invite((HOST, ua.port), *extra)
    statuses = [(await asyncio.wait_for(peer.responses.get(), 10)).status for _ in range(2)]
    assert statuses == [100, status]  # no 180
    assert answerer.opened == [] and answerer.calls == [] and ua.calls == {}


async def test_422_names_our_min_se(peer, ours) -> None:
    ua, _ = await ours()
    peer.invite((HOST, ua.port), ("Supported", "timer"), ("Session-Expires", "1"))
    response = await peer.final()
    assert (response.status, response.reason) == (422, "Session Interval Too Small")
    assert response.headers.get("Min-SE") == "2"


@pytest.mark.parametrize("allow_update", [False, True], ids=["reinvite", "update"])
async def test_we_refresh_when_we_are_the_refresher(peer, ours, allow_update: bool) -> None:
    ua, answerer = await ours()
    allow = [("Allow", "INVITE, ACK, BYE, UPDATE")] if allow_update else []
    peer.invite((HOST, ua.port), *allow)  # no timer support: we apply one and refresh it
    answer = await peer.final()
    assert answer.headers.get("Session-Expires") == "3;refresher=uas"
    assert answer.headers.get("Require") is None
    method = "UPDATE" if allow_update else "INVITE"
    for _ in range(3):  # three refreshes: past the first session's end
        refresh = await peer.request(method)
        assert refresh.headers.get("Session-Expires") == "3;refresher=uac"
        assert "timer" in refresh.headers.get_all("Supported")
        if allow_update:
            assert refresh.body == b""
        else:  # our SDP, unchanged: the same version as in our 200
            assert refresh.body == answer.body
            await peer.request("ACK")
    [call] = answerer.calls
    assert call.state == "confirmed"
    await call.hang_up()
    assert call.end_reason == "hung up by the agent"


async def test_a_refresh_the_peer_no_longer_knows_ends_the_call(peer, ours) -> None:
    ua, answerer = await ours()
    peer.answer_with = 481
    peer.invite((HOST, ua.port))
    assert (await peer.final()).status == 200
    await peer.request("INVITE")  # answered 481: the dialog is gone on its side
    await peer.request("BYE")
    [call] = answerer.calls
    await asyncio.wait_for(call.ended.wait(), 10)
    assert call.end_reason == SESSION_EXPIRED


# -- dialing out ------------------------------------------------------------------------------


async def test_a_dial_retries_a_422_with_its_min_se_and_refreshes(ours) -> None:
    callee, answerer = await ours(SessionTimers(expires=1800, min_se=4))
    caller, _ = await ours(SessionTimers(expires=2, min_se=2))
    refreshes: list[str] = []
    on_offer = SipCall._on_offer

    async def counting(self: SipCall, txn: Any) -> None:
        refreshes.append(txn.request.method)
        await on_offer(self, txn)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SipCall, "_on_offer", counting)
        result = await caller.invite(f"sip:answer@{HOST}:{callee.port}")
        assert result.outcome == "answered" and result.call is not None
        call = result.call
        [inbound] = answerer.calls
        assert call.timer.session == Session(4, ours=True)  # asked 2, told 4, it refreshes
        assert inbound.timer.session == Session(4, ours=False)
        assert call.peer_allows_update
        loop = asyncio.get_running_loop()
        first_expiry = loop.time() + 4 - 4 / 3
        while len(refreshes) < 2 or loop.time() < first_expiry:
            await asyncio.sleep(0.2)
            assert inbound.state == "confirmed" and call.state == "confirmed"
        assert refreshes[:2] == ["UPDATE"] * 2
        await call.hang_up()
        await asyncio.wait_for(inbound.ended.wait(), 10)
        assert inbound.end_reason == "hung up by the caller"


class Refuser(Peer):
    """A UAS that answers every INVITE 422, with ``min_se`` when given."""

    def __init__(self) -> None:
        super().__init__()
        self.min_se: str | None = "5"
        self.invites: dict[str, SipRequest] = {}  # by branch: a retransmission once

    def datagram_received(self, data: bytes, addr: Address) -> None:
        message = parse(data)
        if not isinstance(message, SipRequest) or message.method == "ACK":
            return
        self.invites.setdefault(message.top_via().branch, message)
        extra = [("Min-SE", self.min_se)] if self.min_se else []
        reply = make_response(message, 422, "Session Interval Too Small", to_tag="r", headers=extra)
        assert self.transport is not None
        self.transport.sendto(reply.serialize(), addr)


@pytest.mark.parametrize("min_se", ["5", None], ids=["twice", "without-min-se"])
async def test_a_dial_retries_a_422_once_only(ours, min_se: str | None) -> None:
    loop = asyncio.get_running_loop()
    transport, refuser = await loop.create_datagram_endpoint(Refuser, local_addr=(HOST, 0))
    refuser.min_se = min_se
    try:
        caller, _ = await ours(SessionTimers(expires=2, min_se=2))
        result = await caller.invite(f"sip:answer@{HOST}:{refuser.port}")
        assert (result.outcome, result.status) == ("failed", 422)
        invites = list(refuser.invites.values())
        asked = [(i.headers.get("Session-Expires"), i.headers.get("Min-SE")) for i in invites]
        assert asked == ([("2", "2"), ("5", "5")] if min_se else [("2", "2")])
        assert all(i.headers.get("Supported") == "timer" for i in invites)
        assert [i.cseq[0] for i in invites] == list(range(1, len(asked) + 1))
    finally:
        transport.close()


# -- sipp, and the agent's call record --------------------------------------------------------


@pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")
async def test_sipp_asks_for_a_session_timer_then_goes_silent(ours) -> None:
    ua, answerer = await ours()
    await sipp(ua, "session_timer_silent.xml", timeout_s=20)
    [call] = answerer.calls
    await asyncio.wait_for(call.ended.wait(), 10)
    assert call.end_reason == SESSION_EXPIRED and ua.calls == {}


class TimerPhone(Phone):
    """test_sip_admission's caller, asking for a 3 s session timer it will never refresh."""

    def _request(self, method: str, *args: Any, **kwargs: Any) -> bytes:
        data = super()._request(method, *args, **kwargs)
        if method != "INVITE":
            return data
        extra = b"Supported: timer\r\nSession-Expires: 3;refresher=uac\r\n"
        return data.replace(b"Max-Forwards: 70\r\n", b"Max-Forwards: 70\r\n" + extra)


async def test_the_agent_records_a_session_expired_call(tmp_path) -> None:
    async with AsyncExitStack() as stack:
        models = TestServer(create_app())
        await models.start_server()
        stack.push_async_callback(models.close)
        base = f"{models.host}:{models.port}"
        settings = Settings.from_env(
            {
                "STT_URL": f"ws://{base}/v1/listen",
                "LLM_URL": f"http://{base}/v1",
                "TTS_URL": f"http://{base}/v1/speech",
                "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
                "DATA_DIR": str(tmp_path),
                "SIP_PORT": "0",
            }
        )
        # Below the RFC's 90 s, which the settings refuse: the test's own intervals.
        settings = dataclasses.replace(settings, sip_session_expires_s=3, sip_min_se_s=2)
        ctx = await stack.enter_async_context(AgentRuntime(settings))
        client: TestClient = await stack.enter_async_context(TestClient(TestServer(make_app(ctx))))
        loop = asyncio.get_running_loop()
        transport, caller = await loop.create_datagram_endpoint(TimerPhone, local_addr=(HOST, 0))
        stack.callback(transport.close)
        caller.invite("expiring", (HOST, client.server.app[SIP].port), 4000)
        await caller.until(lambda: caller.final("expiring") is not None)
        answer = caller.final("expiring")
        assert answer is not None and answer.headers.get("Session-Expires") == "3;refresher=uac"
        await caller.until(lambda: caller.byes == ["expiring"], timeout_s=30)
        await asyncio.wait_for(asyncio.gather(*client.server.app[CALLS].tasks()), 30)
        assert await sip_calls(client) == [SESSION_EXPIRED]
