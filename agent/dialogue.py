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
of its sentences is blocked (the rest of that response is dropped). The guard
holds the LLM's response-start frame back until the first words come (pipecat
sends it before the request), so an answer past its deadline is dropped whole;
the policy's text spoken at the deadline goes past the LLM, which holds whatever
is queued behind the request it is still waiting on.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pipecat.frames.frames import (
    DataFrame,
    EndWorkerFrame,
    Frame,
    FunctionCallsStartedFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.string import match_endofsentence

from agent.guard import GuardContext, OutputGuard
from agent.phrasing import Phrasing, Push
from agent.policy import ConversationPolicy, PolicyEvent, Reply
from agent.speculation import Speculation

logger = logging.getLogger(__name__)


@dataclass
class TemplateTextFrame(LLMTextFrame):
    """A fixed text of the policy: spoken verbatim, never rewritten by the guard."""


@dataclass
class PhraseRequestFrame(DataFrame):
    """Goes through the LLM just ahead of phrasing request ``turn``: the LLM's next
    response answers that request (the guard cannot tell otherwise which one it is)."""

    turn: int


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
        #: The LLM asked ahead of each turn's end, in phrase mode (set by the call).
        self.speculation: Speculation | None = None
        self._deadlines: set[asyncio.Task[None]] = set()

    async def cleanup(self) -> None:
        for deadline in list(self._deadlines):  # the call ended before they passed
            await self.cancel_task(deadline)
        await super().cleanup()

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
        """Push ``reply`` as one agent response; end the call after it if it says so.

        Past the LLM while its request is dropped: it may still be waiting on it."""
        self.report_events()
        phrasing = self._phrasing
        push: Push = self.push_frame
        if phrasing is not None and phrasing.expired and phrasing.past_llm is not None:
            push = phrasing.past_llm
        if reply.texts:
            await push(LLMFullResponseStartFrame())
            for text in reply.texts:
                await push(TemplateTextFrame(text + " "))
            await push(LLMFullResponseEndFrame())
        if reply.end_call:
            await push(EndWorkerFrame(reason=self.policy.disposition))

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame) and direction is FrameDirection.DOWNSTREAM:
            if self.speculation is not None:
                self.speculation.committed()
            text = _last_caller_text(frame)
            if not text:
                return
            reply = self.policy.on_caller_turn(text)
            if self._phrasing is not None and reply.phrase is not None:
                self.report_events()
                messages = frame.context.get_messages()
                request = self._phrasing.context(messages, text, reply)
                turn = self._phrasing.turn
                deadline = self.create_task(self._deadline(turn), name="phrase_deadline")
                self._deadlines.add(deadline)
                deadline.add_done_callback(self._deadlines.discard)
                await self.push_frame(PhraseRequestFrame(turn))
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
        if phrasing is not None:
            phrasing.past_llm = self.push_frame
        self._pending = ""
        #: How much of the sentence in ``_pending`` has gone ahead (its first clause).
        self._flushed = 0
        #: This response is the LLM phrasing a policy reply: what it has done so far.
        self._phrased = self._spoke = self._blocked = self._tool_called = False
        #: The request the LLM's next response answers (``PhraseRequestFrame``), and the
        #: one this response answers until its first words decide whether it is in time.
        self._next_turn: int | None = None
        self._turn: int | None = None
        #: This response came too late: none of it goes on. Its held-back start frame.
        self._late = False
        self._held: LLMFullResponseStartFrame | None = None

    def _context(self) -> GuardContext:
        return GuardContext.for_account(self._policy.account, verified=self._policy.verified)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, PhraseRequestFrame):
            self._next_turn = frame.turn
        elif isinstance(frame, InterruptionFrame):
            self._next_turn = None  # its request went with the LLM's queue
            await self.push_frame(frame, direction)
        elif isinstance(frame, TemplateTextFrame):
            await self._open()  # a template response, whatever was announced
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._turn, self._next_turn = self._next_turn, None
            self._phrased = self._spoke = self._blocked = self._late = False
            self._pending, self._flushed = "", 0
            if self._turn is None:
                await self.push_frame(frame, direction)
            else:
                self._held = frame  # the LLM has not begun: it has not even been asked
        elif isinstance(frame, LLMTextFrame):
            if not await self._begin() or self._blocked:
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
            spoken = await self._begin()  # an answer without words has come too
            if spoken and self._pending.strip() and not self._blocked:
                await self._check_and_push(self._pending)
            self._pending = ""
            if spoken and self._phrased:
                await self._settle_phrasing()
            # Reset here, not at the start: a system frame can overtake the start frame.
            self._phrased = self._tool_called = False
            if spoken:
                await self.push_frame(frame, direction)
        else:
            await self.push_frame(frame, direction)

    async def _begin(self) -> bool:
        """Whether this response goes on: an LLM phrasing does if its first words (or
        its end) come in time for its request; a late one is dropped whole."""
        if self._turn is None:
            return not self._late
        assert self._phrasing is not None
        if not self._phrasing.begin(self._turn):
            self._turn, self._held, self._late = None, None, True
            return False
        self._phrased = self._phrasing.pending is not None
        await self._open()
        return True

    async def _open(self) -> None:
        """Send the response's held-back start frame on, before its first words."""
        self._turn = None
        if self._held is not None:
            held, self._held = self._held, None
            await self.push_frame(held)

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
