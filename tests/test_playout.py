"""What was heard counts, not what was sent (issue 17, item 2).

The policy processor, a TTS that says any text as a tone, and the loopback line's
real-time output, as ``agent.pipeline.call`` wires them: the caller's barge-in is what the
user aggregator pushes (the VAD and turn frames, and the interruption).
"""

import asyncio
import datetime as dt
from collections.abc import AsyncGenerator

import numpy as np
import pytest
from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.tts_service import TextAggregationMode
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.workers.runner import WorkerRunner

import agent.pipeline.dialogue
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Templates
from agent.conversation.scenarios import account_from
from agent.ledger.records import TurnRecord, new_call_id
from agent.pipeline.call import CallProcessors
from agent.pipeline.dialogue import GuardProcessor, PolicyProcessor, TemplateTextFrame
from agent.pipeline.phrasing import Phrasing
from agent.pipeline.playout import TAG, PlayedFrame, PlayedText, Playout, cut_text
from agent.pipeline.tts import StreamingTTSService
from agent.pipeline.turns import TurnLedger
from telephony.loopback import LoopbackTransport

PROMPTS = PromptSet.load("collections-v3")
RATE = 16000
#: The tone TTS speaks 25 characters a second: the mini-Miranda takes about 6 s.
SECONDS_PER_CHAR = 0.04
NOW = dt.datetime(2026, 12, 2, 17, 0, tzinfo=dt.UTC)


class ToneTTS(StreamingTTSService):
    """Says any text as a tone, ``SECONDS_PER_CHAR`` a character, streamed at once."""

    def __init__(self) -> None:
        super().__init__(
            url="http://unused",
            session=None,  # type: ignore[arg-type]
            text_aggregation_mode=TextAggregationMode.TOKEN,  # as agent.pipeline.call has it
        )

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        samples = int(len(text) * SECONDS_PER_CHAR * self.sample_rate)
        t = np.arange(samples) / self.sample_rate
        tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).tobytes()
        step = self.sample_rate // 50 * 2
        for start in range(0, len(tone), step):
            yield TTSAudioRawFrame(tone[start : start + step], self.sample_rate, 1, context_id)


class Ends(FrameProcessor):
    """The end of the pipeline: when the goodbye's EndWorkerFrame got there."""

    def __init__(self) -> None:
        super().__init__()
        self.end_requested_at: float | None = None

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, EndWorkerFrame):
            self.end_requested_at = asyncio.get_running_loop().time()
        await self.push_frame(frame, direction)


class Line:
    """The pipeline from the policy to the caller's ear, running."""

    def __init__(self, policy: ConversationPolicy) -> None:
        self.policy = policy
        self.playout = Playout()
        self.processor = PolicyProcessor(policy, lambda e: None, playout=self.playout)
        self.tts = ToneTTS()
        self.tts.playout = self.playout
        self.transport = LoopbackTransport(RATE)
        output = self.transport.output()
        self.playout.attach(output)
        self.ends = Ends()
        self.records: list[TurnRecord] = []
        self.ledger = TurnLedger(
            new_call_id(),
            CallProcessors(
                stt=self.processor, thinkers=(self.processor,), tts=self.tts, output=output
            ),
            sink=self.records.append,
            playout=self.playout,
        )
        self.worker = PipelineWorker(
            Pipeline([self.processor, self.tts, output, self.ends]),
            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
            observers=[self.ledger],
            enable_rtvi=False,
            enable_turn_tracking=False,
            idle_timeout_secs=None,
        )
        self.run: asyncio.Task[None] | None = None

    @property
    def caller(self):
        return self.transport.caller

    async def __aenter__(self) -> "Line":
        started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _started(worker, frame):
            started.set()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self.run = asyncio.create_task(runner.run())
        await asyncio.wait_for(started.wait(), 5)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.run is not None
        if not self.run.done():
            await self.worker.cancel()
        await self.run

    async def say(self, words: str) -> None:
        """A caller turn as the user aggregator hands it over (the caller was silent)."""
        await self.queue(
            UserStartedSpeakingFrame(),
            LLMContextFrame(LLMContext(messages=[{"role": "user", "content": words}])),
            UserStoppedSpeakingFrame(),
        )

    async def cut_in(self) -> None:
        """The caller starts speaking over the agent: pipecat's barge-in."""
        await self.queue(
            VADUserStartedSpeakingFrame(), UserStartedSpeakingFrame(), InterruptionFrame()
        )

    async def stop_and_say(self, words: str) -> None:
        """The caller who cut in finishes, and their turn is handed to the policy."""
        await self.queue(
            VADUserStoppedSpeakingFrame(),
            LLMContextFrame(LLMContext(messages=[{"role": "user", "content": words}])),
            UserStoppedSpeakingFrame(),
        )

    async def queue(self, *frames: Frame) -> None:
        for frame in frames:
            await self.worker.queue_frame(frame, FrameDirection.DOWNSTREAM)

    async def agent_sound(self, timeout_s: float = 10.0) -> float:
        """Wait for the agent's next sound on the line; when it began (monotonic)."""
        heard = len(self.caller.sound_log)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(self.caller.sound_log) == heard:
            assert loop.time() < deadline, "the agent said nothing"
            await asyncio.sleep(0.01)
        return self.caller.sound_log[heard]

    async def until(self, done, timeout_s: float = 20.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done():
            assert loop.time() < deadline, "timed out"
            await asyncio.sleep(0.02)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.policy.events]


def verified_before_the_disclosure() -> ConversationPolicy:
    """A policy whose consumer has confirmed being Jordan Smith, with every reply
    heard: the date of birth is the next thing they say."""
    policy = ConversationPolicy(account_from({}), Templates(PROMPTS.templates), clock=lambda: NOW)
    reply = policy.opening(PROMPTS.greeting.format(consumer_name="Jordan Smith"))
    policy.played(reply, len(reply.texts))
    reply = policy.on_caller_turn("Yes, this is Jordan Smith.")
    policy.played(reply, len(reply.texts))
    assert "date of birth" in " ".join(reply.texts)
    return policy


DOB = "March fifth, nineteen eighty."
MINI_MIRANDA = PROMPTS.templates["mini_miranda"]


async def test_a_disclosure_cut_one_second_in_is_not_noted_and_okay_answers_nothing():
    policy = verified_before_the_disclosure()
    async with Line(policy) as line:
        await line.say(DOB)
        await line.agent_sound()
        await asyncio.sleep(1.0)
        await line.cut_in()
        await asyncio.sleep(0.3)
        await line.stop_and_say("Okay.")
        await line.until(lambda: len(line.records) >= 1)
        assert "mini_miranda" not in line.kinds()  # not noted: it was cut off
        # "Okay." answered no question: the disclosure again, in full, then the question.
        reply_starts = await line.agent_sound()
        assert reply_starts > 0
        await line.until(lambda: "mini_miranda" in line.kinds())
        await line.until(lambda: len(line.playout.log) >= 3)

    assert policy.promise is None and policy.disposition is None
    assert policy.verified
    cut, again, question = line.playout.log[:3]
    assert cut.cut and 0.05 < cut.fraction < 0.5, cut
    # About a second of its six: the first words, and where it was cut.
    assert str(cut).startswith("This is") and str(cut).endswith("%]"), cut
    assert "debt" not in str(cut)
    assert again == PlayedText(MINI_MIRANDA)
    assert "pay it in full" in question.text or "pay the balance in full" in question.text
    # The turn record of the date of birth stores the reply as heard: cut where it was.
    record = line.records[0]
    assert record.interrupted
    assert record.agent_text.startswith("This is") and "[cut at" in record.agent_text
    assert "debt" not in record.agent_text
    [miranda] = [e for e in policy.events if e.kind == "mini_miranda"]
    assert miranda.detail.get("text", MINI_MIRANDA) == MINI_MIRANDA


async def test_a_disclosure_heard_in_full_counts_though_the_question_after_it_was_cut():
    policy = verified_before_the_disclosure()
    async with Line(policy) as line:
        await line.say(DOB)
        await line.until(lambda: len(line.playout.log) == 1)  # played to its end
        await asyncio.sleep(1.0)  # into the question
        await line.cut_in()
        await asyncio.sleep(0.3)
        await line.stop_and_say("Okay.")
        await line.until(lambda: len(line.playout.log) >= 3)
    assert line.kinds().count("mini_miranda") == 1
    heard, cut, again = line.playout.log[:3]
    assert heard == PlayedText(MINI_MIRANDA)
    assert cut.cut and str(cut).startswith("You have") and "Acme" not in str(cut)
    # "Okay." answered nothing: the question again, not the disclosure.
    assert again.text == PROMPTS.templates["purpose_again"]
    assert policy.promise is None


async def test_a_reply_played_to_its_end_is_noted_once_with_every_text_heard():
    policy = verified_before_the_disclosure()
    async with Line(policy) as line:
        await line.say(DOB)
        await line.until(lambda: "mini_miranda" in line.kinds(), timeout_s=30)
    assert line.kinds().count("mini_miranda") == 1
    assert [p.text for p in line.playout.log][0] == MINI_MIRANDA
    assert not any(p.cut for p in line.playout.log)


async def test_a_caller_speaking_over_the_goodbye_has_their_turn_handled_then_the_call_ends():
    policy = verified_before_the_disclosure()
    policy.played(reply := policy.on_caller_turn(DOB), len(reply.texts))
    async with Line(policy) as line:
        await line.say("Stop calling me.")
        await line.agent_sound()  # "I understand. We will stop calling you. Goodbye."
        await asyncio.sleep(0.5)
        await line.cut_in()
        await asyncio.sleep(1.0)  # still talking: the call must not end under them
        assert line.ends.end_requested_at is None
        said_at = asyncio.get_running_loop().time()
        await line.stop_and_say("And I dispute this debt, I don't owe it.")
        await asyncio.wait_for(asyncio.shield(line.run), 30)  # the call ends by itself

    assert policy.disposition == "stop_calling"
    late = [e.detail for e in policy.events if e.kind == "signal" and e.detail.get("late")]
    assert any(d["kind"] == "dispute" for d in late), policy.events
    assert line.ends.end_requested_at is not None and line.ends.end_requested_at > said_at


async def test_a_call_ends_after_its_goodbye_even_if_the_caller_never_stops(monkeypatch):
    monkeypatch.setattr(agent.pipeline.dialogue, "CALLER_GRACE_S", 1.0)
    policy = verified_before_the_disclosure()
    policy.played(reply := policy.on_caller_turn(DOB), len(reply.texts))
    async with Line(policy) as line:
        await line.say("Stop calling me.")
        await line.agent_sound()
        await line.cut_in()  # and never stops
        await asyncio.wait_for(asyncio.shield(line.run), 20)
    assert line.ends.end_requested_at is not None


def test_a_cut_text_keeps_the_words_played_in_full_and_says_it_was_cut():
    text = "This is Northwind Recovery, a debt collector."
    assert cut_text(text, 0.7) == "This is Northwind Recovery, a [cut at 70%]"
    assert cut_text(text, 0.01) == "[cut at 1%]"
    assert str(PlayedText(text)) == text


@pytest.mark.parametrize("heard", [0, 1])
def test_the_policy_owes_a_cut_disclosure_and_notes_it_only_when_heard(heard):
    # The contract the pipeline codes against (agent.conversation.policy.ConversationPolicy.played).
    policy = verified_before_the_disclosure()
    reply = policy.on_caller_turn(DOB)
    assert reply.texts[0] == MINI_MIRANDA
    policy.played(reply, heard)
    assert ("mini_miranda" in [e.kind for e in policy.events]) == (heard >= 1)
    again = policy.on_caller_turn("Okay.")
    assert (again.texts[0] == MINI_MIRANDA) == (heard == 0)
    assert policy.promise is None


# -- production mode: the LLM phrases a question ----------------------------------


class Ear(FrameProcessor):
    """The line, heard to the end: each tagged text and each mark reaches the listener."""

    def __init__(self, listener: PolicyProcessor) -> None:
        super().__init__()
        self.listener = listener

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        tag = None
        if isinstance(frame, PlayedFrame):
            tag = frame.tag
        elif isinstance(frame, TemplateTextFrame):
            tag = frame.metadata.get(TAG)
        if tag is not None and direction is FrameDirection.DOWNSTREAM:
            self.listener.on_heard(tag)
        await self.push_frame(frame, direction)


class ScriptedLLM(FrameProcessor):
    """An LLM that answers each request after ``delay_s`` with ``words``."""

    def __init__(self, words: str, delay_s: float) -> None:
        super().__init__()
        self.words, self.delay_s = words, delay_s

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await asyncio.sleep(self.delay_s)
            await self.push_frame(LLMFullResponseStartFrame())
            await self.push_frame(LLMTextFrame(self.words))
            await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)


def negotiating() -> tuple[ConversationPolicy, list[tuple[list[str], int]]]:
    """A verified policy that has asked for the payment, and its ``played`` calls."""
    policy = verified_before_the_disclosure()
    policy.played(reply := policy.on_caller_turn(DOB), len(reply.texts))
    calls: list[tuple[list[str], int]] = []
    played = policy.played

    def record(reply, heard):
        calls.append((list(reply.texts), heard))
        played(reply, heard)

    policy.played = record  # type: ignore[method-assign]
    return policy, calls


OFFER = "I can do twenty dollars a month."


@pytest.mark.parametrize("llm_delay_s", [0.0, 0.5])
async def test_a_phrased_question_is_heard_once_whoever_said_it(llm_delay_s):
    """In time, the LLM's words are the question; past the deadline (0.05 s), the
    policy's own text is: either way the reply is settled once, as heard."""
    policy, calls = negotiating()
    phrasing = Phrasing(policy, PROMPTS.turn, deadline_s=0.05)
    processor = PolicyProcessor(policy, lambda e: None, phrasing, playout=Playout())
    pipeline = Pipeline(
        [
            processor,
            ScriptedLLM("The smallest monthly payment is $100, for 12 months.", llm_delay_s),
            GuardProcessor(policy, lambda e: None, phrasing=phrasing),
            Ear(processor),
        ]
    )
    context = LLMContext(messages=[{"role": "user", "content": OFFER}])
    await run_test(pipeline, frames_to_send=[LLMContextFrame(context), SleepFrame(1.0)])
    [(texts, heard)] = calls
    assert "$100 a month" in texts[0] and heard == len(texts)
