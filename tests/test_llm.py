"""The LLM service's own bookkeeping (the pipeline-level cases are in test_dialogue)."""

import asyncio

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from agent.pipeline.http_pools import ServiceSessions
from agent.pipeline.llm import ChatCompletionsLLMService, request_key


def service() -> ChatCompletionsLLMService:
    return ChatCompletionsLLMService(
        sessions=ServiceSessions(),
        base_url="http://127.0.0.1:9/v1",
        api_key="none",
        model="m",
        max_tokens=8,
        system_instruction="",
        answer_timeout_s=0.2,
    )


async def test_giving_up_a_request_its_own_timeout_is_already_cutting_is_harmless():
    """The phrasing deadline and the answer timeout are the same 200 ms: either may fire
    first, and the deadline's give-up must not fail (the policy's text rides on it)."""
    llm, context = service(), LLMContext()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0) as timeout:
            llm._current = (context, timeout)
            try:
                await asyncio.sleep(1)
            finally:
                llm.abandon(context)  # the timeout is expiring: nothing left to cut
    assert not llm._cut  # its own timeout's cut: a request not answered, an outage


async def test_nothing_is_sent_ahead_once_the_call_has_ended():
    """pipecat cleans a call's processors up side by side: the STT's last final (and the
    speculation it starts) can come after this service's cleanup, which is its last."""
    llm = service()
    await llm.cleanup()
    before = asyncio.all_tasks()
    llm.prefetch(LLMContext(messages=[{"role": "user", "content": "hello"}]))
    assert asyncio.all_tasks() == before  # no request on its way, for nobody to close
    assert llm.prefetch_misses == 0


async def test_a_request_given_up_before_it_is_sent_is_not_sent():
    llm, context = service(), LLMContext(messages=[{"role": "user", "content": "hi"}])
    llm.abandon(context)
    await llm._process_context(context)  # returns at once: the server (port 9) is never asked
    assert context not in llm._abandoned  # and forgotten


def test_two_requests_are_the_same_by_their_messages_and_tools():
    first = LLMContext(messages=[{"role": "user", "content": "hi"}])
    assert request_key(first) == request_key(
        LLMContext(messages=[{"role": "user", "content": "hi"}])
    )
    assert request_key(first) != request_key(
        LLMContext(messages=[{"role": "user", "content": "ho"}])
    )
