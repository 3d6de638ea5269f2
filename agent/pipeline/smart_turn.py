"""pipecat's smart-turn v3 end-of-turn model, asked of the host's smart-turn service.

``LocalSmartTurnAnalyzerV3`` loads its model into a new ONNX Runtime session for every
analyzer, and a call needs an analyzer of its own (it holds the call's audio): each call
start cost ~40 ms of CPU and a session's memory. Its prediction (Whisper features in
numpy, then the model) is also the largest single cost of a call on the worker (a third
of its CPU with stub models: ``bench capacity --profile``), and run in a thread of the
worker it holds the GIL in long stretches, which makes the RTP pacer late.

So the analyzer here keeps the call's state in the worker and sends each prediction (the
turn's audio, at most 8 s, as 16-bit PCM) to the host's smart-turn service
(``infra/smart_turn_server.py``, at ``SMART_TURN_URL``), which holds the one model for
every worker of the host and decides all their calls' turns in one ONNX session (one
turn a run on a CPU, batches on a GPU). The analyzer's thread waits on its socket
without the GIL; the worker's event loop is not involved. Each thread in flight holds one
keep-alive HTTP connection of the worker's pool (``SmartTurnClient``), kept for the next
decision.

The service failing must not cost a call: a decision that does not come within the
deadline, or a service that is down, is "incomplete", and the turn ends by pipecat's
fallback (``TURN_FALLBACK_SECS`` of silence) as if the model had said so; the next
decision connects again.
"""

from __future__ import annotations

import http.client
import json
import logging
import select
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

logger = logging.getLogger(__name__)

#: What the model hears of a turn: its last 8 s (the service cuts the rest).
MODEL_SECONDS = 8
MODEL_RATE = 16000
#: The decision the analyzer takes when the service gives none: the fallback ends the turn.
INCOMPLETE: dict[str, Any] = {"prediction": 0, "probability": 0.0}
#: The shortest deadline ``deadline_for`` gives: a batch's run on a busy CPU.
MIN_DEADLINE_S = 0.2


def deadline_for(fallback_s: float, vad_stop_s: float) -> float:
    """How long a decision may take: it is asked at the VAD's stop, and one that comes
    after the fallback's silence would have ended the turn anyway is worth nothing."""
    return max(MIN_DEADLINE_S, fallback_s - vad_stop_s)


class SmartTurnClient:
    """One worker's keep-alive connections to the smart-turn service, and its decisions.

    A decision takes an idle connection (or opens one), sends the turn, waits for the
    answer until the deadline, and gives the connection back. Any failure closes the
    connections (the next decision opens a new one) and answers ``INCOMPLETE``; the first
    failure of a run of them is a warning, its end an info line.
    """

    def __init__(self, url: str, deadline_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the smart-turn URL must be http(s)://host:port/path, got {url!r}")
        self.url = url
        self.deadline_s = deadline_s
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = parts.path or "/"
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._failing = False

    def decide(self, audio: np.ndarray, sample_rate: int) -> dict[str, Any]:
        """pipecat's ``{"prediction", "probability"}`` for one turn's float32 audio at
        ``sample_rate`` (blocking, at most about ``deadline_s``)."""
        deadline = time.monotonic() + self.deadline_s
        pcm = np.clip(audio[-MODEL_SECONDS * sample_rate :] * 32768.0, -32768, 32767)
        body = pcm.astype("<i2").tobytes()
        connection = self._take()
        try:
            connection.request(
                "POST",
                f"{self._path}?sample_rate={sample_rate}",
                body=body,
                headers={"Content-Type": "application/octet-stream"},
            )
            if connection.sock is not None:  # the rest of the deadline for the answer
                connection.sock.settimeout(max(0.001, deadline - time.monotonic()))
            response = connection.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException) as e:
            connection.close()
            self.close()  # the others went to the same server: open new ones
            return self._failed(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
        self._give_back(connection)
        try:
            if response.status != 200:
                raise ValueError(f"{response.status} {answer[:200].decode(errors='replace')}")
            result = json.loads(answer)
            decision = {
                "prediction": int(result["prediction"]),
                "probability": float(result["probability"]),
            }
        except (ValueError, KeyError, TypeError) as e:
            return self._failed(f"unexpected answer: {e}")
        if self._failing:
            self._failing = False
            logger.info("the smart-turn service at %s decides again", self.url)
        return decision

    def _failed(self, why: str) -> dict[str, Any]:
        if not self._failing:
            self._failing = True
            logger.warning(
                "no end-of-turn decision from the smart-turn service at %s (%s): turns are "
                "taken as unfinished, and end after their fallback silence, until it answers",
                self.url,
                why,
            )
        else:
            logger.debug("still no decision from %s: %s", self.url, why)
        return dict(INCOMPLETE)

    def _take(self) -> http.client.HTTPConnection:
        """An idle connection the server has not closed meanwhile, or a new one."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                return kind(self._host, self._port, timeout=self.deadline_s)
            sock = connection.sock
            # Readable while idle: the server closed it (or broke the protocol).
            if sock is not None and not select.select([sock], [], [], 0)[0]:
                sock.settimeout(self.deadline_s)
                return connection
            connection.close()

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.append(connection)

    def close(self) -> None:
        """Close the idle connections (those in use close when their decision fails)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def warm_up(client: SmartTurnClient, sample_rate: int) -> dict[str, Any]:
    """One decision, so the first call's finds a connection open (and the logs say now,
    not at the first turn, if the service does not answer)."""
    return client.decide(np.zeros(sample_rate // 10, dtype=np.float32), sample_rate)


class SmartTurnAnalyzer(LocalSmartTurnAnalyzerV3):
    """One call's smart-turn v3 analyzer: its state here, its model in the host's service."""

    def __init__(self, client: SmartTurnClient, **kwargs: Any) -> None:
        BaseSmartTurn.__init__(self, **kwargs)  # the state; no model of its own
        self._client = client
        self._log_data = False

    def _predict_endpoint(self, audio_array: np.ndarray) -> dict[str, Any]:
        # Called in the analyzer's own thread: it waits here without holding the GIL.
        return self._client.decide(audio_array, self._sample_rate or MODEL_RATE)
