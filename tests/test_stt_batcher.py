"""The STT batcher with a fake transcriber: what goes into one model call, and what comes back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from infra.stt_batcher import TranscriptionBatcher, shares

LONG_WINDOW_MS = 60_000.0
"""A window no test waits out: batches close on ``max_batch`` only, so no timing is involved."""


def clip(tag: int) -> np.ndarray:
    """An utterance the fake recognises by its first sample."""
    return np.full(160, tag, dtype=np.float32)


class RecordingTranscriber:
    """Answers ``"text <tag>"`` for each clip and records every model call's batch."""

    name = "recording"

    def __init__(self, failing_tags: Sequence[int] = (), fail_batches: bool = False) -> None:
        self.calls: list[list[int]] = []
        self.failing_tags = set(failing_tags)
        self.fail_batches = fail_batches
        self.release = threading.Event()
        self.release.set()

    def transcribe(self, audio: np.ndarray) -> str:
        return self.transcribe_batch([audio])[0]

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        self.release.wait()
        tags = [int(audio[0]) for audio in audios]
        self.calls.append(tags)
        if self.fail_batches and len(tags) > 1:
            raise RuntimeError("batch failed")
        if self.failing_tags & set(tags):
            raise RuntimeError(f"cannot transcribe {sorted(self.failing_tags & set(tags))}")
        return [f"text {tag}" for tag in tags]


async def heard(batcher: TranscriptionBatcher, tag: int) -> str:
    return (await batcher.transcribe(clip(tag))).text


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition()`` holds (bounded by the test's own timeout)."""
    while not condition():
        await asyncio.sleep(0.001)


async def test_finals_that_arrive_together_are_one_model_call_in_order() -> None:
    fake = RecordingTranscriber()
    batcher = TranscriptionBatcher(fake, window_ms=LONG_WINDOW_MS, max_batch=3)
    try:
        texts = await asyncio.gather(*(heard(batcher, tag) for tag in (1, 2, 3)))
    finally:
        batcher.close()

    assert texts == ["text 1", "text 2", "text 3"]
    assert fake.calls == [[1, 2, 3]]
    assert batcher.stats.as_dict() == {
        "model_calls": 1,
        "finals": 3,
        "largest_batch": 3,
        "retried_batches": 0,
    }


async def test_max_batch_splits_a_burst_into_several_calls() -> None:
    fake = RecordingTranscriber()
    batcher = TranscriptionBatcher(fake, window_ms=LONG_WINDOW_MS, max_batch=2)
    try:
        texts = await asyncio.gather(*(heard(batcher, tag) for tag in (1, 2, 3, 4)))
    finally:
        batcher.close()

    assert texts == ["text 1", "text 2", "text 3", "text 4"]
    assert fake.calls == [[1, 2], [3, 4]]


async def test_a_lone_final_goes_alone_once_the_window_is_over() -> None:
    fake = RecordingTranscriber()
    batcher = TranscriptionBatcher(fake, window_ms=0, max_batch=8)
    try:
        first = await heard(batcher, 1)
        second = await heard(batcher, 2)
    finally:
        batcher.close()

    assert (first, second) == ("text 1", "text 2")
    assert fake.calls == [[1], [2]]


async def test_finals_that_queue_while_the_model_runs_share_the_next_call() -> None:
    fake = RecordingTranscriber()
    batcher = TranscriptionBatcher(fake, window_ms=0, max_batch=8)
    fake.release.clear()  # the model is busy with the first final
    try:
        first = asyncio.ensure_future(heard(batcher, 1))
        await until(lambda: batcher.stats.model_calls == 1)
        rest = [asyncio.ensure_future(heard(batcher, tag)) for tag in (2, 3)]
        await asyncio.sleep(0)
        fake.release.set()
        texts = [await first] + [await task for task in rest]
    finally:
        batcher.close()

    assert texts == ["text 1", "text 2", "text 3"]
    assert fake.calls == [[1], [2, 3]]


async def test_a_failed_batch_is_retried_one_by_one_and_fails_only_the_bad_final() -> None:
    fake = RecordingTranscriber(failing_tags=[2])
    batcher = TranscriptionBatcher(fake, window_ms=LONG_WINDOW_MS, max_batch=3)
    try:
        results = await asyncio.gather(
            *(heard(batcher, tag) for tag in (1, 2, 3)), return_exceptions=True
        )
    finally:
        batcher.close()

    assert results[0] == "text 1"
    assert isinstance(results[1], RuntimeError)
    assert "cannot transcribe [2]" in str(results[1])
    assert results[2] == "text 3"
    assert fake.calls == [[1, 2, 3], [1], [2], [3]]
    assert batcher.stats.retried_batches == 1


async def test_a_batch_that_fails_only_as_a_batch_still_answers_everyone() -> None:
    fake = RecordingTranscriber(fail_batches=True)
    batcher = TranscriptionBatcher(fake, window_ms=LONG_WINDOW_MS, max_batch=2)
    try:
        texts = await asyncio.gather(*(heard(batcher, tag) for tag in (1, 2)))
    finally:
        batcher.close()

    assert texts == ["text 1", "text 2"]


async def test_a_final_whose_stream_closed_while_waiting_is_left_out() -> None:
    fake = RecordingTranscriber()
    batcher = TranscriptionBatcher(fake, window_ms=LONG_WINDOW_MS, max_batch=2)
    try:
        gone = asyncio.ensure_future(heard(batcher, 1))
        await asyncio.sleep(0)
        gone.cancel()  # the stream's handler is cancelled when its websocket goes away
        kept = await asyncio.gather(*(heard(batcher, tag) for tag in (2, 3)))
    finally:
        batcher.close()

    assert gone.cancelled()
    assert kept == ["text 2", "text 3"]
    assert fake.calls == [[2, 3]]


async def test_a_final_whose_stream_closed_during_the_model_call_is_dropped() -> None:
    fake = RecordingTranscriber()
    batcher = TranscriptionBatcher(fake, window_ms=LONG_WINDOW_MS, max_batch=2)
    fake.release.clear()
    try:
        gone = asyncio.ensure_future(heard(batcher, 1))
        kept = asyncio.ensure_future(heard(batcher, 2))
        await until(lambda: batcher.stats.model_calls == 1)
        gone.cancel()
        fake.release.set()
        assert await kept == "text 2"
    finally:
        batcher.close()

    assert gone.cancelled()
    assert fake.calls == [[1, 2]]


@pytest.mark.parametrize(("window_ms", "max_batch"), [(-1.0, 4), (20.0, 0)])
def test_bad_settings_are_refused(window_ms: float, max_batch: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        TranscriptionBatcher(RecordingTranscriber(), window_ms=window_ms, max_batch=max_batch)


async def test_each_final_carries_its_share_of_the_model_time_by_audio_length() -> None:
    class Slow(RecordingTranscriber):
        def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
            threading.Event().wait(0.05)
            return super().transcribe_batch(audios)

    batcher = TranscriptionBatcher(Slow(), window_ms=LONG_WINDOW_MS, max_batch=2)
    short, long = np.full(100, 1, dtype=np.float32), np.full(300, 2, dtype=np.float32)
    try:
        a, b = await asyncio.gather(batcher.transcribe(short), batcher.transcribe(long))
    finally:
        batcher.close()

    assert (a.text, b.text) == ("text 1", "text 2")
    assert b.compute_s == pytest.approx(3 * a.compute_s)
    assert 0.05 <= a.compute_s + b.compute_s < 1.0


def test_shares_split_a_batch_by_audio_length() -> None:
    audios = [np.zeros(n, dtype=np.float32) for n in (100, 300, 0)]
    assert shares(2.0, audios) == pytest.approx([0.5, 1.5, 0.0])
    assert shares(1.0, [np.zeros(0), np.zeros(0)]) == [0.5, 0.5]
