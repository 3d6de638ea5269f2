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
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np
from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

logger = logging.getLogger(__name__)


@functools.cache
def _model(sample_rate: int) -> LocalSmartTurnAnalyzerV3:
    """In the helper process: pipecat's analyzer, for its model and its prediction."""
    return LocalSmartTurnAnalyzerV3(sample_rate=sample_rate)


def _predict(audio: np.ndarray, sample_rate: int) -> dict[str, Any]:
    """In the helper process: pipecat's own prediction for one turn's audio."""
    model = _model(sample_rate)
    model.set_sample_rate(sample_rate)
    return model._predict_endpoint(audio)


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


def warm_up(sample_rate: int) -> None:
    """Start the helper and load the model before the first call needs it (~2 s)."""
    helper().submit(_predict, np.zeros(sample_rate // 10, dtype=np.float32), sample_rate).result()


class SmartTurnAnalyzer(LocalSmartTurnAnalyzerV3):
    """One call's smart-turn v3 analyzer: its state here, its model in the helper process."""

    def __init__(self, **kwargs: Any) -> None:
        BaseSmartTurn.__init__(self, **kwargs)  # the state; no model of its own
        self._log_data = False

    def _predict_endpoint(self, audio_array: np.ndarray) -> dict[str, Any]:
        # Called in the analyzer's own thread: it waits here without holding the GIL.
        rate = self._sample_rate or 16000
        try:
            result: dict[str, Any] = helper().submit(_predict, audio_array, rate).result()
        except BrokenProcessPool:  # the helper died (killed, out of memory): a new one
            logger.warning("the smart-turn process died; starting another")
            helper.cache_clear()
            result = helper().submit(_predict, audio_array, rate).result()
        return result
