"""SIP message parsing and serialisation (telephony/sip/message.py)."""

from __future__ import annotations

import pytest

from telephony.sip.message import (
    MAX_HEADERS,
    MAX_MESSAGE_SIZE,
    NameAddr,
    SipParseError,
    SipRequest,
    SipResponse,
    make_response,
    parse,
    uri_host_port,
)

INVITE = (
    b"INVITE sip:agent@127.0.0.1:5060 SIP/2.0\r\n"
    b"v: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bKabc;rport\r\n"
    b"Via: SIP/2.0/UDP proxy.example:5060;branch=z9hG4bKdef, SIP/2.0/UDP 10.0.0.2\r\n"
    b'f: "Jordan" <sip:+15551234567@10.0.0.1>;tag=a1\r\n'
    b"To: <sip:agent@127.0.0.1>\r\n"
    b"i: call-1\r\n"
    b"CSeq: 1 INVITE\r\n"
    b"Subject: folded\r\n continued\r\n"
    b"Content-Length: 4\r\n\r\nbodyEXTRA"
)


def test_parses_compact_forms_comma_vias_folding_and_content_length() -> None:
    message = parse(INVITE)
    assert isinstance(message, SipRequest)
    assert message.method == "INVITE" and message.call_id == "call-1"
    assert len(message.headers.get_all("Via")) == 3
    assert message.top_via().branch == "z9hG4bKabc"
    assert message.headers.get("Subject") == "folded continued"
    assert message.body == b"body"
    assert NameAddr.parse(message.headers.get("From") or "").tag == "a1"


def test_serialise_round_trip() -> None:
    message = parse(INVITE)
    again = parse(message.serialize())
    assert isinstance(again, SipRequest)
    assert again.headers.items() == message.headers.items() and again.body == b"body"


@pytest.mark.parametrize(
    "mutation",
    [
        (b"CSeq: 1 INVITE", b"CSeq: one INVITE"),
        (b"CSeq: 1 INVITE", b"CSeq: 1 BYE"),
        (b"i: call-1\r\n", b""),
        (b"Content-Length: 4", b"Content-Length: 40"),
        (b"To: <sip:agent@127.0.0.1>", b"To <sip:agent@127.0.0.1>"),
        (b"v: SIP/2.0/UDP 10.0.0.1:5070", b"v: SIP/2.0/UDP 10.0.0.1:99999"),
    ],
)
def test_malformed_requests_keep_their_headers_for_a_400(mutation: tuple[bytes, bytes]) -> None:
    with pytest.raises(SipParseError) as caught:
        parse(INVITE.replace(*mutation))
    assert caught.value.partial is not None and caught.value.status == 400


def test_limits() -> None:
    with pytest.raises(SipParseError) as caught:
        parse(INVITE + b"x" * MAX_MESSAGE_SIZE)
    assert caught.value.status == 513
    many = INVITE.replace(
        b"CSeq: 1 INVITE\r\n", b"CSeq: 1 INVITE\r\n" + b"X-A: 1\r\n" * MAX_HEADERS
    )
    with pytest.raises(SipParseError):
        parse(many)
    with pytest.raises(SipParseError):
        parse(b"HELLO\r\n\r\n")


def test_response_copies_dialog_headers_and_adds_the_to_tag() -> None:
    request = parse(INVITE)
    assert isinstance(request, SipRequest)
    response = make_response(request, 180, to_tag="b2")
    parsed = parse(response.serialize())
    assert isinstance(parsed, SipResponse) and parsed.status == 180
    assert parsed.headers.get_all("Via") == request.headers.get_all("Via")
    assert NameAddr.parse(parsed.headers.get("To") or "").tag == "b2"
    assert make_response(request, 100, to_tag="b2").headers.get("To") == "<sip:agent@127.0.0.1>"


def test_a_dialog_response_to_an_invite_keeps_the_proxies_record_route() -> None:
    routed = INVITE.replace(
        b"i: call-1\r\n",
        b"i: call-1\r\nRecord-Route: <sip:edge1;lr>, <sip:edge2;lr>\r\n",
    )
    request = parse(routed)
    assert isinstance(request, SipRequest)
    routes = ["<sip:edge1;lr>", "<sip:edge2;lr>"]
    assert make_response(request, 180, to_tag="b2").headers.get_all("Record-Route") == routes
    assert make_response(request, 200, to_tag="b2").headers.get_all("Record-Route") == routes
    for status in (100, 486):  # no dialog: no route set
        assert make_response(request, status, to_tag="b2").headers.get_all("Record-Route") == []


def test_uri_host_port() -> None:
    assert uri_host_port("sip:+1555@trunk.example;transport=udp") == ("trunk.example", 5060)
    assert uri_host_port("sip:[::1]:5070") == ("::1", 5070)
    with pytest.raises(ValueError):
        uri_host_port("tel:+1555")


@pytest.mark.parametrize(
    ("value", "display", "uri"),
    [
        (
            '"J Rosenberg \\\\\\""  <sip:j@example.com> ; tag = 9',
            'J Rosenberg \\\\\\"',
            "sip:j@example.com",
        ),
        ('"a<b, c" <sip:x@y>', "a<b, c", "sip:x@y"),
        ("caller<sip:caller@example.com>;tag=323", "caller", "sip:caller@example.com"),
        ("sip:user@example.com ;   tag    = 1918", "", "sip:user@example.com"),
    ],
)
def test_name_addr_reads_quoted_and_token_display_names(value: str, display: str, uri: str) -> None:
    address = NameAddr.parse(value)
    assert (address.display, address.uri) == (display, uri)
    again = NameAddr.parse(str(address))  # escapes kept: it writes back what it read
    assert (again.display, again.uri, again.params) == (display, uri, address.params)


@pytest.mark.parametrize(
    "value",
    [
        '"Mr. J. User <sip:j.user@example.com>',  # RFC 4475 quotbal
        "Bell, Alexander <sip:a.g.bell@example.com>;tag=43",  # baddn
        '"Watson, Thomas" < sip:t.watson@example.org >',  # badaspec
        "sip:user@example.com?Route=%3Csip:sip.example.com%3E",  # regbadct
        "<sip:x@y> junk",
    ],
)
def test_name_addr_refuses_what_rfc_4475_calls_invalid(value: str) -> None:
    with pytest.raises(SipParseError):
        NameAddr.parse(value)


def test_an_escaped_quote_does_not_end_a_quoted_string_in_a_list() -> None:
    contact = b'Contact: "a \\" b, c" <sip:x@y>, <sip:z@y>\r\nCSeq: 1 INVITE'
    message = parse(INVITE.replace(b"CSeq: 1 INVITE", contact))
    assert message.headers.get_all("Contact") == ['"a \\" b, c" <sip:x@y>', "<sip:z@y>"]


@pytest.mark.parametrize(
    "start",
    [
        b"INVITE sip:agent@127.0.0.1:5060 SIP/3.0",
        b"INVITE  sip:agent@127.0.0.1:5060 SIP/2.0",
        b"INVITE sip:agent@127.0.0.1:5060 SIP/2.0 ",
        b"INVITE sip:agent@127.0.0.1; lr SIP/2.0",
        b"INVITE <sip:agent@127.0.0.1> SIP/2.0",
        b"INVITE sip:agent@127.0.0.1?Route=x SIP/2.0",
    ],
)
def test_a_bad_request_line_is_still_answered_400(start: bytes) -> None:
    with pytest.raises(SipParseError) as caught:
        parse(INVITE.replace(b"INVITE sip:agent@127.0.0.1:5060 SIP/2.0", start))
    assert caught.value.partial is not None and caught.value.status == 400


def test_a_single_valued_header_may_not_repeat() -> None:
    with pytest.raises(SipParseError, match="more than one Call-ID"):
        parse(INVITE.replace(b"i: call-1\r\n", b"i: call-1\r\nCall-ID: call-2\r\n"))
