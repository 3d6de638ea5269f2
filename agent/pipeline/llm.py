"""LLM client: OpenAI-compatible streaming chat completions on the process's pool.

pipecat's OpenAI service does the streaming, context and tool-call work; what
it does not do is share one HTTP client between calls (it makes a new one per
service instance), so the client comes from ``ServiceSessions`` instead.

Where the policy stands behind the LLM (``LLM_MODE=phrase``) the server must
begin its answer (the response's headers) within ``answer_timeout_s``, the
phrasing deadline, and no stream may go quiet for ``STALL_TIMEOUT_S``: a request
that breaks either is abandoned and its response ends empty, so the policy's
own text is spoken at once (``agent.pipeline.phrasing``). A server that is gone or hung
costs the caller the deadline, not the client's timeouts and retries, and no
later turn waits behind the dead request. A live server slow to its first words
is judged by the phrasing deadline, which gives its request up (``abandon``): cut
if under way, never sent if still queued, so the next turn's request does not
wait behind it and the server stops generating an answer nobody will hear;
``LATE_ANSWERS_FOR_OUTAGE`` of those in a row (a server hung after its headers
looks the same) are an outage. Failures are logged and recorded
(``llm_unavailable``) once per outage, not once per turn.

A request may be sent ahead of the turn's end (``prefetch``, ``agent.pipeline.speculation``): the
turn's own request, if it is the same, is answered from that stream, already under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import openai
from openai.types import CompletionUsage
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.metrics.metrics import LLMTokenUsage
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.openai.llm import OpenAILLMService

from agent.conversation.replies import PolicyEvent
from agent.pipeline.http_pools import ServiceSessions
from agent.pipeline.usage import report_compute, reported_seconds

logger = logging.getLogger(__name__)

EventSink = Callable[[PolicyEvent], None]
#: What a server that is gone, hung or broken looks like from here.
UNAVAILABLE = (TimeoutError, openai.APIConnectionError, openai.InternalServerError)
#: Requests in a row given up at the phrasing deadline (the server answers, but its first
#: words come too late: hung after its headers, or too slow) that make an outage.
LATE_ANSWERS_FOR_OUTAGE = 3
#: The longest a stream may go without a chunk (the CPU model's first words on a cold
#: start take about three seconds) before it counts as hung.
STALL_TIMEOUT_S = 10.0


class ChatCompletionsLLMService(OpenAILLMService):
    """pipecat's OpenAI LLM service on a shared, pooled client of any compatible server."""

    def __init__(
        self,
        *,
        sessions: ServiceSessions,
        base_url: str,
        api_key: str,
        model: str,
        max_tokens: int,
        system_instruction: str,
        answer_timeout_s: float | None = None,
        on_event: EventSink | None = None,
        **kwargs: Any,
    ) -> None:
        self._sessions = sessions
        self._answer_timeout_s = answer_timeout_s
        self._on_event = on_event
        #: Moves the current request's deadline on: the server answered, or sent a chunk.
        self._progress: Callable[[bool], None] | None = None
        self._answered = False
        #: The request under way and its deadline; the requests given up before their turn.
        self._current: tuple[LLMContext, asyncio.Timeout] | None = None
        self._abandoned: weakref.WeakSet[LLMContext] = weakref.WeakSet()
        self._cut = False
        #: Requests in a row given up under way (``LATE_ANSWERS_FOR_OUTAGE``).
        self._late = 0
        #: Why the LLM is not answering, while an outage lasts.
        self._outage: str | None = None
        #: The request sent ahead of the turn's end: its key and the stream on its way.
        self._prefetch: tuple[str, asyncio.Task[Any]] | None = None
        #: Turns answered from a request sent ahead, and requests sent ahead for nothing.
        self.prefetch_hits = self.prefetch_misses = 0
        #: Set at the call's end: no request is sent ahead from then on.
        self._closed = False
        #: The model time our server reported with the last usage (None: not reported).
        self._compute_s: float | None = None
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            settings=OpenAILLMService.Settings(
                model=model,
                max_tokens=max_tokens,
                temperature=0.7,
                system_instruction=system_instruction,
                # One line per reply: what follows a newline is the model
                # inventing the caller's next turn.
                extra={"stop": ["\n"]},
            ),
            **kwargs,
        )

    def create_client(
        self,
        api_key: Any = None,
        base_url: Any = None,
        organization: Any = None,
        project: Any = None,
        default_headers: Any = None,
        **kwargs: Any,
    ) -> Any:
        return self._sessions.openai_client(base_url=base_url, api_key=api_key)

    def _token_usage(self, usage: CompletionUsage) -> LLMTokenUsage:
        # Our server adds its model time to OpenAI's usage; a third-party one does not.
        self._compute_s = reported_seconds(usage.model_extra or {})
        return super()._token_usage(usage)

    async def start_llm_usage_metrics(self, tokens: LLMTokenUsage) -> None:
        await super().start_llm_usage_metrics(tokens)
        compute_s, self._compute_s = self._compute_s, None
        await report_compute(self, "llm", compute_s)

    def prefetch(self, context: LLMContext) -> None:
        """Send ``context``'s request now, in place of any sent before: the turn's own
        request is answered from its stream if it is the same. Not once the call has
        ended: the STT's last final may come after this service's cleanup."""
        if self._closed:
            return
        self.cancel_prefetch()
        task = asyncio.get_running_loop().create_task(
            OpenAILLMService.get_chat_completions(self, context), name="llm_prefetch"
        )
        self._prefetch = (request_key(context), task)

    def cancel_prefetch(self) -> None:
        """Give up the request sent ahead, if any (its stream is closed)."""
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is not None:
            self.prefetch_misses += 1
            _discard(prefetch[1])

    def abandon(self, context: LLMContext) -> None:
        """Give up ``context``'s request: its answer would be dropped (too late)."""
        current = self._current
        if current is not None and current[0] is context:
            if not current[1].expired():  # (else its own timeout has just cut it)
                self._cut = True
                current[1].reschedule(asyncio.get_running_loop().time())
        else:
            self._abandoned.add(context)

    async def cleanup(self) -> None:
        self._closed = True
        self.cancel_prefetch()
        await super().cleanup()

    async def _prefetched(self, context: LLMContext) -> Any | None:
        """The stream of the request sent ahead, if it is ``context``'s; else None."""
        prefetch = self._prefetch
        if prefetch is None:
            return None
        if prefetch[0] != request_key(context):
            self.cancel_prefetch()
            return None
        self._prefetch = None
        self.prefetch_hits += 1
        logger.debug("answered from the request sent before the turn ended")
        return await prefetch[1]  # its failure is this request's (the server is down)

    async def get_chat_completions(self, context: LLMContext) -> Any:
        stream = await self._prefetched(context) or await super().get_chat_completions(context)
        progress = self._progress
        if progress is None:
            return stream
        self._answered = True
        progress(False)
        return _Watched(stream, progress)

    async def _process_context(self, context: LLMContext) -> None:
        if context in self._abandoned:  # too late before it was sent: its response ends empty
            self._abandoned.discard(context)
            logger.debug("LLM request given up before it was sent")
            return
        loop = asyncio.get_running_loop()
        self._answered = self._cut = False
        try:
            async with asyncio.timeout(None) as deadline:

                def progress(done: bool) -> None:
                    if not (self._cut or deadline.expired()):  # a chunk that crossed a cut
                        deadline.reschedule(None if done else loop.time() + STALL_TIMEOUT_S)

                first = self._answer_timeout_s
                deadline.reschedule(loop.time() + (STALL_TIMEOUT_S if first is None else first))
                self._progress, self._current = progress, (context, deadline)
                try:
                    await super()._process_context(context)
                finally:
                    self._progress = self._current = None
        except UNAVAILABLE as e:
            # The response ends empty (pipecat's LLMFullResponseEndFrame follows), so the
            # policy's text stands in for it; not an ErrorFrame and its log line per turn.
            if self._cut and self._answered:  # live, but its first words came too late
                self._late += 1
                if self._late < LATE_ANSWERS_FOR_OUTAGE:
                    logger.debug("LLM request given up under way (its answer came too late)")
                    return
                self._unavailable(f"its last {self._late} answers came too late")
            else:
                self._unavailable(_reason(e, self._answered, self._answer_timeout_s))
            return
        self._late = 0
        if self._outage is not None:
            logger.info("LLM answering again (it was unavailable: %s)", self._outage)
            self._outage = None

    def _unavailable(self, reason: str) -> None:
        if self._outage is not None:
            logger.debug("LLM still unavailable: %s", reason)
            return
        self._outage = reason
        logger.warning("LLM unavailable (%s): the policy's own texts are spoken", reason)
        if self._on_event is not None:
            self._on_event(PolicyEvent("llm_unavailable", {"reason": reason}, datetime.now(UTC)))


def _reason(error: Exception, answered: bool, answer_timeout_s: float | None) -> str:
    """Why a request failed, in the words of the ``llm_unavailable`` event."""
    if isinstance(error, TimeoutError) and answered:
        return f"its stream stalled for {STALL_TIMEOUT_S:.0f} s"
    if isinstance(error, TimeoutError):
        return f"no answer within {(answer_timeout_s or STALL_TIMEOUT_S) * 1000:.0f} ms"
    return f"{type(error).__name__}: {error}"


def request_key(context: LLMContext) -> str:
    """What makes two requests the same: their messages and the names of their tools."""
    tools = context.tools
    names = [t.name for t in tools.standard_tools] if isinstance(tools, ToolsSchema) else []
    return json.dumps([context.get_messages(), names], sort_keys=True, default=str)


def _discard(task: asyncio.Task[Any]) -> None:
    """Stop a request sent ahead: cancelled on its way, or its stream closed."""

    def close(done: asyncio.Task[Any]) -> None:
        if done.cancelled() or done.exception() is not None:
            return  # (its failure was for nobody)
        stream = done.result()
        with contextlib.suppress(RuntimeError):  # the loop is closing
            asyncio.get_running_loop().create_task(stream.close())

    task.add_done_callback(close)
    task.cancel()


class _Watched:
    """A chunk stream that reports each chunk, and its end, to ``progress``."""

    def __init__(self, stream: Any, progress: Callable[[bool], None]) -> None:
        self._stream = stream
        self._progress = progress

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Any]:
        async for chunk in self._stream:
            self._progress(False)
            yield chunk
        self._progress(True)  # what follows (tool calls) is not the server's to stall

    async def close(self) -> None:
        await self._stream.close()
