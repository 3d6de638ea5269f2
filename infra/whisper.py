"""What every Whisper backend shares: the rate it hears at and when a row counts as silence.

The server (infra/stt_server.py) resamples to this rate and loads the backends; the backends
(faster-whisper there, infra/whisper_transformers.py, infra/whisper_trtllm.py) read these from
here rather than from the server that loads them.
"""

from __future__ import annotations

MODEL_SAMPLE_RATE = 16000
NO_SPEECH_THRESHOLD = 0.6
LOG_PROB_THRESHOLD = -1.0
"""faster-whisper's defaults: a row this likely silent and this unsure of its words is silence."""
