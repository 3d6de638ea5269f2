from collections.abc import Sequence

import numpy as np
import pytest
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams, VADState
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.tests.utils import run_test

from agent.config import Settings
from agent.pipeline.vad import (
    CallerVAD,
    VADUserPausedFrame,
    VADUserResumedFrame,
    WebRTCVADAnalyzer,
    create_vad_analyzer,
)


def _frames(pcm: bytes, rate: int, ms: int = 20):
    step = rate * ms // 1000 * 2
    return [pcm[i : i + step] for i in range(0, len(pcm) - step + 1, step)]


def test_webrtc_vad_hears_speech_and_not_silence(speech_16k):
    vad = WebRTCVADAnalyzer(aggressiveness=2)
    vad.set_sample_rate(16000)
    assert vad.num_frames_required() == 320
    voiced = [vad.voice_confidence(f) for f in _frames(speech_16k, 16000)]
    # A fresh analyzer for silence: webrtcvad carries a short hangover after speech.
    quiet = WebRTCVADAnalyzer(aggressiveness=2)
    quiet.set_sample_rate(16000)
    silent = [quiet.voice_confidence(f) for f in _frames(bytes(32000), 16000)]
    assert sum(voiced) / len(voiced) > 0.5
    assert sum(silent) == 0


async def test_webrtc_vad_states_follow_an_utterance(speech_16k):
    vad = WebRTCVADAnalyzer()
    vad.set_sample_rate(16000)
    states = []
    for frame in _frames(bytes(16000) + speech_16k + bytes(32000), 16000):
        states.append(await vad.analyze_audio(frame))
    assert VADState.SPEAKING in states
    assert states[0] == VADState.QUIET
    assert states[-1] == VADState.QUIET


def test_webrtc_vad_rejects_rates_it_cannot_do():
    vad = WebRTCVADAnalyzer()
    with pytest.raises(ValueError, match="22050 Hz"):
        vad.set_sample_rate(22050)


def test_settings_choose_the_analyzer():
    chosen = create_vad_analyzer(Settings.from_env({"VAD_STOP_SECS": "0.45"}))
    assert isinstance(chosen, WebRTCVADAnalyzer)
    assert chosen.params.stop_secs == 0.45
    assert isinstance(create_vad_analyzer(Settings.from_env({"VAD": "silero"})), SileroVADAnalyzer)


def test_noise_is_not_speech():
    rng = np.random.default_rng(7)
    noise = (rng.normal(0, 30, 16000)).astype(np.int16).tobytes()
    vad = WebRTCVADAnalyzer(aggressiveness=3)
    vad.set_sample_rate(16000)
    voiced = [vad.voice_confidence(f) for f in _frames(noise, 16000)]
    assert sum(voiced) / len(voiced) < 0.2


async def test_webrtc_vad_runs_in_place_not_on_a_thread_of_its_own(speech_16k):
    vad = WebRTCVADAnalyzer(sample_rate=16000)
    vad.set_sample_rate(16000)
    for start in range(0, 16000, 320):
        await vad.analyze_audio(speech_16k[2 * start : 2 * (start + 320)])
    assert not vad._executor._threads  # pipecat's per-analyzer thread was never started


def _audio_frames(pcm: bytes) -> list[InputAudioRawFrame]:
    return [
        InputAudioRawFrame(audio=chunk, sample_rate=16000, num_channels=1)
        for chunk in _frames(pcm, 16000)
    ]


def _marks(frames: Sequence[Frame]) -> list[str]:
    """The VAD's announcements in order, audio frames as '.'."""
    names = {
        VADUserStartedSpeakingFrame: "start",
        VADUserPausedFrame: "pause",
        VADUserResumedFrame: "resume",
        VADUserStoppedSpeakingFrame: "stop",
        InputAudioRawFrame: ".",
    }
    return [names[type(f)] for f in frames if type(f) in names]


async def test_the_caller_vad_announces_a_pause_before_the_stop(speech_16k):
    vad = CallerVAD(vad_analyzer=WebRTCVADAnalyzer(params=VADParams(stop_secs=0.2)))
    frames = _audio_frames(bytes(8000) + speech_16k + bytes(16000))
    down, _ = await run_test(Pipeline([vad]), frames_to_send=frames, expected_down_frames=None)
    marks = _marks(down)

    def last(mark: str) -> int:
        return len(marks) - 1 - marks[::-1].index(mark)

    assert marks.index("start") < last("pause") < last("stop")
    # Only quiet after the last pause: no resumption, and the VAD's stop 0.14 s later.
    assert marks[last("pause") + 1 : last("stop")] == ["."] * 7, "".join(m[0] for m in marks)
    for i, mark in enumerate(marks):
        if mark == "resume":
            assert marks[i - 1] == "." and "pause" in marks[:i]


async def test_voice_after_a_pause_is_a_resumption(speech_16k):
    vad = CallerVAD(vad_analyzer=WebRTCVADAnalyzer(params=VADParams(stop_secs=0.3)))
    one_second = speech_16k[:32000]
    frames = _audio_frames(bytes(8000) + one_second + bytes(3200) + one_second + bytes(16000))
    down, _ = await run_test(Pipeline([vad]), frames_to_send=frames, expected_down_frames=None)
    announced = [m for m in _marks(down) if m != "."]
    assert announced[0] == "start" and announced[-2:] == ["pause", "stop"]
    assert "resume" in announced
    assert announced.count("start") == 1  # a pause is not a stop
