"""A whole SIP call: sipp dials the agent server and speaks; Whisper hears it; the agent answers.

The server answers SIP because ``SIP_PORT`` is set, exactly as ``agent serve`` does.
What the agent sends back is caught on the loopback interface (a raw socket: the
tests run as root, as the network-namespace tests do), so the proof that audio came
back is the packets themselves, not the agent's own counters.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from agent.config import Settings
from agent.runtime.context import AgentRuntime
from agent.server.app import CALLS, SIP, make_app
from agent.store.tables import Call, CallEvent
from infra.stub_server import create_app
from telephony.rtp import g711
from tests.audio import speech_pcm, words
from tests.conftest import settings_for
from tests.test_sipp import free_udp_port, sipp

ETH_P_IP = 0x0800
PACKET_HOST = 0


@contextmanager
def udp_to_port(port: int) -> Iterator[list[bytes]]:
    """The UDP payloads sent to ``port`` on loopback while the block runs."""
    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    sniffer.bind(("lo", 0))
    sniffer.settimeout(0.2)
    payloads: list[bytes] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                frame, address = sniffer.recvfrom(65535)
            except TimeoutError:
                continue
            if address[2] != PACKET_HOST or frame[14 + 9] != socket.IPPROTO_UDP:
                continue
            ip = frame[14:]
            udp = ip[(ip[0] & 0x0F) * 4 :]
            if struct.unpack_from("!H", udp, 2)[0] == port:
                payloads.append(bytes(udp[8:]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield payloads
    finally:
        stop.set()
        reader.join()
        sniffer.close()


@pytest.mark.models
async def test_a_spoken_sip_call_reaches_the_transcript_and_the_agent_answers(cpu_models, tmp_path):
    # A caller the portfolio does not know: the agent asks for the account holder (the
    # demo account is the embedded default's only), then for a verifier.
    sentence = "Yes, I am the account holder."
    (tmp_path / "sentence.ulaw").write_bytes(g711.encode("PCMU", speech_pcm(sentence, 8000)))
    db_url = f"sqlite:///{tmp_path / 'agent.db'}"
    caller_media = free_udp_port()
    async with AgentRuntime(settings_for(cpu_models, db_url, SIP_PORT="0")) as ctx:
        app = make_app(ctx)
        runner = web.AppRunner(app)
        await runner.setup()  # starts the SIP endpoint
        try:
            with udp_to_port(caller_media) as agent_rtp:
                await sipp(
                    app[SIP],
                    "spoken_call.xml",
                    cwd=tmp_path,
                    media_port=caller_media,
                    timeout_s=40,
                )
            await asyncio.wait_for(asyncio.gather(*app[CALLS].tasks()), 30)
        finally:
            await runner.cleanup()
        with Session(ctx.engine) as session:
            call = session.scalar(select(Call).options(selectinload(Call.turns)))
            assert call is not None
            transport, end_reason = call.transport, call.end_reason
            heard = words(" ".join(t.user_text or "" for t in call.turns))
            said = " ".join(t.agent_text or "" for t in call.turns)

    assert transport == "sip" and end_reason == "caller_hung_up"
    assert {"account", "holder"} <= set(heard), heard
    assert "To protect your privacy" in said, said  # the policy's answer to the identity
    # The agent's voice came back as RTP: 20 ms mu-law packets, and not silence.
    audio = [p[12:] for p in agent_rtp if len(p) == 12 + 160 and p[1] & 0x7F == 0]
    assert len(audio) > 100, f"{len(agent_rtp)} packets, {len(audio)} of PCMU audio"
    pcm = np.frombuffer(g711.decode("PCMU", b"".join(audio)), dtype=np.int16)
    assert np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > 300


async def test_a_caller_who_wants_a_person_is_transferred_with_a_refer(tmp_path):
    """Stub models that hear "let me talk to a real person": the policy hands off, and the
    SIP line REFERs the caller to TRANSFER_TARGET (sipp checks the Refer-To) before BYE."""
    sentence = "Let me talk to a real person."
    (tmp_path / "sentence.ulaw").write_bytes(g711.encode("PCMU", speech_pcm(sentence, 8000)))
    models = TestServer(create_app(transcript=sentence))
    await models.start_server()
    base = f"{models.host}:{models.port}"
    settings = Settings.from_env(
        {
            "STT_URL": f"ws://{base}/v1/listen",
            "LLM_URL": f"http://{base}/v1",
            "TTS_URL": f"http://{base}/v1/speech",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
            "SIP_PORT": "0",
            "TRANSFER_TARGET": "sip:collectors@pbx.example",
        }
    )
    try:
        async with AgentRuntime(settings) as ctx:
            app = make_app(ctx)
            runner = web.AppRunner(app)
            await runner.setup()
            try:
                await sipp(app[SIP], "transfer.xml", cwd=tmp_path, timeout_s=30)
                await asyncio.wait_for(asyncio.gather(*app[CALLS].tasks()), 30)
            finally:
                await runner.cleanup()
            with Session(ctx.engine) as session:
                call = session.scalar(select(Call))
                assert call is not None
                assert (call.transport, call.disposition) == ("sip", "escalated_to_human")
                # The policy knew the line would transfer: it said "please hold", not goodbye.
                handoff = session.scalar(
                    select(CallEvent.detail).where(
                        CallEvent.call_id == call.id, CallEvent.kind == "handoff"
                    )
                )
                assert handoff == {"reason": "escalated_to_human", "now": True}
    finally:
        await models.close()
