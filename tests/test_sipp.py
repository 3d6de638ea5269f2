"""The SIP endpoint against a real SIP peer: sipp (Debian's sip-tester) runs our scenarios."""

from __future__ import annotations

import asyncio
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from telephony.rtp import g711
from telephony.rtp.session import RtpClosed, RtpSession
from telephony.sip.call import SipCall
from telephony.sip.transaction import Timers
from telephony.sip.ua import SipEndpoint

SCENARIOS = Path(__file__).parent / "sipp"
pytestmark = pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def on_call(call: SipCall) -> None:
    """The test's application: the dialed user says what to do."""
    action = call.info.local_number
    if action == "ring":
        await call.ended.wait()
        return
    await call.answer()
    if action == "hangup":
        await call.hang_up()


async def sipp(
    endpoint: SipEndpoint,
    scenario: str,
    service: str = "answer",
    *extra: str,
    cwd: Path | None = None,
    media_port: int | None = None,
    timeout_s: int = 20,
) -> str:
    """Run one sipp call of ``scenario`` against ``endpoint``; its output, failing on error."""
    command = [
        "timeout", str(timeout_s + 20), "sipp", f"127.0.0.1:{endpoint.port}",
        "-sf", str(SCENARIOS / scenario), "-s", service, "-m", "1",
        "-i", "127.0.0.1", "-p", str(free_udp_port()),
        "-mi", "127.0.0.1", "-mp", str(media_port or free_udp_port()),
        "-timeout", f"{timeout_s}s", "-timeout_error", "-nostdin", "-nd",
        *extra,
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=cwd
    )
    output, _ = await process.communicate()
    text = output.decode(errors="replace")
    assert process.returncode == 0, (
        f"sipp {scenario} failed ({process.returncode}):\n{text[-3000:]}"
    )
    return text


@pytest.fixture
async def endpoint() -> AsyncIterator[SipEndpoint]:
    ua = SipEndpoint("127.0.0.1", 0, on_call=on_call, timers=Timers(t1=0.1, t2=0.4, t4=0.5))
    await ua.start()
    yield ua
    await ua.close()


async def test_basic_call(endpoint: SipEndpoint) -> None:
    await sipp(endpoint, "basic.xml")
    assert endpoint.calls == {}


async def test_basic_call_with_two_way_rtp() -> None:
    """sipp's -rtp_echo returns our packets: what we send is what comes back, in order."""
    t = np.arange(8000) / 8000
    sent = g711.encode("PCMU", (8000 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes())
    echoed: list[bytes] = []

    async def talk(call: SipCall) -> None:
        await call.answer()
        assert isinstance(call.media, RtpSession)
        call.media.write(g711.decode("PCMU", sent))
        async for frame in call.media:
            echoed.append(frame.payload)

    ua = SipEndpoint("127.0.0.1", 0, on_call=talk, timers=Timers(t1=0.1, t2=0.4, t4=0.5))
    await ua.start()
    try:
        await sipp(ua, "echo.xml", "answer", "-rtp_echo")
    finally:
        await ua.close()
    back = b"".join(echoed).lstrip(b"\xff")  # the silence sent before our audio was queued
    assert len(back) >= 4000, f"{len(back)} bytes echoed"
    assert back[:4000] in sent  # contiguous: no packet lost, reordered or altered


async def test_bye_from_the_agent(endpoint: SipEndpoint) -> None:
    await sipp(endpoint, "bye_from_agent.xml", "hangup")


async def test_cancel_before_answer(endpoint: SipEndpoint) -> None:
    await sipp(endpoint, "cancel.xml", "ring")
    assert endpoint.calls == {}


async def test_options(endpoint: SipEndpoint) -> None:
    await sipp(endpoint, "options.xml")


async def test_hold_reinvite_is_answered_recvonly(endpoint: SipEndpoint) -> None:
    await sipp(endpoint, "hold.xml")


async def test_unsupported_codec_gets_488(endpoint: SipEndpoint) -> None:
    await sipp(endpoint, "no_codec.xml")


async def test_malformed_request_gets_400_and_the_next_call_works(endpoint: SipEndpoint) -> None:
    await sipp(endpoint, "malformed.xml")
    await sipp(endpoint, "basic.xml")


async def test_digest_challenged_invite() -> None:
    ua = SipEndpoint(
        "127.0.0.1", 0, on_call=on_call, credentials={"trunk": "s3cret"},
        timers=Timers(t1=0.1, t2=0.4, t4=0.5),
    )  # fmt: skip
    await ua.start()
    try:
        # sipp signs sip:host:port unless told; a digest's uri must be the Request-URI.
        auth_uri = f"answer@127.0.0.1:{ua.port}"
        await sipp(ua, "auth.xml", "answer", "-au", "trunk", "-ap", "s3cret", "-auth_uri", auth_uri)
    finally:
        await ua.close()


async def test_mu_law_stream_arrives_unchanged(tmp_path: Path) -> None:
    recording = bytes((i * 7 + i // 160) % 256 for i in range(8000))  # one second, known bytes
    (tmp_path / "stream.ulaw").write_bytes(recording)
    received = bytearray()

    async def record(call: SipCall) -> None:
        await call.answer()
        assert isinstance(call.media, RtpSession)
        try:
            while True:
                frame = await call.media.read()
                if not frame.concealed:
                    received.extend(frame.payload)
        except RtpClosed:
            return

    ua = SipEndpoint("127.0.0.1", 0, on_call=record, timers=Timers(t1=0.1, t2=0.4, t4=0.5))
    await ua.start()
    try:
        await sipp(ua, "stream_ulaw.xml", cwd=tmp_path)
    finally:
        await ua.close()
    assert len(received) >= 4000
    assert bytes(received[:4000]) == recording[:4000]


async def test_a_caller_behind_nat_is_heard_and_answered_where_it_sends_from(
    tmp_path: Path,
) -> None:
    recording = bytes((i * 7 + i // 160) % 256 for i in range(8000))
    (tmp_path / "stream.ulaw").write_bytes(recording)
    received = bytearray()
    latched: list[tuple[str, int] | None] = []

    async def record(call: SipCall) -> None:
        await call.answer()
        assert isinstance(call.media, RtpSession)
        try:
            while True:
                frame = await call.media.read()
                if not frame.concealed:
                    received.extend(frame.payload)
                    latched.append(call.media.destination)
        except RtpClosed:
            return

    ua = SipEndpoint("127.0.0.1", 0, on_call=record, timers=Timers(t1=0.1, t2=0.4, t4=0.5))
    await ua.start()
    try:
        await sipp(ua, "nat_stream.xml", cwd=tmp_path)
    finally:
        await ua.close()
    assert len(received) >= 4000
    assert bytes(received[:4000]) == recording[:4000]  # not dropped for its source
    assert latched[0] is not None and latched[0][0] == "127.0.0.1"  # not the SDP's 127.0.0.2
    assert set(latched) == {latched[0]}  # our RTP went to where it came from, all along


async def test_a_law_call_with_rfc2833_dtmf_from_sipps_pcaps() -> None:
    digits: list[str] = []
    codecs: list[str] = []

    async def listen(call: SipCall) -> None:
        await call.answer()
        assert isinstance(call.media, RtpSession) and call.negotiated is not None
        codecs.append(call.negotiated.codec)
        try:
            while True:
                digits.append(await call.media.read_dtmf())
        except RtpClosed:
            return

    ua = SipEndpoint("127.0.0.1", 0, on_call=listen, timers=Timers(t1=0.1, t2=0.4, t4=0.5))
    await ua.start()
    try:
        await sipp(ua, "dtmf_alaw.xml")
    finally:
        await ua.close()
    assert codecs == ["PCMA"]
    assert digits == ["1", "9", "#"]
