"""The callers of ``bench sip`` and ``bench capacity``: sipp over SIP and RTP.

Each streams the same caller's voice (``caller_audio``: Piper saying ``CALLER_LINE`` between
two pauses, looped); the calls start at ``CALL_RATE`` per second.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from telephony.carriers.media_stream import CARRIER_SAMPLE_RATE
from telephony.rtp import g711
from telephony.rtp.session import PACKET_S
from tools.bench_sip_worker import BenchError

#: New calls per second, during ramp-up and ramp-down.
CALL_RATE = 10
#: The caller's line, spoken by Piper between two pauses and looped: the agent greets, the
#: caller speaks, the agent answers (the stub STT hears "yes that is me"; the policy asks
#: for the date of birth again and again), and round it goes, every ~3 s, so that the
#: agent speaks often (the stub TTS says anything as a 0.3 s tone).
CALLER_LINE = "Yes, speaking."
CALLER_PAUSES_S = (0.5, 1.0)
SIPP_SCENARIO = """<?xml version="1.0" encoding="ISO-8859-1" ?>
<!-- One bench call: streams caller.ulaw (looped) for -d milliseconds, then hangs up. -->
<scenario name="bench sip call">
  <send retrans="500">
    <![CDATA[
      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller@[local_ip]:[local_port]>;tag=[call_number]t[pid]
      To: <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: <sip:caller@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Type: application/sdp
      Content-Length: [len]

      v=0
      o=caller 1 1 IN IP[local_ip_type] [local_ip]
      s=-
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [media_port] RTP/AVP 0
      a=rtpmap:0 PCMU/8000
      a=sendrecv
    ]]>
  </send>
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="200"/>
  <send>
    <![CDATA[
      ACK sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller@[local_ip]:[local_port]>;tag=[call_number]t[pid]
      To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 1 ACK
      Contact: <sip:caller@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <nop>
    <action>
      <exec rtp_stream="caller.ulaw,-1,0"/>
    </action>
  </nop>
  <pause/>
  <send retrans="500">
    <![CDATA[
      BYE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller@[local_ip]:[local_port]>;tag=[call_number]t[pid]
      To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 2 BYE
      Contact: <sip:caller@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <recv response="200"/>
</scenario>
"""


def caller_audio() -> bytes:
    """The caller's side of a call as G.711 mu-law: a pause, the line, a pause."""
    from tools.simulate import CallerVoice

    before, after = (bytes(2 * int(s * CARRIER_SAMPLE_RATE)) for s in CALLER_PAUSES_S)
    pcm = before + CallerVoice(CARRIER_SAMPLE_RATE).say(CALLER_LINE) + after
    frame = 2 * int(PACKET_S * CARRIER_SAMPLE_RATE)
    pcm += bytes(-len(pcm) % frame)  # whole packets, so every loop is aligned
    return g711.encode("PCMU", pcm)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def sipp_calls(port: int, calls: int, call_s: float, workdir: Path) -> None:
    """``calls`` sipp calls at CALL_RATE per second, each ``call_s`` long."""
    timeout_s = call_s + calls / CALL_RATE + 30
    command = [
        "sipp", f"127.0.0.1:{port}", "-sf", str(workdir / "bench_call.xml"), "-s", "agent",
        "-m", str(calls), "-l", str(calls), "-r", str(CALL_RATE), "-d", str(int(call_s * 1000)),
        "-i", "127.0.0.1", "-p", str(_free_udp_port()),
        "-mi", "127.0.0.1", "-mp", str(_free_udp_port()),
        "-timeout", f"{int(timeout_s)}s", "-timeout_error", "-nostdin",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=workdir
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s + 10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        text = output.decode(errors="replace")
        raise BenchError(f"sipp failed ({process.returncode}):\n{text[-2000:]}")
