"""Call recordings (agent/pipeline/recording.py): stereo, redacted, paused, dropped on objection,
stored in a directory or an S3-compatible server, and played to the console with range requests.

The recorder is driven here as the call's pipeline drives it (20 ms frames, the end of each
caller turn, the policy's answer) on a clock of the test's own, with the real policy judging
what the caller said; one test holds a real call on the CPU models and checks the file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import wave
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import cast

import boto3
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from argon2 import PasswordHasher
from pipecat.audio.vad.vad_analyzer import VADParams, VADState
from pipecat.frames.frames import (
    EndWorkerFrame,
    InputAudioRawFrame,
    LLMContextUserTurnFrame,
    LLMFullResponseStartFrame,
    OutputAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from agent.config import ConfigError, Settings
from agent.console.auth import setup_auth
from agent.console.recordings import add_recording_routes
from agent.console.users import Users
from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import PolicyEvent, Templates
from agent.conversation.scenarios import account_from
from agent.ledger.records import new_call_id
from agent.pipeline.call import Call
from agent.pipeline.card_guard import CardDataHeardFrame
from agent.pipeline.recording import _DISK, SLACK_S, CallRecorder, dtmf_tone
from agent.store.recordings import FileStore, RecordingError, S3Store, store_from_settings
from agent.store.tables import AuditEntry
from agent.store.tables import Call as CallRow
from tests.audio import speech_pcm

RATE = 16000
FRAME = RATE // 50  # 20 ms
PASSWORD = "a long operator password"
FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
CALLER, AGENT, DIGITS = 1000, 2000, 3000  # each stretch of speech is a level of its own


def tone(level: int, samples: int = FRAME) -> bytes:
    return np.full(samples, level, dtype="<i2").tobytes()


def new_policy() -> ConversationPolicy:
    prompts = PromptSet.load("collections-v3")
    return ConversationPolicy(account_from({}), Templates(prompts.templates), date.today())


class Line:
    """A recorder fed as the call's pipeline feeds it, on the line's own clock."""

    def __init__(self, store: FileStore | S3Store, policy: ConversationPolicy | None = None):
        self.t = 0.0
        self.policy = policy or new_policy()
        self.events: list[PolicyEvent] = []
        self.recorder = CallRecorder(
            new_call_id(), store, self.policy, self.events.append, RATE, clock=lambda: self.t
        )

    def at(self, seconds: float) -> int:
        return round(seconds * RATE)

    async def talk(self, seconds: float, caller: int = 0, agent: int | None = None) -> None:
        """``seconds`` of 20 ms frames from the caller (always) and the agent (if given)."""
        for _ in range(round(seconds / 0.02)):
            self.t += 0.02
            await self.recorder.on_caller_side(InputAudioRawFrame(tone(caller), RATE, 1))
            if agent is not None:
                await self.recorder.on_agent_side(OutputAudioRawFrame(tone(agent), RATE, 1))

    async def agent_only(self, frames: int, level: int = AGENT) -> None:
        """Agent frames with no caller frame between them (a line that sends nothing)."""
        for _ in range(frames):
            self.t += 0.02
            await self.recorder.on_agent_side(OutputAudioRawFrame(tone(level), RATE, 1))

    async def turn(self, text: str) -> None:
        """The caller's turn ends; the policy judges what they said and answers."""
        await self.recorder.on_caller_side(LLMContextUserTurnFrame(text, "t"))
        reply = self.policy.on_caller_turn(text)
        answer = LLMFullResponseStartFrame() if reply.texts else EndWorkerFrame()
        await self.recorder.on_caller_side(answer)
        self.policy.played(reply, len(reply.texts))  # the caller hears all of it

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


def channels(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with wave.open(str(path), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (2, 2, RATE)
        data = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    return data[:, 0], data[:, 1]


def stored_path(uri: str) -> Path:
    assert uri.startswith("file://"), uri
    return FileStore.path_of(uri)


# -- the recording itself -----------------------------------------------------------------


async def test_caller_left_agent_right_on_one_clock(tmp_path):
    assert 0.06 < SLACK_S < 1.0  # the stall below is jitter, the pause is not
    line = Line(FileStore(tmp_path))
    await line.talk(1.0, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(0.5, agent=AGENT)
    # The agent's audio stalls for 60 ms (under the slack): its voice is not cut up.
    await line.talk(0.06)
    await line.talk(0.5, agent=AGENT)
    # Then it pauses for a second while the caller's line stays quiet.
    await line.talk(1.0)
    await line.talk(0.4, agent=AGENT)
    uri = await line.recorder.store()

    left, right = channels(stored_path(uri))
    assert len(left) == line.at(3.46)
    assert (left[: line.at(1.0)] == CALLER).all()
    assert (left[line.at(1.0) :] == 0).all()
    assert (right[: line.at(1.0)] == 0).all()
    # One second of agent speech without a gap, though it came in two stretches.
    assert (right[line.at(1.0) : line.at(2.0)] == AGENT).all()
    # The pause is silence, and the agent resumes exactly where the clock says.
    assert (right[line.at(2.0) : line.at(3.06)] == 0).all()
    assert (right[line.at(3.06) :] == AGENT).all()


async def test_the_agent_starts_where_the_clock_says_after_a_turn(tmp_path):
    line = Line(FileStore(tmp_path))
    await line.talk(1.0, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")  # both channels written up to 1.0 s
    await line.talk(0.06)  # the agent's first audio comes 60 ms later (under the slack)
    await line.talk(0.2, agent=AGENT)
    _, right = channels(stored_path(await line.recorder.store()))
    assert (right[: line.at(1.06)] == 0).all()
    assert (right[line.at(1.06) :] == AGENT).all()


async def test_a_line_that_sends_nothing_leaves_silence_not_a_shift(tmp_path):
    line = Line(FileStore(tmp_path))
    await line.talk(0.2, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.agent_only(25)  # half a second with no caller frame at all (a muted line)
    await line.talk(0.2, caller=CALLER)
    await line.turn("Sorry, I was on mute.")
    left, right = channels(stored_path(await line.recorder.store()))
    assert (left[: line.at(0.2)] == CALLER).all()
    assert (left[line.at(0.2) : line.at(0.7)] == 0).all()
    assert (left[line.at(0.7) : line.at(0.9)] == CALLER).all()
    assert (right[line.at(0.2) : line.at(0.7)] == AGENT).all()


async def test_a_turn_with_card_digits_is_silence_in_the_recording(tmp_path):
    line = Line(FileStore(tmp_path))
    await line.talk(1.0, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(0.5, agent=AGENT)
    await line.talk(1.0, caller=DIGITS)
    await line.turn("My card number is 4111 1111 1111 1111.")
    assert "card_number_spoken" in [e.kind for e in line.policy.events]
    await line.talk(0.5, agent=AGENT)
    uri = await line.recorder.store()

    left, right = channels(stored_path(uri))
    assert not (left == DIGITS).any(), "the card turn's audio was kept"
    assert (left[: line.at(1.0)] == CALLER).all()  # the turn before it was not touched
    assert (right == AGENT).sum() == line.at(1.0)  # nor the agent's channel
    redacted = [e.detail for e in line.events if e.kind == "recording_redacted"]
    assert redacted[0] == {"reason": "card_number", "from_s": 1.0, "to_s": 2.5}
    # Digits were heard: payment is open, and what the caller says next is silence as it
    # comes (agent/conversation/policy.py's ``payment_open``).
    assert line.policy.payment_open
    assert redacted[1:] == [{"reason": "payment_open", "from_s": 2.5, "to_s": 3.0}]


async def test_what_no_turn_judged_is_not_kept(tmp_path):
    # The call ends while the caller speaks (they hang up mid-sentence): nothing judged it.
    line = Line(FileStore(tmp_path))
    await line.talk(0.5, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(0.5, caller=DIGITS)
    await line.recorder.on_caller_side(LLMContextUserTurnFrame("4111 1111", "t"))
    await line.talk(0.1, caller=DIGITS)  # cancelled before the policy answered
    left, _ = channels(stored_path(await line.recorder.store()))
    assert len(left) == line.at(1.1)
    assert (left[: line.at(0.5)] == CALLER).all()
    assert not (left == DIGITS).any()


async def test_the_caller_is_not_recorded_while_payment_is_open(tmp_path):
    line = Line(FileStore(tmp_path))
    await line.talk(0.4, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(0.4, caller=CALLER)
    await line.turn("March fifth, nineteen eighty.")  # answered: "pay it in full, or a plan?"
    assert line.policy.payment_open
    await line.talk(0.4, caller=CALLER)
    await line.turn("Yes, I can pay it all.")  # "On what date ... debit card ...?"
    assert line.kinds()[-1] == "recording_paused"
    await line.talk(0.6, agent=AGENT)
    await line.talk(0.4, caller=DIGITS)
    await line.turn("This Friday, with my debit card.")  # the read-back: the step is over
    assert line.kinds()[-1] == "recording_resumed"
    await line.talk(0.6, agent=AGENT)  # "To confirm: one payment of $1,200 ..."
    await line.talk(0.4, caller=DIGITS)
    await line.turn("Yes, that's right.")
    assert line.policy.disposition == "promise_to_pay" and not line.policy.payment_open
    await line.talk(0.6, agent=AGENT)  # the confirmation, with the secure payment link
    left, right = channels(stored_path(await line.recorder.store()))

    at = {e.kind: e.detail["at_s"] for e in line.events if "at_s" in e.detail}
    assert (at["recording_paused"], at["recording_resumed"]) == (1.2, 2.2)
    redacted = [e.detail for e in line.events if e.kind == "recording_redacted"]
    assert redacted == [
        {"reason": "payment_open", "from_s": 0.4, "to_s": 0.8},  # judged as payment opened
        {"reason": "payment_open", "from_s": 0.8, "to_s": 1.2},  # silence as it came
        {"reason": "payment_open", "from_s": 2.2, "to_s": 3.2},
    ]
    # The caller is kept until payment came up and never after, whatever they said; the
    # agent is silence only in the commitment step: its read-back and confirmation are kept.
    assert (left[: line.at(0.4)] == CALLER).all()
    assert not left[line.at(0.4) :].any()
    assert not right[line.at(1.2) : line.at(2.2)].any()
    assert (right[line.at(2.2) : line.at(2.8)] == AGENT).all()
    assert (right[line.at(3.2) :] == AGENT).all()


async def test_an_objection_keeps_nothing(tmp_path):
    line = Line(FileStore(tmp_path))
    await line.talk(1.0, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(1.0, agent=AGENT)
    written = await _flushed(line)
    assert [p.name for p in written] and all(p.name.endswith(".wav.part") for p in written)

    await line.talk(0.5, caller=CALLER)
    await line.turn("Please do not record this call.")
    assert line.kinds() == ["recording_stopped"]
    await line.talk(1.0, caller=CALLER, agent=AGENT)  # nothing more is taken
    assert await line.recorder.store() is None
    assert list(tmp_path.iterdir()) == []
    assert line.events[0].detail == {"reason": "consumer_objected"}


async def _flushed(line: Line) -> list[Path]:
    """The files in the store's directory once the recorder's disk writes are done."""
    await asyncio.wrap_future(_DISK.submit(lambda: None))
    return list(line.recorder._store.spool_dir.iterdir())


async def test_the_store_never_shows_half_a_recording_under_its_name(tmp_path):
    line = Line(FileStore(tmp_path))
    final = tmp_path / f"{line.recorder.call_id}.wav"
    await line.talk(1.0, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(1.0, agent=AGENT)
    during = await _flushed(line)
    # While the call goes on: a hidden part file, owner-only, nothing under the final name.
    assert not final.exists()
    assert len(during) == 1 and during[0].name.startswith(f".{line.recorder.call_id}.")
    assert during[0].stat().st_mode & 0o077 == 0
    assert during[0].stat().st_size > RATE * 2  # the first turn, on its way to disk

    uri = await line.recorder.store()
    assert stored_path(uri) == final.resolve()
    assert [p.name for p in tmp_path.iterdir()] == [final.name]
    left, right = channels(final)
    assert len(left) == line.at(2.0)


async def test_a_recording_that_cannot_be_stored_does_not_cost_the_call_its_record():
    class Broken:
        async def store(self) -> str | None:
            raise RecordingError("disk full")

    call = Call.__new__(Call)  # only what _store_recording reads
    call.id, call._recorder = "c-broken", Broken()  # type: ignore[assignment]
    assert await call._store_recording() is None


def test_settings_name_the_store():
    assert Settings.from_env({}).recording_store == "data/recordings"
    beside = Settings.from_env({"DATABASE_URL": "sqlite:////srv/agent/agent.db"})
    assert beside.recording_store == "/srv/agent/recordings"
    pg = Settings.from_env(
        {"DATABASE_URL": "postgresql+psycopg://db/agent", "DATA_DIR": "/var/lib/agent"}
    )
    assert pg.recording_store == "/var/lib/agent/recordings"
    for off in ("", "off", "OFF", "none"):
        settings = Settings.from_env({"RECORDING_STORE": off})
        assert settings.recording_store is None and store_from_settings(settings) is None
    assert Settings.from_env({"RECORDING_STORE": "file:///srv/rec"}).recording_store == "/srv/rec"
    s3 = Settings.from_env(
        {"RECORDING_STORE": "s3://calls/prod/", "S3_ENDPOINT_URL": "http://minio:9000"}
    )
    store = store_from_settings(s3)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint_url) == (
        "calls",
        "prod",
        "http://minio:9000",
    )
    assert store.key("abc") == "prod/abc.wav"
    for bad in ({"RECORDING_STORE": "s3://"}, {"RECORDING_STORE": "ftp://x/y"}):
        with pytest.raises(ConfigError, match="RECORDING_STORE"):
            Settings.from_env(bad)
    with pytest.raises(ConfigError, match="S3_ENDPOINT_URL"):
        Settings.from_env({"S3_ENDPOINT_URL": "minio:9000"})


# -- card data fails closed (C11): whatever the transcript says ----------------------------


@dataclass
class FakePolicy:
    """What the recorder reads of the policy, set by the test."""

    events: list[PolicyEvent] = field(default_factory=list)
    stage: Stage = Stage.VERIFICATION
    payment_open: bool = False


class FakeLine(Line):
    """A line whose policy's judgement the test decides, with the VAD's frames."""

    def __init__(self, store: FileStore) -> None:
        self.fake = FakePolicy()
        super().__init__(store, cast(ConversationPolicy, self.fake))

    async def speak(self, seconds: float, level: int = CALLER) -> None:
        """``seconds`` of caller speech as the VAD reports it (0.2 s to start and stop)."""
        await self.talk(0.2, caller=level)
        await self.recorder.on_caller_side(VADUserStartedSpeakingFrame(start_secs=0.2))
        await self.talk(seconds - 0.2, caller=level)
        await self.talk(0.2)
        await self.recorder.on_caller_side(VADUserStoppedSpeakingFrame(stop_secs=0.2))

    async def turn(self, text: str) -> None:
        await self.recorder.on_caller_side(LLMContextUserTurnFrame(text, "t"))
        await self.recorder.on_caller_side(LLMFullResponseStartFrame())

    def redacted(self) -> list[dict]:
        return [e.detail for e in self.events if e.kind == "recording_redacted"]


async def test_caller_audio_is_silence_as_it_comes_while_payment_is_open(tmp_path):
    line = FakeLine(FileStore(tmp_path))
    await line.talk(0.4, caller=CALLER)
    await line.turn("I can pay.")
    line.fake.payment_open = True  # whatever the next turn's words turn out to be
    await line.talk(0.6, caller=DIGITS)
    await line.turn("Okay.")
    line.fake.payment_open = False  # the payment step ended
    await line.talk(0.4, caller=CALLER)
    await line.turn("Thank you.")
    left, _ = channels(stored_path(await line.recorder.store()))
    assert (left[: line.at(0.4)] == CALLER).all()
    assert not left[line.at(0.4) : line.at(1.0)].any()
    assert (left[line.at(1.0) :] == CALLER).all()
    assert line.redacted() == [{"reason": "payment_open", "from_s": 0.4, "to_s": 1.0}]


async def test_a_turn_judged_as_payment_opens_is_not_kept(tmp_path):
    line = FakeLine(FileStore(tmp_path))
    await line.talk(0.5, caller=DIGITS)
    line.fake.payment_open = True  # the policy's answer asks how they will pay
    await line.turn("I'll just pay it all now.")
    left, _ = channels(stored_path(await line.recorder.store()))
    assert not left.any()
    assert line.redacted() == [{"reason": "payment_open", "from_s": 0.0, "to_s": 0.5}]


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        ("It expires twelve twenty seven.", False),  # four digits, no cue the STT knew
        ("The code is 321 and 4111.", False),
        ("Yes, I can pay. [card number removed]", False),  # the STT client cut it
        ("Nineteen eighty.", False),  # a year is four digits too: fails closed
        ("I have 3 kids and 2 dogs.", True),
        ("On the 15th, please.", True),
    ],
)
async def test_a_turn_with_a_digit_run_is_not_kept(tmp_path, said, kept):
    line = FakeLine(FileStore(tmp_path))
    await line.talk(0.5, caller=DIGITS)
    await line.turn(said)
    left, _ = channels(stored_path(await line.recorder.store()))
    assert (left == DIGITS).all() if kept else not left.any()
    assert line.redacted() == (
        [] if kept else [{"reason": "digit_run", "from_s": 0.0, "to_s": 0.5}]
    )


async def test_a_turn_the_recognizer_left_mostly_empty_is_not_kept(tmp_path):
    line = FakeLine(FileStore(tmp_path))
    await line.speak(2.0)
    await line.turn("Yes, this is Jordan Smith.")  # five words in two seconds: kept
    await line.speak(8.0, DIGITS)  # eight seconds of speech: six words are too few
    await line.turn("I'll just pay it all now.")
    left, _ = channels(stored_path(await line.recorder.store()))
    assert (left[: line.at(2.0)] == CALLER).all()
    assert not (left == DIGITS).any()
    assert line.redacted() == [
        {"reason": "mostly_empty", "from_s": 2.2, "to_s": 10.4, "voiced_s": 8.0, "words": 6}
    ]


async def test_speech_the_recognizer_lost_whole_counts_toward_the_next_turn(tmp_path):
    line = FakeLine(FileStore(tmp_path))
    await line.speak(3.0, DIGITS)  # no words at all: no turn (the aggregator sends none)
    await line.speak(0.5)
    await line.turn("Okay.")
    left, _ = channels(stored_path(await line.recorder.store()))
    assert not left.any()
    assert line.redacted()[0]["reason"] == "mostly_empty"


async def test_card_data_the_guard_heard_silences_the_turn_until_it_is_judged(tmp_path):
    line = FakeLine(FileStore(tmp_path))
    await line.talk(1.0, caller=DIGITS)  # "... 4111 1111": the guard stops the caller
    await line.recorder.on_caller_side(CardDataHeardFrame())
    await line.talk(0.5, caller=DIGITS)  # the caller goes on reading over the warning
    await line.turn("I'll pay now.")  # the digits were cut from the transcript
    await line.talk(0.5, caller=CALLER)
    await line.turn("Okay, send me the link.")
    left, _ = channels(stored_path(await line.recorder.store()))
    assert not left[: line.at(1.5)].any()
    assert (left[line.at(1.5) :] == CALLER).all()
    assert line.redacted() == [
        {"reason": "card_guard", "from_s": 0.0, "to_s": 1.0},  # held: silenced at once
        {"reason": "card_guard", "from_s": 1.0, "to_s": 1.5},  # silence as it came
    ]


def keypad(keys: str, rate: int, on_s: float = 0.08, off_s: float = 0.06) -> bytes:
    """``keys`` as in-band DTMF tones, the column tone 3 dB louder (a usual twist)."""
    rows, columns = (697, 770, 852, 941), (1209, 1336, 1477)
    grid = {k: (rows[i // 3], columns[i % 3]) for i, k in enumerate("123456789*0#")}
    t = np.arange(round(on_s * rate)) / rate
    out = []
    for key in keys:
        low, high = grid[key]
        wave_ = 5000 * np.sin(2 * np.pi * low * t) + 7000 * np.sin(2 * np.pi * high * t)
        out += [wave_.astype("<i2").tobytes(), bytes(2 * round(off_s * rate))]
    return b"".join(out)


async def test_keypad_tones_sent_in_band_are_not_kept(tmp_path):
    line = FakeLine(FileStore(tmp_path))
    await line.talk(0.4, caller=CALLER)
    tones = keypad("4111", RATE)
    for start in range(0, len(tones), 2 * FRAME):
        line.t += 0.02
        frame = tones[start : start + 2 * FRAME]
        await line.recorder.on_caller_side(InputAudioRawFrame(frame, RATE, 1))
    await line.talk(0.4, caller=CALLER)
    await line.turn("There.")
    left, _ = channels(stored_path(await line.recorder.store()))
    # A frame either side of the tones is silence too (a tone's onset and its fade).
    assert (left[: line.at(0.38)] == CALLER).all()
    assert not left[line.at(0.38) : line.at(0.96)].any()
    assert (left[line.at(0.96) :] == CALLER).all()
    assert {d["reason"] for d in line.redacted()} == {"dtmf_tone"}


@pytest.mark.parametrize("rate", [16000, 8000])
def test_a_keypad_tone_is_told_from_speech(rate):
    from telephony.rtp import g711

    frame = rate // 50
    tones = keypad("1590#", rate, on_s=0.1, off_s=0.0)
    if rate == 8000:  # over a G.711 line
        tones = g711.decode("PCMU", g711.encode("PCMU", tones))
    assert all(dtmf_tone(tones[i : i + 2 * frame], rate) for i in range(0, len(tones), 2 * frame))
    speech = speech_pcm(
        "Yes, this is Jordan Smith. My number is four one one one, and I can pay on Friday.", rate
    )
    frames = [speech[i : i + 2 * frame] for i in range(0, len(speech), 2 * frame)]
    assert not any(dtmf_tone(f, rate) for f in frames)
    assert not dtmf_tone(tone(CALLER), RATE) and not dtmf_tone(bytes(2 * FRAME), RATE)


async def _spoken(line: FakeLine, pcm: bytes, rate: int) -> None:
    """Real speech through the recorder, with the call's VAD (webrtcvad) marking it."""
    from agent.pipeline.vad import WebRTCVADAnalyzer

    vad = WebRTCVADAnalyzer(sample_rate=rate, params=VADParams(start_secs=0.2, stop_secs=0.2))
    vad.set_sample_rate(rate)
    state = VADState.QUIET
    step = 2 * rate // 50
    for start in range(0, len(pcm) + 2 * step * 25, step):  # and half a second of silence
        chunk = pcm[start : start + step].ljust(step, b"\0")
        line.t += 0.02
        await line.recorder.on_caller_side(InputAudioRawFrame(chunk, rate, 1))
        new = await vad.analyze_audio(chunk)
        if new is VADState.SPEAKING and state is not VADState.SPEAKING:
            started = VADUserStartedSpeakingFrame(start_secs=0.2)
            await line.recorder.on_caller_side(started)
        elif new is VADState.QUIET and state is not VADState.QUIET:
            await line.recorder.on_caller_side(VADUserStoppedSpeakingFrame(stop_secs=0.2))
        state = new if new in (VADState.SPEAKING, VADState.QUIET) else state


@pytest.mark.parametrize("rate", [16000, 8000])
async def test_a_card_number_the_recognizer_dropped_is_not_kept(tmp_path, rate):
    """The reviewers' case on real audio: the recognizer kept only "I'll just pay it all
    now.", payment was not open (the worst case: the policy never knew), and the stored
    caller channel is still silence wherever the card was read."""
    from telephony.rtp import g711

    greeting = speech_pcm("Yes, this is Jordan Smith.", rate)
    card = speech_pcm(
        "I'll just pay it all now. My card number is four one one one, one one one one, "
        "one one one one, one one one one. It expires oh four, twenty seven, and the "
        "security code is three two one.",
        rate,
    )
    if rate == 8000:  # over a G.711 line
        greeting, card = (g711.decode("PCMU", g711.encode("PCMU", p)) for p in (greeting, card))
    line = FakeLine(FileStore(tmp_path))
    line.recorder = CallRecorder(
        line.recorder.call_id,
        FileStore(tmp_path),
        cast(ConversationPolicy, line.fake),
        line.events.append,
        rate,
        clock=lambda: line.t,
    )
    await _spoken(line, greeting, rate)
    await line.turn("Yes, this is Jordan Smith.")  # heard right: kept
    kept_to = line.recorder._timeline.caller_end
    await _spoken(line, card, rate)
    await line.turn("I'll just pay it all now.")  # the recognizer dropped the rest
    uri = await line.recorder.store()

    with wave.open(str(stored_path(uri)), "rb") as wav:
        assert wav.getframerate() == rate
        data = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    left = data[:, 0].astype(np.float64)
    assert np.sqrt(np.mean(left[:kept_to] ** 2)) > 300  # the first turn is there
    assert not left[kept_to:].any()  # not a sample of the card turn is
    [redacted] = line.redacted()
    assert redacted["reason"] == "mostly_empty" and redacted["words"] == 6
    assert redacted["voiced_s"] > 10  # the VAD heard the whole of it
    assert redacted["from_s"] == round(kept_to / rate, 3)


# -- an S3-compatible server --------------------------------------------------------------

BUCKET = "recordings"


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server on a port of its own, for the module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_endpoint(s3_server, monkeypatch):
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    client = boto3.session.Session().client("s3", endpoint_url=s3_server)
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    return s3_server


async def test_the_s3_store_uploads_the_file(s3_endpoint, tmp_path):
    line = Line(S3Store(BUCKET, "calls", s3_endpoint, spool=tmp_path))
    await line.talk(1.0, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(1.0, agent=AGENT)
    uri = await line.recorder.store()
    assert uri == f"s3://{BUCKET}/calls/{line.recorder.call_id}.wav"
    assert list(tmp_path.iterdir()) == []  # the local spool is gone

    client = boto3.session.Session().client("s3", endpoint_url=s3_endpoint)
    got = client.get_object(Bucket=BUCKET, Key=f"calls/{line.recorder.call_id}.wav")
    assert got["ContentType"] == "audio/wav"
    path = tmp_path / "back.wav"
    path.write_bytes(got["Body"].read())
    left, right = channels(path)
    assert (left[: line.at(1.0)] == CALLER).all() and (right[line.at(1.0) :] == AGENT).all()


# -- the console's route ------------------------------------------------------------------


async def log_in(client: TestClient, username: str = "olive") -> None:
    form = await client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    assert token is not None
    done = await client.post(
        "/login",
        data={"username": username, "password": PASSWORD, "csrf_token": token.group(1)},
        allow_redirects=False,
    )
    assert done.status in (302, 303), await done.text()


def add_call(engine, call_id: str, recording_uri: str | None) -> None:
    with Session(engine) as session, session.begin():
        session.add(
            CallRow(
                id=call_id,
                transport="loopback",
                direction="inbound",
                status="ended",
                started_at=dt.datetime.now(dt.UTC),
                recording_uri=recording_uri,
            )
        )


@pytest.fixture
async def console(db_engine, db_url):
    """An app with the console's login and the recording route, and an operator."""

    async def make(settings_env: dict[str, str]):
        settings = Settings.from_env({"DATABASE_URL": db_url, **settings_env})
        app = web.Application()
        setup_auth(app, db_engine, secure_cookies=False, hasher=FAST)
        add_recording_routes(app, settings)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    clients: list[TestClient] = []
    Users(db_engine, FAST).add("olive", PASSWORD, "operator")
    try:
        yield make
    finally:
        for client in clients:
            await client.close()


async def _recorded_wav(tmp_path: Path) -> bytes:
    line = Line(FileStore(tmp_path / "src"))
    await line.talk(0.5, caller=CALLER)
    await line.turn("Yes, this is Jordan Smith.")
    await line.talk(0.5, agent=AGENT)
    return stored_path(await line.recorder.store()).read_bytes()


async def _check_ranges(client: TestClient, call_id: str, data: bytes) -> None:
    url = f"/api/calls/{call_id}/recording"
    full = await client.get(url)
    assert full.status == 200
    assert full.headers["Content-Type"] == "audio/wav"
    assert full.headers["Accept-Ranges"] == "bytes"
    assert full.headers["Cache-Control"] == "no-store"
    assert await full.read() == data

    part = await client.get(url, headers={"Range": "bytes=44-1043"})
    assert part.status == 206
    assert part.headers["Content-Range"] == f"bytes 44-1043/{len(data)}"
    assert await part.read() == data[44:1044]

    tail = await client.get(url, headers={"Range": "bytes=-100"})
    assert tail.status == 206 and await tail.read() == data[-100:]

    for whole in WHOLE:  # ranges that read it all are reads like any other
        response = await client.get(url, headers={"Range": whole})
        assert await response.read() == data, whole

    for bad in (f"bytes={len(data) + 10}-", "bytes=abc", "pages=1-2"):
        refused = await client.get(url, headers={"Range": bad})
        assert refused.status == 416, (bad, refused.status)
        assert refused.headers["Content-Range"] == f"bytes */{len(data)}"


#: Ranges that read the whole recording.
WHOLE = ("bytes=00-", "bytes=-999999999")


def _ranges_read(data: bytes) -> list[str | None]:
    """The ranges ``_check_ranges`` asks for, as the audit log records them."""
    bad = [f"bytes={len(data) + 10}-", "bytes=abc", "pages=1-2"]
    return [None, "bytes=44-1043", "bytes=-100", *WHOLE, *bad]


def _plays(engine, call_id: str) -> list[AuditEntry]:
    with Session(engine) as session:
        return list(
            session.scalars(
                select(AuditEntry)
                .where(AuditEntry.action == "play_recording", AuditEntry.object_id == call_id)
                .order_by(AuditEntry.id)
            )
        )


async def test_the_console_plays_a_stored_recording_with_ranges(console, db_engine, tmp_path):
    data = await _recorded_wav(tmp_path)
    path = tmp_path / "store" / "c-rec-file.wav"
    path.parent.mkdir()
    path.write_bytes(data)
    add_call(db_engine, "c-rec-file", path.as_uri())
    add_call(db_engine, "c-no-rec", None)
    client = await console({"RECORDING_STORE": str(tmp_path / "store")})

    anonymous = await client.get("/api/calls/c-rec-file/recording")
    assert anonymous.status == 401
    assert not _plays(db_engine, "c-rec-file")

    await log_in(client)
    await _check_ranges(client, "c-rec-file", data)
    # Every read is an entry, whatever its range, with the range it asked for.
    plays = _plays(db_engine, "c-rec-file")
    assert [play.detail for play in plays] == _ranges_read(data)
    assert all(play.user_id is not None for play in plays)

    for missing in ("c-no-rec", "c-nowhere"):
        response = await client.get(f"/api/calls/{missing}/recording")
        assert response.status == 404
        assert "no recording" in (await response.json())["error"]
    path.unlink()
    gone = await client.get("/api/calls/c-rec-file/recording")
    assert gone.status == 404 and "missing" in (await gone.json())["error"]


async def test_the_console_plays_a_recording_from_s3(console, db_engine, s3_endpoint, tmp_path):
    data = await _recorded_wav(tmp_path)
    client_s3 = boto3.session.Session().client("s3", endpoint_url=s3_endpoint)
    client_s3.put_object(Bucket=BUCKET, Key="calls/c-rec-s3.wav", Body=data)
    add_call(db_engine, "c-rec-s3", f"s3://{BUCKET}/calls/c-rec-s3.wav")
    add_call(db_engine, "c-rec-s3-gone", f"s3://{BUCKET}/calls/gone.wav")
    client = await console(
        {"RECORDING_STORE": f"s3://{BUCKET}/calls", "S3_ENDPOINT_URL": s3_endpoint}
    )
    assert (await client.get("/api/calls/c-rec-s3/recording")).status == 401
    await log_in(client)
    await _check_ranges(client, "c-rec-s3", data)
    assert [play.detail for play in _plays(db_engine, "c-rec-s3")] == _ranges_read(data)
    gone = await client.get("/api/calls/c-rec-s3-gone/recording")
    assert gone.status == 404


# -- a real call --------------------------------------------------------------------------


@pytest.mark.models
async def test_a_real_call_leaves_a_stereo_recording_without_the_card(cpu_models, tmp_path):
    from agent.conversation.scenarios import builtin_scenarios
    from agent.runtime.context import AgentRuntime
    from tests.conftest import settings_for
    from tools.simulate import simulate_call

    store = tmp_path / "recordings"
    settings = settings_for(
        cpu_models, f"sqlite:///{tmp_path / 'agent.db'}", RECORDING_STORE=str(store)
    )
    async with AgentRuntime(settings) as ctx:
        sim = await simulate_call(ctx, builtin_scenarios()["card_number"])
        with Session(ctx.engine) as session:
            row = session.scalar(
                select(CallRow)
                .where(CallRow.id == sim.summary.call_id)
                .options(selectinload(CallRow.events))
            )
            assert row is not None
            uri, events = row.recording_uri, {e.kind: e.detail for e in row.events}
            redacted = [e.detail for e in row.events if e.kind == "recording_redacted"]

    assert uri is not None and os.path.exists(stored_path(uri))
    left, right = channels(stored_path(uri))
    rms = lambda x: float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))  # noqa: E731
    assert rms(right) > 50, rms(right)
    if rms(left) <= 50:
        # Under load the recognizer can garble the one caller turn this scenario keeps (its
        # identity answer: the date of birth is a digit run, then payment comes up): the
        # recorder silences that turn too, as it must. A silent channel is then explained
        # by a turn's redaction, never silent by accident.
        reasons = {detail["reason"] for detail in redacted}
        assert reasons & {"mostly_empty", "digit_run"}, redacted
    # The card guard stopped the caller at the card number (its digits never reached the
    # policy). Payment came up before it: from then on nothing the caller said is kept.
    assert "card_number_interrupted" in events, list(events)
    assert redacted, list(events)
    for span in redacted:
        assert not left[round(span["from_s"] * RATE) : round(span["to_s"] * RATE)].any()
    assert not left[round(redacted[0]["from_s"] * RATE) :].any(), redacted
    # So is the payment step, when Whisper tiny heard the date of birth well enough for the
    # call to get there (it does not always: the policy then asks again).
    asked = sim.policy is not None and sim.policy.disposition == "promise_to_pay"
    assert asked == ("recording_paused" in events)
    if not asked:
        return
    assert "recording_resumed" in events
    # Audio is placed to the frame (20 ms): the pause is checked within that.
    paused = round(events["recording_paused"]["at_s"] * RATE) + FRAME
    resumed = round(events["recording_resumed"]["at_s"] * RATE) - FRAME
    assert not left[paused:resumed].any()
    assert not right[paused:resumed].any()
    assert right[resumed:].any()  # the promise's confirmation is kept
