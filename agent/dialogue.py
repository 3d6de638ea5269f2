"""The conversation policy and the output guard inside the call's pipeline.

``PolicyProcessor`` sits where the caller's finished turn (the LLM context)
leaves the user aggregator. It hands the turn's words to the policy and speaks
the policy's fixed texts as the agent's reply, marked so the output guard knows
they are vetted templates. When the policy ends the call, the pipeline is asked
to end once the goodbye has been spoken.

``GuardProcessor`` sits between the LLM and the TTS: every sentence the LLM
writes is checked before it can be spoken; a blocked one is replaced by a safe
fixed sentence and recorded as a compliance event. It is also what cuts the
text into units of speech (the TTS speaks each unit it gets at once): the
response's first clause goes ahead as soon as it is complete and allowed on its
own, so the voice starts before the first sentence is written; the whole
sentence is still checked when it ends.

In production mode (``agent.phrasing``) the policy processor sends the LLM a
narrow request for the replies the LLM may phrase; the guard then speaks the
policy's own text instead of the LLM's when the LLM gives nothing, or when one
of its sentences is blocked (the rest of that response is dropped).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    FunctionCallsStartedFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.string import match_endofsentence

from agent.guard import GuardContext, OutputGuard
from agent.phrasing import Phrasing
from agent.policy import ConversationPolicy, PolicyEvent, Reply

logger = logging.getLogger(__name__)


@dataclass
class TemplateTextFrame(LLMTextFrame):
    """A fixed text of the policy: spoken verbatim, never rewritten by the guard."""


EventSink = Callable[[PolicyEvent], None]


class PolicyProcessor(FrameProcessor):
    """Answers each caller turn with the policy's templates instead of free generation."""

    def __init__(
        self, policy: ConversationPolicy, on_event: EventSink, phrasing: Phrasing | None = None
    ) -> None:
        super().__init__()
        self.policy = policy
        self._on_event = on_event
        self._reported = 0
        self._phrasing = phrasing
        if phrasing is not None:
            phrasing.bind(self.speak)

    async def _deadline(self, turn: int) -> None:
        """Speak the policy's text if the LLM has not begun phrasing it in time."""
        assert self._phrasing is not None
        await asyncio.sleep(self._phrasing.deadline_s)
        reply = self._phrasing.expire(turn)
        if reply is not None:
            logger.warning(
                "LLM missed the %.0f ms phrasing deadline", 1000 * self._phrasing.deadline_s
            )
            await self.speak(reply)

    async def speak(self, reply: Reply) -> None:
        """Push ``reply`` as one agent response; end the call after it if it says so."""
        self.report_events()
        if reply.texts:
            await self.push_frame(LLMFullResponseStartFrame())
            for text in reply.texts:
                await self.push_frame(TemplateTextFrame(text + " "))
            await self.push_frame(LLMFullResponseEndFrame())
        if reply.end_call:
            await self.push_frame(EndWorkerFrame(reason=self.policy.disposition))

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame) and direction is FrameDirection.DOWNSTREAM:
            text = _last_caller_text(frame)
            if not text:
                return
            reply = self.policy.on_caller_turn(text)
            if self._phrasing is not None and reply.phrase is not None:
                self.report_events()
                messages = frame.context.get_messages()
                request = self._phrasing.context(messages, text, reply)
                self.create_task(self._deadline(self._phrasing.turn), name="phrase_deadline")
                await self.push_frame(LLMContextFrame(request))
            else:
                await self.speak(reply)
            return
        await self.push_frame(frame, direction)

    def report_events(self) -> None:
        """Hand the policy's events not yet reported to the sink (the call's store)."""
        for event in self.policy.events[self._reported :]:
            self._on_event(event)
        self._reported = len(self.policy.events)


def _last_caller_text(frame: LLMContextFrame) -> str:
    for message in reversed(frame.context.get_messages()):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content.strip()
        if isinstance(content, list):
            return " ".join(p.get("text", "") for p in content if isinstance(p, dict)).strip()
    return ""


#: Where a clause ends: , ; or : before a space (so "$1,200" is one word).
CLAUSE_END = re.compile(r"(?<=\w)[,;:](?=\s)")
#: A first clause shorter than this waits for the sentence ("Well, ..." is no clause).
MIN_CLAUSE_WORDS = 4


def first_clause_end(text: str) -> int:
    """Where the first clause of ``text`` worth speaking alone ends (0: none yet)."""
    for match in CLAUSE_END.finditer(text):
        if len(text[: match.end()].split()) >= MIN_CLAUSE_WORDS:
            return match.end()
    return 0


class GuardProcessor(FrameProcessor):
    """Checks the LLM's output sentence by sentence before it reaches the TTS."""

    def __init__(
        self,
        policy: ConversationPolicy,
        on_event: EventSink,
        guard: OutputGuard | None = None,
        phrasing: Phrasing | None = None,
    ) -> None:
        super().__init__()
        self._policy = policy
        self._on_event = on_event
        self._guard = guard or OutputGuard()
        self._phrasing = phrasing
        self._pending = ""
        #: How much of the sentence in ``_pending`` has gone ahead (its first clause).
        self._flushed = 0
        #: This response is the LLM phrasing a policy reply: what it has done so far.
        self._phrased = self._spoke = self._blocked = self._tool_called = False

    def _context(self) -> GuardContext:
        return GuardContext.for_account(self._policy.account, verified=self._policy.verified)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TemplateTextFrame):
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMFullResponseStartFrame):
            late = self._phrasing is not None and self._phrasing.expired
            self._phrased = self._phrasing is not None and self._phrasing.claim()
            self._spoke, self._blocked = False, late  # a late answer is dropped whole
            self._pending, self._flushed = "", 0
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMTextFrame):
            if self._blocked:
                return
            self._pending += frame.text
            while (end := match_endofsentence(self._pending)) > 0:
                sentence, self._pending = self._pending[:end], self._pending[end:]
                await self._check_and_push(sentence)
            if not self._spoke and not self._blocked:
                await self._flush_first_clause()
        elif isinstance(frame, FunctionCallsStartedFrame):
            self._tool_called = True
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMFullResponseEndFrame):
            if self._pending.strip() and not self._blocked:
                await self._check_and_push(self._pending)
            self._pending = ""
            if self._phrased:
                await self._settle_phrasing()
            # Reset here, not at the start: a system frame can overtake the start frame.
            self._phrased = self._tool_called = False
            await self.push_frame(frame, direction)
        else:
            await self.push_frame(frame, direction)

    async def _flush_first_clause(self) -> None:
        """Send the response's first clause ahead once it passes the guard on its own."""
        cut = first_clause_end(self._pending)
        if cut and self._guard.check(self._pending[:cut].strip(), self._context()).allowed:
            self._flushed, self._spoke = cut, True
            await self.push_frame(LLMTextFrame(self._pending[:cut]))

    async def _check_and_push(self, sentence: str) -> None:
        """Check the whole sentence; speak what of it has not gone ahead already."""
        flushed, self._flushed = self._flushed, 0
        verdict = self._guard.check(sentence.strip(), self._context())
        if verdict.allowed:
            self._spoke = True
            if sentence[flushed:].strip():
                await self.push_frame(LLMTextFrame(sentence[flushed:]))
            return
        logger.warning("blocked a generated sentence (%s): %s", verdict.rule, verdict.reason)
        self._on_event(
            PolicyEvent(
                "blocked_sentence",
                {"rule": verdict.rule, "reason": verdict.reason},
                datetime.now(UTC),
            )
        )
        if self._phrased:
            # The policy's own text says what the LLM's should have said.
            self._blocked = True
            self._pending = ""
        elif verdict.replacement:
            await self.push_frame(TemplateTextFrame(verdict.replacement + " "))

    async def _settle_phrasing(self) -> None:
        """The LLM's version is done: speak the policy's instead if it said nothing usable."""
        assert self._phrasing is not None
        reply = self._phrasing.take_fallback()
        if reply is None or self._tool_called or (self._spoke and not self._blocked):
            return
        for text in reply.texts:
            await self.push_frame(TemplateTextFrame(text + " "))
