"""How a call ends: its limits free its slot, and its record is written whichever part of
its end fails (issue 18).

The calls run on the stub model servers (``infra.stub_server``, the instant stand-ins):
what is tested is the call's own ending, not what the models hear or say. Limits are
configured short, and nothing here asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
from pathlib import Path
from typing import Any

import pytest
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.transports.base_transport import BaseTransport
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, selectinload

import agent.pipeline.call
from agent.campaigns.portfolio import import_portfolio
from agent.config import Settings
from agent.conversation.policy import ConversationPolicy
from agent.conversation.replies import Templates
from agent.conversation.scenarios import account_from
from agent.pipeline.call import (
    CALL_LIMIT,
    COST_ERROR,
    END_STEP_FAILED,
    LINE_FAILED,
    Call,
    CallSummary,
)
from agent.pipeline.dialogue import PolicyProcessor
from agent.pipeline.limits import MAX_DURATION, NEVER_CONNECTED, SILENCE
from agent.pipeline.recording import CallRecorder
from agent.pipeline.turns import TurnLedger
from agent.runtime.context import AgentRuntime
from agent.store.tables import Call as CallRow
from agent.store.tables import CallEvent
from telephony.carriers.livekit import LiveKitConfig, transport_for
from telephony.loopback import LoopbackInputTransport, LoopbackTransport
from tools.simulate import portfolio_account

DATA = Path(__file__).resolve().parent / "data"
#: Tuesday 10:00 in Seattle, the consumer's zone: the policy's and the gate's clock.
NOW = dt.datetime(2026, 12, 8, 18, 0, tzinfo=dt.UTC)
#: What a failing step's error says: it must reach no log line.
SECRET = "the caller said 4111 1111 1111 1111"
#: A guard against a test that hangs, not a measure of anything.
HANG_S = 60


def settings(db_url: str, tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(
        {
            "DATABASE_URL": db_url,
            "DATA_DIR": str(tmp_path),
            "RECORDING_STORE": str(tmp_path / "recordings"),
            **env,
        },
        dotenv=False,
    )


@pytest.fixture
def daniel(db_engine: Engine) -> tuple[Any, str | None]:
    """Daniel Kim's account (ACME-0002) and number, from the imported portfolio."""
    import_portfolio(db_engine, DATA / "portfolio.csv")
    return portfolio_account(db_engine, "ACME-0002")


async def hold(call: Call, line: LoopbackTransport) -> CallSummary:
    """Run ``call``: answered, the caller hears the greeting, then hangs up."""
    started = asyncio.Event()
    run = asyncio.create_task(call.run(on_started=lambda _: started.set()))
    async with asyncio.timeout(HANG_S):
        await started.wait()
        await call.answer()
        await line.caller.listen(silence_s=0.5, timeout_s=HANG_S)
        await call.cancel("caller_hung_up")
        return await run


def stored(engine: Engine, call_id: str) -> tuple[CallRow, list[tuple[str, dict[str, Any]]]]:
    """The call's row (its cost lines loaded) and its events, in order."""
    with Session(engine) as session:
        row = session.get_one(CallRow, call_id, options=[selectinload(CallRow.cost_lines)])
        events = session.scalars(
            select(CallEvent).where(CallEvent.call_id == call_id).order_by(CallEvent.id)
        )
        return row, [(e.kind, e.detail) for e in events]


# -- the end of a call survives each of its steps failing ---------------------------------

STEPS = ("turns", "events", "cost", "recording", "outcome", "gate")


def fail(monkeypatch: pytest.MonkeyPatch, step: str, call: Call) -> None:
    """Make ``step`` of ``call``'s end raise, its message quoting what was said."""

    def boom(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(SECRET)

    report = PolicyProcessor.report_events

    def report_until_the_end(processor: PolicyProcessor) -> None:
        # The policy's events are reported during the call too: only the last report fails.
        worker = call._worker
        if worker is not None and worker.has_finished():
            boom()
        report(processor)

    target: tuple[Any, str, Any] = {
        "turns": (TurnLedger, "close", boom),
        "events": (PolicyProcessor, "report_events", report_until_the_end),
        "cost": (agent.pipeline.call, "price_call", boom),
        "recording": (CallRecorder, "store", boom),
        "outcome": (agent.pipeline.call, "CallOutcome", boom),
        "gate": (agent.pipeline.call, "record_call", boom),
    }[step]
    monkeypatch.setattr(*target)


@pytest.fixture
def gate_told(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The debts the pre-dial gate was told about (the real update runs too)."""
    told: list[int] = []
    real = agent.pipeline.call.record_call

    def spy(engine: Engine, debt_id: int, *args: Any, **kwargs: Any) -> list[str]:
        told.append(debt_id)
        return real(engine, debt_id, *args, **kwargs)

    monkeypatch.setattr(agent.pipeline.call, "record_call", spy)
    return told


@pytest.mark.parametrize("step", STEPS)
async def test_the_rest_of_the_record_is_written_when_a_step_of_the_end_fails(
    step: str,
    db_url: str,
    db_engine: Engine,
    daniel: tuple[Any, str | None],
    gate_told: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    account, number = daniel
    async with AgentRuntime(settings(db_url, tmp_path), stub_models=True) as ctx:
        policy = ConversationPolicy(account, Templates(ctx.prompts.templates), clock=lambda: NOW)
        line = LoopbackTransport(16000)
        call = Call(ctx, line, transport_name="loopback", policy=policy, number=number)
        fail(monkeypatch, step, call)
        summary = await hold(call, line)
        await ctx.writer.flush(timeout=HANG_S)
    row, events = stored(db_engine, call.id)
    kinds = [kind for kind, _ in events]

    # The failed step is noted on the call, by name and error type; its message is nowhere.
    failed = [(kind, detail) for kind, detail in events if kind in (END_STEP_FAILED, COST_ERROR)]
    kind = COST_ERROR if step == "cost" else END_STEP_FAILED
    assert failed == [(kind, {"step": step, "error": "RuntimeError"})]
    assert f"end step {step!r} failed: RuntimeError" in caplog.text
    assert SECRET not in caplog.text
    # Everything else is written.
    assert (row.status, row.end_reason) == ("ended", "caller_hung_up")
    assert summary.end_reason == "caller_hung_up" and row.duration_s
    # The events of the call so far (the greeting, its disclosures once played) are kept.
    assert {"greeting", "ai_disclosure", "recording_notice"} <= set(kinds), kinds
    assert (row.cost_usd is None, not row.cost_lines) == (step == "cost",) * 2
    assert (row.recording_uri is None) == (step == "recording")
    assert (row.debt_id, row.disposition) == (
        (None, None) if step == "outcome" else (account.debt_id, "no_commitment")
    )
    assert gate_told == ([] if step == "gate" else [account.debt_id])


async def test_a_call_whose_end_cannot_be_written_still_tells_the_gate(
    db_url: str,
    db_engine: Engine,
    daniel: tuple[Any, str | None],
    gate_told: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    account, number = daniel
    async with AgentRuntime(settings(db_url, tmp_path), stub_models=True) as ctx:

        def unwritable(*_args: Any, **_kwargs: Any) -> Any:
            raise ValueError(SECRET)

        monkeypatch.setattr(agent.pipeline.call, "CallEnded", unwritable)
        policy = ConversationPolicy(account, Templates(ctx.prompts.templates), clock=lambda: NOW)
        line = LoopbackTransport(16000)
        call = Call(ctx, line, transport_name="loopback", policy=policy, number=number)
        await hold(call, line)
        await ctx.writer.flush(timeout=HANG_S)
    row, events = stored(db_engine, call.id)
    assert (END_STEP_FAILED, {"step": "end", "error": "ValueError"}) in events
    assert row.status == "active"  # left for the worker's restart to mark abnormal
    assert gate_told == [account.debt_id]
    assert SECRET not in caplog.text


# -- limits -------------------------------------------------------------------------------

LONG = "600"  # a limit that plays no part in the test


async def limited_call(
    db_url: str,
    tmp_path: Path,
    line: BaseTransport,
    *,
    answer: bool,
    transport_name: str = "loopback",
    **limits: str,
) -> tuple[CallSummary, Call]:
    env = {"CONNECT_TIMEOUT_S": LONG, "MAX_CALL_S": LONG, "MAX_SILENCE_S": LONG, **limits}
    async with AgentRuntime(settings(db_url, tmp_path, **env), stub_models=True) as ctx:
        # The demo account: a debt of no portfolio, so no gate to tell.
        policy = ConversationPolicy(
            account_from({}), Templates(ctx.prompts.templates), clock=lambda: NOW
        )
        call = Call(ctx, line, transport_name=transport_name, policy=policy)
        started = asyncio.Event()
        run = asyncio.create_task(call.run(on_started=lambda _: started.set()))
        async with asyncio.timeout(HANG_S):
            await started.wait()
            if answer:
                await call.answer()
            summary = await run
        await ctx.writer.flush(timeout=HANG_S)
    return summary, call


async def test_a_line_that_never_connects_ends_the_call_and_frees_its_slot(
    db_url: str, db_engine: Engine, tmp_path: Path
) -> None:
    line = LoopbackTransport(16000)
    summary, call = await limited_call(
        db_url, tmp_path, line, answer=False, CONNECT_TIMEOUT_S="0.2"
    )
    row, events = stored(db_engine, call.id)
    assert summary.end_reason == row.end_reason == NEVER_CONNECTED
    assert row.status == "ended" and row.cost_lines  # priced like any other call
    assert (CALL_LIMIT, {"limit": NEVER_CONNECTED}) in events
    assert "greeting" not in [kind for kind, _ in events]


@pytest.mark.parametrize(
    ("setting", "reason"), [("MAX_CALL_S", MAX_DURATION), ("MAX_SILENCE_S", SILENCE)]
)
async def test_a_connected_call_ends_at_its_limit(
    setting: str, reason: str, db_url: str, db_engine: Engine, tmp_path: Path
) -> None:
    # The caller's line carries silence only: after the greeting, nobody speaks.
    line = LoopbackTransport(16000)
    summary, call = await limited_call(db_url, tmp_path, line, answer=True, **{setting: "1"})
    row, events = stored(db_engine, call.id)
    assert summary.end_reason == row.end_reason == reason
    assert row.status == "ended"
    assert (CALL_LIMIT, {"limit": reason}) in events
    assert "greeting" in [kind for kind, _ in events]
    assert line.caller.sound_log, "the greeting was not played before the call ended"


class UnjoinableInput(LoopbackInputTransport):
    """A line's input whose setup fails, as LiveKit's does when it cannot join the room
    (pipecat reports the error and goes on without it)."""

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        raise ConnectionError("could not join the room")


async def test_a_line_that_fails_to_connect_ends_the_call_at_once(
    db_url: str, db_engine: Engine, tmp_path: Path
) -> None:
    # The connect timeout is long: only the failure itself can end this call.
    line = LoopbackTransport(16000)
    line._input = UnjoinableInput(line.caller, line._params)
    summary, call = await limited_call(db_url, tmp_path, line, answer=False)
    row, events = stored(db_engine, call.id)
    assert summary.end_reason == row.end_reason == NEVER_CONNECTED
    assert row.status == "ended"
    assert (LINE_FAILED, {"error": "ConnectionError", "connected": False}) in events


async def test_a_livekit_room_that_cannot_be_joined_ends_the_call(
    db_url: str, db_engine: Engine, tmp_path: Path
) -> None:
    # Issue 18: the call stayed active, holding its slot until a restart. pipecat's LiveKit
    # transport tries three times, then gives the room up; the connect timeout is long.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    config = LiveKitConfig(f"ws://127.0.0.1:{port}", "key", "a-secret-of-thirty-two-characters")
    line = transport_for(config, "debt-42", 16000)
    summary, call = await limited_call(
        db_url, tmp_path, line, answer=False, transport_name="livekit"
    )
    row, events = stored(db_engine, call.id)
    assert summary.end_reason == row.end_reason == NEVER_CONNECTED
    assert row.status == "ended" and row.transport == "livekit"
    assert row.cost_lines and row.price_book_version  # LiveKit has a price now
    assert [detail["connected"] for kind, detail in events if kind == LINE_FAILED] == [False]
