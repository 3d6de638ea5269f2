"""G.711 tables against the reference arithmetic (Python 3.11's audioop implements it)."""

import warnings

import numpy as np
import pytest

from telephony.rtp import g711

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

ALL_SAMPLES = np.arange(-32768, 32768, dtype="<i2").tobytes()
ALL_CODES = bytes(range(256))


def test_mu_law_matches_the_reference_for_every_sample_and_code() -> None:
    assert g711.encode("PCMU", ALL_SAMPLES) == audioop.lin2ulaw(ALL_SAMPLES, 2)
    assert g711.decode("PCMU", ALL_CODES) == audioop.ulaw2lin(ALL_CODES, 2)


def test_a_law_matches_the_reference_for_every_sample_and_code() -> None:
    assert g711.encode("PCMA", ALL_SAMPLES) == audioop.lin2alaw(ALL_SAMPLES, 2)
    assert g711.decode("PCMA", ALL_CODES) == audioop.alaw2lin(ALL_CODES, 2)


@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
def test_encoded_audio_survives_decode_and_reencode(codec: str) -> None:
    tone = (8000 * np.sin(np.arange(8000) * 2 * np.pi * 440 / 8000)).astype("<i2").tobytes()
    coded = g711.encode(codec, tone)
    assert g711.encode(codec, g711.decode(codec, coded)) == coded


def test_silence_bytes_decode_to_zero() -> None:
    for codec, byte in g711.SILENCE.items():
        assert g711.decode(codec, bytes([byte])) in (b"\0\0", b"\x08\x00", b"\xf8\xff")
    assert g711.decode("PCMU", bytes([g711.SILENCE["PCMU"]])) == b"\0\0"


def test_unknown_codec_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unsupported codec 'G729'"):
        g711.encode("G729", b"\0\0")
