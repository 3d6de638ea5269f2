"""The host's smart-turn service: pipecat's decisions, batched, and what it refuses."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from infra.smart_turn_server import (
    CPU,
    CUDA,
    MAX_BATCH,
    ROUTE,
    Decisions,
    Prediction,
    SmartTurnModel,
    batch_for,
    create_app,
    parse_turn,
    providers_for,
)
from tools.simulate import CallerVoice

LINES = [
    "I can pay two hundred dollars on Friday.",
    "I can pay two hundred dollars and",
    "Yes.",
    "My date of birth is",
]


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    return SmartTurnModel(threads=1)


def _pcm(line: str, rate: int = 16000) -> bytes:
    return CallerVoice(rate).say(line)


def _float(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768


class Gated:
    """A stand-in model whose first run waits for the test, counting each run's batch."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.first_started = threading.Event()
        self.go = threading.Event()

    def __call__(self, audios: Sequence[np.ndarray], rates: Sequence[int]) -> list[Prediction]:
        self.batches.append(len(audios))
        if len(self.batches) == 1:
            self.first_started.set()
            self.go.wait(30)
        # Each answer names its turn: its length, as its probability.
        return [{"prediction": 1, "probability": float(len(a))} for a in audios]


def test_every_turn_gets_pipecats_decision_on_it(model: SmartTurnModel) -> None:
    audios = [_float(_pcm(line)) for line in LINES]
    stock = LocalSmartTurnAnalyzerV3(sample_rate=16000)
    expected = [stock._predict_endpoint(a) for a in audios]

    ours = model.predict(audios, [16000] * len(audios))  # one run for all four

    for got, want in zip(ours, expected, strict=True):
        assert got["prediction"] == want["prediction"]
        assert got["probability"] == pytest.approx(want["probability"], abs=1e-4)


def test_a_turn_at_8_khz_is_heard_as_pipecat_hears_it(model: SmartTurnModel) -> None:
    audio = _float(_pcm("Yes, that is me.", 8000))
    stock = LocalSmartTurnAnalyzerV3()
    stock.set_sample_rate(8000)  # as pipecat's turn strategy does at the call's start

    (ours,) = model.predict([audio], [8000])

    assert ours["probability"] == pytest.approx(
        stock._predict_endpoint(audio)["probability"], abs=1e-4
    )


async def test_decisions_asked_during_a_run_share_the_next() -> None:
    gated = Gated()
    decisions = Decisions(gated, max_batch=3)
    try:
        first = asyncio.create_task(decisions.decide(np.zeros(1, np.float32), 16000))
        await asyncio.to_thread(gated.first_started.wait, 30)
        # Five calls ask while the model runs the first: they wait, then go 3 + 2.
        rest = [
            asyncio.create_task(decisions.decide(np.zeros(n, np.float32), 16000))
            for n in range(2, 7)
        ]
        await asyncio.sleep(0)
        assert decisions.waiting == 5
        gated.go.set()
        answers = await asyncio.gather(first, *rest)
    finally:
        decisions.close()

    assert [a["probability"] for a in answers] == [1, 2, 3, 4, 5, 6]  # each its own
    assert gated.batches == [1, 3, 2]


async def test_a_decision_whose_caller_left_costs_no_run() -> None:
    gated = Gated()
    decisions = Decisions(gated)
    try:
        first = asyncio.create_task(decisions.decide(np.zeros(1, np.float32), 16000))
        await asyncio.to_thread(gated.first_started.wait, 30)
        gone = asyncio.create_task(decisions.decide(np.zeros(2, np.float32), 16000))
        kept = asyncio.create_task(decisions.decide(np.zeros(3, np.float32), 16000))
        await asyncio.sleep(0)
        gone.cancel()  # its client hung up: aiohttp cancels the handler
        gated.go.set()
        assert (await first)["probability"] == 1
        assert (await kept)["probability"] == 3
    finally:
        decisions.close()
    assert gated.batches == [1, 1]


async def test_a_failed_run_fails_its_decisions_and_the_next_runs() -> None:
    runs: list[int] = []

    def broken_once(audios: Sequence[np.ndarray], rates: Sequence[int]) -> list[Prediction]:
        runs.append(len(audios))
        if len(runs) == 1:
            raise RuntimeError("the model's file is gone")
        return [{"prediction": 0, "probability": 0.1}] * len(audios)

    app = create_app(Decisions(broken_once), {"model": "test"})
    async with TestClient(TestServer(app)) as client:
        failed = await client.post(f"{ROUTE}?sample_rate=16000", data=b"\0\0" * 160)
        assert failed.status == 500
        assert "file is gone" in (await failed.json())["error"]
        ok = await client.post(f"{ROUTE}?sample_rate=16000", data=b"\0\0" * 160)
        assert ok.status == 200
        assert await ok.json() == {"prediction": 0, "probability": 0.1}


@pytest.mark.parametrize(
    ("query", "body", "message"),
    [
        ("", b"\0\0", "sample_rate is required"),
        ("?sample_rate=fast", b"\0\0", "must be an integer, got 'fast'"),
        ("?sample_rate=4000", b"\0\0", "must be 8000 to 48000 Hz, got 4000"),
        ("?sample_rate=16000", b"", "the body must be the turn's audio"),
        ("?sample_rate=16000", b"\0\0\0", "an even number of bytes, got 3"),
    ],
)
async def test_a_request_it_cannot_take_is_a_400_saying_why(
    query: str, body: bytes, message: str
) -> None:
    gated = Gated()
    gated.go.set()
    app = create_app(Decisions(gated), {"model": "test"})
    async with TestClient(TestServer(app)) as client:
        response = await client.post(ROUTE + query, data=body)
        assert response.status == 400
        assert message in (await response.json())["error"]
    assert gated.batches == []


async def test_health_names_the_model_and_its_provider() -> None:
    description = {"model": "smart-turn-v3.2-cpu", "providers": [CPU], "max_batch": 64}
    async with TestClient(TestServer(create_app(Decisions(Gated()), description))) as client:
        response = await client.get("/health")
        assert response.status == 200
        assert await response.json() == {"status": "ok", **description, "waiting": 0}


def test_a_turn_is_heard_as_the_analyzer_holds_it_its_last_8_s() -> None:
    pcm = np.arange(-5, 9 * 8000 - 5, dtype="<i2")  # 9 s at 8 kHz
    audio, rate = parse_turn({"sample_rate": "8000"}, pcm.tobytes())
    assert rate == 8000 and len(audio) == 8 * 8000
    assert audio[-1] == pcm[-1] / 32768 and audio.dtype == np.float32


@pytest.mark.parametrize(
    ("device", "available", "chosen"),
    [
        ("cpu", [CUDA, CPU], [CPU]),
        ("auto", [CPU], [CPU]),
        ("auto", ["TensorrtExecutionProvider", CUDA, CPU], [CUDA, CPU]),
        ("cuda", [CUDA, CPU], [CUDA, CPU]),
    ],
)
def test_the_provider_is_chosen_from_what_onnx_runtime_has(
    device: str, available: list[str], chosen: list[str]
) -> None:
    assert providers_for(device, available) == chosen


def test_cuda_asked_for_and_missing_is_refused() -> None:
    with pytest.raises(ValueError, match="no CUDAExecutionProvider here"):
        providers_for("cuda", [CPU])
    with pytest.raises(ValueError, match="device must be one of"):
        providers_for("tpu", [CPU])


def test_a_batch_needs_room_for_one() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        Decisions(Gated(), max_batch=0)


def test_a_cpu_decides_one_turn_a_run_and_a_gpu_batches() -> None:
    assert batch_for([CPU]) == 1  # a batch costs a CPU more than its turns one by one
    assert batch_for([CUDA, CPU]) == MAX_BATCH
