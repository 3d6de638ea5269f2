"""pipecat's smart-turn v3 end-of-turn model, run for all of a worker's calls in one helper
process.

``LocalSmartTurnAnalyzerV3`` loads its model into a new ONNX Runtime session for every
analyzer, and a call needs an analyzer of its own (it holds the call's audio): each call
start cost ~40 ms of CPU and a session's memory. Its prediction (Whisper features in
numpy, then the model) is also the largest single cost of a call on the worker (a third
of its CPU with stub models: ``bench capacity --profile``), and run in a thread of the
worker it holds the GIL in long stretches, which makes the RTP pacer late.

So the analyzer here keeps the call's state in the worker and sends each prediction (the
turn's audio, at most 8 s) to a helper process that holds the one model: the worker's
thread waits without the GIL. The helper runs under ``SCHED_IDLE``: a prediction (~50 ms of
CPU, whatever the turn's length) takes only the time the calls leave on the core, and any
of the worker's threads that wakes takes the core from it at once. As an ordinary process
it kept the worker's event loop waiting for its slice to end (up to a 4 ms kernel tick),
and the calls' audio with it (``bench capacity``, measured with ``perf sched``).

The decisions of all the worker's calls are batched (``Decisions``): those asked for while
the helper is busy go to it together, as one run of the one ONNX session, whose cost grows
much less than its batch (``python -m agent bench smart-turn``, docs/benchmarks/smart-turn.md).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np
import soxr
from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import (
    LocalSmartTurnAnalyzerV3,
    compute_whisper_log_mel_features,
)

logger = logging.getLogger(__name__)

#: What the model hears of a turn: its last 8 s at 16 kHz, zeros before a shorter one.
MODEL_RATE = 16000
MODEL_SAMPLES = 8 * MODEL_RATE
#: The most decisions in one run of the model.
MAX_BATCH = 64


@functools.cache
def _model(sample_rate: int) -> LocalSmartTurnAnalyzerV3:
    """In the helper process: pipecat's analyzer, for its model and its prediction."""
    return LocalSmartTurnAnalyzerV3(sample_rate=sample_rate)


def _features(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """In the helper process: the model's input for one turn, as pipecat's analyzer makes it."""
    if sample_rate != MODEL_RATE:
        audio = soxr.resample(audio, sample_rate, MODEL_RATE, quality="HQ")
    audio = audio[-MODEL_SAMPLES:]
    audio = np.pad(audio, (MODEL_SAMPLES - len(audio), 0))
    return compute_whisper_log_mel_features(audio, do_normalize=True)


def _predict(audios: Sequence[np.ndarray], sample_rates: Sequence[int]) -> list[dict[str, Any]]:
    """In the helper process: the decisions on several turns, one run of the model."""
    features = np.stack([_features(a, r) for a, r in zip(audios, sample_rates, strict=True)])
    (probabilities,) = _model(MODEL_RATE)._session.run(None, {"input_features": features})
    return [
        {"prediction": 1 if p > 0.5 else 0, "probability": float(p)} for p in probabilities[:, 0]
    ]


@functools.cache
def helper() -> ProcessPoolExecutor:
    """The worker's smart-turn process (spawned: the worker has threads; one per worker)."""
    return ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_background
    )


def _background() -> None:
    """In the helper process: run only on CPU time nothing else on the core wants, and end
    with the worker."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError) as e:  # not Linux
        logger.info("the smart-turn process keeps its ordinary priority: %s", e)
    threading.Thread(target=_end_with_parent, name="smart-turn-parent", daemon=True).start()


def _end_with_parent() -> None:
    """In the helper process: exit once the worker is gone, however it went.

    A worker killed outright (SIGKILL, out of memory) never shuts its pool down, and its
    helper would wait for work forever: it reads a queue whose writing end it holds itself.
    So would multiprocessing's resource tracker, which the helper keeps open.
    """
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)


def shutdown() -> None:
    """Stop the helper process, if one was started; the next prediction starts another.

    The helper lives as long as its worker; this is for what ends sooner than the process
    (a test run, which then counts the processes it left behind).
    """
    if helper.cache_info().currsize:
        helper().shutdown(wait=True, cancel_futures=True)
        helper.cache_clear()


def _run_in_helper(audios: list[np.ndarray], rates: list[int]) -> list[dict[str, Any]]:
    try:
        return helper().submit(_predict, audios, rates).result()
    except BrokenProcessPool:  # the helper died (killed, out of memory): a new one
        logger.warning("the smart-turn process died; starting another")
        helper.cache_clear()
        return helper().submit(_predict, audios, rates).result()


class Decisions:
    """The end-of-turn decisions of all of a worker's calls, batched.

    A call's analyzer asks from its own thread and waits. The first request starts a run
    of the helper at once; requests that come while it runs wait for it and then go
    together, up to ``max_batch``: with one call nothing waits for company, and under
    load a batch costs the helper far less than its decisions one by one.
    """

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._pending: list[tuple[np.ndarray, int, Future[dict[str, Any]]]] = []
        self._running = False

    def decide(self, audio: np.ndarray, sample_rate: int) -> dict[str, Any]:
        """pipecat's ``{"prediction", "probability"}`` for one turn's audio (blocking)."""
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            self._pending.append((audio, sample_rate, future))
            lead = not self._running
            self._running = True
        if lead:
            # A thread runs batches until none is waiting, then ends: an idle worker has none.
            threading.Thread(target=self._drain, name="smart-turn-batches", daemon=True).start()
        return future.result()

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                if not batch:
                    self._running = False
                    return
            audios, rates, futures = (list(column) for column in zip(*batch, strict=True))
            try:
                results = _run_in_helper(audios, rates)
            except Exception as e:
                for future in futures:
                    future.set_exception(e)
                continue
            for future, result in zip(futures, results, strict=True):
                future.set_result(result)


#: The worker's one batcher, shared by its calls.
DECISIONS = Decisions()


def warm_up(sample_rate: int) -> None:
    """Start the helper and load the model before the first call needs it (~2 s)."""
    DECISIONS.decide(np.zeros(sample_rate // 10, dtype=np.float32), sample_rate)


class SmartTurnAnalyzer(LocalSmartTurnAnalyzerV3):
    """One call's smart-turn v3 analyzer: its state here, its model in the helper process."""

    def __init__(self, **kwargs: Any) -> None:
        BaseSmartTurn.__init__(self, **kwargs)  # the state; no model of its own
        self._log_data = False

    def _predict_endpoint(self, audio_array: np.ndarray) -> dict[str, Any]:
        # Called in the analyzer's own thread: it waits here without holding the GIL.
        return DECISIONS.decide(audio_array, self._sample_rate or MODEL_RATE)
