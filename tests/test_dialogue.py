"""The policy and the guard as pipeline processors (pipecat's own test harness)."""

import datetime as dt

from pipecat.frames.frames import (
    EndFrame,
    EndWorkerFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from agent.dialogue import GuardProcessor, PolicyProcessor, TemplateTextFrame
from agent.policy import ConversationPolicy, Templates
from agent.prompts import PromptSet
from agent.scenarios import account_from

PROMPTS = PromptSet.load("collections-v1")


def policy() -> ConversationPolicy:
    p = ConversationPolicy(account_from({}), Templates(PROMPTS.templates), dt.date(2026, 12, 2))
    p.opening(PROMPTS.greeting.format(consumer_name="Jordan Smith"))
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
            LLMTextFrame,
            TemplateTextFrame,
            TemplateTextFrame,
            LLMFullResponseEndFrame,
        ],
    )
    spoken = [f.text for f in down if isinstance(f, LLMTextFrame)]
    assert spoken[0].strip() == "Hello there."
    assert "1,200" not in " ".join(spoken) and spoken[-1] == "Goodbye. "
    [event] = events
    assert event.kind == "blocked_sentence" and event.detail["rule"] == "C3"
