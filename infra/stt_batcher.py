"""Batching finals across calls: one model call for every final that arrives close together.

A Whisper call costs about the same for one 30 s window as for several stacked ones (the
encoder runs on fixed-size mel windows, the decoder steps all rows together), so finals
from different calls that arrive within a short window are run as one batch. The window
starts when the oldest pending final arrived: a final waits at most ``window_s`` for
company, and finals that queue up while the model runs go into the next batch at once.

If a batch fails, each of its finals is retried once on its own, so one bad utterance
fails only its own stream (the stream is then closed with 1011, docs/protocols.md).

Each final carries its share of the model's time (``Transcript.compute_s``), for the cost
ledger: a batch's time split across its members by audio length, the way the decoder's work
grows with it. A failed batch's time is charged to no one (its retries are timed alone).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

logger = logging.getLogger(__name__)

DEFAULT_WINDOW_MS = 20.0
DEFAULT_MAX_BATCH = 16


class Transcriber(Protocol):
    """A speech-to-text backend (blocking, CPU or GPU); audio is mono float32 16 kHz in [-1, 1]."""

    name: str

    def transcribe(self, audio: np.ndarray) -> str:
        """Transcribe one utterance."""
        ...

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        """Transcribe several utterances in one model call; texts in the same order."""
        ...


@dataclass
class BatchStats:
    """What the batcher has done so far (served in ``/health``)."""

    model_calls: int = 0
    finals: int = 0
    largest_batch: int = 0
    retried_batches: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "model_calls": self.model_calls,
            "finals": self.finals,
            "largest_batch": self.largest_batch,
            "retried_batches": self.retried_batches,
        }


@dataclass(frozen=True)
class Transcript:
    """One final's text and its share of the model's time, in seconds."""

    text: str
    compute_s: float


@dataclass
class _Pending:
    audio: np.ndarray
    future: asyncio.Future[Transcript]
    arrived: float = field(default_factory=time.monotonic)


class TranscriptionBatcher:
    """Gathers concurrent ``transcribe`` calls into ``transcribe_batch`` calls on one thread.

    Every stream of the server shares one batcher; the model runs on a single worker
    thread, so the event loop keeps serving audio while a batch is decoded.
    """

    def __init__(
        self,
        transcriber: Transcriber,
        *,
        window_ms: float = DEFAULT_WINDOW_MS,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        if window_ms < 0:
            raise ValueError(f"window_ms must be >= 0, got {window_ms}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._transcriber = transcriber
        self.window_s = window_ms / 1000
        self.max_batch = max_batch
        self.stats = BatchStats()
        self._pending: deque[_Pending] = deque()
        self._wake: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transcribe")

    @property
    def name(self) -> str:
        return self._transcriber.name

    async def transcribe(self, audio: np.ndarray) -> Transcript:
        """The text of ``audio``, transcribed in a batch with whatever arrives with it."""
        loop = asyncio.get_running_loop()
        if self._runner is None or self._runner.done():
            self._wake = asyncio.Event()
            self._runner = loop.create_task(self._run(), name="stt-batcher")
        assert self._wake is not None
        item = _Pending(audio, loop.create_future())
        self._pending.append(item)
        self._wake.set()
        return await item.future

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            self._drop_abandoned()
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            deadline = self._pending[0].arrived + self.window_s
            while len(self._pending) < self.max_batch:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), remaining)
                except TimeoutError:
                    break
                self._drop_abandoned()
            self._drop_abandoned()
            batch = [
                self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))
            ]
            if batch:
                await self._serve(batch)

    def _drop_abandoned(self) -> None:
        """Forget finals whose stream went away while they waited."""
        if any(item.future.done() for item in self._pending):
            self._pending = deque(item for item in self._pending if not item.future.done())

    async def _serve(self, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        audios = [item.audio for item in batch]
        self.stats.model_calls += 1
        self.stats.finals += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        try:
            texts, seconds = await loop.run_in_executor(self._executor, self._timed, audios)
            if len(texts) != len(batch):
                raise RuntimeError(f"{len(texts)} texts for a batch of {len(batch)}")
        except Exception as error:
            if len(batch) == 1:
                _settle(batch[0].future, error=error)
                return
            logger.warning("a batch of %d failed (%s); retrying each alone", len(batch), error)
            self.stats.retried_batches += 1
            for item in batch:
                if item.future.done():
                    continue
                await self._serve([item])
            return
        for item, text, share in zip(batch, texts, shares(seconds, audios), strict=True):
            _settle(item.future, Transcript(text, share))

    def _timed(self, audios: list[np.ndarray]) -> tuple[list[str], float]:
        """The batch's texts and the model's time for them (on the worker thread)."""
        started = time.perf_counter()
        texts = self._transcriber.transcribe_batch(audios)
        return texts, time.perf_counter() - started

    def close(self) -> None:
        """Stop batching; finals still waiting fail with ``CancelledError``."""
        if self._runner is not None:
            self._runner.cancel()
        for item in self._pending:
            item.future.cancel()
        self._pending.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)


def shares(seconds: float, audios: Sequence[np.ndarray]) -> list[float]:
    """``seconds`` of a batch split across its members by audio length (equally if all empty)."""
    total = sum(audio.size for audio in audios)
    if not total:
        return [seconds / len(audios)] * len(audios)
    return [seconds * audio.size / total for audio in audios]


def _settle(
    future: asyncio.Future[Transcript],
    result: Transcript | None = None,
    *,
    error: BaseException | None = None,
) -> None:
    """Resolve a final's future unless its stream already gave up on it."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert result is not None
        future.set_result(result)
