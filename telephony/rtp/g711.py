"""G.711 (PCMU mu-law, PCMA A-law) to and from 16-bit linear PCM, with numpy lookup tables.

aiortc's G.711 codec works on PyAV frames and ``audioop`` is gone after Python 3.12, so the
conversions here are 256- and 65536-entry tables built once from the ITU-T G.711 segment
rules (the same arithmetic as the classic Sun reference code, so results match ``audioop``
bit for bit). A table lookup is one numpy indexing operation per 20 ms packet.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: RTP static payload types (RFC 3551) and the silence byte of each law.
PAYLOAD_TYPES = {"PCMU": 0, "PCMA": 8}
SILENCE = {"PCMU": 0xFF, "PCMA": 0xD5}

_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


def _ulaw_decode_table() -> npt.NDArray[np.int16]:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


def _alaw_decode_table() -> npt.NDArray[np.int16]:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)


def _all_samples() -> npt.NDArray[np.int32]:
    # Index i of an encode table is the int16 whose bits, read as uint16, are i.
    return np.arange(65536, dtype=np.uint16).view(np.int16).astype(np.int32)


def _ulaw_encode_table() -> npt.NDArray[np.uint8]:
    pcm = _all_samples() >> 2
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(pcm), 8159) + (0x84 >> 2)
    seg = np.searchsorted(_ULAW_SEG_END, mag, side="left")
    uval = (seg << 4) | ((mag >> (seg + 1)) & 0x0F)
    return (np.where(seg >= 8, 0x7F, uval) ^ mask).astype(np.uint8)


def _alaw_encode_table() -> npt.NDArray[np.uint8]:
    pcm = _all_samples() >> 3
    mask = np.where(pcm >= 0, 0xD5, 0x55)
    mag = np.where(pcm >= 0, pcm, -pcm - 1)
    seg = np.searchsorted(_ALAW_SEG_END, mag, side="left")
    low = np.where(seg < 2, mag >> 1, mag >> np.minimum(seg, 31)) & 0x0F
    aval = (np.minimum(seg, 7) << 4) | low
    return (np.where(seg >= 8, 0x7F, aval) ^ mask).astype(np.uint8)


_DECODE = {"PCMU": _ulaw_decode_table(), "PCMA": _alaw_decode_table()}
_ENCODE = {"PCMU": _ulaw_encode_table(), "PCMA": _alaw_encode_table()}


def check_codec(codec: str) -> str:
    """Return ``codec`` if it is one we carry, else raise ``ValueError`` naming the choices."""
    if codec not in PAYLOAD_TYPES:
        raise ValueError(f"unsupported codec {codec!r}; expected one of {sorted(PAYLOAD_TYPES)}")
    return codec


def decode(codec: str, payload: bytes) -> bytes:
    """G.711 bytes -> 16-bit little-endian linear PCM (two bytes per input byte)."""
    table = _DECODE[check_codec(codec)]
    return table[np.frombuffer(payload, dtype=np.uint8)].astype("<i2").tobytes()


def encode(codec: str, pcm: bytes) -> bytes:
    """16-bit little-endian linear PCM -> G.711 bytes (an odd trailing byte is dropped)."""
    table = _ENCODE[check_codec(codec)]
    samples = np.frombuffer(pcm[: len(pcm) & ~1], dtype="<u2")
    return table[samples].tobytes()
