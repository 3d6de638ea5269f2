"""Phrase mode's LLM request sent ahead of the turn's end: what is asked, that the call's
policy is not touched, and that the committed turn takes the stream only when it asks the
same (the real LLM service against a loopback server)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from aiohttp import web
from pipecat.processors.aggregators.llm_context import LLMContext

from agent.pipeline.http_pools import ServiceSessions
from agent.pipeline.llm import ChatCompletionsLLMService, request_key
from agent.pipeline.phrasing import Phrasing
from agent.pipeline.speculation import Speculation
from tests.test_dialogue import (
    MINIMUM,
    OFFER,
    PROMPTS,
    StreamingLLM,
    policy,
    through_the_openai_service,
    verified_policy,
)

HISTORY = [{"role": "assistant", "content": "What monthly amount would work for you?"}]


class Asked:
    """The LLM service's side of a speculation, as a record."""

    def __init__(self) -> None:
        self.requests: list[LLMContext] = []
        self.cancels = 0

    def prefetch(self, context: LLMContext) -> None:
        self.requests.append(context)

    def cancel_prefetch(self) -> None:
        self.cancels += 1


def speculation(p: Any, asked: Asked) -> tuple[Speculation, Phrasing]:
    phrasing = Phrasing(p, PROMPTS.turn)
    return Speculation(p, phrasing, LLMContext(messages=list(HISTORY)), asked), phrasing


def test_it_asks_what_the_committed_turn_will_ask_and_leaves_the_policy_alone():
    p = verified_policy(min_installment=50)
    asked = Asked()
    ahead, phrasing = speculation(p, asked)
    before = copy.deepcopy(p, {id(p.templates): p.templates})  # (templates: no __eq__)

    ahead.heard(OFFER)

    assert p == before  # every field: stage, events, offer, promise
    [request] = asked.requests
    # The turn commits with the same words: the policy answers, the phrasing asks.
    committed = phrasing.context([*HISTORY, {"role": "user", "content": OFFER}], OFFER,
                                 p.on_caller_turn(OFFER))  # fmt: skip
    assert request_key(request) == request_key(committed)
    assert MINIMUM in request.get_messages()[-1]["content"]  # the policy's reference


def test_a_turn_the_policy_answers_itself_asks_nothing():
    p = policy()  # not verified: the policy's own texts only
    asked = Asked()
    ahead, _ = speculation(p, asked)

    ahead.heard("Yes, this is Jordan Smith.")

    assert asked.requests == [] and asked.cancels == 1
    assert not p.verified  # the copy verified, not the call


def test_the_caller_going_on_withdraws_and_the_turn_is_asked_whole():
    p = verified_policy(min_installment=50)
    asked = Asked()
    ahead, _ = speculation(p, asked)

    ahead.heard("I can do")
    ahead.resumed()
    ahead.heard("twenty dollars a month.")

    assert asked.cancels == 1
    assert OFFER.replace('"', "'") in asked.requests[-1].get_messages()[-1]["content"]
    ahead.committed()
    ahead.heard(OFFER)
    assert asked.requests[-1].get_messages()[-1]["content"].count("twenty dollars") == 1


class Recorded(StreamingLLM):
    """A slow live model that keeps what it was asked."""

    def __init__(self, *pieces: str, first_s: float) -> None:
        super().__init__(*pieces, first_s=first_s)
        self.asked: list[str] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.asked.append(body["messages"][-1]["content"])
        return await super().__call__(request)


async def ahead_and_at_the_commit(ahead: str):
    """``ahead`` heard 0.05 s in, the turn committed with OFFER at 0.35 s; the model takes
    0.3 s to its first word, the phrasing deadline is 0.2 s."""
    server_llm = Recorded(
        "The least I can set up is $100 a month, for 12 months. ",
        "Would that work for you?",
        first_s=0.3,
    )
    heard, phrasing, llm = await through_the_openai_service(
        server_llm, 0.2, (0.35, OFFER), wait_s=0.6, ahead=ahead
    )
    return server_llm.asked, [text for _, text in heard], llm, phrasing


async def test_the_committed_turn_takes_the_answer_already_under_way():
    """Asked at the commit the model would miss the deadline; asked when the words were
    heard, its answer is spoken."""
    asked, spoken, llm, phrasing = await ahead_and_at_the_commit(OFFER)

    assert len(asked) == 1  # one request, sent ahead
    assert (llm.prefetch_hits, llm.prefetch_misses) == (1, 0)
    assert spoken == [
        "The least I can set up is $100 a month, for 12 months.",
        "Would that work for you?",
    ]
    assert not phrasing.expired


async def test_a_turn_that_ends_otherwise_asks_again_and_drops_what_was_asked():
    asked, spoken, llm, phrasing = await ahead_and_at_the_commit("I can do ten dollars a month.")

    assert len(asked) == 2 and "ten dollars" in asked[0] and "twenty dollars" in asked[1]
    assert (llm.prefetch_hits, llm.prefetch_misses) == (0, 1)
    # Asked at the commit, the slow model misses the deadline: the policy speaks.
    assert spoken == [MINIMUM] and phrasing.expired


async def test_a_request_sent_ahead_to_a_dead_server_is_given_up_quietly():
    sessions = ServiceSessions()
    llm = ChatCompletionsLLMService(
        sessions=sessions,
        base_url="http://127.0.0.1:9/v1",  # discard: nobody listens
        api_key="none",
        model="scripted",
        max_tokens=40,
        system_instruction="You are the agent.",
    )
    try:
        llm.prefetch(LLMContext(messages=[{"role": "user", "content": "hello"}]))
        await asyncio.sleep(0.2)  # it fails on its own meanwhile
        llm.cancel_prefetch()
        await asyncio.sleep(0)
    finally:
        await sessions.close()
    assert (llm.prefetch_hits, llm.prefetch_misses) == (0, 1)
