"""The conversation policy and the output guard inside the call's pipeline.

``PolicyProcessor`` sits where the caller's finished turn (the LLM context)
leaves the user aggregator. It hands the turn's words to the policy and speaks
the policy's fixed texts as the agent's reply, marked so the output guard knows
they are vetted templates, and follows each text to the line (``agent.pipeline.playout``):
the policy counts what the caller heard, not what was sent. When the policy ends
the call, the pipeline is asked to end once the goodbye was played and the caller
is quiet.

``GuardProcessor`` sits between the LLM and the TTS: an LLM response is held
whole until every sentence of it, and the response as a whole, has passed the
output guard (``agent.conversation.guard``: the deny rules, and the allow-list of the turn's
instruction); nothing of it reaches the voice before. A blocked response is
stored for review (``blocked_sentence``, card data redacted) and not spoken at
all. The guard also cuts the text into units of speech (the TTS speaks each
unit it gets at once): one per sentence.

In production mode (``agent.pipeline.phrasing``) the policy processor sends the LLM a
narrow request for the replies the LLM may phrase; the guard then speaks the
policy's own text instead of the LLM's when the LLM gives nothing, or when its
response is blocked. The guard
holds the LLM's response-start frame back until the first words come (pipecat
sends it before the request), so an answer past its deadline is dropped whole;
the policy's text spoken at the deadline goes past the LLM, which holds whatever
is queued behind the request it is still waiting on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

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
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.conversation.guard import GuardContext, Instruction, OutputGuard, Verdict
from agent.conversation.policy import ConversationPolicy
from agent.conversation.redaction import redact_card_numbers
from agent.conversation.replies import PolicyEvent, Reply
from agent.pipeline.phrasing import Phrasing, Push
from agent.pipeline.playout import EPOCH, TAG, PlayedFrame, Playout
from agent.pipeline.speculation import Speculation

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

#: The longest the goodbye may take to be played before the call ends anyway.
GOODBYE_PLAYOUT_S = 30.0
#: Quiet after the goodbye before the call ends: speech that began as it ended takes
#: the VAD about this long to hear.
LINGER_S = 0.5
#: After the goodbye, the longest the call waits on the caller: still speaking, a turn
#: they began not yet answered (its late signals are recorded), or that answer playing.
CALLER_GRACE_S = 8.0
#: A caller turn that ended without words is given up this long after they stopped.
TURN_HANDOFF_S = 2.0


@dataclass
class SpeakFrame(DataFrame):
    """Asks the policy processor to speak ``reply`` (the greeting): queued at the
    pipeline's start, it is spoken once the pipeline runs, and no interruption
    drops it on the way, or the greeting would be neither heard nor owed."""

    reply: Reply
    interruptible: bool = field(default=False, init=False)


@dataclass(eq=False)
class _Rendition:
    """A reply as it is spoken: how many of its texts were heard to their end so far.

    A reply the LLM phrases counts as one text: its words, whatever they are."""

    id: int
    reply: Reply
    count: int
    #: The caller's interruptions (``agent.pipeline.playout.EPOCH``) before it was spoken.
    epoch: int
    phrased: bool = False
    heard: int = 0


class PolicyProcessor(FrameProcessor):
    """Answers each caller turn with the policy's templates instead of free generation.

    What was heard counts, not what was sent (with a ``playout``, ``agent.pipeline.playout``):
    each text is tagged, and the policy is told once per reply how many of its texts
    were played to their end (``ConversationPolicy.played``), when the last one was,
    or when the caller cut in, their next turn came, or the call ended first. Until
    then the reply's disclosures are not noted and its question is not heard.

    Required disclosures stay interruptible: one the caller cut is said again in full
    by the policy at its next reply. The one count the policy is given then means one
    thing: what was played to its end finished before the caller's first word, since
    barge-in cuts everything queued. An uninterruptible disclosure would play on under
    the caller, so it would be heard but talked over, and a read-back (a question too)
    talked over is no read-back the caller said yes to (C13).

    When the policy ends the call, it ends only once the goodbye was played, the
    caller is quiet and any turn they began meanwhile reached the policy (whose late
    signals are recorded), within ``CALLER_GRACE_S``: never over the caller's words.
    """

    def __init__(
        self,
        policy: ConversationPolicy,
        on_event: EventSink,
        phrasing: Phrasing | None = None,
        playout: Playout | None = None,
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
        self._playout = playout
        if playout is not None:
            playout.listener = self
        #: Replies spoken and not yet settled with the policy, by id.
        self._renditions: dict[int, _Rendition] = {}
        self._ids = itertools.count(1)
        self._epoch = 0
        self._ending: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._caller_speaking = False
        self._turn_open = False
        self._turn_stopped_at: float | None = None

    async def cleanup(self) -> None:
        for deadline in list(self._deadlines):  # the call ended before they passed
            await self.cancel_task(deadline)
        if self._ending is not None:
            await self.cancel_task(self._ending)
        self._settle_all()  # what was played of them when the call ended
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

    def _push_target(self) -> Push:
        """Past the LLM while its request is dropped: it may still be waiting on it."""
        phrasing = self._phrasing
        if phrasing is not None and phrasing.expired and phrasing.past_llm is not None:
            return phrasing.past_llm
        return self.push_frame

    async def speak(self, reply: Reply) -> None:
        """Push ``reply`` as one agent response, each text tagged to be followed to the
        line; end the call after it if it says so."""
        self.report_events()
        push = self._push_target()
        rendition = self._open(reply, len(reply.texts))
        if reply.texts:
            await push(LLMFullResponseStartFrame())
            for index, text in enumerate(reply.texts):
                frame = TemplateTextFrame(text + " ")
                if rendition is not None:
                    frame.metadata[TAG] = (rendition.id, index)
                await push(frame)
            await push(LLMFullResponseEndFrame())
        elif rendition is not None:
            self._settle(rendition)
        if reply.end_call:
            if self._playout is None:
                await push(EndWorkerFrame(reason=self.policy.disposition))
            elif self._ending is None:
                self._ending = self.create_task(self._end_when_heard(), name="end_when_heard")

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM:
            self._follow_caller(frame)
        if isinstance(frame, SpeakFrame):
            await self.speak(frame.reply)
            return
        if isinstance(frame, LLMContextFrame) and direction is FrameDirection.DOWNSTREAM:
            self._turn_open = False
            self._changed.set()
            if self.speculation is not None:
                self.speculation.committed()
            text = _last_caller_text(frame)
            if not text:
                return
            # The caller's words answer only what they heard before them.
            self._settle_all()
            reply = self.policy.on_caller_turn(text)
            if self._phrasing is not None and reply.phrase is not None:
                self.report_events()
                rendition = self._open(reply, 1, phrased=True)
                messages = frame.context.get_messages()
                request = self._phrasing.context(messages, text, reply)
                turn = self._phrasing.turn
                deadline = self.create_task(self._deadline(turn), name="phrase_deadline")
                self._deadlines.add(deadline)
                deadline.add_done_callback(self._deadlines.discard)
                await self.push_frame(PhraseRequestFrame(turn))
                await self.push_frame(LLMContextFrame(request))
                if rendition is not None:  # heard once whatever the LLM says has been
                    await self.push_frame(PlayedFrame(tag=(rendition.id, 0)))
            else:
                await self.speak(reply)
            return
        await self.push_frame(frame, direction)

    def report_events(self) -> None:
        """Hand the policy's events not yet reported to the sink (the call's store)."""
        for event in self.policy.events[self._reported :]:
            self._on_event(event)
        self._reported = len(self.policy.events)

    # -- what was heard (agent.pipeline.playout) --------------------------------------------

    def _open(self, reply: Reply, count: int, phrased: bool = False) -> _Rendition | None:
        """Start following ``reply`` to the line (None without a playout).

        A reply the LLM was phrasing is superseded: by the policy's own text for it at
        the deadline (then this one takes its place), or by the answer to a tool call
        (then it is settled as heard so far: whatever of it was said)."""
        if self._playout is None:
            return None
        for earlier in [r for r in self._renditions.values() if r.phrased]:
            if earlier.reply is reply:
                del self._renditions[earlier.id]
            else:
                self._settle(earlier)
        rendition = _Rendition(next(self._ids), reply, count, self._epoch, phrased)
        self._renditions[rendition.id] = rendition
        return rendition

    def on_heard(self, tag: Any) -> None:
        """Text ``tag`` (a rendition's id and the text's index) was played to its end."""
        if not isinstance(tag, tuple) or len(tag) != 2:
            return
        rendition = self._renditions.get(tag[0])
        if rendition is None or tag[1] != rendition.heard:
            return
        rendition.heard += 1
        if rendition.heard >= rendition.count:
            self._settle(rendition)

    def on_interrupted(self, epoch: int | None) -> None:
        """The caller cut in: the replies spoken before it are heard as far as they were."""
        for rendition in list(self._renditions.values()):
            if epoch is None or rendition.epoch < epoch:
                self._settle(rendition)

    def _settle(self, rendition: _Rendition) -> None:
        if self._renditions.pop(rendition.id, None) is None:
            return
        self.policy.played(rendition.reply, rendition.heard)
        self.report_events()
        self._changed.set()

    def _settle_all(self) -> None:
        for rendition in list(self._renditions.values()):
            self._settle(rendition)

    # -- the end of the call ---------------------------------------------------------

    def _follow_caller(self, frame: Frame) -> None:
        """Whether the caller is speaking, or has a turn not yet handed to the policy."""
        if isinstance(frame, InterruptionFrame):
            self._epoch += 1
            frame.metadata[EPOCH] = self._epoch
        elif isinstance(frame, VADUserStartedSpeakingFrame | VADUserStoppedSpeakingFrame):
            self._caller_speaking = isinstance(frame, VADUserStartedSpeakingFrame)
        elif isinstance(frame, UserStartedSpeakingFrame):
            self._turn_open, self._turn_stopped_at = True, None
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._turn_stopped_at = asyncio.get_running_loop().time()
        else:
            return
        self._changed.set()

    def _caller_busy(self) -> bool:
        if self._caller_speaking:
            return True
        if not self._turn_open:
            return False
        stopped = self._turn_stopped_at
        return stopped is None or asyncio.get_running_loop().time() - stopped < TURN_HANDOFF_S

    async def _until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done():
            left = deadline - loop.time()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 0.25))
        return True

    async def _end_when_heard(self) -> None:
        """End the call once its goodbye was played and the caller is quiet, with every
        turn they began meanwhile answered; at the latest ``CALLER_GRACE_S`` after the
        goodbye (a call always ends)."""
        if not await self._until(lambda: not self._renditions, GOODBYE_PLAYOUT_S):
            logger.warning("the goodbye was not played within %.0f s", GOODBYE_PLAYOUT_S)
        await asyncio.sleep(LINGER_S)
        quiet = await self._until(
            lambda: not self._renditions and not self._caller_busy(), CALLER_GRACE_S
        )
        if not quiet:
            logger.warning("ending the call %.0f s after its goodbye", CALLER_GRACE_S)
        await self._push_target()(EndWorkerFrame(reason=self.policy.disposition))


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


@dataclass(frozen=True)
class GuardDecision:
    """One LLM response and what the guard made of it, for audits (``tools.bench_phrase``).

    ``spoken`` is what of the LLM's text went to the voice (all of it or nothing);
    ``blocked`` the sentences (card data redacted) that stopped it, with rule and reason;
    ``fallback`` the policy's texts spoken instead. ``dropped`` says why a response was
    not judged at all: a tool call answered the turn, or a later request overtook it."""

    reference: str | None
    text: str
    sentences: tuple[str, ...]
    spoken: tuple[str, ...] = ()
    blocked: tuple[tuple[str, str, str], ...] = ()
    fallback: tuple[str, ...] = ()
    dropped: str | None = None


DecisionSink = Callable[[GuardDecision], None]


class GuardProcessor(FrameProcessor):
    """Holds each LLM response whole until it passes the guard, then lets it be spoken.

    Nothing of a response reaches the TTS before all of it has been judged: each
    sentence against the deny rules and the turn's instruction (the allow-list of
    ``agent.conversation.guard``), then the response as a whole (length, the reference's required
    content). A response that fails is dropped whole and stored for review
    (``blocked_sentence`` events, card data redacted); the policy's own text is spoken
    instead. The cost is latency: the voice starts when the LLM's response ends, not at
    its first clause (docs/benchmarks/guard.md)."""

    def __init__(
        self,
        policy: ConversationPolicy,
        on_event: EventSink,
        guard: OutputGuard | None = None,
        phrasing: Phrasing | None = None,
        on_decision: DecisionSink | None = None,
    ) -> None:
        super().__init__()
        self._policy = policy
        self._on_event = on_event
        self._on_decision = on_decision
        self._guard = guard or OutputGuard()
        self._phrasing = phrasing
        if phrasing is not None:
            phrasing.past_llm = self.push_frame
        #: The response's text so far: none of it is spoken before it has been judged.
        self._pending = ""
        #: This response is the LLM phrasing a policy reply (``_reply``, of request
        #: ``_reply_turn``), and whether it called a tool.
        self._phrased = self._tool_called = False
        self._reply: Reply | None = None
        self._reply_turn: int | None = None
        #: The request the LLM's next response answers (``PhraseRequestFrame``), and the
        #: one this response answers until its first words decide whether it is in time.
        self._next_turn: int | None = None
        self._turn: int | None = None
        #: This response came too late: none of it goes on. Its held-back start frame.
        self._late = False
        self._held: LLMFullResponseStartFrame | None = None

    def _context(self, reference: str | None) -> GuardContext:
        account, verified = self._policy.account, self._policy.verified
        instruction = Instruction.for_turn(reference, account, verified=verified)
        return GuardContext.for_account(account, verified=verified, instruction=instruction)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, PhraseRequestFrame):
            self._next_turn = frame.turn
        elif isinstance(frame, InterruptionFrame):
            self._next_turn = None  # its request went with the LLM's queue
            # The caller cut in: what the LLM had written is not said (what it writes
            # after, if it goes on, is judged alone, so the policy's text stands in).
            self._pending = ""
            await self.push_frame(frame, direction)
        elif isinstance(frame, TemplateTextFrame):
            await self._open()  # a template response, whatever was announced
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._turn, self._next_turn = self._next_turn, None
            self._phrased = self._late = False
            self._reply, self._reply_turn = None, None
            self._pending = ""
            if self._turn is None:
                await self.push_frame(frame, direction)
            else:
                self._held = frame  # the LLM has not begun: it has not even been asked
        elif isinstance(frame, LLMTextFrame):
            if await self._begin():
                self._pending += frame.text
        elif isinstance(frame, FunctionCallsStartedFrame):
            self._tool_called = True
            await self.push_frame(frame, direction)
        elif isinstance(frame, LLMFullResponseEndFrame):
            spoken = await self._begin()  # an answer without words has come too
            if spoken:
                await self._judge()
            self._pending = ""
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
        if self._phrased:
            self._reply, self._reply_turn = self._phrasing.pending, self._turn
        await self._open()
        return True

    async def _open(self) -> None:
        """Send the response's held-back start frame on, before its first words."""
        self._turn = None
        if self._held is not None:
            held, self._held = self._held, None
            await self.push_frame(held)

    async def _judge(self) -> None:
        """The response is complete: speak it if it passes, else the policy's text."""
        text = self._pending.strip()
        reference = self._reply.phrase if self._reply is not None else None
        phrasing = self._phrasing
        if self._phrased and phrasing is not None and self._reply_turn != phrasing.turn:
            # The caller spoke again and the policy asked anew: this answers a question
            # the conversation has moved past (and the pending reply is the new one's).
            logger.info("an LLM answer overtaken by a later request: dropped")
            self._decided(reference, text, (), dropped="overtaken")
            return
        if self._tool_called:
            if text:  # the policy's answer to the tool speaks for this turn
                logger.info("an LLM answer that called a tool: its words are dropped")
            self._decided(reference, text, (), dropped="tool call")
            if self._phrased and phrasing is not None:
                phrasing.take_fallback()
            return
        if not text:
            await self._fall_back(reference, text, (), ())
            return
        verdict = self._guard.check_response(text, self._context(reference))
        if verdict.allowed:
            for sentence in verdict.sentences:
                await self.push_frame(LLMTextFrame(sentence + " "))
            if self._phrased and phrasing is not None:
                phrasing.take_fallback()  # settled: its own text is not needed
            self._decided(reference, text, verdict.sentences, spoken=verdict.sentences)
            return
        blocked = tuple(
            (_redacted(sentence), v.rule or "", _redacted(v.reason or ""))
            for sentence, v in verdict.blocked
        )
        for stored, rule, reason in blocked:
            logger.warning("blocked a generated response (%s): %s", rule, reason)
            self._on_event(
                PolicyEvent(
                    "blocked_sentence",
                    {"text": stored, "rule": rule, "reason": reason},
                    datetime.now(UTC),
                )
            )
        await self._fall_back(reference, text, verdict.sentences, blocked, verdict.verdict)

    async def _fall_back(
        self,
        reference: str | None,
        text: str,
        sentences: tuple[str, ...],
        blocked: tuple[tuple[str, str, str], ...],
        verdict: Verdict | None = None,
    ) -> None:
        """Speak the policy's own text for the turn (or, for an LLM response no policy
        reply stands behind, the guard's safe sentence)."""
        texts: list[str] = []
        if self._phrased and self._phrasing is not None:
            reply = self._phrasing.take_fallback()
            texts = list(reply.texts) if reply is not None else []
        elif verdict is not None and verdict.replacement:
            texts = [verdict.replacement]
        for fallback in texts:
            await self.push_frame(TemplateTextFrame(fallback + " "))
        self._decided(reference, text, sentences, blocked=blocked, fallback=tuple(texts))

    def _decided(
        self, reference: str | None, text: str, sentences: tuple[str, ...], **outcome: Any
    ) -> None:
        if self._on_decision is not None:
            decision = GuardDecision(reference, _redacted(text), sentences, **outcome)
            self._on_decision(decision)


def _redacted(text: str) -> str:
    """``text`` as it may be stored or logged: card data removed (rule C11)."""
    return redact_card_numbers(text)[0]
