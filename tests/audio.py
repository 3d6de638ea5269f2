"""Speech and PCM helpers for tests: real speech from the bundled Piper voice.

Any test that needs a caller's voice can use ``speech_pcm``; round-tripping Piper speech
through Whisper tiny.en changes only formatting, so tests can assert on the words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

from tools.simulate import CallerVoice


@cache
def _caller_voice(sample_rate: int) -> CallerVoice:
    return CallerVoice(sample_rate)


@cache
def speech_pcm(text: str, sample_rate: int = 16000) -> bytes:
    """``text`` spoken by the Piper joe voice (the simulator's caller): s16le mono PCM."""
    return _caller_voice(sample_rate).say(text)


def silence_pcm(seconds: float, sample_rate: int = 16000) -> bytes:
    """Digital silence as s16le mono PCM."""
    return bytes(2 * int(seconds * sample_rate))


def pcm_chunks(pcm: bytes, sample_rate: int, ms: float = 20.0) -> Iterator[bytes]:
    """``pcm`` cut into frames of ``ms`` milliseconds, as a transport delivers it."""
    size = 2 * int(sample_rate * ms / 1000)
    for start in range(0, len(pcm), size):
        yield pcm[start : start + size]


def pcm_seconds(pcm: bytes, sample_rate: int) -> float:
    return len(pcm) / 2 / sample_rate


def words(text: str) -> list[str]:
    """Lower-case words without punctuation, for comparing transcripts."""
    return re.findall(r"[a-z0-9']+", text.lower())
