"""smart-turn in its helper process decides as pipecat's own analyzer does."""

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from agent.pipeline import smart_turn
from agent.pipeline.smart_turn import Decisions, SmartTurnAnalyzer, helper, warm_up
from tools.simulate import CallerVoice


@pytest.fixture(scope="module")
def voice() -> CallerVoice:
    return CallerVoice(16000)


def _audio(voice: CallerVoice, line: str) -> np.ndarray:
    return np.frombuffer(voice.say(line), dtype=np.int16).astype(np.float32) / 32768


def test_calls_keep_their_own_audio_and_load_no_model() -> None:
    first, second = SmartTurnAnalyzer(sample_rate=16000), SmartTurnAnalyzer(sample_rate=16000)
    first.append_audio(b"\1\0" * 320, is_speech=True)

    assert first._audio_buffer and not second._audio_buffer
    assert not hasattr(first, "_session")  # the model is in the helper process only


@pytest.mark.parametrize(
    "line", ["I can pay two hundred dollars on Friday.", "I can pay two hundred dollars and"]
)
def test_it_predicts_what_pipecats_analyzer_predicts(voice: CallerVoice, line: str) -> None:
    audio = _audio(voice, line)
    ours = SmartTurnAnalyzer(sample_rate=16000)._predict_endpoint(audio)
    stock = LocalSmartTurnAnalyzerV3(sample_rate=16000)._predict_endpoint(audio)

    assert ours["prediction"] == stock["prediction"]
    assert ours["probability"] == pytest.approx(stock["probability"])


def test_a_helper_that_died_is_replaced(voice: CallerVoice) -> None:
    warm_up(16000)
    (pid,) = helper()._processes  # one helper per worker
    os.kill(pid, signal.SIGKILL)

    result = SmartTurnAnalyzer(sample_rate=16000)._predict_endpoint(_audio(voice, "Yes."))

    assert result["prediction"] in (0, 1)
    assert pid not in helper()._processes


def test_the_helper_takes_only_cpu_time_nothing_else_wants() -> None:
    assert helper().submit(os.sched_getscheduler, 0).result(timeout=30) == os.SCHED_IDLE


def test_batched_decisions_each_get_their_own_answer(voice: CallerVoice) -> None:
    lines = [
        "I can pay two hundred dollars on Friday.",
        "I can pay two hundred dollars and",
        "Yes.",
        "My date of birth is",
    ]
    audios = [_audio(voice, line) for line in lines]
    stock = LocalSmartTurnAnalyzerV3(sample_rate=16000)
    expected = [stock._predict_endpoint(audio)["probability"] for audio in audios]
    decisions = Decisions(max_batch=3)
    warm_up(16000)
    ran: list[int] = []
    real = smart_turn._run_in_helper

    def counted(audios: list[np.ndarray], rates: list[int]) -> list[dict[str, Any]]:
        ran.append(len(audios))
        return real(audios, rates)

    # Many calls at once, each line asked for several times, all in one burst.
    asked = [i % len(lines) for i in range(12)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(smart_turn, "_run_in_helper", counted)
        with ThreadPoolExecutor(max_workers=12) as calls:
            answers = list(calls.map(lambda i: decisions.decide(audios[i], 16000), asked))

    for i, answer in zip(asked, answers, strict=True):
        assert answer["probability"] == pytest.approx(expected[i], abs=1e-4)
        assert answer["prediction"] == (1 if expected[i] > 0.5 else 0)
    assert sum(ran) == 12 and max(ran) <= 3
    assert len(ran) < 12  # some decisions shared a run of the model


def test_a_turn_at_8_khz_is_heard_as_pipecat_hears_it(voice: CallerVoice) -> None:
    audio = np.frombuffer(CallerVoice(8000).say("Yes, that is me."), dtype=np.int16)
    audio = audio.astype(np.float32) / 32768
    stock, ours = LocalSmartTurnAnalyzerV3(), SmartTurnAnalyzer()
    stock.set_sample_rate(8000)
    ours.set_sample_rate(8000)  # as pipecat's turn strategy does at the call's start
    assert ours._predict_endpoint(audio)["probability"] == pytest.approx(
        stock._predict_endpoint(audio)["probability"], abs=1e-4
    )


def test_a_batch_needs_room_for_one() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        Decisions(max_batch=0)


def test_a_failed_batch_fails_each_of_its_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(audios: list[np.ndarray], rates: list[int]) -> list[dict[str, Any]]:
        raise RuntimeError("the model's file is gone")

    monkeypatch.setattr(smart_turn, "_run_in_helper", broken)
    decisions = Decisions()
    with ThreadPoolExecutor(max_workers=3) as calls:
        asked = [calls.submit(decisions.decide, np.zeros(160, np.float32), 16000) for _ in "abc"]
        for future in asked:
            with pytest.raises(RuntimeError, match="file is gone"):
                future.result(timeout=30)
    # The batcher goes on: the next decision starts a new run.
    monkeypatch.setattr(smart_turn, "_run_in_helper", lambda a, r: [{"prediction": 1}] * len(a))
    assert decisions.decide(np.zeros(160, np.float32), 16000) == {"prediction": 1}
