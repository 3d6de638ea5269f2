"""The callers of ``bench sip`` and ``bench capacity``: sipp over SIP and RTP.

Each streams the same caller's voice (``caller_audio``: Piper saying ``CALLER_LINE`` between
two pauses, looped); the calls start at ``CALL_RATE`` per second. The caller is a consumer on
file (``caller_on_file``: the demo account, ``CALLER_NUMBER``), and what the stub STT hears in
each of their turns is ``caller_words``.
"""

from __future__ import annotations

import asyncio
import csv
import socket
from pathlib import Path

from agent.campaigns.portfolio import REQUIRED_COLUMNS, import_portfolio
from agent.conversation.account import Account, dollars
from agent.store.database import create_engine_for, upgrade
from telephony.carriers.media_stream import CARRIER_SAMPLE_RATE
from telephony.rtp import g711
from telephony.rtp.session import PACKET_S
from tools.bench_sip_worker import BenchError

#: New calls per second, during ramp-up and ramp-down.
CALL_RATE = 10
#: The caller's line, spoken by Piper between two pauses and looped: the agent greets, the
#: caller speaks, the agent answers (to what the stub STT hears, ``caller_words``), and round
#: it goes, every ~3 s, so that the agent speaks often (the stub TTS says anything as a
#: 0.3 s tone).
CALLER_LINE = "Yes, speaking."
CALLER_PAUSES_S = (0.5, 1.0)
#: The number every bench call comes from (fictional, 555-01xx), on file for the demo
#: consumer (``caller_on_file``).
CALLER_NUMBER = "+12145550100"
SIPP_SCENARIO = f"""<?xml version="1.0" encoding="ISO-8859-1" ?>
<!-- One bench call: streams caller.ulaw (looped) for -d milliseconds, then hangs up. -->
<scenario name="bench sip call">
  <send retrans="500">
    <![CDATA[
      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:{CALLER_NUMBER}@[local_ip]:[local_port]>;tag=[call_number]t[pid]
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
      From: <sip:{CALLER_NUMBER}@[local_ip]:[local_port]>;tag=[call_number]t[pid]
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
      From: <sip:{CALLER_NUMBER}@[local_ip]:[local_port]>;tag=[call_number]t[pid]
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


def caller_words() -> str:
    """What the stub STT hears in every turn of every call (its ``--transcript``): the demo
    consumer (``Account.demo()``, whom a bench call is about) saying who they are with their
    date of birth, and offering half the creditor's least monthly payment.

    So the first turn verifies them (the policy's mini-Miranda and the debt's purpose, said
    word for word) and every later one is answered with the policy's counter-offer, a reply
    the LLM may phrase, and the call never ends: after the first answer, phrase mode asks
    the LLM for every answer, as the stock pipeline does. The same words every turn, not a
    script turn by turn: nothing a call does puts them out of step (a greeting asked again,
    two utterances joined into one turn, an STT stream reopened mid-call).
    """
    account = Account.demo()
    born = account.date_of_birth
    assert born is not None  # the demo consumer is verified by it
    offer = account.min_installment_cents // 2 // 100 * 100  # whole dollars, below the least
    return (
        f"Yes, this is {account.consumer_name}, born {born:%B} {born.day}, {born.year}. "
        f"I can pay {dollars(offer)} a month."
    )


def phrased_counter() -> str:
    """What the stub LLM answers every request (its ``--reply``): the policy's counter-offer
    to ``caller_words`` in its own words, which the output guard lets through, so phrase
    mode speaks the LLM's words as the stock pipeline does."""
    plan = Account.demo().lowest_plan()
    return (
        f"I can set up {dollars(plan.amount_cents)} a month for {plan.months} months. "
        "Would that work for you?"
    )


def caller_on_file(database_url: str, folder: Path) -> None:
    """The bench's database, migrated, with the caller on file: the demo consumer
    (``Account.demo()``) owing its one debt, ``CALLER_NUMBER`` their number.

    Each inbound call is then about that debt (``match_caller``), as a consumer's call back
    is, and the policy verifies the caller against it; a caller not on file would be about
    no debt, with nothing to verify and nothing to negotiate. Imported through the real
    importer, from a portfolio CSV written in ``folder``."""
    account = Account.demo()
    assert account.date_of_birth is not None and account.timezone is not None
    row = {
        "consumer_ref": "BENCH-C1",
        "name": account.consumer_name,
        "date_of_birth": account.date_of_birth.isoformat(),
        "account_last4": account.account_last4 or "",
        "address": "1 Main St",
        "city": "Dallas",
        "state": account.state,
        "time_zone": account.timezone,
        "phones": f"{CALLER_NUMBER}:personal:consumer_provided",
        "account_ref": "BENCH-1",
        "creditor": account.creditor,
        "balance": f"{account.balance_cents / 100:.2f}",
        "statute_status": "time_barred" if account.time_barred else "within",
        "tenant_type": "third_party_collector",
        "max_discount_pct": f"{account.max_discount_pct:g}",
        "min_installment": f"{account.min_installment_cents / 100:.2f}",
        "max_term_months": str(account.max_term_months),
    }
    path = folder / "portfolio.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*REQUIRED_COLUMNS, "date_of_birth", "account_last4"])
        writer.writeheader()
        writer.writerow(row)
    upgrade(database_url)
    engine = create_engine_for(database_url)
    try:
        report = import_portfolio(engine, path)
    finally:
        engine.dispose()
    if report.rejected:
        raise BenchError(f"the caller's portfolio row was refused: {report.rejected[0].reasons}")


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
