"""Call recordings: one stereo WAV per call (caller left, agent right), stored and played back.

Two taps in the call's pipeline feed one ``CallRecorder`` (``tap``, shown each frame where
the call's pipeline ends that side's audio). The caller's sits right after the policy
processor: it sees the caller's audio, the end of each caller turn (the user aggregator's
``LLMContextUserTurnFrame``) and then the policy's answer to that turn, in the order the
policy handled them. The agent's sits after the output transport: it sees the agent's
audio as it is played. Each channel is placed on one wall clock, so the two stay
aligned (within ``SLACK_S``) across the agent's silences, a muted line or a stalled TTS.

What the recording may hold is decided by rules that fail closed (rule C11): the caller's
channel is silence unless every rule lets it through, whatever the transcript says, because
the recognizer can drop what it heard (Whisper tiny turned a card number, its expiry and its
code into "I'll just pay it all now."). The caller's audio is held in memory until the
policy has judged the turn it belongs to: on the policy's answer the held audio is kept, or
written as silence (``recording_redacted``, with its reason and span). The answer always
follows the turn's end in the tap (the policy handles both, in order, on one task), and the
turn's audio always precedes it (audio frames overtake data frames, never the reverse).
Audio the policy never judged (what the caller said after their last turn, when the call
ends) is silence too. A turn's caller audio is silence when:

- ``card_number``: the policy noted ``card_number_spoken`` (the transcript held card data);
- ``card_guard``: the card guard (agent/pipeline/card_guard.py) heard card data in it and cut it
  from the transcript (``CardDataHeardFrame``): what is held is silenced at once, and what comes
  is silence as it comes, until the turn is judged;
- ``payment_open``: the policy's ``payment_open`` was true when the policy judged it (the
  answer that asks how the consumer will pay silences the turn it answers), or when the
  audio came (then it is silence from the start, and one event covers the stretch): from
  the moment payment comes up (a method asked or offered, card digits heard) until the
  payment step ends;
- ``digit_run``: its transcript holds a run of ``DIGIT_RUN`` (4) or more digits, written or
  spoken, or a card marker the STT client put in (what the recognizer got of a card is
  often just a part of it; a year or a last four goes too: the policy keeps the
  verification's result, the recording need not);
- ``mostly_empty``: the VAD heard more speech than the transcript accounts for (fewer than
  one word a second over 1.5 s or more; see ``SECONDS_PER_WORD``). The recorder learns the
  turn's transcript from the user aggregator's ``LLMContextUserTurnFrame`` (what went into
  the context) and its speech from the VAD's ``VADUserStartedSpeakingFrame`` and
  ``VADUserStoppedSpeakingFrame``, which pass the tap among the audio frames: the speech
  runs from the start frame less its ``start_secs`` to the stop frame less its
  ``stop_secs``, on the caller's channel, and is split at each turn's end. The VAD, not the
  audio's energy: it is the same judge of speech the turn-taking uses, where energy would
  count line noise and comfort noise as speech. Speech the recognizer lost whole (no turn
  at all) counts toward the next turn;
- ``dtmf_tone``: a keypad tone sent in band (a line without RFC 4733 events; those are not
  audio and never reach the recording): each frame (20 ms, or 40 ms on a SIP line) whose
  energy is nearly all at one row and one column DTMF frequency (``dtmf_tone``), with a
  frame either side, is silence as it comes. (The STT still hears such tones, and
  transcribes no digits from them.)

Two more rules, for both channels:

- The payment step (C11). The policy's commitment stage is where it asks for the date and
  the method ("debit card, bank transfer or check"), the moment a consumer is most likely to
  read a card out. Both channels are silence from the policy's answer that enters the stage
  (``recording_paused``) to its answer that leaves it (``recording_resumed``). The agent's
  read-back of the promise and its confirmation, evidence that holds no digits, are kept.
- An objection (C2). On ``recording_objection`` the recording stops for good and nothing is
  kept: the buffers are dropped and the partial file deleted (``recording_stopped``).

A call without a policy (a developer's bare pipeline) is not recorded: nothing would judge
what the caller said.

Where recordings go is ``RECORDING_STORE``: a directory or ``s3://bucket/prefix``
(``agent.store.recordings``); the console plays them (``agent.console.recordings``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import tempfile
import time
import wave
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import (
    AudioRawFrame,
    EndWorkerFrame,
    Frame,
    InputAudioRawFrame,
    LLMContextFrame,
    LLMContextUserTurnFrame,
    LLMFullResponseStartFrame,
    OutputAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)

from agent.config import Settings
from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.replies import PolicyEvent
from agent.pipeline.card_guard import (
    CardDataHeardFrame,
    has_card_marker,
    longest_digit_run,
)
from agent.store.recordings import RecordingError, RecordingStore, store_from_settings

logger = logging.getLogger(__name__)

#: How far a channel may fall behind the wall clock before the gap is filled with silence:
#: above frame jitter, so a voice is never cut up, well under a syllable of misalignment.
SLACK_S = 0.1
#: What the policy pushes, and only it, when it answers a caller turn (its reply, the
#: LLM's phrasing request, the end of the call).
ANSWERS = (LLMFullResponseStartFrame, LLMContextFrame, EndWorkerFrame)
#: A caller turn whose transcript holds a run of this many digits is not kept: what the
#: recognizer got of a card number, an expiry, or a code with a cue (and also a year or a
#: last four: the policy records the verification's result, the recording need not).
DIGIT_RUN = 4
#: A caller turn is "mostly empty" (the recognizer lost most of what was said: a card
#: number read out in a flat voice is what Whisper drops first) when the VAD heard at
#: least ``MIN_VOICED_S`` of speech and the transcript has fewer than one word per
#: ``SECONDS_PER_WORD`` of it. The VAD's speech runs across pauses shorter than its stop
#: time (0.2 s); people say two to three words a second of it, and even a slow, hesitant
#: speaker whose "uh"s the recognizer leaves out says more than one and a half, so a
#: faithful transcript is not taken for an empty one. The reviewers' case ("I'll just pay
#: it all now." over a card number, its expiry and its code: six words for some ten
#: seconds of speech) is far below. A turn always has a word (the user aggregator sends
#: none without), so under 1.5 s a turn is never "mostly empty"; speech the recognizer
#: lost whole (no turn at all) counts toward the next turn's.
MIN_VOICED_S = 1.5
SECONDS_PER_WORD = 1.0
#: The DTMF frequencies (Hz): the row group, then the column group.
DTMF_HZ = (697, 770, 852, 941, 1209, 1336, 1477, 1633)
#: A caller frame is a key's tone sent in band when the strongest DTMF frequency of each
#: group holds at least ``TONE_SHARE`` of its energy and the two together ``TONE_PAIR``
#: (a key's tone puts nearly all of it in two; speech spreads it over harmonics and
#: formants), and it is louder than line noise (``TONE_MIN_RMS``, about -50 dBFS).
TONE_SHARE = 0.1
TONE_PAIR = 0.6
TONE_MIN_RMS = 100.0
#: Frames after a tone's last that are silenced too (its fade; one before it is as well).
TONE_TAIL_FRAMES = 1

EventSink = Callable[[PolicyEvent], None]
Clock = Callable[[], float]

#: The disk work of every call's recording, one thread in order: never on the event loop.
_DISK = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recordings")


# -- what the caller's turn may hold -----------------------------------------------------


def word_count(transcript: str) -> int:
    return len(re.findall(r"[\w']+", transcript))


def mostly_empty(transcript: str, voiced_s: float) -> bool:
    """Whether ``transcript`` accounts for too little of ``voiced_s`` seconds of speech."""
    return voiced_s >= MIN_VOICED_S and word_count(transcript) < voiced_s / SECONDS_PER_WORD


@functools.lru_cache(maxsize=16)
def _tone_basis(samples: int, rate: int) -> np.ndarray:
    """The cosine and sine of each DTMF frequency over ``samples``: one row each."""
    angles = 2 * np.pi * np.outer(DTMF_HZ, np.arange(samples) / rate)
    return np.vstack([np.cos(angles), np.sin(angles)])


def dtmf_tone(pcm: bytes, rate: int) -> bool:
    """Whether a frame of 16-bit PCM is a keypad tone (see ``TONE_SHARE``)."""
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    n = len(x)
    if n < rate // 100:
        return False
    energy = float(x @ x)
    if energy < n * TONE_MIN_RMS**2:
        return False
    projection = _tone_basis(n, rate) @ x
    # A tone of amplitude A projects (A n / 2)^2 and holds n A^2 / 2 of the energy.
    share = (projection[:8] ** 2 + projection[8:] ** 2) * 2 / (n * energy)
    row, column = float(share[:4].max()), float(share[4:].max())
    return row >= TONE_SHARE and column >= TONE_SHARE and row + column >= TONE_PAIR


# -- the two channels on one clock --------------------------------------------------------


def interleave(left: bytes, right: bytes) -> bytes:
    """Two mono 16-bit channels of equal length as one stereo stream."""
    out = np.empty(len(left), dtype="<i2")
    out[0::2] = np.frombuffer(left, dtype="<i2")
    out[1::2] = np.frombuffer(right, dtype="<i2")
    return out.tobytes()


class StereoTimeline:
    """The caller's and the agent's audio on one clock, and how much of it is final.

    Positions are in samples since the first frame. A frame that starts a stretch (its
    channel was idle) goes where the clock says; one that continues a stretch follows the
    last without a gap unless the stretch has fallen ``slack_s`` behind (jitter is not
    silence, a stall is). The caller's samples are held until ``release`` (the policy judged
    them) and handed to ``write`` interleaved with the agent's, which are final as they
    come. ``write`` gets whole stereo stretches, in order.
    """

    def __init__(self, rate: int, write: Callable[[bytes], None], slack_s: float = SLACK_S):
        self.rate = rate
        self._write = write
        self._slack_s = slack_s
        self._t0: float | None = None
        #: When each channel's last frame came (its stretch goes on, or starts anew).
        self._last: dict[str, float] = {}
        #: Everything before this has been written.
        self._kept = 0
        self._held = bytearray()  # the caller's samples from _kept on
        self._caller_end = 0
        self._agent = bytearray()  # the agent's samples from _kept on
        self._agent_end = 0
        #: The end of the last caller turn not yet judged.
        self._sealed: int | None = None
        #: Both channels are written as silence while paused (the payment step).
        self.paused = False
        #: Where the last caller audio not made silence on arrival ends: held audio up to
        #: here may need silencing, what comes after it is silence by a rule already.
        self._live_end = 0

    def seconds(self, position: int | None = None) -> float:
        return round((self._caller_end if position is None else position) / self.rate, 3)

    def _gap(self, channel: str, end: int, samples: int, now: float) -> int:
        """The silence to put before a frame of ``samples`` that ended at ``now``."""
        duration = samples / self.rate
        if self._t0 is None:
            self._t0 = now - duration
        last, self._last[channel] = self._last.get(channel), now
        gap = round((now - self._t0) * self.rate) - samples - end
        goes_on = last is not None and now - last <= duration + self._slack_s
        return gap if gap > 0 and (not goes_on or gap > self._slack_s * self.rate) else 0

    @property
    def caller_end(self) -> int:
        """Where the caller's channel ends now (samples)."""
        return self._caller_end

    def caller(self, pcm: bytes, now: float, mute: bool = False) -> int:
        """Place the caller's frame (as silence when ``mute``); where its samples start."""
        samples = len(pcm) // 2
        gap = self._gap("caller", self._caller_end, samples, now)
        silent = self.paused or mute
        self._held += bytes(2 * (gap + samples)) if silent else bytes(2 * gap) + pcm
        self._caller_end += gap + samples
        if not silent:
            self._live_end = self._caller_end
        return self._caller_end - samples

    def mute_tail(self, samples: int) -> int:
        """Turn the last ``samples`` of the caller's held audio into silence; where the
        silence starts (no earlier than what is written already)."""
        samples = min(samples, len(self._held) // 2)
        if samples > 0:
            self._held[len(self._held) - 2 * samples :] = bytes(2 * samples)
        return self._caller_end - samples

    def agent(self, pcm: bytes, now: float) -> None:
        samples = len(pcm) // 2
        gap = self._gap("agent", self._agent_end, samples, now)
        self._agent += bytes(2 * (gap + samples)) if self.paused else bytes(2 * gap) + pcm
        self._agent_end += gap + samples

    def seal(self) -> None:
        """A caller turn ended here: what came before waits for the policy's judgement."""
        self._sealed = self._caller_end

    @property
    def awaiting_judgement(self) -> bool:
        return self._sealed is not None

    def silence_held(self) -> tuple[float, float] | None:
        """Turn all the caller audio not yet written into silence; the span it covered
        (None when it was all silence by a rule already)."""
        if not self._held or self._live_end <= self._kept:
            return None
        self._held = bytearray(len(self._held))
        self._live_end = self._kept
        return self.seconds(self._kept), self.seconds()

    def release(self) -> None:
        """The policy judged the turns sealed so far: write them out."""
        if self._sealed is not None:
            self._write_until(self._sealed)
            self._sealed = None

    def finish(self) -> None:
        """Write everything; caller audio no one judged is silence (C11 fails closed)."""
        self.silence_held()
        end = max(self._caller_end, self._agent_end)
        self._held += bytes(2 * (end - self._caller_end))
        self._caller_end = end
        self._write_until(end)

    def _write_until(self, position: int) -> None:
        samples = position - self._kept
        if samples <= 0:
            return
        if self._agent_end < position:
            self._agent += bytes(2 * (position - self._agent_end))
            self._agent_end = position
        caller, agent = bytes(self._held[: 2 * samples]), bytes(self._agent[: 2 * samples])
        del self._held[: 2 * samples]
        del self._agent[: 2 * samples]
        self._kept = position
        self._write(interleave(caller, agent))


# -- the file while the call goes on ------------------------------------------------------


class _Spool:
    """The recording's WAV file while the call goes on; every method runs on ``_DISK``."""

    def __init__(self, directory: Path, call_id: str, rate: int) -> None:
        self._directory, self._call_id, self._rate = directory, call_id, rate
        self.path: Path | None = None
        self._file: Any = None
        self._wav: wave.Wave_write | None = None
        self.error: BaseException | None = None

    def _guarded(self, work: Callable[[], None]) -> None:
        if self.error is not None:
            return
        try:
            work()
        except Exception as e:  # kept for ``close``; the call must not notice
            logger.exception("recording of call %s: disk write failed", self._call_id)
            self.error = e

    def write(self, frames: bytes) -> None:
        self._guarded(lambda: self._writer().writeframesraw(frames))

    def _writer(self) -> wave.Wave_write:
        if self._wav is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(
                dir=self._directory, prefix=f".{self._call_id}.", suffix=".wav.part"
            )
            self.path = Path(name)
            self._file = os.fdopen(fd, "wb")
            wav = wave.open(self._file, "wb")
            wav.setnchannels(2)
            wav.setsampwidth(2)
            wav.setframerate(self._rate)
            self._wav = wav
        return self._wav

    def close(self) -> Path:
        """Finish the file (its header, on disk) and return where it is."""

        def finish() -> None:
            wav = self._writer()  # a call with no audio still leaves a valid, empty file
            wav.close()  # writes the final header; the file object stays ours
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

        self._guarded(finish)
        if self.error is not None:
            self.discard()
            raise RecordingError(f"the recording could not be written: {self.error}")
        assert self.path is not None
        return self.path

    def discard(self) -> None:
        """Delete whatever was written (the consumer objected, or writing failed)."""
        wav, self._wav = self._wav, None
        if wav is not None:
            with contextlib.suppress(Exception):
                wav.close()
        if self._file is not None and not self._file.closed:
            self._file.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        self.error = self.error or RecordingError("discarded")


# -- the recorder in the pipeline ---------------------------------------------------------


class CallRecorder:
    """One call's recording: ``tap("caller")`` after the policy processor and
    ``tap("agent")`` after the output transport, then ``store()`` it when the call ends."""

    def __init__(
        self,
        call_id: str,
        store: RecordingStore,
        policy: ConversationPolicy,
        on_event: EventSink,
        sample_rate: int,
        clock: Clock = time.monotonic,
    ) -> None:
        self.call_id = call_id
        self._store = store
        self._policy = policy
        self._on_event = on_event
        self._clock = clock
        self._rate = sample_rate
        self._spool = _Spool(store.spool_dir, call_id, sample_rate)
        self._timeline = StereoTimeline(sample_rate, self._write)
        self._seen = len(policy.events)
        self._resamplers = {"caller": create_stream_resampler(), "agent": create_stream_resampler()}
        #: What the caller turns sealed since the last judgement said.
        self._texts: list[str] = []
        #: The VAD's speech (samples): in the turns sealed since the last judgement, in the
        #: turn under way; where the stretch of speech under way began, and the turn.
        self._voiced_sealed = 0
        self._voiced = 0
        self._speech_from: int | None = None
        self._turn_from = 0
        #: The card guard heard card data in the turn under way, or in one sealed since the
        #: last judgement: the caller's audio is silence until that turn is judged.
        self._card_heard = False
        self._card_sealed = False
        #: The caller's audio is made silence as it comes: why, and from where (samples).
        self._muting: tuple[str, int] | None = None
        self._tone_tail = 0
        self._last_samples = 0
        #: The consumer objected: nothing is kept, nothing more recorded.
        self.stopped = False
        #: Why the recording broke off, if it did (it is then dropped, the call goes on).
        self.failure: BaseException | None = None
        self._dropped: Future[None] | None = None

    @property
    def active(self) -> bool:
        return not self.stopped and self.failure is None

    def tap(self, side: str) -> Callable[[Frame], Awaitable[None]]:
        """What sees each frame on ``side`` ("caller" or "agent"); a failure there gives
        the recording up, and the call goes on."""
        handle = self.on_caller_side if side == "caller" else self.on_agent_side

        async def see(frame: Frame) -> None:
            try:
                await handle(frame)
            except Exception as e:
                logger.exception("call %s: recording failed; the call goes on", self.call_id)
                self.fail(e)

        return see

    def _write(self, frames: bytes) -> None:
        _DISK.submit(self._spool.write, frames)

    def _event(self, kind: str, **detail: Any) -> None:
        self._on_event(PolicyEvent(kind, detail, datetime.now(UTC)))

    async def _mono(self, frame: AudioRawFrame, channel: str) -> bytes:
        audio = frame.audio
        if frame.num_channels > 1:
            samples = np.frombuffer(audio, dtype="<i2").reshape(-1, frame.num_channels)
            audio = samples.mean(axis=1).astype("<i2").tobytes()
        return await self._resamplers[channel].resample(audio, frame.sample_rate, self._rate)

    async def on_caller_side(self, frame: Frame) -> None:
        if not self.active:
            return
        if isinstance(frame, InputAudioRawFrame):
            self._heard(await self._mono(frame, "caller"))
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            at = self._timeline.caller_end - round(frame.start_secs * self._rate)
            self._speech_from = max(self._turn_from, at)
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            if self._speech_from is not None:
                end = self._timeline.caller_end - round(frame.stop_secs * self._rate)
                self._voiced += max(0, end - self._speech_from)
                self._speech_from = None
        elif isinstance(frame, CardDataHeardFrame):
            self._card_heard = True
            self._silence_held("card_guard")
        elif isinstance(frame, LLMContextUserTurnFrame):
            self._sealed(frame.text)
        elif isinstance(frame, ANSWERS):
            self.judged()

    def _heard(self, pcm: bytes) -> None:
        """The caller's frame, silence at once when a rule says so (C11 fails closed)."""
        timeline = self._timeline
        reason = self._mute_reason(pcm)
        at = timeline.caller(pcm, self._clock(), mute=reason is not None)
        samples, self._last_samples = self._last_samples, len(pcm) // 2
        started = reason is not None and (self._muting is None or self._muting[0] != reason)
        if started and reason == "dtmf_tone":
            at = timeline.mute_tail(samples + len(pcm) // 2)  # the tone's onset too
        self._mute_from(reason, at)

    def _mute_reason(self, pcm: bytes) -> str | None:
        if self._timeline.paused:
            return None  # both channels are silence already (``recording_paused``)
        if self._policy.payment_open:
            return "payment_open"
        if self._card_heard or self._card_sealed:
            return "card_guard"
        if dtmf_tone(pcm, self._rate):
            self._tone_tail = TONE_TAIL_FRAMES
            return "dtmf_tone"
        if self._tone_tail:
            self._tone_tail -= 1
            return "dtmf_tone"
        return None

    def _mute_from(self, reason: str | None, at: int) -> None:
        """The caller's audio from ``at`` on is silence for ``reason`` (None: kept as it
        comes); a stretch made silence is a ``recording_redacted`` event when it ends."""
        if reason == (self._muting[0] if self._muting else None):
            return
        if self._muting is not None:
            why, since = self._muting
            seconds = self._timeline.seconds
            self._event("recording_redacted", reason=why, from_s=seconds(since), to_s=seconds(at))
        self._muting = None if reason is None else (reason, at)

    def _sealed(self, text: str) -> None:
        """A caller turn ended: its words and its speech wait for the policy's judgement."""
        end = self._timeline.caller_end
        if self._speech_from is not None:  # the caller goes on: the rest is the next turn's
            self._voiced += max(0, end - self._speech_from)
            self._speech_from = end
        self._voiced_sealed += self._voiced
        self._voiced, self._turn_from = 0, end
        self._texts.append(text)
        self._card_sealed = self._card_sealed or self._card_heard
        self._card_heard = False
        self._timeline.seal()

    def _silence_held(self, reason: str, **detail: Any) -> None:
        span = self._timeline.silence_held()
        if span is not None:
            self._event("recording_redacted", reason=reason, from_s=span[0], to_s=span[1], **detail)

    def _verdict(self, kinds: set[str]) -> tuple[str, dict[str, Any]] | None:
        """Why the caller's held audio may not be kept, if it may not (the first reason)."""
        if "card_number_spoken" in kinds:
            return "card_number", {}
        if self._card_sealed or self._card_heard:
            return "card_guard", {}
        if self._policy.payment_open:
            return "payment_open", {}
        if not self._texts:
            return None
        said = " ".join(self._texts)
        if has_card_marker(said) or longest_digit_run(said) >= DIGIT_RUN:
            return "digit_run", {}
        voiced_s = round(self._voiced_sealed / self._rate, 2)
        if mostly_empty(said, voiced_s):
            return "mostly_empty", {"voiced_s": voiced_s, "words": word_count(said)}
        return None

    async def on_agent_side(self, frame: Frame) -> None:
        if self.active and isinstance(frame, OutputAudioRawFrame):
            pcm = await self._mono(frame, "agent")
            self._timeline.agent(pcm, self._clock())

    def judged(self) -> None:
        """The policy answered a caller turn: act on what it noted meanwhile."""
        events = self._policy.events[self._seen :]
        self._seen = len(self._policy.events)
        kinds = {e.kind for e in events}
        timeline = self._timeline
        if "recording_objection" in kinds:
            self._stop()
            return
        verdict = self._verdict(kinds)
        if verdict is not None:
            self._silence_held(verdict[0], **verdict[1])
        timeline.release()
        self._texts, self._voiced_sealed, self._card_sealed = [], 0, False
        paying = self._policy.stage is Stage.COMMITMENT
        if paying != timeline.paused:
            timeline.paused = paying
            if paying:
                self._event("recording_paused", reason="payment_step", at_s=timeline.seconds())
            else:
                self._event("recording_resumed", at_s=timeline.seconds())

    def _drop(self) -> None:
        self._timeline = StereoTimeline(self._rate, lambda _: None)
        self._dropped = _DISK.submit(self._spool.discard)

    def _stop(self) -> None:
        self.stopped = True
        self._drop()
        self._event("recording_stopped", reason="consumer_objected")

    def fail(self, error: BaseException) -> None:
        """Give the recording up (the call goes on without one)."""
        if self.failure is None:
            self.failure = error
            self._drop()

    async def store(self) -> str | None:
        """Finish the recording and store it; its URI, or None when nothing is kept.

        Raises ``RecordingError`` (or the store's error) when it could not be stored."""
        # An objection in the policy's last words counts even if its answer never came by.
        if self.active and any(
            e.kind == "recording_objection" for e in self._policy.events[self._seen :]
        ):
            self._stop()
        if self._dropped is not None:
            await asyncio.wrap_future(self._dropped)  # gone before the call is written down
        if self.stopped:
            return None
        if self.failure is not None:
            raise RecordingError(f"the recording broke off: {self.failure}")
        self._mute_from(None, self._timeline.caller_end)
        self._timeline.finish()
        spooled = await asyncio.wrap_future(_DISK.submit(self._spool.close))
        try:
            return await self._store.save(self.call_id, spooled)
        finally:
            await asyncio.to_thread(spooled.unlink, missing_ok=True)


def recorder_for(
    call_id: str,
    settings: Settings,
    policy: ConversationPolicy | None,
    on_event: EventSink,
    sample_rate: int,
) -> CallRecorder | None:
    """The call's recorder, or None: recording is off, or no policy judges the call."""
    store = store_from_settings(settings)
    if store is None or policy is None:
        return None
    return CallRecorder(call_id, store, policy, on_event, sample_rate)
