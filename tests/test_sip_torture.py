"""RFC 4475's SIP torture messages against the parser and a running endpoint (issue 19).

``tests/data/rfc4475/<tag>.dat`` holds each message bytes-exact, as the RFC's archive
(Appendix B) has them: CRLF line ends, the ``<allOneLine>`` and ``<hex>`` conventions decoded.
:data:`CORPUS` says, per message, whether our strict parser reads it and what the endpoint
answers. A valid request is answered (any final status its method gets from this UA); an
invalid one is answered 400 when it is readable enough to have headers to answer with, or
dropped; a response (valid or not) matches no transaction and gets nothing back. Either way
the endpoint answers an OPTIONS afterwards: nothing crashed.

Where we differ from the RFC, deliberately (the ``why`` column):

* intmeth (valid): its To display name holds escaped BEL, NUL and DEL (quoted-pairs); we
  refuse control characters anywhere in a header, escaped or not (they would reach logs and
  the call records; PostgreSQL refuses NUL), so it is answered 400.
* badvers: the RFC suggests 505; we answer 400 with the reason in a Warning.
* sdp01 (406): the RFC's answer to an INVITE whose Accept omits SDP; this UA answers it as any
  INVITE (here the application's 503): its 200 would carry SDP, which the caller offered.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

import pytest

from telephony.line import LineBusy
from telephony.sip.call import SipCall
from telephony.sip.message import SipParseError, SipRequest, SipResponse, parse
from telephony.sip.transaction import Timers
from telephony.sip.ua import SipEndpoint

DATA = Path(__file__).parent / "data" / "rfc4475"
FAST = Timers(t1=0.02, t2=0.08, t4=0.1)


@dataclass(frozen=True)
class Case:
    section: str
    #: parse() returns a message (else it raises SipParseError).
    parses: bool
    #: The endpoint's final status; None: nothing comes back (dropped, or a response).
    answer: int | None
    why: str = ""


INVITED = 503  # the application below refuses every call (LineBusy): a final response
CORPUS = {
    # §3.1.1 valid messages
    "wsinv": Case("3.1.1.1", True, 481, "To has a tag: no such dialog. SWS in Via (a fix)"),
    "intmeth": Case("3.1.1.2", False, 400, "escaped control characters: see the docstring"),
    "esc01": Case("3.1.1.3", True, INVITED),
    "escnull": Case("3.1.1.4", True, 501, "REGISTER: not ours"),
    "esc02": Case("3.1.1.5", True, 501, "an unknown method"),
    "lwsdisp": Case("3.1.1.6", True, 200),
    "longreq": Case("3.1.1.7", True, INVITED),
    "dblreq": Case("3.1.1.8", True, 501, "the REGISTER; the INVITE after it is its body"),
    "semiuri": Case("3.1.1.9", True, 200),
    "transports": Case("3.1.1.10", True, 200),
    "mpart01": Case("3.1.1.11", True, 501, "MESSAGE: not ours"),
    "unreason": Case("3.1.1.12", True, None, "a response to no transaction of ours"),
    "noreason": Case("3.1.1.13", True, None, "a response to no transaction of ours"),
    # §3.1.2 invalid messages
    "badinv01": Case("3.1.2.1", False, 400),
    "clerr": Case("3.1.2.2", False, 400),
    "ncl": Case("3.1.2.3", False, 400),
    "scalar02": Case("3.1.2.4", False, 400),
    "scalarlg": Case("3.1.2.5", False, None, "a response"),
    "quotbal": Case("3.1.2.6", False, 400, "unterminated display name (a parser fix)"),
    "ltgtruri": Case("3.1.2.7", False, 400, "<> around the Request-URI (a parser fix)"),
    "lwsruri": Case("3.1.2.8", False, 400, "answered now, was dropped"),
    "lwsstart": Case("3.1.2.9", False, 400, "answered now, was dropped"),
    "trws": Case("3.1.2.10", False, 400, "answered now, was dropped"),
    "escruri": Case("3.1.2.11", False, 400, "headers in the Request-URI (a parser fix)"),
    "baddate": Case("3.1.2.12", True, INVITED, "the RFC lets a UA ignore the Date"),
    "regbadct": Case("3.1.2.13", False, 400, "an unbracketed URI with ? (a parser fix)"),
    "badaspec": Case("3.1.2.14", False, 400, "white space inside <> (a parser fix)"),
    "baddn": Case("3.1.2.15", False, 400, "an unquoted display name with a comma (a fix)"),
    "badvers": Case("3.1.2.16", False, 400, "RFC: 505; answered now, was dropped"),
    "mismatch01": Case("3.1.2.17", False, 400),
    "mismatch02": Case("3.1.2.18", False, 400),
    "bigcode": Case("3.1.2.19", False, None, "a response"),
    # §3.2 transaction layer
    "badbranch": Case("3.2.1", True, 200),
    # §3.3 application layer
    "insuf": Case("3.3.1", False, 400),
    "unkscm": Case("3.3.2", True, 416),
    "novelsc": Case("3.3.3", True, 416),
    "unksm2": Case("3.3.4", True, 501, "REGISTER: not ours"),
    "bext01": Case("3.3.5", True, 420),
    "invut": Case("3.3.6", True, 415),
    "regaut01": Case("3.3.7", True, 501, "REGISTER: not ours"),
    "multi01": Case("3.3.8", False, 400, "two From, To, Call-ID, CSeq (a parser fix)"),
    "mcl01": Case("3.3.9", False, 400, "two Content-Lengths (a parser fix)"),
    "bcast": Case("3.3.10", True, None, "a response"),
    "zeromf": Case("3.3.11", True, 200, "Max-Forwards 0 is for proxies"),
    "cparam01": Case("3.3.12", True, 501, "REGISTER: not ours"),
    "cparam02": Case("3.3.13", True, 501, "REGISTER: not ours"),
    "regescrt": Case("3.3.14", True, 501, "REGISTER: not ours"),
    "sdp01": Case("3.3.15", True, INVITED, "RFC: 406 (see the docstring)"),
    # §3.4 backward compatibility
    "inv2543": Case("3.4.1", True, INVITED, "RFC 2543 syntax: no branch, no Max-Forwards"),
}
RESPONSES = {"unreason", "noreason", "scalarlg", "bigcode", "bcast"}


def message(tag: str) -> bytes:
    return (DATA / f"{tag}.dat").read_bytes()


def test_the_corpus_is_the_rfcs_49_messages_with_crlf_line_ends() -> None:
    assert sorted(path.stem for path in DATA.glob("*.dat")) == sorted(CORPUS)
    for tag in CORPUS:
        head = message(tag).partition(b"\r\n\r\n")[0]
        assert b"\n" not in head.replace(b"\r\n", b""), f"{tag}: a bare LF in the headers"


@pytest.mark.parametrize("tag", CORPUS)
def test_the_parser(tag: str) -> None:
    case = CORPUS[tag]
    data = message(tag)
    if case.parses:
        parsed = parse(data)
        assert isinstance(parsed, SipResponse if tag in RESPONSES else SipRequest)
        parsed.top_via()
        return
    with pytest.raises(SipParseError) as caught:
        parse(data)
    assert caught.value.status == 400
    # What the layer answers 400 to: a request with headers it could read.
    assert (caught.value.partial is not None) == (case.answer == 400)


def test_a_valid_message_is_read_right() -> None:
    wsinv = parse(message("wsinv"))
    assert isinstance(wsinv, SipRequest) and wsinv.cseq == (9, "INVITE")
    assert [v.split(";")[0].split()[-1] for v in wsinv.headers.get_all("Via")] == [
        "192.0.2.2",
        "spindle.example.com",
        "192.168.255.111",
    ]
    assert wsinv.top_via().branch == "390skdjuw" and len(wsinv.body) == 150
    esc02 = parse(message("esc02"))
    assert isinstance(esc02, SipRequest) and esc02.method == "RE%47IST%45R"


class _Peer(asyncio.DatagramProtocol):
    """A UDP socket that keeps the status of every response it gets (it need not parse)."""

    def __init__(self) -> None:
        self.statuses: asyncio.Queue[int] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        match = re.match(rb"SIP/2\.0 (\d{3}) ", data)
        assert match, data[:80]
        self.statuses.put_nowait(int(match.group(1)))


PROBE = (
    b"OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\n"
    b"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKprobe\r\n"
    b"From: <sip:probe@127.0.0.1>;tag=p1\r\nTo: <sip:agent@127.0.0.1>\r\n"
    b"Call-ID: torture-probe\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
)


def refuse(call: SipCall) -> Awaitable[None]:
    raise LineBusy("the torture test takes no calls")


async def _final(peer: _Peer) -> int:
    while True:
        status = await asyncio.wait_for(peer.statuses.get(), 5)
        if status >= 200:
            return status


@pytest.mark.parametrize("tag", CORPUS)
async def test_the_endpoint(tag: str, caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    failures: list[dict[str, object]] = []
    loop.set_exception_handler(lambda loop, context: failures.append(context))
    ua = SipEndpoint("127.0.0.1", 0, on_call=refuse, timers=FAST)
    await ua.start()
    sender, peer = await loop.create_datagram_endpoint(_Peer, local_addr=("127.0.0.1", 0))
    prober, probe = await loop.create_datagram_endpoint(_Peer, local_addr=("127.0.0.1", 0))
    try:
        sender.sendto(message(tag), ("127.0.0.1", ua.port))
        expected = CORPUS[tag].answer
        if expected is not None:
            assert await _final(peer) == expected
        prober.sendto(PROBE, ("127.0.0.1", ua.port))
        assert await _final(probe) == 200  # nothing crashed
        if expected is None:
            await asyncio.sleep(0.05)
            assert peer.statuses.empty(), "a response or a dropped message was answered"
    finally:
        await ua.close()
        sender.close()
        prober.close()
    assert failures == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
