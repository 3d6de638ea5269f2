"""pipecat's smart-turn v3 end-of-turn model, with one ONNX session for all of a worker's calls.

``LocalSmartTurnAnalyzerV3`` loads its model into a new ONNX Runtime session for every
analyzer, and a call needs an analyzer of its own (it holds the call's audio): each call
start cost ~40 ms of CPU and a session's memory. An ONNX Runtime session may be run from
several threads at once, so here the session is built once per process and every call's
analyzer runs on it; the per-call state stays in the analyzer.
"""

from __future__ import annotations

import functools
from typing import Any

from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3


@functools.cache
def _session() -> Any:
    """The bundled model's session, built as pipecat builds it."""
    return LocalSmartTurnAnalyzerV3()._session


class SmartTurnAnalyzer(LocalSmartTurnAnalyzerV3):
    """One call's smart-turn v3 analyzer on the process's shared session."""

    def __init__(self, **kwargs: Any) -> None:
        BaseSmartTurn.__init__(self, **kwargs)  # the state; the model is the shared one
        self._log_data = False
        self._session = _session()
