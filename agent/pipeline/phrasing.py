"""Production mode (``LLM_MODE=phrase``): the LLM phrases, the policy decides.

The policy answers every caller turn itself. Where its answer is one of the
questions it lets the LLM put in its own words (``Reply.phrase``), the LLM gets a
narrow instruction for that turn: the call state, what may be said (nothing
about the debt before verification; the balance and the creditor's envelope
after), the caller's words and the policy's reply as the reference. It may also
call the policy's tools (record_promise, record_dispute, transfer, end_call) when
it understood more than the rules did; each call is gated by
``ConversationPolicy.on_tool_call``, through the same rules as the caller's own
words. Whatever the LLM writes still passes the output guard, and whenever its
version is missing or blocked the policy's vetted text is spoken instead.

The caller must never wait on it: when the LLM's first words (its first text
token or a tool call, not pipecat's response-start frame, which comes before the
request is even sent) have not come within ``deadline_s`` of the request, the
policy's text is spoken and the LLM's late answer (text or tool call) is dropped: the
request is given up (``abandon``, bound to the LLM service's), so no later turn waits on it.

The instruction is the last message, after the system prompt and the call so
far, so the system part stays a stable prefix for the server's KV cache.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import Frame, FunctionCallResultProperties
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import FunctionCallParams

from agent.conversation.account import dollars
from agent.conversation.policy import PAYMENT_METHODS, ConversationPolicy
from agent.conversation.replies import Reply

logger = logging.getLogger(__name__)

#: What each tool tells the LLM, and what its arguments are.
TOOL_SPECS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "record_promise": (
        "Record the consumer's promise to pay, when they have clearly agreed to an amount, "
        "a date and a method. The agent then confirms it to them.",
        {
            "amount": {"type": "number", "description": "US dollars per payment"},
            "date": {"type": "string", "description": "first payment date, YYYY-MM-DD"},
            "method": {"type": "string", "enum": [str(m) for m in PAYMENT_METHODS]},
            "monthly": {"type": "boolean", "description": "true for a monthly payment plan"},
        },
        ["amount", "date", "method"],
    ),
    "record_dispute": (
        "Record that the consumer disputes the debt (says they do not owe it).",
        {},
        [],
    ),
    "transfer": ("Transfer the caller to a person, when they ask for one.", {}, []),
    "end_call": (
        "End the call politely, when the caller wants to stop talking.",
        {"reason": {"type": "string", "enum": ["refused", "other"]}},
        ["reason"],
    ),
}

TOOL_HINT = (
    "If the caller has clearly agreed to an amount, a date and a method, call record_promise "
    "instead of asking. If they say they do not owe it, call record_dispute. If they want a "
    "person, call transfer. If they want to end the call, call end_call."
)

Speak = Callable[[Reply], Awaitable[None]]
Push = Callable[[Frame], Awaitable[None]]


class Phrasing:
    """One call's production mode: the turn's instruction, the tool gate, the fallback.

    ``pending`` is the policy reply the LLM is phrasing right now: the guard speaks
    its vetted texts if the LLM's version never comes or is blocked, and a tool call
    settles it (the policy's answer to the tool is spoken instead). ``turn`` counts
    the requests, so a deadline set for one never fires on the next; ``expired``
    says the current one missed its deadline and whatever the LLM says is dropped.
    ``past_llm`` (bound by the guard) is where the policy's texts go while that is
    so: the LLM holds every frame queued behind the request it is still waiting on.
    ``abandon`` (bound by the call) gives up an expired request in the LLM service.
    """

    def __init__(
        self, policy: ConversationPolicy, turn_template: str, deadline_s: float = 0.2
    ) -> None:
        if not turn_template:
            raise ValueError("LLM_MODE=phrase needs the prompt version's turn.txt")
        self.policy = policy
        self.deadline_s = deadline_s
        self._template = turn_template
        self.pending: Reply | None = None
        self.turn = 0
        self.expired = False
        self._started = False
        self._request: LLMContext | None = None
        self._speak: Speak | None = None
        self.past_llm: Push | None = None
        self.abandon: Callable[[LLMContext], None] | None = None

    def bind(self, speak: Speak) -> None:
        """Where the policy's answer to a tool call is spoken (its events go with it)."""
        self._speak = speak

    def context(self, history: list[Any], caller_text: str, reply: Reply) -> LLMContext:
        """This turn's LLM request, the one the guard now waits on (``request``)."""
        self.pending = reply
        self.turn += 1
        self.expired = self._started = False
        self._request = self.request(history, caller_text, reply, self.policy)
        return self._request

    def request(
        self, history: list[Any], caller_text: str, reply: Reply, policy: ConversationPolicy
    ) -> LLMContext:
        """The LLM request for a turn that left ``policy`` as it is: the call so far, then
        the narrow instruction. ``policy`` is the call's own, or a copy that answered a
        turn not yet over (``agent.pipeline.speculation``)."""
        assert reply.phrase is not None
        messages = list(history)
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "user":
            messages.pop()
        instruction = self.instruction(caller_text, reply.phrase, policy)
        messages.append({"role": "user", "content": instruction})
        tools = ToolsSchema(standard_tools=[self._schema(n) for n in policy.tools()])
        return LLMContext(messages=messages, tools=tools)

    def instruction(
        self, caller_text: str, reference: str, policy: ConversationPolicy | None = None
    ) -> str:
        policy = policy or self.policy
        account = policy.account
        if policy.verified:
            state = f"talking with {account.consumer_name}, identity verified; {policy.stage}"
            facts = (
                f"the balance is {dollars(account.balance_cents)} with {account.creditor}; "
                f"at most {account.max_discount_pct:g} percent off, at least "
                f"{dollars(account.min_installment_cents)} a month, over at most "
                f"{account.max_term_months} months; today is {policy.today}"
            )
        else:
            state = "the person's identity is not verified yet"
            facts = (
                "nothing about any debt, balance, creditor, payment or account; "
                "only who you are and who you are calling for"
            )
        return self._template.format(
            state=state,
            facts=facts,
            caller=caller_text.replace('"', "'"),
            reference=reference,
            tools=TOOL_HINT if policy.verified else "If they want a person, call transfer.",
        ).strip()

    def _schema(self, name: str) -> FunctionSchema:
        description, properties, required = TOOL_SPECS[name]
        return FunctionSchema(name, description, properties, required, handler=self._gate)

    async def _gate(self, params: FunctionCallParams) -> None:
        """A tool call of the LLM: the policy decides, its answer is what is spoken."""
        if self.expired or params.context is not self._request:  # late, or an older request's
            logger.info("LLM called %s after the turn's deadline: dropped", params.function_name)
            await params.result_callback(
                {"allowed": False, "reason": "too late: the agent has answered already"},
                properties=FunctionCallResultProperties(run_llm=False),
            )
            return
        outcome = self.policy.on_tool_call(params.function_name, dict(params.arguments or {}))
        self.pending = None
        logger.info(
            "LLM called %s: %s (%s)",
            params.function_name,
            "done" if outcome.allowed else "refused",
            outcome.reason,
        )
        await params.result_callback(
            {"allowed": outcome.allowed, "reason": outcome.reason},
            properties=FunctionCallResultProperties(run_llm=False),
        )
        if self._speak is not None:
            await self._speak(outcome.reply)

    def begin(self, turn: int) -> bool:
        """The LLM's first words (or its end) for request ``turn`` came: True if in time,
        and its deadline then passes quietly; False if they are late and to be dropped."""
        if turn != self.turn or self.expired:
            return False
        self._started = True
        return True

    def expire(self, turn: int) -> Reply | None:
        """The deadline of request ``turn`` passed: the reply to speak now, if the LLM
        has not begun; from here its answer to that request is dropped."""
        if turn != self.turn or self._started or self.pending is None:
            return None
        self.expired = True
        if self.abandon is not None and self._request is not None:
            self.abandon(self._request)
        return self.take_fallback()

    def take_fallback(self) -> Reply | None:
        """The vetted reply to speak instead of the LLM's (once), if one is pending."""
        reply, self.pending = self.pending, None
        return reply
