"""Voice activity detection: Google's WebRTC VAD as a pipecat analyzer, Silero by config.

webrtcvad needs no model file and costs microseconds per 20 ms frame, which
matters when one process carries many calls; pipecat's bundled Silero model is
the more robust choice in noise and is one setting away.

The caller's pauses are announced before the VAD's stop (``CallerVAD``): the STT decodes
the utterance while the VAD is still counting the silence that ends it
(``agent.pipeline.stt``), so the final is ready at the stop rather than ~0.2 s after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import webrtcvad
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState
from pipecat.frames.frames import Frame, InputAudioRawFrame, SystemFrame
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection

from agent.config import Settings

WEBRTC_SAMPLE_RATES = (8000, 16000, 32000, 48000)
#: How long the caller must have been quiet (by the VAD) before the pause is announced: a
#: gap between two words is shorter, and each announcement costs a speculative decode.
PAUSE_SECS = 0.06


@dataclass
class VADUserPausedFrame(SystemFrame):
    """The caller has been quiet for ``PAUSE_SECS`` after speech: if nothing voiced follows
    until the VAD's stop, the utterance is the audio so far."""


@dataclass
class VADUserResumedFrame(SystemFrame):
    """The caller spoke again after a ``VADUserPausedFrame``, before the VAD's stop."""


class WatchedState:
    """An analyzer whose state after the last frame can be read (for ``CallerVAD``)."""

    _vad_state: VADState

    @property
    def state(self) -> VADState:
        return self._vad_state


class WebRTCVADAnalyzer(WatchedState, VADAnalyzer):
    """A pipecat ``VADAnalyzer`` over webrtcvad; confidence is 1.0 (voiced) or 0.0."""

    frame_ms = 20

    def __init__(
        self,
        *,
        aggressiveness: int = 2,
        sample_rate: int | None = None,
        params: VADParams | None = None,
    ) -> None:
        super().__init__(sample_rate=sample_rate, params=params)
        self._vad = webrtcvad.Vad(aggressiveness)

    def set_sample_rate(self, sample_rate: int) -> None:
        rate = self._init_sample_rate or sample_rate
        if rate not in WEBRTC_SAMPLE_RATES:
            raise ValueError(
                f"webrtcvad supports {WEBRTC_SAMPLE_RATES} Hz, not {rate} Hz; "
                "resample the input or use VAD=silero"
            )
        super().set_sample_rate(sample_rate)

    def num_frames_required(self) -> int:
        return self.sample_rate * self.frame_ms // 1000

    async def analyze_audio(self, buffer: bytes) -> VADState:
        # pipecat hands each frame to a thread of the analyzer's own and back: for a
        # microsecond of webrtcvad, two thread switches and a loop wake-up per frame per
        # call (a fifth of a worker's CPU at eight calls). Here it runs in place.
        return self._run_analyzer(buffer)

    def voice_confidence(self, buffer: bytes) -> float:
        return 1.0 if self._vad.is_speech(buffer, self.sample_rate) else 0.0


class SileroAnalyzer(WatchedState, SileroVADAnalyzer):
    """pipecat's Silero analyzer, its state readable."""


class CallerVAD(VADProcessor):
    """pipecat's VAD processor that also announces the caller's pauses and resumptions.

    pipecat reports the caller's stop only once ``stop_secs`` of unvoiced audio has
    passed. A pause of ``pause_secs`` is pushed as ``VADUserPausedFrame`` in the audio's
    order; voice before the stop (the analyzer back to SPEAKING) as ``VADUserResumedFrame``.
    The analyzer leaves STOPPING for QUIET only through unvoiced frames, so an announced
    pause not followed by a resumption covers all the voiced audio of the utterance.
    """

    def __init__(
        self, *, vad_analyzer: WebRTCVADAnalyzer | SileroAnalyzer, pause_secs: float = PAUSE_SECS
    ) -> None:
        # In the line's own task: a frame's VAD is microseconds, its hop a queue and a
        # task switch (``bench capacity --profile``).
        super().__init__(vad_analyzer=vad_analyzer, enable_direct_mode=True)
        self._analyzer = vad_analyzer
        self._pause_secs = pause_secs
        self._quiet_s = 0.0
        self._paused = False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if not isinstance(frame, InputAudioRawFrame):
            return
        state = self._analyzer.state
        if state is VADState.STOPPING:
            self._quiet_s += len(frame.audio) / (2 * frame.num_channels * frame.sample_rate)
            if not self._paused and self._quiet_s >= self._pause_secs:
                self._paused = True
                await self.push_frame(VADUserPausedFrame())
            return
        self._quiet_s = 0.0
        if self._paused:
            self._paused = False
            if state is VADState.SPEAKING:
                await self.push_frame(VADUserResumedFrame())


def create_vad_analyzer(settings: Settings) -> WebRTCVADAnalyzer | SileroAnalyzer:
    """The analyzer ``settings.vad`` names, with the configured start/stop times."""
    params = VADParams(start_secs=settings.vad_start_secs, stop_secs=settings.vad_stop_secs)
    if settings.vad == "silero":
        return SileroAnalyzer(params=params)
    return WebRTCVADAnalyzer(aggressiveness=settings.vad_aggressiveness, params=params)
