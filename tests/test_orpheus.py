"""Orpheus's token stream to audio, with a tiny random-weight SNAC and a fake token stream."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from infra import orpheus
from infra.gpu_check import SNAC_TINY


@pytest.fixture(scope="module")
def snac_model():  # noqa: ANN201 - a snac.SNAC
    from snac import SNAC

    torch.manual_seed(0)
    return SNAC(**SNAC_TINY).eval()


@pytest.fixture
def batcher(snac_model) -> Iterator[orpheus.SnacBatcher]:  # noqa: ANN001
    batcher = orpheus.SnacBatcher(snac_model)
    batcher.start()
    yield batcher
    batcher.stop()


def frame_tokens(codes: list[int]) -> list[int]:
    """The 7 custom-token numbers Orpheus emits for one frame's codes (in token order)."""
    return [orpheus.AUDIO_TOKEN_OFFSET + orpheus.CODEBOOK_SIZE * i + c for i, c in enumerate(codes)]


def random_frames(n: int, seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(rng.integers(0, 4096, 7)) for _ in range(n)]


def test_prompt_wraps_the_text_in_orpheus_control_tokens() -> None:
    assert orpheus.prompt("Hello.", "tara") == (
        "<custom_token_3><|begin_of_text|>tara: Hello.<|eot_id|>"
        "<custom_token_4><custom_token_5><custom_token_1>"
    )
    assert orpheus.END_OF_SPEECH_ID == 128258


def test_custom_tokens_are_found_across_split_pieces() -> None:
    pieces = ["<custom_tok", "en_12><custom_token_4", "107>", "x<custom_token_9>"]
    assert list(orpheus.custom_numbers(pieces)) == [12, 4107, 9]


def test_seven_tokens_make_a_frame_with_per_position_offsets() -> None:
    assembler = orpheus.FrameAssembler()
    tokens = frame_tokens([1, 2, 3, 4, 5, 6, 7])
    frames = [assembler.push(t) for t in tokens]
    assert frames[:6] == [None] * 6
    assert frames[6] == orpheus.Frame(coarse=(1,), middle=(2, 5), fine=(3, 4, 6, 7))


def test_a_frame_with_an_out_of_range_code_is_dropped() -> None:
    assembler = orpheus.FrameAssembler()
    bad = frame_tokens([1, 2, 3, 4, 5, 6, 7])
    bad[3] -= orpheus.CODEBOOK_SIZE  # a position-2 code where position 3 belongs
    assert [assembler.push(t) for t in bad] == [None] * 7
    assert assembler.dropped == 1
    good = [assembler.push(t) for t in frame_tokens([0] * 7)]
    assert good[6] == orpheus.Frame(coarse=(0,), middle=(0, 0), fine=(0, 0, 0, 0))


def test_window_codes_have_snac_row_lengths() -> None:
    frames = [orpheus.Frame((i,), (i, i), (i, i, i, i)) for i in range(4)]
    rows = orpheus.window_codes(frames)
    assert [len(r) for r in rows] == [4, 8, 16]


def test_each_frame_is_released_once_from_the_middle_of_its_window(
    batcher: orpheus.SnacBatcher,
) -> None:
    assembler = orpheus.FrameAssembler()
    frames = [
        f for codes in random_frames(6) for t in frame_tokens(codes) if (f := assembler.push(t))
    ]
    decoder = orpheus.SlidingWindowDecoder(batcher, window=4, emit=1)
    released = [decoder.push(f) for f in frames]
    tail = decoder.flush()
    assert released[:3] == [None, None, None]
    spf = orpheus.SAMPLES_PER_FRAME
    out = [a for a in released[3:] if a is not None]
    assert [len(a) for a in out] == [2 * spf, spf, spf]  # frames 0-1, 2, 3
    assert tail is not None and len(tail) == 2 * spf  # frames 4-5 at the end
    # Frame 3 is rendered as position 1 of the window of frames 2..5.
    (window,) = batcher.decode_batch([orpheus.window_codes(frames[2:6])])
    np.testing.assert_allclose(out[2], window[spf : 2 * spf], atol=1e-5)


def test_windows_from_two_streams_go_to_snac_in_one_call(snac_model) -> None:  # noqa: ANN001
    batcher = orpheus.SnacBatcher(snac_model)
    a = [orpheus.Frame((1,), (2, 3), (4, 5, 6, 7))] * 4
    b = [orpheus.Frame((9,), (8, 7), (6, 5, 4, 3))] * 4
    futures = [batcher.submit(orpheus.window_codes(w)) for w in (a, b)]  # both queued first
    batcher.start()
    try:
        audio = [f.result() for f in futures]
    finally:
        batcher.stop()
    assert batcher.batch_sizes == [2]
    (alone,) = batcher.decode_batch([orpheus.window_codes(b)])
    np.testing.assert_allclose(audio[1], alone, atol=1e-5)


def test_leading_silence_is_released_from_50_ms_before_the_first_sound() -> None:
    gate = orpheus.LeadingSilenceGate(24000, threshold=0.01, lead_ms=50.0)
    silence = np.zeros(2048, np.float32)
    assert gate.push(silence).size == 0
    chunk = np.zeros(2048, np.float32)
    chunk[100:] = 0.5
    out = gate.push(chunk)
    assert len(out) == 1200 + (2048 - 100)  # 50 ms at 24 kHz, then the sound onwards
    assert out[1199] == 0.0 and out[1200] == 0.5
    later = np.full(10, 0.001, np.float32)
    assert gate.push(later) is later  # once open, everything passes, quiet or not


def test_all_silence_yields_nothing() -> None:
    gate = orpheus.LeadingSilenceGate(24000)
    assert all(gate.push(np.zeros(512, np.float32)).size == 0 for _ in range(5))
    assert not gate.open


class FakeSource:
    """Orpheus's text stream for a few frames, split mid-token, as a server streams it."""

    def __init__(self, frames: list[list[int]]) -> None:
        self.prompts: list[str] = []
        text = "".join(f"<custom_token_{t}>" for c in frames for t in frame_tokens(c))
        self._pieces = [text[i : i + 11] for i in range(0, len(text), 11)]

    def pieces(self, prompt_text: str) -> Iterator[str]:
        self.prompts.append(prompt_text)
        yield from self._pieces


def test_the_synthesizer_turns_a_token_stream_into_audio(batcher: orpheus.SnacBatcher) -> None:
    source = FakeSource(random_frames(6, seed=2))
    synthesizer = orpheus.OrpheusSynthesizer(source, batcher, voice="leo", silence_threshold=0.0)
    chunks = list(synthesizer.synthesize("Your balance is paid."))
    assert source.prompts == [orpheus.prompt("Your balance is paid.", "leo")]
    assert all(c.dtype == np.float32 for c in chunks)
    total = sum(len(c) for c in chunks)
    assert 0 < total <= 6 * orpheus.SAMPLES_PER_FRAME
    assert synthesizer.sample_rate == 24000


async def test_the_tts_server_streams_orpheus_audio(batcher: orpheus.SnacBatcher) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from infra.tts_server import create_app

    source = FakeSource(random_frames(5, seed=3))
    synthesizer = orpheus.OrpheusSynthesizer(source, batcher, silence_threshold=0.0, max_streams=4)
    async with TestClient(TestServer(create_app(synthesizer))) as client:
        response = await client.post("/v1/speech", json={"text": "Hello.", "sample_rate": 24000})
        body = await response.read()
    assert response.status == 200
    assert 0 < len(body) <= 5 * orpheus.SAMPLES_PER_FRAME * 2  # s16le
    assert source.prompts == [orpheus.prompt("Hello.", "tara")]
