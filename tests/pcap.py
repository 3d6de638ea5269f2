"""Reading the RTP out of sipp's shipped pcaps (Debian package sip-tester)."""

import struct
from pathlib import Path

SIPP_PCAPS = Path("/usr/share/sip-tester")


def read_pcap_udp_payloads(path: Path) -> list[bytes]:
    """UDP payloads of an Ethernet/IPv4 pcap (the format sipp ships)."""
    data = path.read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xA1B2C3D4
    payloads, pos = [], 24
    while pos < len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        frame = data[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        ihl = (frame[14] & 0x0F) * 4
        payloads.append(frame[14 + ihl + 8 :])
    return payloads
