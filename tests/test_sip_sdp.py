"""SDP offer/answer (telephony/sip/sdp.py)."""

from __future__ import annotations

import pytest

from telephony.sip import sdp

OFFER = (
    b"v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n"
    b"m=audio 4000 RTP/AVP 18 8 0 96\r\na=rtpmap:18 G729/8000\r\n"
    b"a=rtpmap:96 telephone-event/8000\r\na=sendonly\r\n"
)


def test_first_shared_codec_dtmf_and_mirrored_direction() -> None:
    media = sdp.negotiate(sdp.parse(OFFER))
    assert (media.codec, media.payload_type, media.dtmf_payload_type) == ("PCMA", 8, 96)
    assert (media.remote_ip, media.remote_port, media.direction) == ("10.0.0.1", 4000, "recvonly")


@pytest.mark.parametrize(
    ("offered", "answered"),
    [("sendrecv", "sendrecv"), ("recvonly", "sendonly"), ("inactive", "inactive")],
)
def test_direction_mirror(offered: str, answered: str) -> None:
    offer = OFFER.replace(b"a=sendonly", b"a=" + offered.encode())
    assert sdp.negotiate(sdp.parse(offer)).direction == answered


def test_old_style_hold_is_sendonly() -> None:
    offer = OFFER.replace(b"c=IN IP4 10.0.0.1", b"c=IN IP4 0.0.0.0").replace(b"a=sendonly", b"")
    assert sdp.negotiate(sdp.parse(offer)).direction == "recvonly"


def test_no_shared_codec_and_garbage() -> None:
    with pytest.raises(sdp.SdpError):
        sdp.negotiate(sdp.parse(OFFER.replace(b"18 8 0 96", b"18")))
    with pytest.raises(sdp.SdpError):
        sdp.parse(b"v=0\r\n")
    with pytest.raises(sdp.SdpError):
        sdp.parse(b"m=audio 4000 RTP/AVP 0\r\n")


def test_answer_and_offer_round_trip_with_version_bumps() -> None:
    local = sdp.LocalSession("127.0.0.1", 5000)
    offer = sdp.parse(local.offer())
    assert offer.formats == [0, 8, 101] and offer.port == 5000
    media = sdp.negotiate(offer)
    first = local.answer(media)
    assert local.answer(media) == first  # unchanged description keeps its version
    media.direction = "recvonly"
    assert b"a=recvonly" in local.answer(media) and local.answer(media) != first


def test_other_media_sections_keep_their_lines_to_themselves() -> None:
    """A video section's (or a refused audio stream's) c= and a= lines are not the audio's."""
    offer = (
        b"v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n"
        b"m=video 5000 RTP/AVP 96\r\nc=IN IP4 10.9.9.9\r\na=sendonly\r\n"
        b"m=audio 0 RTP/AVP 0\r\nc=IN IP4 10.8.8.8\r\n"
        b"m=audio 4000 RTP/AVP 0\r\n"
    )
    media = sdp.negotiate(sdp.parse(offer))
    assert (media.remote_ip, media.remote_port, media.direction) == ("10.0.0.1", 4000, "sendrecv")


@pytest.mark.parametrize(
    "change",
    [
        (b"m=audio 4000", b"m=audio 0"),  # the only audio stream, refused
        (b"m=audio 4000", b"m=audio 70000"),  # asyncio's sendto would close the RTP socket
        (b"c=IN IP4 10.0.0.1", b"c=IN IP4 pbx.example.com"),  # RTP sends to addresses only
        (b"18 8 0 96", b"18 8 0 960"),
    ],
)
def test_streams_we_cannot_send_to_are_refused(change: tuple[bytes, bytes]) -> None:
    with pytest.raises(sdp.SdpError):
        sdp.negotiate(sdp.parse(OFFER.replace(*change)))
