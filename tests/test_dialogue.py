"""The policy and the guard as pipeline processors (pipecat's own test harness)."""

import asyncio
import datetime as dt
import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from pipecat.frames.frames import (
    EndFrame,
    EndWorkerFrame,
    FunctionCallFromLLM,
    FunctionCallsStartedFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

import agent.pipeline.llm
from agent.conversation.policy import TOOLS, ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import PolicyEvent, Templates
from agent.conversation.scenarios import account_from
from agent.pipeline.dialogue import (
    GuardProcessor,
    PhraseRequestFrame,
    PolicyProcessor,
    TemplateTextFrame,
)
from agent.pipeline.http_pools import ServiceSessions
from agent.pipeline.llm import ChatCompletionsLLMService
from agent.pipeline.phrasing import Phrasing
from agent.pipeline.speculation import Speculation

PROMPTS = PromptSet.load("collections-v3")


def policy(**account) -> ConversationPolicy:
    p = ConversationPolicy(
        account_from(account), Templates(PROMPTS.templates), dt.date(2026, 12, 2)
    )
    reply = p.opening(PROMPTS.greeting.format(consumer_name="Jordan Smith"))
    p.played(reply, len(reply.texts))  # the greeting was heard to its end
    return p


async def test_a_caller_turn_is_answered_with_templates_and_events_are_reported():
    events = []
    processor = PolicyProcessor(policy(), events.append)
    context = LLMContext(messages=[{"role": "user", "content": "Wrong number, no Jordan here."}])
    down, _ = await run_test(
        processor,
        frames_to_send=[LLMContextFrame(context)],
        expected_down_frames=[
            LLMFullResponseStartFrame,
            TemplateTextFrame,
            LLMFullResponseEndFrame,
            EndWorkerFrame,
            EndFrame,  # the worker ends the call once the goodbye has gone through
        ],
        send_end_frame=False,
    )
    assert "remove this number" in down[1].text
    assert [e.kind for e in events][-2:] == ["signal", "disposition"]


async def test_a_generated_sentence_about_the_debt_is_blocked_before_verification():
    """The response is held whole: a template passes at once, the LLM's text only when
    its end has come and all of it passed; one bad sentence and none of it is said."""
    events = []
    guard = GuardProcessor(policy(), events.append)
    down, _ = await run_test(
        guard,
        frames_to_send=[
            LLMFullResponseStartFrame(),
            LLMTextFrame("Hello there. "),
            LLMTextFrame("You owe $1,200 to Acme Bank. "),
            TemplateTextFrame("Goodbye. "),
            LLMFullResponseEndFrame(),
        ],
        expected_down_frames=[
            LLMFullResponseStartFrame,
            TemplateTextFrame,  # the template, ahead of the LLM's text held back
            TemplateTextFrame,  # the guard's safe sentence instead of the LLM's
            LLMFullResponseEndFrame,
        ],
    )
    spoken = [f.text.strip() for f in down if isinstance(f, LLMTextFrame)]
    assert spoken == ["Goodbye.", "I'm only able to speak with Jordan Smith directly."]
    [event] = events
    assert event.kind == "blocked_sentence" and event.detail["rule"] == "C3"
    assert event.detail["text"] == "You owe $1,200 to Acme Bank."


# -- production mode (LLM_MODE=phrase) -----------------------------------------------


def verified_policy(**account) -> ConversationPolicy:
    p = policy(**account)
    for line in ("Yes, this is Jordan Smith.", "March fifth, nineteen eighty."):
        reply = p.on_caller_turn(line)
        p.played(reply, len(reply.texts))
    assert p.verified
    return p


def phrased(text: str = "I can do twenty dollars a month.") -> Phrasing:
    """A phrasing whose policy has just answered ``text`` with a phraseable question."""
    phrasing = Phrasing(verified_policy(min_installment=50), PROMPTS.turn)
    reply = phrasing.policy.on_caller_turn(text)
    phrasing.context([], text, reply)
    return phrasing


async def test_in_phrase_mode_a_negotiation_question_goes_to_the_llm_with_its_tools():
    events = []
    p = verified_policy(min_installment=50)
    processor = PolicyProcessor(p, events.append, Phrasing(p, PROMPTS.turn))
    context = LLMContext(messages=[{"role": "user", "content": "I can do twenty dollars a month."}])
    down, _ = await run_test(
        processor,
        frames_to_send=[LLMContextFrame(context)],
        expected_down_frames=[PhraseRequestFrame, LLMContextFrame],  # the marker first
    )
    request = down[1].context
    assert "$50 a month" in request.get_messages()[-1]["content"]
    assert [t.name for t in request.tools.standard_tools] == list(TOOLS)
    assert "offer_outside_envelope" in [e.kind for e in events]  # reported before the LLM runs


async def test_in_phrase_mode_verification_is_still_answered_with_templates():
    p = policy()
    processor = PolicyProcessor(p, lambda e: None, Phrasing(p, PROMPTS.turn))
    context = LLMContext(messages=[{"role": "user", "content": "Yes, this is Jordan."}])
    down, _ = await run_test(
        processor,
        frames_to_send=[LLMContextFrame(context)],
        expected_down_frames=[
            LLMFullResponseStartFrame,
            TemplateTextFrame,
            LLMFullResponseEndFrame,
        ],
    )
    assert "date of birth" in down[1].text


async def run_guard(phrasing: Phrasing, *frames) -> tuple[list[str], list]:
    events = []
    guard = GuardProcessor(phrasing.policy, events.append, phrasing=phrasing)
    down, _ = await run_test(
        guard,
        frames_to_send=[
            PhraseRequestFrame(phrasing.turn),  # as the policy processor sends it
            LLMFullResponseStartFrame(),
            *frames,
            LLMFullResponseEndFrame(),
        ],
    )
    return [f.text.strip() for f in down if isinstance(f, LLMTextFrame)], events


#: A faithful phrasing of the policy's counter-offer to OFFER (``MINIMUM``), in pieces.
PHRASED = ("The lowest monthly amount is one hundred dollars, ", "for twelve months. ", "Okay?")


async def test_the_llm_phrasing_is_spoken_when_the_guard_allows_it():
    decisions = []
    phrasing = phrased()
    guard = GuardProcessor(
        phrasing.policy, lambda e: None, phrasing=phrasing, on_decision=decisions.append
    )
    down, _ = await run_test(
        guard,
        frames_to_send=[
            PhraseRequestFrame(phrasing.turn),
            LLMFullResponseStartFrame(),
            *[LLMTextFrame(piece) for piece in PHRASED],
            LLMFullResponseEndFrame(),
        ],
    )
    spoken = [f.text.strip() for f in down if isinstance(f, LLMTextFrame)]
    assert spoken == [
        "The lowest monthly amount is one hundred dollars, for twelve months.",
        "Okay?",
    ]  # one unit per sentence, for the TTS
    [decision] = decisions
    assert decision.spoken == tuple(spoken) and decision.blocked == ()
    assert decision.reference == MINIMUM and phrasing.pending is None  # settled


async def test_the_policy_text_is_spoken_when_the_llm_says_nothing():
    phrasing = phrased()
    reference = phrasing.pending.texts
    spoken, _ = await run_guard(phrasing)
    assert spoken == reference


async def test_a_blocked_phrased_sentence_drops_the_whole_response_for_the_policy_text():
    phrasing = phrased()
    reference = phrasing.pending.texts
    spoken, events = await run_guard(
        phrasing,
        LLMTextFrame("I hear you. "),
        LLMTextFrame("If you don't pay we will have you arrested. "),
        LLMTextFrame("So pay fifty."),
    )
    assert spoken == reference  # not even "I hear you.", which passed on its own
    # Each failing sentence is kept for review: a threat, and an amount not offered.
    assert [(e.kind, e.detail["rule"]) for e in events] == [
        ("blocked_sentence", "C5"),
        ("blocked_sentence", "allow:figure"),
    ]
    assert events[0].detail["text"] == "If you don't pay we will have you arrested."


async def test_a_response_without_the_references_content_is_not_spoken():
    """Each sentence may pass and the response still fail: the counter-offer's figures
    and its question are the reference's required content."""
    phrasing = phrased()
    reference = phrasing.pending.texts
    spoken, events = await run_guard(phrasing, LLMTextFrame("Thank you for telling me that."))
    assert spoken == reference
    assert [e.detail["rule"] for e in events] == ["allow:required"]


async def test_a_blocked_sentence_is_stored_for_review_with_card_data_redacted():
    phrasing = phrased()
    reference = phrasing.pending.texts
    spoken, events = await run_guard(
        phrasing,
        LLMTextFrame("Sure, your card 4111 1111 1111 1111 works. "),
        LLMTextFrame("Would that work for you?"),
    )
    assert spoken == reference
    [event] = events
    assert "4111" not in event.detail["text"] and "[card number removed]" in event.detail["text"]
    assert event.detail["rule"] == "C11" and event.detail["reason"]


async def test_nothing_reaches_the_voice_before_the_response_has_passed():
    """However long the response streams, its first words wait for its end."""
    phrasing = phrased()
    guard = GuardProcessor(phrasing.policy, lambda e: None, phrasing=phrasing)
    heard = Heard()
    pieces = [LLMTextFrame(piece) for piece in PHRASED]
    frames = [PhraseRequestFrame(phrasing.turn), LLMFullResponseStartFrame()]
    for piece in pieces:
        frames += [piece, SleepFrame(0.2)]
    start = asyncio.get_running_loop().time()
    await run_test(Pipeline([guard, heard]), frames_to_send=[*frames, LLMFullResponseEndFrame()])
    assert [text for _, text in heard.texts] == [
        "The lowest monthly amount is one hundred dollars, for twelve months.",
        "Okay?",
    ]
    assert all(at - start >= 0.55 for at, _ in heard.texts), heard.texts  # after the stream


async def test_what_the_llm_wrote_before_the_caller_cut_in_is_not_spoken():
    phrasing = phrased()
    reference = phrasing.pending.texts
    guard = GuardProcessor(phrasing.policy, lambda e: None, phrasing=phrasing)
    down, _ = await run_test(
        guard,
        frames_to_send=[
            PhraseRequestFrame(phrasing.turn),
            LLMFullResponseStartFrame(),
            LLMTextFrame(PHRASED[0]),
            SleepFrame(0.1),
            InterruptionFrame(),
            LLMTextFrame(PHRASED[1] + PHRASED[2]),
            LLMFullResponseEndFrame(),
        ],
    )
    spoken = [f.text.strip() for f in down if isinstance(f, LLMTextFrame)]
    assert spoken == reference  # what came after is judged alone: the policy's text


async def test_a_tool_call_settles_the_turn_without_the_fallback():
    phrasing = phrased()
    call = FunctionCallFromLLM(
        function_name="transfer", tool_call_id="1", arguments={}, context=LLMContext()
    )
    spoken, _ = await run_guard(phrasing, FunctionCallsStartedFrame(function_calls=[call]))
    assert spoken == []


async def _write_chunk(
    response: web.StreamResponse, delta: dict[str, Any], finish: str | None
) -> None:
    """One OpenAI chat-completion chunk as a server-sent event."""
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    await response.write(f"data: {json.dumps(chunk)}\n\n".encode())


class ToolCallingLLM:
    """An OpenAI-compatible server that answers every request with one tool call."""

    def __init__(self, name: str, arguments: dict) -> None:
        self.name, self.arguments = name, arguments
        self.requests: list[dict] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        call = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }
        for delta, finish in [
            ({"role": "assistant", "tool_calls": [call]}, None),
            ({}, "tool_calls"),
        ]:
            await _write_chunk(response, delta, finish)
        await response.write(b"data: [DONE]\n\n")
        return response


async def test_a_tool_call_through_the_openai_service_is_gated_and_answered():
    server_llm = ToolCallingLLM(
        "record_promise", {"amount": 50, "date": "2026-12-15", "method": "check", "monthly": True}
    )
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server_llm)
    server = TestServer(app)
    await server.start_server()
    sessions = ServiceSessions()
    p = verified_policy(min_installment=50, balance=300)
    phrasing = Phrasing(p, PROMPTS.turn)
    events = []
    llm = ChatCompletionsLLMService(
        sessions=sessions,
        base_url=str(server.make_url("/v1")),
        api_key="none",
        model="scripted",
        max_tokens=40,
        system_instruction="You are the agent.",
    )
    pipeline = Pipeline(
        [
            PolicyProcessor(p, events.append, phrasing),
            llm,
            GuardProcessor(p, events.append, phrasing=phrasing),
        ]
    )
    context = LLMContext(messages=[{"role": "user", "content": "I can do twenty dollars a month."}])
    try:
        down, _ = await run_test(
            pipeline,
            frames_to_send=[LLMContextFrame(context), SleepFrame(0.5)],
            send_end_frame=True,
        )
    finally:
        await sessions.close()
        await server.close()
    [request] = server_llm.requests
    assert [t["function"]["name"] for t in request["tools"]] == list(TOOLS)
    spoken = " ".join(f.text for f in down if isinstance(f, LLMTextFrame))
    # C13: the LLM's terms are read back for the consumer's own yes, never recorded by it.
    assert "To confirm: $50 a month for 6 months" in spoken and "Would that work" not in spoken
    assert p.promise is None and p.stage is Stage.READ_BACK
    assert "tool_call" in [e.kind for e in events]


class SlowLLM(FrameProcessor):
    """An LLM whose first words come long after the phrasing deadline."""

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await asyncio.sleep(0.5)
            await self.push_frame(LLMFullResponseStartFrame())
            await self.push_frame(LLMTextFrame("Late words from the model."))
            await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)


async def test_when_the_llm_misses_its_deadline_the_policy_speaks_and_the_late_answer_is_dropped():
    p = verified_policy(min_installment=50)
    phrasing = Phrasing(p, PROMPTS.turn, deadline_s=0.05)
    pipeline = Pipeline(
        [
            PolicyProcessor(p, lambda e: None, phrasing),
            SlowLLM(),
            GuardProcessor(p, lambda e: None, phrasing=phrasing),
        ]
    )
    context = LLMContext(messages=[{"role": "user", "content": "I can do twenty dollars a month."}])
    # The end comes after the slow LLM has answered.
    down, _ = await run_test(pipeline, frames_to_send=[LLMContextFrame(context), SleepFrame(1.0)])
    spoken = [f.text.strip() for f in down if isinstance(f, LLMTextFrame)]
    assert spoken == [MINIMUM], spoken
    assert phrasing.expired


class StreamingLLM:
    """An OpenAI-compatible server that is up at once (its headers come first) but
    streams its text only after ``first_s`` (``then_s`` for the requests after the
    first): a live, slow model. ``finished`` says, per request, if it streamed to
    the end (False: the client went away first)."""

    def __init__(
        self, *pieces: str, first_s: float, between_s: float = 0.0, then_s: float | None = None
    ) -> None:
        self.pieces, self.first_s, self.between_s = pieces, first_s, between_s
        self.then_s = first_s if then_s is None else then_s
        self.finished: list[bool] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        first_s = self.then_s if self.finished else self.first_s
        self.finished.append(False)
        index = len(self.finished) - 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(first_s)
        deltas = [({"role": "assistant", "content": p}, None) for p in self.pieces]
        try:
            for i, (delta, finish) in enumerate([*deltas, ({}, "stop")]):
                if i:
                    await asyncio.sleep(self.between_s)
                await _write_chunk(response, delta, finish)
            await response.write(b"data: [DONE]\n\n")
        except ConnectionResetError:
            return response
        self.finished[index] = True
        return response


class Heard(FrameProcessor):
    """The end of the pipeline: what reaches the TTS, and when (loop time)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[tuple[float, str]] = []
        self.responses = 0  # start frames, less end frames: 0 once each response has ended

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            self.texts.append((asyncio.get_running_loop().time(), frame.text.strip()))
        elif isinstance(frame, LLMFullResponseStartFrame | LLMFullResponseEndFrame):
            self.responses += 1 if isinstance(frame, LLMFullResponseStartFrame) else -1
        await self.push_frame(frame, direction)


async def through_the_openai_service(
    server_llm,
    deadline_s: float,
    *turns,
    wait_s: float,
    ahead: str | None = None,
    events: list[PolicyEvent] | None = None,
):
    """Caller turns (``(seconds after the previous one, words)``) through PolicyProcessor,
    the real LLM service on a loopback server and the guard, as agent.pipeline.call builds them:
    what was heard, in seconds from the first turn, the phrasing and the LLM service.
    With ``ahead``, those words are heard by the STT (``agent.pipeline.speculation``) 0.05 s in;
    the LLM service's events go to ``events``."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server_llm)
    server = TestServer(app)
    await server.start_server()
    sessions = ServiceSessions()
    p = verified_policy(min_installment=50)
    phrasing = Phrasing(p, PROMPTS.turn, deadline_s=deadline_s)
    llm = ChatCompletionsLLMService(
        sessions=sessions,
        base_url=str(server.make_url("/v1")),
        api_key="none",
        model="scripted",
        max_tokens=40,
        system_instruction="You are the agent.",
        answer_timeout_s=deadline_s,
        on_event=None if events is None else events.append,
    )
    phrasing.abandon = llm.abandon
    heard = Heard()
    processor = PolicyProcessor(p, lambda e: None, phrasing)
    if ahead is not None:
        processor.speculation = Speculation(p, phrasing, LLMContext(), llm)
        asyncio.get_running_loop().call_later(0.05, processor.speculation.heard, ahead)
    pipeline = Pipeline(
        [
            processor,
            llm,
            GuardProcessor(p, lambda e: None, phrasing=phrasing),
            heard,
        ]
    )
    frames = []
    for after_s, words in turns:
        frames += [SleepFrame(after_s)] if after_s else []
        frames.append(LLMContextFrame(LLMContext(messages=[{"role": "user", "content": words}])))
    start = asyncio.get_running_loop().time()
    try:
        await run_test(pipeline, frames_to_send=[*frames, SleepFrame(wait_s)])
    finally:
        await sessions.close()
        await server.close()
    assert heard.responses == 0  # a late answer's start frame went no further either
    return [(round(at - start, 2), text) for at, text in heard.texts], phrasing, llm


OFFER = "I can do twenty dollars a month."
#: What the policy answers OFFER with (the LLM's reference, and the fallback).
MINIMUM = (
    "The lowest monthly payment I can set up is $100 a month, for 12 months. "
    "Would that work for you?"
)
NO_CARDS = PROMPTS.templates["no_card_numbers"]


async def test_a_live_llm_slow_to_its_first_words_misses_the_deadline():
    """The server answers at once but its first token comes after 1 s: the policy's
    text is spoken at the deadline, and the LLM's late words never."""
    slow = StreamingLLM("Late words ", "from the model.", first_s=1.0)
    heard, phrasing, _ = await through_the_openai_service(slow, 0.2, (0, OFFER), wait_s=1.5)
    assert [text for _, text in heard] == [MINIMUM], heard
    assert heard[0][0] < 0.5, heard  # the deadline, not the LLM's 1 s
    assert phrasing.expired


async def test_an_llm_whose_first_words_come_in_time_is_spoken_to_its_end():
    """The first token within the deadline wins the turn, however long the rest takes."""
    llm = StreamingLLM(*PHRASED, first_s=0.05, between_s=0.3)
    heard, phrasing, _ = await through_the_openai_service(llm, 0.2, (0, OFFER), wait_s=1.3)
    assert [text for _, text in heard] == [
        "The lowest monthly amount is one hundred dollars, for twelve months.",
        "Okay?",
    ], heard
    assert heard[0][0] > 0.6, heard  # spoken when the whole response had passed
    assert not phrasing.expired


async def test_a_late_answer_claims_no_later_turn_and_holds_up_no_policy_text():
    """Turn 1's late words come while turn 2 waits behind it in the LLM: they count for
    neither turn, and turn 2's deadline still fires. The policy's texts for both, and
    for a turn 3 it answers itself (at 0.9 s), are spoken on time, not after the LLM."""
    slow = StreamingLLM("Late words ", "from the model.", first_s=1.0)
    card = "My card number is 4111 1111 1111 1111."
    heard, _, _ = await through_the_openai_service(
        slow, 0.2, (0, OFFER), (0.5, OFFER), (0.4, card), wait_s=2.5
    )
    assert [text for _, text in heard][:3] == [MINIMUM, MINIMUM, NO_CARDS] and len(heard) == 4
    limits = (0.5, 1.0, 1.2, 1.2)  # the LLM's words would come at 1 s, then 2 s
    assert all(at < limit for (at, _), limit in zip(heard, limits, strict=True)), heard


async def test_a_request_past_its_deadline_is_given_up_and_the_next_turn_waits_on_nothing():
    """Turn 1's LLM is slow (1 s to its first words), turn 2's quick: turn 1's stream is
    cut at its deadline, so turn 2's request goes at once and its words are spoken."""
    llm = StreamingLLM("".join(PHRASED), first_s=1.0, then_s=0.05)
    events: list[PolicyEvent] = []
    heard, _, _ = await through_the_openai_service(
        llm, 0.2, (0, OFFER), (0.5, OFFER), wait_s=1.5, events=events
    )
    assert [text for _, text in heard] == [
        MINIMUM,
        "The lowest monthly amount is one hundred dollars, for twelve months.",
        "Okay?",
    ]
    assert heard[1][0] < 0.7, heard  # turn 2's own deadline (0.5 + 0.2), not turn 1's 1 s
    assert llm.finished == [False, True]
    assert events == []  # one late answer is no outage


async def test_a_stream_gone_quiet_after_its_first_words_is_given_up_as_stalled(monkeypatch):
    monkeypatch.setattr(agent.pipeline.llm, "STALL_TIMEOUT_S", 0.3)
    llm = StreamingLLM(PHRASED[0], PHRASED[1], first_s=0.05, between_s=2.0)
    events: list[PolicyEvent] = []
    heard, _, _ = await through_the_openai_service(llm, 0.2, (0, OFFER), wait_s=1.0, events=events)
    # What it wrote before it stalled ends mid-sentence: the policy's text, whole.
    assert [text for _, text in heard] == [MINIMUM]
    assert [e.kind for e in events] == ["llm_unavailable"]
    assert "stalled" in events[0].detail["reason"]


async def test_a_request_given_up_while_queued_is_never_sent():
    """Turn 1's answer (begun in time) streams past turn 2's deadline: turn 2's request,
    still queued behind it, is dropped there instead of being sent for nothing."""
    llm = StreamingLLM(*PHRASED, first_s=0.05, between_s=0.3)
    heard, phrasing, _ = await through_the_openai_service(
        llm, 0.2, (0, OFFER), (0.1, OFFER), wait_s=1.5
    )
    # Turn 1 begins at 0.05 s and its stream ends at ~0.65 s; at turn 2's deadline
    # (0.3 s) the policy answers it and its request is given up. Turn 1's answer, whole
    # only after that, answers a question the caller has moved past: it is dropped.
    assert [text for _, text in heard] == [MINIMUM]
    assert heard[0][0] < 0.5, heard
    assert llm.finished == [True]
    assert phrasing.expired
