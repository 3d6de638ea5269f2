"""A worker's capacity over SIP: a call's place is taken before it rings
(agent/pipeline/live_calls.py).

The agent server answers SIP because ``SIP_PORT`` is set, exactly as ``agent serve`` does,
with the instant stub models. The caller is a bare UDP socket, so that INVITEs can be sent
back to back within one round trip and every response is seen: which calls rang, which were
answered, which were refused. The answered calls' RTP comes back to sockets of the test's own.
A place is also given back when the caller's RTP stops (``RTP_TIMEOUT_S``), though not
while the call is on hold.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiortc.rtp import RtpPacket
from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.runtime.context import AgentRuntime
from agent.server.app import CALLS, CTX, SIP, make_app
from agent.store.tables import Call
from infra.stub_server import create_app
from telephony.rtp import g711
from telephony.sip import sdp
from telephony.sip import ua as ua_module
from telephony.sip.call import SipCall
from telephony.sip.message import NameAddr, SipRequest, SipResponse, make_response, parse
from telephony.sip.transaction import Timers
from tests.test_sipp import SCENARIOS, free_udp_port

HOST = "127.0.0.1"
Address = tuple[str, int]


class Phone(asyncio.DatagramProtocol):
    """A bare SIP caller on one UDP socket: sends the requests the test asks for and keeps
    every response by Call-ID. It ACKs the final responses to its INVITEs (a 2xx only while
    ``acks_answers``) and answers the agent's BYE with 200."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.responses: defaultdict[str, list[SipResponse]] = defaultdict(list)
        self.byes: list[str] = []
        self.acks_answers = True
        self._changed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        message = parse(data)
        if isinstance(message, SipRequest):
            self.byes.append(message.call_id)
            self._send(make_response(message, 200).serialize(), addr)
        else:
            self.responses[message.call_id].append(message)
            if message.cseq[1] == "INVITE" and message.status >= 300:
                self._send(self._ack(message, message.top_via().branch), addr)  # same transaction
            elif message.cseq[1] == "INVITE" and message.status >= 200 and self.acks_answers:
                self._send(self._ack(message, secrets.token_hex(6)), addr)  # its own
        self._changed.set()

    def invite(self, call_id: str, agent: Address, rtp_port: int) -> None:
        body = sdp.LocalSession(HOST, rtp_port).offer()
        self._send(self._request("INVITE", call_id, f"sip:agent@{HOST}", call_id, body=body), agent)

    def reinvite(self, call_id: str, agent: Address, rtp_port: int, direction: str) -> None:
        """Put the call on hold (``sendonly``) or take it off (``sendrecv``), RFC 3264 8.4."""
        answer = self.final(call_id)
        assert answer is not None and answer.status == 200
        contact = NameAddr.parse(answer.headers.get("Contact") or "").uri
        to_tag = NameAddr.parse(answer.headers.get("To") or "").tag
        body = sdp.LocalSession(HOST, rtp_port).offer(direction)
        branch = secrets.token_hex(6)
        cseq = max(r.cseq[0] for r in self.responses[call_id]) + 1
        self._send(
            self._request("INVITE", call_id, contact, branch, cseq=cseq, to_tag=to_tag, body=body),
            agent,
        )

    def cancel(self, call_id: str, agent: Address) -> None:
        self._send(self._request("CANCEL", call_id, f"sip:agent@{HOST}", call_id), agent)

    def bye(self, call_id: str, agent: Address) -> None:
        answer = self.final(call_id)
        assert answer is not None and answer.status == 200
        contact = NameAddr.parse(answer.headers.get("Contact") or "").uri
        to_tag = NameAddr.parse(answer.headers.get("To") or "").tag
        branch = secrets.token_hex(6)
        self._send(self._request("BYE", call_id, contact, branch, cseq=2, to_tag=to_tag), agent)

    def statuses(self, call_id: str, method: str = "INVITE") -> list[int]:
        """The statuses answered to ``method``, each once (retransmissions are not counted)."""
        return list(dict.fromkeys(r.status for r in self.responses[call_id] if r.cseq[1] == method))

    def final(self, call_id: str) -> SipResponse | None:
        finals = [r for r in self.responses[call_id] if r.cseq[1] == "INVITE" and r.status >= 200]
        return finals[0] if finals else None

    async def until(self, done: Callable[[], bool], timeout_s: float = 30.0) -> None:
        """Wait until ``done()`` holds for what has arrived."""

        async def wait() -> None:
            while not done():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout_s)

    def _request(
        self,
        method: str,
        call_id: str,
        uri: str,
        branch: str,
        *,
        cseq: int = 1,
        to_tag: str | None = None,
        body: bytes = b"",
    ) -> bytes:
        assert self.transport is not None
        port = self.transport.get_extra_info("sockname")[1]
        to = f"<sip:agent@{HOST}>" + (f";tag={to_tag}" if to_tag else "")
        content_type = "Content-Type: application/sdp\r\n" if body else ""
        return (
            f"{method} {uri} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP {HOST}:{port};branch=z9hG4bK{branch}\r\n"
            f"From: <sip:+15551230000@{HOST}>;tag=t-{call_id}\r\nTo: {to}\r\n"
            f"Call-ID: {call_id}\r\nCSeq: {cseq} {method}\r\n"
            f"Contact: <sip:caller@{HOST}:{port}>\r\nMax-Forwards: 70\r\n"
            f"{content_type}Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    def _ack(self, response: SipResponse, branch: str) -> bytes:
        to_tag = NameAddr.parse(response.headers.get("To") or "").tag
        if response.status >= 300:
            uri = f"sip:agent@{HOST}"
        else:
            uri = NameAddr.parse(response.headers.get("Contact") or "").uri
        cseq = response.cseq[0]
        return self._request("ACK", response.call_id, uri, branch, cseq=cseq, to_tag=to_tag)

    def _send(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        self.transport.sendto(data, addr)


class Earpiece(asyncio.DatagramProtocol):
    """One call's RTP socket: ``heard`` is set once the agent's voice (not G.711 silence)
    arrives."""

    def __init__(self) -> None:
        self.heard = asyncio.Event()
        self.port = 0
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.port = transport.get_extra_info("sockname")[1]

    def speak(self, agent: Address, packets: int) -> None:
        """Send the agent ``packets`` 20 ms packets of the caller's silence."""
        assert self.transport is not None
        for seq in range(packets):
            packet = RtpPacket(0, 0, seq, seq * 160, 7, b"\xff" * 160)
            self.transport.sendto(packet.serialize(), agent)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if len(data) == 12 + 160 and data[1] & 0x7F == 0:  # 20 ms of PCMU
            pcm = np.frombuffer(g711.decode("PCMU", data[12:]), dtype=np.int16)
            if np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > 300:
                self.heard.set()


@pytest.fixture
async def sockets() -> AsyncIterator[Callable[[type[Any]], Awaitable[Any]]]:
    """Open UDP sockets on the loopback with a protocol; all closed at the end."""
    transports: list[asyncio.BaseTransport] = []

    async def open_socket(protocol: type[Any]) -> Any:
        loop = asyncio.get_running_loop()
        transport, opened = await loop.create_datagram_endpoint(protocol, local_addr=(HOST, 0))
        transports.append(transport)
        return opened

    yield open_socket
    for transport in transports:
        transport.close()


@pytest.fixture
async def agent(tmp_path) -> AsyncIterator[Callable[..., Awaitable[TestClient]]]:
    """Start the agent server (SIP on a free port, the stub models) with more settings."""
    async with AsyncExitStack() as stack:
        models = TestServer(create_app())
        await models.start_server()
        stack.push_async_callback(models.close)
        base = f"{models.host}:{models.port}"

        async def start(**env: str) -> TestClient:
            settings = Settings.from_env(
                {
                    "STT_URL": f"ws://{base}/v1/listen",
                    "LLM_URL": f"http://{base}/v1",
                    "TTS_URL": f"http://{base}/v1/speech",
                    "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
                    "DATA_DIR": str(tmp_path),
                    "SIP_PORT": "0",
                    **env,
                }
            )
            ctx = await stack.enter_async_context(AgentRuntime(settings))
            # Serving the app starts its SIP endpoint too.
            return await stack.enter_async_context(TestClient(TestServer(make_app(ctx))))

        yield start


@pytest.fixture
def rings(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """The agent's phone rings until this is set (or the caller gives up), then answers."""
    pick_up = asyncio.Event()
    answer = SipCall.answer

    async def ring_then_answer(self: SipCall) -> None:
        waits = {asyncio.ensure_future(pick_up.wait()), asyncio.ensure_future(self.ended.wait())}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        await answer(self)

    monkeypatch.setattr(SipCall, "answer", ring_then_answer)
    return pick_up


def sip_address(client: TestClient) -> Address:
    return (HOST, client.server.app[SIP].port)


async def readiness(client: TestClient) -> tuple[int, dict[str, Any]]:
    response = await client.get("/ready")
    return response.status, await response.json()


async def all_places_free(client: TestClient) -> None:
    """Wait until ``/ready`` counts no call: every place taken has been given back."""

    async def poll() -> None:
        while (await readiness(client))[1]["calls"]:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), 30)


async def sip_calls(client: TestClient) -> list[str | None]:
    """The end reasons of the SIP calls the agent recorded."""
    ctx = client.server.app[CTX]
    await ctx.writer.flush(timeout=10)
    with Session(ctx.engine) as session:
        return list(session.scalars(select(Call.end_reason).where(Call.transport == "sip")))


async def test_invites_past_capacity_in_one_round_trip_are_refused_before_they_ring(agent, sockets):
    client = await agent(MAX_CALLS="2")
    address = sip_address(client)
    caller = await sockets(Phone)
    ears = {f"burst-{i}": await sockets(Earpiece) for i in range(6)}
    for call_id, ear in ears.items():  # back to back: all six within one round trip
        caller.invite(call_id, address, ear.port)
    await caller.until(lambda: all(caller.final(c) is not None for c in ears))

    statuses = {call_id: caller.statuses(call_id) for call_id in ears}
    answered = [c for c, s in statuses.items() if s == [100, 180, 200]]
    refused = [c for c, s in statuses.items() if s == [100, 503]]  # never rang
    assert (len(answered), len(refused)) == (2, 4), statuses
    assert {caller.final(c).headers.get("Retry-After") for c in refused} == {"5"}
    # The answered calls are conversations: the agent's greeting reaches each caller.
    await asyncio.wait_for(asyncio.gather(*(ears[c].heard.wait() for c in answered)), 30)
    assert await readiness(client) == (503, {"calls": 2, "capacity": 2, "draining": False})

    for call_id in answered:
        caller.bye(call_id, address)
    await caller.until(lambda: all(caller.statuses(c, "BYE") == [200] for c in answered))
    await asyncio.wait_for(asyncio.gather(*client.server.app[CALLS].tasks()), 30)
    assert caller.byes == []  # the agent dropped none of them
    assert await sip_calls(client) == ["caller_hung_up", "caller_hung_up"]
    await all_places_free(client)


async def test_a_call_cancelled_while_ringing_gives_its_place_back(agent, sockets, rings):
    client = await agent(MAX_CALLS="1")
    address = sip_address(client)
    caller, ear = await sockets(Phone), await sockets(Earpiece)
    caller.invite("ringing", address, ear.port)
    await caller.until(lambda: caller.statuses("ringing") == [100, 180])
    assert await readiness(client) == (503, {"calls": 1, "capacity": 1, "draining": False})
    caller.invite("while-ringing", address, ear.port)  # the ringing call holds the one place
    await caller.until(lambda: caller.final("while-ringing") is not None)
    assert caller.statuses("while-ringing") == [100, 503]

    caller.cancel("ringing", address)
    await caller.until(lambda: caller.final("ringing") is not None)
    assert (caller.statuses("ringing"), caller.statuses("ringing", "CANCEL")) == (
        [100, 180, 487],
        [200],
    )
    await all_places_free(client)

    rings.set()  # the place is free again: the next call is answered in it
    caller.invite("next", address, ear.port)
    await caller.until(lambda: caller.final("next") is not None)
    assert caller.statuses("next") == [100, 180, 200]
    caller.bye("next", address)
    await caller.until(lambda: caller.statuses("next", "BYE") == [200])
    await asyncio.wait_for(asyncio.gather(*client.server.app[CALLS].tasks()), 30)
    assert await sip_calls(client) == ["caller_hung_up"]
    await all_places_free(client)


async def test_an_answer_never_acknowledged_gives_its_place_back(agent, sockets, monkeypatch):
    # The agent's SIP timers, shortened: timer H (no ACK for our 200) fires after 3.2 s.
    monkeypatch.setattr(ua_module, "Timers", lambda: Timers(t1=0.05, t2=0.2, t4=0.2))
    client = await agent(MAX_CALLS="1")
    address = sip_address(client)
    caller, ear = await sockets(Phone), await sockets(Earpiece)
    caller.acks_answers = False
    caller.invite("unacknowledged", address, ear.port)
    await caller.until(lambda: caller.final("unacknowledged") is not None)
    assert (await readiness(client))[1]["calls"] == 1
    await caller.until(lambda: caller.byes == ["unacknowledged"])  # timer H: the agent hangs up
    await all_places_free(client)
    assert await sip_calls(client) == []  # no conversation was started on it


def agent_rtp(caller: Phone, call_id: str) -> Address:
    """Where the agent's 200 said its RTP for the call is."""
    answer = caller.final(call_id)
    assert answer is not None
    answered = sdp.parse(answer.body)
    return (answered.ip, answered.port)


async def test_a_caller_whose_rtp_stops_is_hung_up_for_media_timeout(agent, sockets):
    client = await agent(RTP_TIMEOUT_S="1")
    address = sip_address(client)
    caller, ear = await sockets(Phone), await sockets(Earpiece)
    caller.invite("vanished", address, ear.port)
    await caller.until(lambda: caller.final("vanished") is not None)
    ear.speak(agent_rtp(caller, "vanished"), 5)  # then its network goes
    await caller.until(lambda: caller.byes == ["vanished"], timeout_s=1 + 2)
    await asyncio.wait_for(asyncio.gather(*client.server.app[CALLS].tasks()), 30)
    assert await sip_calls(client) == ["media_timeout"]
    await all_places_free(client)


async def test_a_call_on_hold_is_not_ended_for_its_silence(agent, sockets):
    client = await agent(RTP_TIMEOUT_S="1")
    address = sip_address(client)
    caller, ear = await sockets(Phone), await sockets(Earpiece)
    caller.invite("held", address, ear.port)
    await caller.until(lambda: caller.final("held") is not None)
    ear.speak(agent_rtp(caller, "held"), 5)
    caller.reinvite("held", address, ear.port, "sendonly")  # on hold: no RTP from here on
    await caller.until(
        lambda: any(r.cseq == (2, "INVITE") and r.status == 200 for r in caller.responses["held"])
    )
    await asyncio.sleep(2 * 1)  # twice the timeout in silence, on hold
    assert caller.byes == []
    caller.reinvite("held", address, ear.port, "sendrecv")  # back, and still silent
    await caller.until(lambda: caller.byes == ["held"], timeout_s=1 + 2)
    await asyncio.wait_for(asyncio.gather(*client.server.app[CALLS].tasks()), 30)
    assert await sip_calls(client) == ["media_timeout"]


@pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")
async def test_a_sipp_caller_killed_mid_call_is_ended_and_recorded_within_the_timeout(
    agent, tmp_path
):
    """Issue 19's test of liveness: a real SIP peer that vanishes (killed: no BYE, no more
    RTP) leaves no call active; it is recorded ended (media_timeout) within the RTP timeout
    plus 2 s of its death, and its place is given back."""
    timeout_s = 1.0
    client = await agent(RTP_TIMEOUT_S=str(timeout_s))
    tone = np.sin(2 * np.pi * 440 * np.arange(8000) / 8000) * 8000
    (tmp_path / "stream.ulaw").write_bytes(g711.encode("PCMU", tone.astype(np.int16).tobytes()))
    port = sip_address(client)[1]
    command = [
        "sipp", f"{HOST}:{port}", "-sf", str(SCENARIOS / "vanish.xml"), "-s", "agent",
        "-m", "1", "-i", HOST, "-p", str(free_udp_port()), "-mi", HOST,
        "-mp", str(free_udp_port()), "-nostdin", "-nd", "-timeout", "90s",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        # answered and streaming: the agent carries it, and its record is open
        await asyncio.wait_for(_until_calls(client, 1), 30)
        await asyncio.sleep(2 * timeout_s)  # longer than the timeout: RTP keeps it alive
        assert await sip_calls(client) == [None]
    finally:
        process.kill()
        await process.wait()
    died = asyncio.get_running_loop().time()
    while await sip_calls(client) != ["media_timeout"]:
        waited = asyncio.get_running_loop().time() - died
        assert waited <= timeout_s + 2, f"still not ended {waited:.1f} s after the caller died"
        await asyncio.sleep(0.1)
    await all_places_free(client)


async def _until_calls(client: TestClient, count: int) -> None:
    while (await readiness(client))[1]["calls"] != count:
        await asyncio.sleep(0.05)


async def test_a_call_hung_up_with_its_ack_is_recorded_as_the_caller_hanging_up(agent, sockets):
    """The caller's ACK and BYE in one burst, before the agent has started the conversation:
    the call took place, so it has its record, ended by the caller (not by the RTP timeout)."""
    client = await agent(RTP_TIMEOUT_S="30")
    address = sip_address(client)
    caller, ear = await sockets(Phone), await sockets(Earpiece)
    caller.acks_answers = False
    caller.invite("brief", address, ear.port)
    await caller.until(lambda: caller.final("brief") is not None)
    answer = caller.final("brief")
    assert answer is not None and answer.status == 200
    caller._send(caller._ack(answer, secrets.token_hex(6)), address)
    caller.bye("brief", address)  # the same turn of the loop: both datagrams arrive together
    await caller.until(lambda: 200 in caller.statuses("brief", "BYE"))
    await asyncio.wait_for(_until_calls(client, 0), 10)
    await asyncio.wait_for(asyncio.gather(*client.server.app[CALLS].tasks()), 10)
    assert await sip_calls(client) == ["caller_hung_up"]
