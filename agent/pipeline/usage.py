"""What a model request consumed beyond pipecat's own usage metrics, for the cost ledger.

pipecat counts STT audio seconds, LLM tokens and TTS characters. The ledger also needs the
time the model servers spent on each request (our own servers report it: ``compute_ms`` in
an STT final and in an LLM usage chunk, ``X-Real-Time-Factor`` on a TTS response;
docs/protocols.md) and the seconds of audio the self-hosted TTS produced. They travel as
metrics frames like pipecat's, so the turn ledger (``agent.pipeline.turns``) counts them
where it counts the rest. A third-party server (vLLM, trtllm-serve) reports no time: its
requests are priced by their tokens alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pipecat.frames.frames import MetricsFrame
from pipecat.metrics.metrics import MetricsData
from pipecat.processors.frame_processor import FrameProcessor

#: The stages whose servers may report their time.
STAGES = ("stt", "llm", "tts")


class ComputeUsageMetricsData(MetricsData):
    """Seconds of a model server's time one request of ``stage`` used, as the server said."""

    stage: str
    value: float


class TTSAudioUsageMetricsData(MetricsData):
    """Seconds of audio the self-hosted TTS produced for one request."""

    value: float


def reported_seconds(report: Mapping[str, Any], key: str = "compute_ms") -> float | None:
    """A server's ``compute_ms`` in seconds; None when absent or not a sane number."""
    value = report.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value / 1000.0


async def report_usage(processor: FrameProcessor, *data: MetricsData) -> None:
    """Push ``data`` as a metrics frame, when the processor reports usage at all."""
    if processor.can_generate_metrics() and processor.usage_metrics_enabled:
        await processor.push_frame(MetricsFrame(data=list(data)))


async def report_compute(processor: FrameProcessor, stage: str, seconds: float | None) -> None:
    """Push the server's time for one request of ``stage`` (nothing when it gave none)."""
    if seconds is not None:
        await report_usage(
            processor,
            ComputeUsageMetricsData(processor=processor.name, stage=stage, value=seconds),
        )
