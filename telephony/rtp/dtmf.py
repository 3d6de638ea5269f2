"""RFC 4733 telephone-events: the DTMF digits a phone sends in RTP, and the ones we send.

An event is a run of RTP packets sharing one timestamp (the event's start): updates with a
growing duration while the key is held, then the end packet, sent three times in case one is
lost. A receiver therefore reports a digit once per (timestamp), on the first end packet, or
when a new event starts before the old one's end was seen.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import dataclass

logger = logging.getLogger(__name__)

#: RFC 4733 section 3.2: event codes 0-15 are the DTMF keys.
EVENT_CODES = {d: i for i, d in enumerate("0123456789*#ABCD")}
DIGITS = {i: d for d, i in EVENT_CODES.items()}
#: RTP clock ticks per 20 ms at 8 kHz.
TICKS_PER_PACKET = 160
END_RETRANSMISSIONS = 3


@dataclass(frozen=True)
class TelephoneEvent:
    """One telephone-event payload (RFC 4733 section 2.3)."""

    event: int
    end: bool
    volume: int
    duration: int

    def pack(self) -> bytes:
        return struct.pack(
            "!BBH", self.event, (0x80 if self.end else 0) | (self.volume & 0x3F), self.duration
        )

    @classmethod
    def parse(cls, payload: bytes) -> TelephoneEvent:
        if len(payload) < 4:
            raise ValueError(f"telephone-event payload is {len(payload)} bytes, expected 4")
        event, flags, duration = struct.unpack_from("!BBH", payload)
        return cls(event, bool(flags & 0x80), flags & 0x3F, duration)


def event_code(digit: str) -> int:
    """The event code of a DTMF key; ``ValueError`` for anything else."""
    code = EVENT_CODES.get(digit.upper())
    if code is None:
        raise ValueError(f"not a DTMF digit: {digit!r}; expected one of 0-9 * # A-D")
    return code


def event_payloads(digit: str, duration_ms: int = 100, volume: int = 10) -> list[TelephoneEvent]:
    """The packets of one key press, one per 20 ms: updates, then the end three times."""
    code = event_code(digit)
    if duration_ms < 20:
        raise ValueError(f"DTMF duration must be at least 20 ms, got {duration_ms}")
    updates = duration_ms // 20
    events = [
        TelephoneEvent(code, False, volume, (i + 1) * TICKS_PER_PACKET) for i in range(updates)
    ]
    end = TelephoneEvent(code, True, volume, updates * TICKS_PER_PACKET)
    return events + [end] * END_RETRANSMISSIONS


class DtmfReceiver:
    """Turns the telephone-event packets of one stream into digits, each reported once."""

    def __init__(self, memory: int = 16) -> None:
        self._reported: deque[int] = deque(maxlen=memory)
        self._open: tuple[int, int] | None = None  # (timestamp, event) not yet ended

    def feed(self, timestamp: int, payload: bytes) -> list[str]:
        """Digits completed by this packet (usually none or one; a malformed payload is
        ignored with a warning)."""
        try:
            event = TelephoneEvent.parse(payload)
        except ValueError as e:
            logger.warning("telephone-event ignored: %s", e)
            return []
        digits: list[str] = []
        if self._open is not None and self._open[0] != timestamp:
            # A new event began before the previous one's end packets arrived.
            digits += self._report(*self._open)
        self._open = None
        if timestamp in self._reported:
            return digits
        if event.end:
            digits += self._report(timestamp, event.event)
        else:
            self._open = (timestamp, event.event)
        return digits

    def _report(self, timestamp: int, event: int) -> list[str]:
        self._reported.append(timestamp)
        digit = DIGITS.get(event)
        if digit is None:
            logger.info("telephone-event %d is not a DTMF key; ignored", event)
            return []
        return [digit]
