"""A call's pipeline on the real CPU models: barge-in, and the turn in the store."""

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.campaigns.portfolio import account_for, import_portfolio
from agent.campaigns.predial import DialRequest, check
from agent.conversation.scenarios import Scenario
from agent.pipeline.call import Call
from agent.runtime.context import AgentRuntime
from agent.store.tables import Call as CallRow
from agent.store.tables import Debt
from telephony.loopback import LoopbackTransport
from tests.audio import speech_pcm
from tests.conftest import settings_for
from tools.simulate import simulate_call

pytestmark = pytest.mark.models
DATA = Path(__file__).resolve().parent / "data"


async def test_caller_speaking_over_the_agent_stops_its_audio(cpu_models, tmp_path):
    settings = settings_for(cpu_models, f"sqlite:///{tmp_path / 'agent.db'}")
    interruption = speech_pcm("Sorry, can you wait a moment please, I need to find a pen.", 16000)
    async with AgentRuntime(settings) as ctx:
        line = LoopbackTransport(16000)
        call = Call(ctx, line, transport_name="loopback")
        started = asyncio.Event()
        run = asyncio.create_task(call.run(on_started=lambda _: started.set()))
        await started.wait()
        await asyncio.sleep(0.5)
        await call.answer()  # the greeting takes about eight seconds to say
        caller = line.caller
        while not caller.sound_log:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)
        cut_in_at = time.monotonic()
        await caller.speak(interruption)
        await asyncio.sleep(2.0)
        await call.hang_up("caller_hung_up")
        summary = await run

    greeting_started = caller.sound_log[0]
    during_cut_in = [t for t in caller.sound_log if cut_in_at + 1.0 < t < cut_in_at + 3.0]
    # The agent went quiet soon after the caller cut in, long before the greeting's end.
    assert not during_cut_in, f"agent still audible {during_cut_in[0] - cut_in_at:.2f} s in"
    assert any(t > greeting_started + 1.0 for t in caller.sound_log)
    assert summary.end_reason == "caller_hung_up"


async def test_what_the_consumer_says_reaches_the_pre_dial_gate(cpu_models, db_url, db_engine):
    # A call about a debt of the portfolio: "stop calling" must deny the next attempt (D7).
    import_portfolio(db_engine, DATA / "portfolio.csv")
    with Session(db_engine) as session:
        debt = session.scalar(select(Debt).where(Debt.account_ref == "ACME-0002"))
        account = account_for(session, debt.id)
    scenario = Scenario(
        "stop_on_stored_debt",
        "stop calling, on a debt of the portfolio",
        account,
        ("Yes, this is Daniel Kim.", "Stop calling me."),
    )
    async with AgentRuntime(settings_for(cpu_models, db_url)) as ctx:
        sim = await simulate_call(ctx, scenario)
    assert sim.policy.disposition == "stop_calling"
    with Session(db_engine) as session:
        call = session.get(CallRow, sim.summary.call_id)
        assert call.debt_id == debt.id and call.disposition == "stop_calling"
        # Seattle, 10:00 on a Tuesday: only the opt-out can deny it.
        at = datetime(2026, 12, 8, 18, 0, tzinfo=UTC)
        decision = check(session, DialRequest(debt.id, "+12065550117", at))
    assert not decision.allowed and decision.rule == "D7", decision


async def test_okay_said_over_the_mini_miranda_cuts_it_and_answers_nothing(cpu_models, tmp_path):
    # Issue 17: "Okay." two seconds into the mini-Miranda, through real audio. It is
    # noted only once said again in full, "Okay." is no yes to a question never heard,
    # and the turn record keeps the reply as heard: cut.
    from agent.conversation.scenarios import account_from

    settings = settings_for(cpu_models, f"sqlite:///{tmp_path / 'agent.db'}")
    scenario = Scenario(
        "okay_over_the_mini_miranda",
        "the caller says okay over the mini-Miranda",
        account_from({}),
        ("Yes, this is Jordan Smith.", "March fifth, nineteen eighty.", "Okay."),
        barge_in=(None, None, 2.0),
    )
    async with AgentRuntime(settings) as ctx:
        sim = await simulate_call(ctx, scenario)
        mini_miranda = ctx.prompts.templates["mini_miranda"]
    policy = sim.policy
    assert policy is not None and policy.verified
    assert policy.promise is None, policy.promise
    kinds = [e.kind for e in policy.events]
    assert kinds.count("mini_miranda") == 1, kinds  # the second, whole one
    cut = [t for t in sim.summary.turns if t.interrupted and "[cut at" in (t.agent_text or "")]
    assert cut, [(t.user_text, t.agent_text, t.interrupted) for t in sim.summary.turns]
    # What was heard is a beginning of the mini-Miranda, however early the cut fell (on a
    # loaded machine the agent's first audio comes late, so the 2 s land near its start).
    heard = cut[0].agent_text[: cut[0].agent_text.index("[cut at")].strip()
    assert mini_miranda.startswith(heard), heard
    assert "any information obtained" not in heard
    last = sim.summary.turns[-1]
    assert last.agent_text.startswith("This is Northwind Recovery, a debt collector."), last


async def test_drop_audio_ends_one_kind_of_raw_audio_going_downstream_only():
    from pipecat.frames.frames import (
        InputAudioRawFrame,
        OutputAudioRawFrame,
        TextFrame,
        TTSAudioRawFrame,
    )
    from pipecat.processors.frame_processor import FrameDirection
    from pipecat.tests.utils import run_test

    from agent.pipeline.call import DropAudio

    audio = b"\0\0" * 160
    seen: list[type] = []

    async def tap(frame: object) -> None:  # the recording: sees what goes on, and the audio
        seen.append(type(frame))

    await run_test(
        DropAudio(OutputAudioRawFrame, tap),
        frames_to_send=[
            OutputAudioRawFrame(audio, 8000, 1),
            TTSAudioRawFrame(audio, 8000, 1),  # an agent's audio of another class: dropped too
            InputAudioRawFrame(audio, 8000, 1),  # the other kind goes on
            TextFrame("said"),
        ],
        expected_down_frames=[InputAudioRawFrame, TextFrame],
    )
    audio_and_text = (OutputAudioRawFrame, TTSAudioRawFrame, InputAudioRawFrame, TextFrame)
    assert set(audio_and_text) <= set(seen)
    await run_test(  # upstream is not its business
        DropAudio(OutputAudioRawFrame),
        frames_to_send=[OutputAudioRawFrame(audio, 8000, 1)],
        frames_to_send_direction=FrameDirection.UPSTREAM,
        expected_up_frames=[OutputAudioRawFrame],
    )
