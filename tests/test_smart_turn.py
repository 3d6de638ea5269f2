"""The shared-session smart-turn analyzer decides as pipecat's own does."""

import numpy as np
import pytest
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from agent.simulate import CallerVoice
from agent.smart_turn import SmartTurnAnalyzer


@pytest.fixture(scope="module")
def voice() -> CallerVoice:
    return CallerVoice(16000)


def test_calls_share_one_session_but_not_their_audio() -> None:
    first, second = SmartTurnAnalyzer(sample_rate=16000), SmartTurnAnalyzer(sample_rate=16000)
    assert first._session is second._session
    first.append_audio(b"\1\0" * 320, is_speech=True)
    assert first._audio_buffer and not second._audio_buffer


@pytest.mark.parametrize(
    "line", ["I can pay two hundred dollars on Friday.", "I can pay two hundred dollars and"]
)
def test_it_predicts_what_pipecats_analyzer_predicts(voice: CallerVoice, line: str) -> None:
    audio = np.frombuffer(voice.say(line), dtype=np.int16).astype(np.float32) / 32768
    ours = SmartTurnAnalyzer(sample_rate=16000)._predict_endpoint(audio)
    stock = LocalSmartTurnAnalyzerV3(sample_rate=16000)._predict_endpoint(audio)
    assert ours == pytest.approx(stock)
