"""Phrase mode's head start: the LLM asked for a turn's answer before the turn is over.

The STT's final transcript of an utterance comes at the VAD's stop, the turn's commit
later: when smart-turn has judged the turn complete (its prediction takes ~50 ms) or, when
it judged it unfinished, after ``TURN_FALLBACK_SECS`` of silence. In that gap this asks the
LLM for the answer the turn would get if it ended there: the policy decides on a copy of
itself (the call's own state is not touched), the phrasing builds the request as it will at
the commit, and the LLM service sends it (``ChatCompletionsLLMService.prefetch``). When the
turn commits asking exactly that, the service answers from the stream already under way;
any other request, or the caller speaking again, cancels it. Nothing a speculative request
produces is spoken, recorded or counted unless the committed turn asks for it.
"""

from __future__ import annotations

import copy
from typing import Protocol

from pipecat.processors.aggregators.llm_context import LLMContext

from agent.conversation.policy import ConversationPolicy
from agent.pipeline.phrasing import Phrasing


class Prefetcher(Protocol):
    """The LLM service's side (``ChatCompletionsLLMService``)."""

    def prefetch(self, context: LLMContext) -> None:
        """Send ``context``'s request now, in place of any sent before."""

    def cancel_prefetch(self) -> None:
        """Give up the request sent ahead, if any."""


class Speculation:
    """One call's speculative LLM requests: ``heard`` at each final transcript,
    ``resumed`` when the caller speaks again, ``committed`` when the turn is over."""

    def __init__(
        self,
        policy: ConversationPolicy,
        phrasing: Phrasing,
        history: LLMContext,
        llm: Prefetcher,
    ) -> None:
        self._policy = policy
        self._phrasing = phrasing
        self._history = history
        self._llm = llm
        #: The turn's words so far (an utterance, or several when the caller paused).
        self._text = ""

    def heard(self, text: str) -> None:
        """An utterance's final transcript: ask for the answer to the turn so far."""
        self._text = f"{self._text} {text.strip()}".strip()
        if not self._text:
            return
        policy = self._policy
        # A copy answers (its templates and account are the call's: read only).
        ahead = copy.deepcopy(policy, {id(policy.templates): policy.templates})
        reply = ahead.on_caller_turn(self._text)
        if reply.phrase is None:  # the policy's own text: nothing to ask
            self._llm.cancel_prefetch()
            return
        messages = [*self._history.get_messages(), {"role": "user", "content": self._text}]
        self._llm.prefetch(self._phrasing.request(messages, self._text, reply, ahead))

    def resumed(self) -> None:
        """The caller speaks again: what was asked answers a turn that is not over."""
        self._llm.cancel_prefetch()

    def committed(self) -> None:
        """The turn is over (its request, if it matches, has taken the stream)."""
        self._text = ""
