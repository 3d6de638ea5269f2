"""smart-turn in its helper process decides as pipecat's own analyzer does."""

import os
import signal

import numpy as np
import pytest
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from agent.pipeline.smart_turn import SmartTurnAnalyzer, helper, warm_up
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
