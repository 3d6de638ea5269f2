"""LLM client: OpenAI-compatible streaming chat completions on the process's pool.

pipecat's OpenAI service does the streaming, context and tool-call work; what
it does not do is share one HTTP client between calls (it makes a new one per
service instance), so the client comes from ``ServiceSessions`` instead.

Where the policy stands behind the LLM (``LLM_MODE=phrase``) the server must
begin its answer (the response's headers) within ``answer_timeout_s``, the
phrasing deadline, and no stream may go quiet for ``STALL_TIMEOUT_S``: a request
that breaks either is abandoned and its response ends empty, so the policy's
own text is spoken at once (``agent.phrasing``). A server that is gone or hung
costs the caller the deadline, not the client's timeouts and retries, and no
later turn waits behind the dead request. A live server that is slow to find
its first words is not cut off here (the phrasing deadline decides what is
spoken). Failures are logged and recorded (``llm_unavailable``) once per
outage, not once per turn.

A request may be sent ahead of the turn's end (``prefetch``, ``agent.speculation``): the
turn's own request, if it is the same, is answered from that stream, already under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import openai
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.openai.llm import OpenAILLMService

from agent.policy import PolicyEvent
from agent.sessions import ServiceSessions

logger = logging.getLogger(__name__)

EventSink = Callable[[PolicyEvent], None]
#: What a server that is gone, hung or broken looks like from here.
UNAVAILABLE = (TimeoutError, openai.APIConnectionError, openai.InternalServerError)
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
        #: Why the LLM is not answering, while an outage lasts.
        self._outage: str | None = None
        #: The request sent ahead of the turn's end: its key and the stream on its way.
        self._prefetch: tuple[str, asyncio.Task[Any]] | None = None
        #: Turns answered from a request sent ahead, and requests sent ahead for nothing.
        self.prefetch_hits = self.prefetch_misses = 0
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

    def prefetch(self, context: LLMContext) -> None:
        """Send ``context``'s request now, in place of any sent before: the turn's own
        request is answered from its stream if it is the same."""
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

    async def cleanup(self) -> None:
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
        loop = asyncio.get_running_loop()
        self._answered = False
        try:
            async with asyncio.timeout(None) as deadline:

                def progress(done: bool) -> None:
                    deadline.reschedule(None if done else loop.time() + STALL_TIMEOUT_S)

                first = self._answer_timeout_s
                deadline.reschedule(loop.time() + (STALL_TIMEOUT_S if first is None else first))
                self._progress = progress
                try:
                    await super()._process_context(context)
                finally:
                    self._progress = None
        except UNAVAILABLE as e:
            # The response ends empty (pipecat's LLMFullResponseEndFrame follows), so the
            # policy's text stands in for it; not an ErrorFrame and its log line per turn.
            self._unavailable(e)
            return
        if self._outage is not None:
            logger.info("LLM answering again (it was unavailable: %s)", self._outage)
            self._outage = None

    def _unavailable(self, error: Exception) -> None:
        if isinstance(error, TimeoutError) and self._answered:
            reason = f"its stream stalled for {STALL_TIMEOUT_S:.0f} s"
        elif isinstance(error, TimeoutError):
            limit = self._answer_timeout_s or STALL_TIMEOUT_S
            reason = f"no answer within {limit * 1000:.0f} ms"
        else:
            reason = f"{type(error).__name__}: {error}"
        if self._outage is not None:
            logger.debug("LLM still unavailable: %s", reason)
            return
        self._outage = reason
        logger.warning("LLM unavailable (%s): the policy's own texts are spoken", reason)
        if self._on_event is not None:
            self._on_event(PolicyEvent("llm_unavailable", {"reason": reason}, datetime.now(UTC)))


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
