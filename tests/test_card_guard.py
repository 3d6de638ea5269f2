"""Card digits read aloud and keyed (agent/pipeline/card_guard.py, rule C11): what counts as card
data, the guard in the pipeline (pipecat's own test harness), and keyed digits kept out
of the logs and the pipeline."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

import pytest
from loguru import logger as pipecat_logger
from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import (
    InputDTMFFrame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    TextFrame,
    TranscriptionFrame,
    TTSSpeakFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.tests.utils import run_test

from agent import logs
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import PolicyEvent, Templates
from agent.conversation.scenarios import account_from
from agent.pipeline.card_guard import (
    CardDataHeardFrame,
    CardGuard,
    card_spans,
    cut,
    digit_runs,
    longest_digit_run,
    warning_for,
)
from telephony.rtp.session import RtpSession

PROMPTS = PromptSet.load("collections-v3")
WARNING = PROMPTS.templates["no_card_numbers"]


def screened(text: str, *, paying: bool = False) -> str:
    """``text`` as the guard lets it through."""
    spans = card_spans(text, payment_open=paying)
    return cut(text, spans) if spans else text


# -- what counts as card data -------------------------------------------------------------


def test_digit_runs_are_read_written_or_spoken():
    assert [r.groups for r in digit_runs("4111-1111, uh, 1111 and 11")] == [
        ("4111", "1111", "1111", "11")
    ]
    assert digit_runs("forty one eleven, double one")[0].digits == "411111"
    assert digit_runs("oh three twelve eighty four")[0].groups == ("0", "3", "12", "84")
    assert longest_digit_run("I have one question about five hundred dollars") == 1
    assert longest_digit_run("Nothing here.") == 0


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1111",  # a whole card
        "four one one one one one one one one one one one one one one one",  # spoken, 16
        "4111 1111",  # two groups of four: a card being read
        "It's a visa, 4111 1",  # more than a last four after a card word
        "my debit card is 51051",
        "the CVV is 123",  # a code after its cue
        "it expires twelve twenty seven",
        "Yes, I can pay it all. [card number removed]",  # what the STT client cut already
        "[security code removed]",
    ],
)
def test_card_data_is_found(text):
    assert card_spans(text), text


@pytest.mark.parametrize(
    "text",
    [
        "March fifth, nineteen eighty.",  # a date of birth
        "oh three twelve eighty four",  # read as digits
        "My date of birth is 03/12/1984.",
        "Call me back at 555-123-4567.",  # a phone number: 10 digits, 3-3-4
        "It's 1 800 555 0100.",
        "The card ending in 1234",  # a last four may be said
        "I can pay $1,250.50 on Friday.",
        "Twelve fifty a month by debit card.",
        "four one one one one one one one",  # 8 digits, no cue, not paying: maybe a date
    ],
)
def test_the_conversations_own_numbers_are_not_card_data(text):
    assert not card_spans(text), text


def test_while_paying_any_longer_run_is_card_data_but_amounts_and_dates_are_not():
    assert card_spans("four one one one one one one one", payment_open=True)
    assert card_spans("it's 411111", payment_open=True)
    assert card_spans("forty one eleven, eleven eleven", payment_open=True)
    assert not card_spans("forty one eleven, eleven eleven")  # pairs, like a date's
    for kept in (
        "I can pay $1,250.50 on 12/15/2025.",
        "twelve fifteen twenty twenty five",
        "1500 dollars on the 15th",
    ):
        assert not card_spans(kept, payment_open=True), kept


def test_what_is_left_of_a_sentence_without_its_digits():
    assert screened("My card number is 4111 1111 1111 1111.") == "My card number is."
    assert screened("I'll pay by card, 4111 1111, okay?") == "I'll pay by card, okay?"
    assert screened("4111 1111 1111 1111") == ""
    assert screened("[card number removed].") == ""
    assert screened("March fifth, nineteen eighty.") == "March fifth, nineteen eighty."


# -- the guard in the pipeline ------------------------------------------------------------


def guard(paying: bool = False) -> tuple[CardGuard, list[PolicyEvent]]:
    events: list[PolicyEvent] = []
    return CardGuard(lambda: WARNING, events.append, payment_open=lambda: paying), events


def final(text: str) -> TranscriptionFrame:
    return TranscriptionFrame(text, "caller", "2026-12-05T10:00:00Z", result={"raw": text})


async def test_a_caller_reading_a_card_is_interrupted_and_the_digits_go_no_further():
    processor, events = guard()
    down, up = await run_test(
        processor,
        frames_to_send=[final("I'll pay now, it's 4111 1111 1111 1111.")],
        expected_down_frames=[
            CardDataHeardFrame,
            InterruptionFrame,
            TTSSpeakFrame,
            TranscriptionFrame,
        ],
    )
    warning = next(f for f in down if isinstance(f, TTSSpeakFrame))
    assert warning.text == WARNING and not warning.interruptible  # heard through
    [rest] = [f for f in down if isinstance(f, TranscriptionFrame)]
    assert rest.text == "I'll pay now, it's." and rest.result is None  # nor in the raw result
    assert "4111" not in str(down)
    [event] = events
    assert event.kind == "card_number_interrupted" and event.detail == {"heard": "final"}


async def test_a_transcript_of_digits_only_is_dropped_and_an_interim_one_too():
    processor, events = guard()
    down, _ = await run_test(
        processor,
        frames_to_send=[
            InterimTranscriptionFrame("4111 1111", "caller", "t"),
            final("4111 1111 1111 1111"),  # the same turn: told once
        ],
        expected_down_frames=[
            CardDataHeardFrame,
            InterruptionFrame,
            TTSSpeakFrame,
            CardDataHeardFrame,
        ],
    )
    assert [e.detail["heard"] for e in events] == ["interim"]


async def test_the_caller_is_told_again_in_a_later_turn():
    processor, events = guard()
    told = [CardDataHeardFrame, InterruptionFrame, TTSSpeakFrame]
    await run_test(processor, frames_to_send=[final("4111 1111")], expected_down_frames=told)
    await run_test(  # the same turn goes on: not told twice
        processor, frames_to_send=[final("1111 1111")], expected_down_frames=[CardDataHeardFrame]
    )
    await run_test(  # the turn ended (the user aggregator says so both ways); a new one
        processor,
        frames_to_send=[UserStoppedSpeakingFrame(), final("1111 1111")],
        expected_down_frames=[UserStoppedSpeakingFrame, *told],
    )
    assert len(events) == 2


async def test_words_without_card_data_go_on_as_a_frame_of_the_guards_own():
    processor, events = guard()
    said = final("Yes, this is Jordan Smith, born oh three twelve eighty four.")
    down, _ = await run_test(
        processor,
        frames_to_send=[said, InterimTranscriptionFrame("Yes, this", "caller", "t")],
        expected_down_frames=[TranscriptionFrame, InterimTranscriptionFrame],
    )
    assert down[0].text == said.text and down[0].result == said.result
    assert down[0] is not said  # the turn ledger stores what the guard pushed, not the STT
    assert not events


async def test_while_paying_a_shorter_run_is_stopped_too():
    processor, events = guard(paying=True)
    down, _ = await run_test(
        processor,
        frames_to_send=[final("It's four one one one one one one one.")],
        expected_down_frames=[
            CardDataHeardFrame,
            InterruptionFrame,
            TTSSpeakFrame,
            TranscriptionFrame,
        ],
    )
    assert down[-1].text == "It's." and len(events) == 1


async def test_keyed_digits_go_no_further_than_the_guard():
    processor, _ = guard()
    await run_test(
        processor,
        frames_to_send=[InputDTMFFrame(button=KeypadEntry.FOUR), TextFrame("other frames go on")],
        expected_down_frames=[TextFrame],
    )
    await run_test(  # upstream is not its business
        processor,
        frames_to_send=[TextFrame("up")],
        frames_to_send_direction=FrameDirection.UPSTREAM,
        expected_up_frames=[TextFrame],
    )


async def test_in_the_pipeline_the_recording_silences_what_the_guard_stopped(tmp_path):
    """The guard's word reaches the recording's tap behind the audio it is about."""
    import itertools
    import wave
    from dataclasses import dataclass, field
    from typing import cast

    import numpy as np
    from pipecat.frames.frames import InputAudioRawFrame
    from pipecat.pipeline.pipeline import Pipeline

    from agent.conversation.policy import Stage
    from agent.pipeline.call import DropAudio
    from agent.pipeline.recording import CallRecorder
    from agent.store.recordings import FileStore

    @dataclass
    class Policy:  # what the recorder reads of the policy
        events: list[PolicyEvent] = field(default_factory=list)
        stage: Stage = Stage.VERIFICATION
        payment_open: bool = False

    events: list[PolicyEvent] = []
    ticks = itertools.count(1)
    recorder = CallRecorder(
        "c-guard",
        FileStore(tmp_path),
        cast(ConversationPolicy, Policy()),
        events.append,
        16000,
        clock=lambda: next(ticks) * 0.02,
    )
    processor, _ = guard()
    digits = np.full(320, 3000, dtype="<i2").tobytes()
    await run_test(
        Pipeline([processor, DropAudio(InputAudioRawFrame, recorder.tap("caller"))]),
        frames_to_send=[
            *(InputAudioRawFrame(digits, 16000, 1) for _ in range(50)),
            final("4111 1111 1111 1111"),
        ],
        expected_down_frames=[CardDataHeardFrame, InterruptionFrame, TTSSpeakFrame],
    )
    uri = await recorder.store()
    assert uri is not None
    with wave.open(str(FileStore.path_of(uri)), "rb") as stored:
        left = np.frombuffer(stored.readframes(stored.getnframes()), dtype="<i2")[0::2]
    assert len(left) == 16000 and not left.any()
    assert [e.detail["reason"] for e in events] == ["card_guard"]


def test_the_speculation_listener_hears_only_what_the_guard_lets_through():
    class Listener:
        def __init__(self) -> None:
            self.heard_texts: list[str] = []
            self.resumes = 0

        def heard(self, text: str) -> None:
            self.heard_texts.append(text)

        def resumed(self) -> None:
            self.resumes += 1

    processor, _ = guard()
    listener = Listener()
    screened_listener = processor.listening(listener)
    screened_listener.heard("It's 4111 1111 1111 1111, can I pay now?")
    screened_listener.heard("4111 1111")
    screened_listener.heard("Yes.")
    screened_listener.resumed()
    assert listener.heard_texts == ["It's, can I pay now?", "Yes."]
    assert listener.resumes == 1


def test_the_pay_link_is_named_only_to_the_verified_consumer():
    policy = ConversationPolicy(
        account_from({}), Templates(PROMPTS.templates), dt.date(2026, 12, 2)
    )
    # Before verification the speaker may be anyone: a hint of a payment is a disclosure.
    assert warning_for(policy) == PROMPTS.templates["no_numbers"]
    for said in ("Yes, this is Jordan Smith.", "March fifth, nineteen eighty."):
        policy.played(reply := policy.on_caller_turn(said), len(reply.texts))
    assert policy.verified
    assert warning_for(policy) == WARNING
    bare = CardGuard.for_call(None, PROMPTS.templates, lambda e: None)  # no policy at all
    assert bare.screen("4111 1111") == ""


# -- keyed digits: never logged -----------------------------------------------------------


async def test_a_keyed_digit_is_never_logged(caplog):
    caplog.set_level(logging.DEBUG)
    a = await RtpSession.open("127.0.0.1")
    b = await RtpSession.open("127.0.0.1")
    try:
        a.start(b.local_address, "PCMU", 101)
        b.start(a.local_address, "PCMU", 101)
        await a.send_dtmf("7")
        assert await asyncio.wait_for(b.read_dtmf(), 5) == "7"
    finally:
        await a.close()
        await b.close()
    keyed = [r.getMessage() for r in caplog.records if "dtmf" in r.getMessage().lower()]
    assert keyed == ["DTMF key received"]


def test_pipecats_lines_about_keys_are_not_passed_on(caplog):
    caplog.set_level(logging.DEBUG)
    sink = pipecat_logger.add(logs._to_logging, level="DEBUG", format="{message}")
    try:
        pipecat_logger.debug("LiveKitTransport#0 DTMF event: {'tone': '4'}")
        pipecat_logger.debug("LiveKitTransport#0 joined the room")
    finally:
        pipecat_logger.remove(sink)
    messages = [r.getMessage() for r in caplog.records]
    assert "LiveKitTransport#0 joined the room" in messages
    assert not any("tone" in m for m in messages)
