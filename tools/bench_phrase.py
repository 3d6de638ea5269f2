"""Phrase mode audited: the embedded base model phrases the scenarios, the guard judges.

``bench guard --phrase`` (and the compliance bench, through ``phrase_audit``) holds the
caller scripts at text level, as ``agent.conversation.scenarios.converse`` does, with one
difference: every reply the policy lets the LLM phrase goes to a real LLM (by default
the embedded Gemma 3 270M, a base model that cannot follow the instruction: a natural
fuzzer for the guard) through the call's own ``ChatCompletionsLLMService`` and
``GuardProcessor``, tools and all. Per phrased turn it keeps what the model wrote, the
sentences spoken and those blocked (with rule and reason), and the policy's text when
it stood in. Then every sentence spoken is judged again by a fresh guard against its
turn's instruction: the audit holds when none fails (``PhraseAudit.violations``).

The deadline is lifted (the CPU model takes seconds), so what is judged is always the
model's phrasing, never the policy's text spoken for a late model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipecat.frames.frames import Frame, LLMContextFrame, LLMFullResponseEndFrame, LLMTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.conversation.guard import GuardContext, Instruction, OutputGuard
from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import PolicyEvent, Reply, Templates
from agent.conversation.scenarios import Scenario, builtin_scenarios, heard_before, outcome_of
from agent.pipeline.dialogue import GuardDecision, GuardProcessor, PhraseRequestFrame
from agent.pipeline.http_pools import ServiceSessions
from agent.pipeline.llm import ChatCompletionsLLMService
from agent.pipeline.phrasing import Phrasing

logger = logging.getLogger(__name__)

#: Long enough that the CPU model's answer is always the one judged.
DEADLINE_S = 120.0
#: The most one phrased turn may take before the audit gives up on it.
TURN_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class PhrasedTurn:
    """One reply the LLM phrased: what it wrote and what the guard made of it."""

    scenario: str
    run: int
    caller: str
    key: str
    verified: bool
    reference: str
    generated: str
    sentences: tuple[str, ...]
    spoken: tuple[str, ...]
    blocked: tuple[tuple[str, str, str], ...]
    fallback: tuple[str, ...]
    #: The turn was not judged: its answer called a tool (the policy's answer spoke).
    dropped: str | None = None
    #: From the LLM's first words to its response's end: how long the guard held it.
    held_ms: float | None = None


@dataclass
class ScenarioAudit:
    """A scenario's phrased turns, over all its runs, and how each run ended."""

    name: str
    turns: list[PhrasedTurn] = field(default_factory=list)
    #: Per run: how the call's ending differed from the script's ``expect``.
    unmet: list[list[str]] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return sum(len(t.sentences) for t in self.turns)

    @property
    def blocked(self) -> int:
        return sum(len(t.sentences) for t in self.turns if t.blocked)

    @property
    def spoken(self) -> int:
        return sum(len(t.spoken) for t in self.turns)

    @property
    def responses_spoken(self) -> int:
        return sum(1 for t in self.turns if t.spoken)

    @property
    def responses_blocked(self) -> int:
        return sum(1 for t in self.turns if t.blocked)


@dataclass
class PhraseAudit:
    """Phrase mode over the scenarios: per scenario, per turn; and the violations (a
    sentence spoken that a fresh allow-list check fails: there must be none)."""

    model: str
    runs: int
    seconds: float
    scenarios: list[ScenarioAudit]
    violations: list[tuple[PhrasedTurn, str]] = field(default_factory=list)

    @property
    def turns(self) -> list[PhrasedTurn]:
        return [t for s in self.scenarios for t in s.turns]

    def totals(self) -> dict[str, int]:
        turns = self.turns
        return {
            "phrased turns": len(turns),
            "sentences generated": sum(s.generated for s in self.scenarios),
            "sentences blocked": sum(s.blocked for s in self.scenarios),
            "sentences spoken": sum(s.spoken for s in self.scenarios),
            "responses spoken": sum(s.responses_spoken for s in self.scenarios),
            "responses blocked": sum(s.responses_blocked for s in self.scenarios),
            "answered by a tool": sum(1 for t in turns if t.dropped),
            "violations": len(self.violations),
        }

    def held_ms(self) -> list[float]:
        return sorted(t.held_ms for t in self.turns if t.held_ms is not None)

    def blocked_by_rule(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for turn in self.turns:
            for _, rule, _ in turn.blocked:
                counts[rule] = counts.get(rule, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class _Tap(FrameProcessor):
    """Between the LLM and the guard: when the response's first words and its end came,
    the time the guard holds a response back before any of it may be spoken."""

    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None
        self.held_ms: float | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        now = time.monotonic()
        if isinstance(frame, LLMTextFrame) and self.first is None:
            self.first = now
        elif isinstance(frame, LLMFullResponseEndFrame) and self.first is not None:
            self.held_ms = 1000 * (now - self.first)
        await self.push_frame(frame, direction)


class _Ends(FrameProcessor):
    """The pipeline's end: each response's end, and what was spoken."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = asyncio.Event()
        self.texts: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            self.texts.append(frame.text.strip())
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.ended.set()
        await self.push_frame(frame, direction)


class _PhrasingPath:
    """One run's phrasing path, as the pipeline's: the LLM, then the guard with the
    phrasing (a tap between them times how long the guard held the response)."""

    def __init__(
        self,
        policy: ConversationPolicy,
        prompts: PromptSet,
        url: str,
        model: str,
        max_tokens: int,
        sessions: ServiceSessions,
    ) -> None:
        self.phrasing = Phrasing(policy, prompts.turn, deadline_s=DEADLINE_S)
        #: The policy's answers to tool calls, in order.
        self.tool_replies: list[Reply] = []
        self.phrasing.bind(self._speak)
        self.decisions: list[GuardDecision] = []
        llm = ChatCompletionsLLMService(
            sessions=sessions,
            base_url=url,
            api_key="none",
            model=model,
            max_tokens=max_tokens,
            system_instruction=prompts.system,
            answer_timeout_s=DEADLINE_S,
        )
        guard = GuardProcessor(
            policy, self._ignore, phrasing=self.phrasing, on_decision=self.decisions.append
        )
        self.end = _Ends()
        self.tap = _Tap()
        self.worker = PipelineWorker(
            Pipeline([llm, self.tap, guard, self.end]),
            params=PipelineParams(),
            enable_rtvi=False,
            enable_turn_tracking=False,
            idle_timeout_secs=None,
        )

    @staticmethod
    def _ignore(_event: PolicyEvent) -> None:
        pass

    async def _speak(self, reply: Reply) -> None:  # the policy's answer to a tool call
        self.tool_replies.append(reply)

    async def phrase(self, history: list[dict[str, Any]], said: str, reply: Reply) -> GuardDecision:
        """The LLM's phrasing of ``reply`` to ``said``, as far as the guard let it."""
        assert reply.phrase is not None
        request = self.phrasing.context(history, said, reply)
        self.end.ended.clear()
        self.end.texts.clear()
        self.tap.first = self.tap.held_ms = None
        self.decisions.clear()
        self.tool_replies.clear()
        await self.worker.queue_frames(
            [PhraseRequestFrame(self.phrasing.turn), LLMContextFrame(request)]
        )
        await asyncio.wait_for(self.end.ended.wait(), TURN_TIMEOUT_S)
        await asyncio.sleep(0.05)  # a tool's answer, if one was called
        return self.decisions[-1] if self.decisions else GuardDecision(reply.phrase, "", ())


async def _hold(
    scenario: Scenario,
    run: int,
    prompts: PromptSet,
    url: str,
    model: str,
    max_tokens: int,
    sessions: ServiceSessions,
) -> tuple[list[PhrasedTurn], list[str]]:
    """One run of ``scenario`` with the LLM phrasing what the policy lets it."""
    policy = ConversationPolicy(scenario.account, Templates(prompts.templates))
    path = _PhrasingPath(policy, prompts, url, model, max_tokens, sessions)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(path.worker)
    running = asyncio.create_task(runner.run())
    turns: list[PhrasedTurn] = []
    history: list[dict[str, Any]] = []
    reply = policy.opening(prompts.greeting.format(consumer_name=scenario.account.consumer_name))
    spoken = list(reply.texts)  # what the agent said for ``reply`` (the LLM's, if it spoke)
    try:
        await asyncio.sleep(0.05)  # started
        for index, said in enumerate(scenario.lines):
            over = scenario.over(index)
            played, heard = heard_before(reply, over)
            policy.played(reply, played)
            whole = played == len(reply.texts)
            history.append({"role": "assistant", "content": " ".join(spoken if whole else heard)})
            if policy.stage is Stage.ENDED and over is None:
                break
            history.append({"role": "user", "content": said})
            reply = policy.on_caller_turn(said)
            spoken = list(reply.texts)
            if reply.phrase is None:
                continue
            decision = await path.phrase(history, said, reply)
            keys = getattr(reply, "keys", None) or [""]
            turns.append(
                PhrasedTurn(
                    scenario=scenario.name,
                    run=run,
                    caller=said,
                    key=str(keys[-1]),
                    verified=policy.verified,
                    reference=reply.phrase,
                    generated=decision.text,
                    sentences=decision.sentences,
                    spoken=decision.spoken,
                    blocked=decision.blocked,
                    fallback=decision.fallback,
                    dropped=decision.dropped,
                    held_ms=path.tap.held_ms,
                )
            )
            if path.tool_replies:  # the policy's answer to the tool is what was said
                reply = path.tool_replies[-1]
                spoken = list(reply.texts)
            else:
                spoken = list(path.end.texts)
        else:
            policy.played(reply, len(reply.texts))
    finally:
        await path.worker.cancel()
        await running
    unmet = [
        f"{key}: expected {want}, got {outcome_of(policy).get(key)}"
        for key, want in scenario.expect.items()
        if outcome_of(policy).get(key) != want
    ]
    return turns, unmet


def _violations(turns: Iterable[PhrasedTurn], scenarios: Sequence[Scenario]) -> list[Any]:
    """Every spoken response that a fresh guard, on its turn's instruction, would block."""
    guard = OutputGuard()
    accounts = {s.name: s.account for s in scenarios}
    found: list[tuple[PhrasedTurn, str]] = []
    for turn in turns:
        if not turn.spoken:
            continue
        account = accounts[turn.scenario]
        instruction = Instruction.for_turn(turn.reference, account, verified=turn.verified)
        ctx = GuardContext.for_account(account, verified=turn.verified, instruction=instruction)
        verdict = guard.check_response(" ".join(turn.spoken), ctx)
        if not verdict.allowed:
            found.append((turn, f"{verdict.verdict.rule}: {verdict.verdict.reason}"))
    return found


async def phrase_audit(
    llm_url: str | None = None,
    scenarios: Sequence[Scenario] | None = None,
    *,
    repeats: int = 1,
    prompt_version: str = "collections-v3",
    model: str = "gemma-3-270m",
    max_tokens: int = 40,
    log_dir: Path = Path("data/logs"),
) -> PhraseAudit:
    """Phrase mode over ``scenarios`` (the builtin ones by default), each ``repeats``
    times (the model samples), against the LLM at ``llm_url`` (OpenAI-compatible,
    ``.../v1``) or, when None, the embedded Gemma 270M started here for the run."""
    from agent.runtime.embedded import MODEL_SERVERS, ServerProcess

    chosen = list(scenarios) if scenarios is not None else list(builtin_scenarios().values())
    prompts = PromptSet.load(prompt_version)
    server: ServerProcess | None = None
    if llm_url is None:
        server = ServerProcess.launch("llm", MODEL_SERVERS["llm"], log_dir=log_dir)
    sessions = ServiceSessions()
    started = time.monotonic()
    audits: list[ScenarioAudit] = []
    try:
        if server is not None:
            await server.wait_healthy()
            llm_url = f"{server.base_url}/v1"
        assert llm_url is not None
        for scenario in chosen:
            audit = ScenarioAudit(scenario.name)
            for run in range(repeats):
                turns, unmet = await _hold(
                    scenario, run, prompts, llm_url, model, max_tokens, sessions
                )
                audit.turns.extend(turns)
                audit.unmet.append(unmet)
            audits.append(audit)
            logger.info(
                "%s: %d phrased turns, %d sentences, %d blocked, %d spoken",
                scenario.name,
                len(audit.turns),
                audit.generated,
                audit.blocked,
                audit.spoken,
            )
    finally:
        await sessions.close()
        if server is not None:
            await server.stop()
    result = PhraseAudit(model, repeats, time.monotonic() - started, audits)
    result.violations = _violations(result.turns, chosen)
    return result


def _held_line(audit: PhraseAudit) -> str:
    held = audit.held_ms()
    if not held:
        return "No LLM response had words to hold."
    from agent.ledger.quantiles import percentile

    return (
        f"The whole-response check holds each response from the LLM's first words to its "
        f"end before the voice may start: median {percentile(held, 0.5):.0f} ms, p95 "
        f"{percentile(held, 0.95):.0f} ms here ({len(held)} responses, CPU model)."
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report_section(audit: PhraseAudit, command: str) -> str:
    """The audit as the markdown section of docs/benchmarks/guard.md."""
    totals = audit.totals()
    lines = [
        "## Phrase mode with the embedded base model: what the guard let through",
        "",
        f"`{command}`: the {len(audit.scenarios)} builtin scenarios at text level, "
        f"{audit.runs} run(s) each, every reply the policy lets the LLM phrase sent to "
        f"{audit.model} (a base model) through `ChatCompletionsLLMService` and "
        f"`GuardProcessor`, tools and all; {audit.seconds:.0f} s. Every spoken response was "
        "then judged again by a fresh guard against its turn's instruction.",
        "",
        "| scenario | phrased turns | sentences generated | blocked | spoken | "
        "responses spoken | responses blocked |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in audit.scenarios:
        lines.append(
            f"| {s.name} | {len(s.turns)} | {s.generated} | {s.blocked} | {s.spoken} "
            f"| {s.responses_spoken} | {s.responses_blocked} |"
        )
    lines.append(
        f"| **all** | {totals['phrased turns']} | {totals['sentences generated']} "
        f"| {totals['sentences blocked']} | {totals['sentences spoken']} "
        f"| {totals['responses spoken']} | {totals['responses blocked']} |"
    )
    lines += [
        "",
        f"Answered by a tool call (the policy's answer spoken, the words dropped): "
        f"{totals['answered by a tool']}. **Spoken sentences failing the allow-list: "
        f"{totals['violations']}.**",
        "",
        _held_line(audit),
        "",
        "Why, by rule (each failing sentence of a blocked response, or the response as a "
        "whole; `allow:*` are the allow-list's rules, `C*` the deny rules):",
        "",
        "| rule | times |",
        "|---|---:|",
        *[f"| `{rule}` | {n} |" for rule, n in audit.blocked_by_rule().items()],
        "",
        "Every spoken LLM response:",
        "",
        "| scenario | reference | spoken |",
        "|---|---|---|",
        *[
            f"| {t.scenario} | {_cell(t.reference)} | {_cell(' '.join(t.spoken))} |"
            for t in audit.turns
            if t.spoken
        ],
        "",
        "Every blocked response (the text stored for review, card data redacted):",
        "",
        "| scenario | model wrote | rule | reason |",
        "|---|---|---|---|",
        *[
            f"| {t.scenario} | {_cell(t.generated)} | `{b[1]}` | {_cell(b[2])} |"
            for t in audit.turns
            for b in t.blocked[:1]
        ],
    ]
    if audit.violations:
        lines += ["", "Violations:", ""]
        lines += [
            f"- {t.scenario}: {_cell(' '.join(t.spoken))} ({why})" for t, why in audit.violations
        ]
    return "\n".join(lines) + "\n"
