"""The usage a model client reports beyond pipecat's: the servers' time, parsed with care."""

import pytest
from pipecat.frames.frames import MetricsFrame
from pipecat.processors.frame_processor import FrameProcessor

from agent.pipeline.usage import ComputeUsageMetricsData, report_compute, reported_seconds


@pytest.mark.parametrize(
    ("report", "seconds"),
    [
        ({"compute_ms": 250}, 0.25),
        ({"compute_ms": 0.0}, 0.0),
        ({}, None),  # a third-party server: its tokens are priced alone
        ({"compute_ms": "12"}, None),
        ({"compute_ms": True}, None),
        ({"compute_ms": -1}, None),
        ({"compute_ms": float("nan")}, None),
    ],
)
def test_reported_seconds(report: dict[str, object], seconds: float | None) -> None:
    assert reported_seconds(report) == seconds


class Recorder(FrameProcessor):
    def __init__(self) -> None:
        super().__init__()
        self.pushed: list[object] = []

    def can_generate_metrics(self) -> bool:
        return True

    @property
    def usage_metrics_enabled(self) -> bool:  # set up by the pipeline's StartFrame otherwise
        return True

    async def push_frame(self, frame, direction=None):  # type: ignore[no-untyped-def]
        self.pushed.append(frame)


async def test_a_reported_time_goes_out_as_a_metrics_frame() -> None:
    processor = Recorder()
    await report_compute(processor, "stt", 0.12)
    await report_compute(processor, "stt", None)
    [frame] = processor.pushed
    assert isinstance(frame, MetricsFrame)
    [data] = frame.data
    assert isinstance(data, ComputeUsageMetricsData)
    assert (data.stage, data.value) == ("stt", 0.12)
