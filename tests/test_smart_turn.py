"""A call's smart-turn analyzer asks the host's service, and a service that fails costs no
call: its decisions are "incomplete" (the fallback ends the turn) until it answers again."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from agent.pipeline.smart_turn import (
    INCOMPLETE,
    MIN_DEADLINE_S,
    SmartTurnAnalyzer,
    SmartTurnClient,
    deadline_for,
    warm_up,
)
from agent.runtime.embedded import free_port
from infra.smart_turn_server import ROUTE, Decisions, Prediction, SmartTurnModel, create_app
from tools.simulate import CallerVoice

#: Generous: a loaded test machine runs the model slowly; the dead-service tests' own
#: deadlines are much shorter.
DEADLINE_S = 30.0


def _audio(line: str, rate: int = 16000) -> np.ndarray:
    return np.frombuffer(CallerVoice(rate).say(line), dtype=np.int16).astype(np.float32) / 32768


class Echo:
    """A stand-in model that answers with what it heard: the turn's length and last sample."""

    def __call__(self, audios: Sequence[np.ndarray], rates: Sequence[int]) -> list[Prediction]:
        return [
            {"prediction": int(r), "probability": float(len(a) * 100000 + a[-1] * 32768)}
            for a, r in zip(audios, rates, strict=True)
        ]


async def _service(predict: object, port: int | None = None) -> TestServer:
    server = TestServer(create_app(Decisions(predict), {"model": "test"}), port=port)  # type: ignore[arg-type]
    await server.start_server()
    return server


@pytest.fixture
async def echo() -> AsyncIterator[TestServer]:
    server = await _service(Echo())
    yield server
    await server.close()


async def _silence(client: SmartTurnClient) -> dict[str, Any]:
    """The client's decision on 10 ms of silence at 16 kHz, from a thread as a call asks."""
    return await asyncio.to_thread(client.decide, np.zeros(160, np.float32), 16000)


def _url(server: TestServer) -> str:
    return str(server.make_url(ROUTE))


def test_calls_keep_their_own_audio_and_load_no_model() -> None:
    client = SmartTurnClient(f"http://127.0.0.1:{free_port()}{ROUTE}", DEADLINE_S)
    first = SmartTurnAnalyzer(client, sample_rate=16000)
    second = SmartTurnAnalyzer(client, sample_rate=16000)
    first.append_audio(b"\1\0" * 320, is_speech=True)

    assert first._audio_buffer and not second._audio_buffer
    assert not hasattr(first, "_session")  # the model is in the service only


async def test_the_analyzer_decides_through_the_service_as_pipecats_own() -> None:
    model = SmartTurnModel(threads=1)
    server = await _service(model.predict)
    client = SmartTurnClient(_url(server), DEADLINE_S)
    try:
        for rate, line in [(16000, "I can pay two hundred dollars and"), (8000, "Yes, it's me.")]:
            audio = _audio(line, rate)
            stock = LocalSmartTurnAnalyzerV3()
            ours = SmartTurnAnalyzer(client)
            stock.set_sample_rate(rate)
            ours.set_sample_rate(rate)  # as pipecat's turn strategy does at the call's start
            got = await asyncio.to_thread(ours._predict_endpoint, audio)
            want = stock._predict_endpoint(audio)
            assert got["prediction"] == want["prediction"]
            assert got["probability"] == pytest.approx(want["probability"], abs=1e-4)
    finally:
        client.close()
        await server.close()


async def test_the_turn_goes_as_pcm_its_last_8_seconds(echo: TestServer) -> None:
    client = SmartTurnClient(_url(echo), DEADLINE_S)
    audio = (np.arange(10 * 8000) % 2000 - 1000).astype(np.float32) / 32768  # 10 s at 8 kHz
    try:
        answer = await asyncio.to_thread(client.decide, audio, 8000)
    finally:
        client.close()
    assert answer == {"prediction": 8000, "probability": 8 * 8000 * 100000 + audio[-1] * 32768}


async def test_connections_are_kept_and_reused(echo: TestServer) -> None:
    client = SmartTurnClient(_url(echo), DEADLINE_S)
    try:
        for _ in range(3):
            await _silence(client)
        assert len(client._idle) == 1  # one decision at a time: one connection
        await asyncio.gather(
            *(asyncio.to_thread(client.decide, np.zeros(160, np.float32), 16000) for _ in "ab")
        )
        assert 1 <= len(client._idle) <= 2
    finally:
        client.close()


async def test_a_dead_service_is_incomplete_then_the_next_decision_reconnects(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()  # nobody listens there
    client = SmartTurnClient(f"http://127.0.0.1:{port}{ROUTE}", deadline_s=1.0)
    caplog.set_level(logging.INFO, logger="agent.pipeline.smart_turn")
    try:
        assert await _silence(client) == INCOMPLETE
        assert await _silence(client) == INCOMPLETE
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1  # once per outage, not per turn
        assert "turns are taken as unfinished" in warnings[0].getMessage()

        server = await _service(Echo(), port)  # the service is back
        try:
            answer = await _silence(client)
        finally:
            await server.close()
    finally:
        client.close()
    assert answer["prediction"] == 16000
    assert "decides again" in caplog.records[-1].getMessage()


async def test_a_service_that_does_not_answer_is_incomplete_at_the_deadline() -> None:
    with socket.socket() as silent:  # takes the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}{ROUTE}"
        client = SmartTurnClient(url, deadline_s=MIN_DEADLINE_S)
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await _silence(client)
        waited = loop.time() - started
    assert answer == INCOMPLETE
    assert waited < 5  # the deadline, not forever (generous for a loaded machine)
    assert client._idle == []  # the late connection is not reused


async def test_a_service_started_again_is_found_without_a_lost_decision() -> None:
    first = await _service(Echo())
    port = first.port
    client = SmartTurnClient(_url(first), DEADLINE_S)
    try:
        await _silence(client)
        await first.close()  # its kept connection is closed by the server
        second = await _service(Echo(), port)
        try:
            answer = await _silence(client)
        finally:
            await second.close()
    finally:
        client.close()
    assert answer["prediction"] == 16000


async def test_a_refused_turn_is_incomplete_with_the_services_reason(
    echo: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = SmartTurnClient(_url(echo), DEADLINE_S)
    try:
        answer = await asyncio.to_thread(client.decide, np.zeros(160, np.float32), 4000)
    finally:
        client.close()
    assert answer == INCOMPLETE
    assert "must be 8000 to 48000 Hz" in caplog.text


def test_a_decision_is_worth_waiting_for_until_the_fallback_would_end_the_turn() -> None:
    assert deadline_for(1.0, 0.3) == pytest.approx(0.7)
    assert deadline_for(0.3, 0.3) == MIN_DEADLINE_S


def test_the_service_must_be_an_http_url() -> None:
    with pytest.raises(ValueError, match="http"):
        SmartTurnClient("ws://127.0.0.1:1/v1/end-of-turn", 1.0)


async def test_warming_up_opens_the_connection_the_first_call_uses(echo: TestServer) -> None:
    client = SmartTurnClient(_url(echo), DEADLINE_S)
    try:
        assert (await asyncio.to_thread(warm_up, client, 16000))["prediction"] == 16000
        assert len(client._idle) == 1
    finally:
        client.close()


async def test_a_call_without_its_smart_turn_service_still_ends_its_turns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from agent.config import Settings
    from agent.conversation.scenarios import Scenario, account_from
    from agent.runtime.context import AgentRuntime
    from tools.simulate import simulate_call

    dead = f"http://127.0.0.1:{free_port()}{ROUTE}"  # nobody listens there
    settings = Settings.from_env(
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
            "DATA_DIR": str(tmp_path),
            "SMART_TURN_URL": dead,
            "RECORDING_STORE": "off",
        }
    )
    scenario = Scenario("dead", "smart-turn is down", account_from({}), ("Yes, it's me.",))
    async with AgentRuntime(settings, stub_models=True) as ctx:
        sim = await simulate_call(ctx, scenario)

    # The turn was taken as unfinished, ended by the fallback's silence, and answered.
    answered = [t for t in sim.summary.turns if t.user_text and t.agent_text]
    assert answered, [(t.user_text, t.agent_text) for t in sim.summary.turns]
    assert "turns are taken as unfinished" in caplog.text
    # Answered from the VAD's stop no sooner than the fallback's silence (1 s) allows.
    fallback_ms = 1000 * (settings.turn_fallback_secs - settings.vad_stop_secs)
    assert answered[0].response_ms is not None and answered[0].response_ms >= fallback_ms - 50
