"""``bench speculation``: what asking the LLM ahead of the turn's end buys, gap by gap.

In phrase mode a negotiation turn's answer waits on the LLM's first words. Asked at the
commit, the caller waits the LLM's whole time to first token; asked when the STT's final
transcript came (``agent.pipeline.speculation``), the commit finds part of it, or all of it,
already spent. How much depends on the gap between the two: smart-turn's verdict after the
transcript (~50 ms), or the fallback's silence when it judged the turn unfinished.

The bench runs a negotiation turn ("I can do twenty dollars a month.", the policy phrasing
its floor) through the call's own processors (``PolicyProcessor``, the real
``ChatCompletionsLLMService``, ``GuardProcessor``) against the stub model server in this
process, whose LLM takes ``--llm-ms`` to its first word, the design's GPU budget by
default. For each gap it times, over ``--turns`` fresh turns, the commit to the first
words the guard lets through: with the LLM asked at the commit, and asked ahead.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time
from typing import Any

from aiohttp import web
from pipecat.frames.frames import Frame, LLMContextFrame, LLMTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import PolicyEvent, Templates
from agent.conversation.scenarios import account_from
from agent.ledger.quantiles import percentile
from agent.pipeline.dialogue import GuardProcessor, PolicyProcessor
from agent.pipeline.http_pools import ServiceSessions
from agent.pipeline.llm import ChatCompletionsLLMService
from agent.pipeline.phrasing import Phrasing
from agent.pipeline.speculation import Speculation
from infra.stub_server import create_app
from tools.bench import _machine, _write_report

#: The caller's side of the negotiation turn, and the agent's question before it.
OFFER = "I can do twenty dollars a month."
HISTORY: list[Any] = [{"role": "assistant", "content": "What monthly amount would work for you?"}]
#: Long enough that the LLM's words are always the ones spoken: the bench times the LLM.
DEADLINE_S = 5.0
GAPS_MS = (0, 25, 50, 100, 200)


def _show(text: str) -> None:
    print(text, flush=True)  # noqa: T201


class _FirstWords(FrameProcessor):
    """The pipeline's end: when the guard let the turn's first words through."""

    def __init__(self) -> None:
        super().__init__()
        self.at: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame) and not self.at.done():
            self.at.set_result(time.monotonic())
        await self.push_frame(frame, direction)


def _negotiating(prompts: PromptSet) -> ConversationPolicy:
    """A call's policy at the negotiation: the right party verified."""
    policy = ConversationPolicy(account_from({"min_installment": 50}), Templates(prompts.templates))
    reply = policy.opening(prompts.greeting.format(consumer_name=policy.account.consumer_name))
    for line in ("Yes, this is Jordan Smith.", "March fifth, nineteen eighty."):
        policy.played(reply, len(reply.texts))  # heard to its end, as a caller would
        reply = policy.on_caller_turn(line)
    policy.played(reply, len(reply.texts))
    return policy


async def _turn(url: str, sessions: ServiceSessions, gap_s: float, ahead: bool) -> float:
    """One turn's commit to first words, in ms."""

    def ignore(_event: PolicyEvent) -> None:
        pass

    prompts = PromptSet.load("collections-v3")
    policy = _negotiating(prompts)
    phrasing = Phrasing(policy, prompts.turn, deadline_s=DEADLINE_S)
    llm = ChatCompletionsLLMService(
        sessions=sessions,
        base_url=url,
        api_key="none",
        model="stub",
        max_tokens=40,
        system_instruction=prompts.system,
        answer_timeout_s=DEADLINE_S,
    )
    phrasing.abandon = llm.abandon
    processor = PolicyProcessor(policy, ignore, phrasing)
    if ahead:
        processor.speculation = Speculation(
            policy, phrasing, LLMContext(messages=list(HISTORY)), llm
        )
    end = _FirstWords()
    worker = PipelineWorker(
        Pipeline([processor, llm, GuardProcessor(policy, ignore, phrasing=phrasing), end]),
        params=PipelineParams(),
        enable_rtvi=False,
        enable_turn_tracking=False,
        idle_timeout_secs=None,
    )
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.sleep(0.05)  # started
        if processor.speculation is not None:
            processor.speculation.heard(OFFER)  # the STT's final transcript
        await asyncio.sleep(gap_s)
        committed = time.monotonic()
        turn = LLMContext(messages=[*HISTORY, {"role": "user", "content": OFFER}])
        await worker.queue_frame(LLMContextFrame(turn))
        return 1000 * (await asyncio.wait_for(end.at, 10.0) - committed)
    finally:
        await worker.cancel()
        await running


async def _measure(turns: int, llm_ms: float) -> dict[tuple[int, bool], list[float]]:
    app = create_app(first_token_s=llm_ms / 1000.0)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/v1"
    sessions = ServiceSessions()
    results: dict[tuple[int, bool], list[float]] = {}
    try:
        for gap_ms in GAPS_MS:
            for ahead in (False, True):
                results[gap_ms, ahead] = [
                    await _turn(url, sessions, gap_ms / 1000.0, ahead) for _ in range(turns)
                ]
                ms = results[gap_ms, ahead]
                when = "ahead" if ahead else "at the commit"
                _show(f"  gap {gap_ms} ms, asked {when}: p50 {percentile(ms, 0.5):.0f} ms")
    finally:
        await sessions.close()
        await runner.cleanup()
    return results


def table(results: dict[tuple[int, bool], list[float]]) -> str:
    rows = [
        "| gap ms | asked at the commit p50 | p95 | asked ahead p50 | p95 | saved (p50) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for gap_ms in sorted({gap for gap, _ in results}):
        late, ahead = results[gap_ms, False], results[gap_ms, True]
        p50s = percentile(late, 0.5), percentile(ahead, 0.5)
        rows.append(
            f"| {gap_ms} | {p50s[0]:.0f} | {percentile(late, 0.95):.0f} | {p50s[1]:.0f} "
            f"| {percentile(ahead, 0.95):.0f} | {p50s[0] - p50s[1]:.0f} |"
        )
    return "\n".join(rows)


def run_speculation_bench(turns: int, llm_ms: float, output: str) -> int:
    """``python -m agent bench speculation``: the table, the report."""
    if turns < 5:
        print(f"--turns must be at least 5, got {turns}", file=sys.stderr)  # noqa: T201
        return 2
    if llm_ms < 0:
        print(f"--llm-ms must be 0 or more, got {llm_ms:g}", file=sys.stderr)  # noqa: T201
        return 2
    _show(f"{turns} turns per gap and way, the LLM's first word after {llm_ms:g} ms ...")
    results = asyncio.run(_measure(turns, llm_ms))
    text = table(results)
    _show("")
    _show(text)
    command = f"python -m agent bench speculation --turns {turns} --llm-ms {llm_ms:g}"
    report = "\n".join(
        [
            "# Asking the LLM ahead of the turn's end (phrase mode)",
            "",
            f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with "
            f"`{command}`.",
            "",
            "Each cell: from the turn's commit to the first words of the LLM's answer the "
            "guard let through, in ms, over fresh negotiation turns through the call's own "
            "processors (`PolicyProcessor`, `ChatCompletionsLLMService`, `GuardProcessor`) "
            f"against the stub model server, its LLM taking {llm_ms:g} ms to its first word. "
            "*gap*: from the caller's words heard (the STT's final transcript) to the commit. "
            "*asked at the commit*: `LLM_SPECULATION=0`; *asked ahead*: the default "
            "(`agent/pipeline/speculation.py`).",
            "",
            text,
            "",
            "In the call the gap is what the turn waits for after the transcript: "
            "smart-turn's verdict (about 50 ms of model time on the CPU), or, when it judged "
            "the turn unfinished, the fallback's silence (`TURN_FALLBACK_SECS`). Where the "
            "STT is the slower (Whisper tiny.en on these two cores, ~0.5 s), the commit waits "
            "for the transcript, the gap is nil and so is the gain: asked ahead or not, the "
            "request leaves at the same moment.",
            "",
        ]
    )
    return _write_report(output, report)
