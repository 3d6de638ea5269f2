"""RFC 4733 events: packing, the packets of a key press, and once-per-event reporting."""

import pytest

from telephony.rtp import dtmf
from tests.pcap import SIPP_PCAPS, read_pcap_udp_payloads


def test_event_payload_round_trips() -> None:
    event = dtmf.TelephoneEvent(event=11, end=True, volume=10, duration=800)
    assert event.pack() == bytes([11, 0x8A, 0x03, 0x20])
    assert dtmf.TelephoneEvent.parse(event.pack()) == event


def test_a_key_press_is_updates_then_three_end_packets() -> None:
    events = dtmf.event_payloads("5", duration_ms=100)
    assert [e.duration for e in events] == [160, 320, 480, 640, 800, 800, 800, 800]
    assert [e.end for e in events] == [False] * 5 + [True] * 3
    assert {e.event for e in events} == {5}


def test_bad_digit_and_short_duration_are_rejected() -> None:
    with pytest.raises(ValueError, match="not a DTMF digit"):
        dtmf.event_payloads("x")
    with pytest.raises(ValueError, match="at least 20 ms"):
        dtmf.event_payloads("1", duration_ms=10)


def test_retransmitted_end_packets_report_the_digit_once() -> None:
    receiver = dtmf.DtmfReceiver()
    digits = [d for e in dtmf.event_payloads("#") for d in receiver.feed(4000, e.pack())]
    assert digits == ["#"]


def test_an_event_whose_end_was_lost_is_reported_when_the_next_starts() -> None:
    receiver = dtmf.DtmfReceiver()
    assert receiver.feed(1000, dtmf.TelephoneEvent(1, False, 10, 160).pack()) == []
    assert receiver.feed(3000, dtmf.TelephoneEvent(2, True, 10, 800).pack()) == ["1", "2"]


def test_malformed_payload_is_ignored() -> None:
    assert dtmf.DtmfReceiver().feed(0, b"\x01") == []


@pytest.mark.skipif(not SIPP_PCAPS.is_dir(), reason="sip-tester (sipp) is not installed")
@pytest.mark.parametrize(
    ("name", "digit"), [(str(i), str(i)) for i in range(10)] + [("pound", "#"), ("star", "*")]
)
def test_sipps_rfc2833_pcaps_decode_to_their_digit(name: str, digit: str) -> None:
    from aiortc.rtp import RtpPacket

    receiver = dtmf.DtmfReceiver()
    digits = []
    for raw in read_pcap_udp_payloads(SIPP_PCAPS / f"dtmf_2833_{name}.pcap"):
        packet = RtpPacket.parse(raw)
        digits += receiver.feed(packet.timestamp, packet.payload)
    assert digits == [digit]
