"""The stub server: the three protocols answered at once, with the real servers' errors."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import aiohttp
import numpy as np
import openai
import pytest
from aiohttp import WSMsgType

from infra.stub_server import DEFAULT_REPLY, DEFAULT_TRANSCRIPT
from tests.audio import pcm_chunks
from tests.servers import running_server


@pytest.fixture(scope="session")
def stub_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(
        "stub", "infra.stub_server", tmp_path_factory.mktemp("stub-logs"), timeout=60
    ) as server:
        yield server.base_url


async def test_health_covers_all_three(stub_url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{stub_url}/health") as response:
        assert response.status == 200
        assert await response.json() == {
            "status": "ok",
            "model": "stub",
            "voice": "stub-tone",
            "sample_rate": 16000,
            "open_streams": 0,
        }


async def test_every_turn_hears_the_fixed_transcript(stub_url: str) -> None:
    ws_url = stub_url.replace("http://", "ws://") + "/v1/listen"
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
        await ws.send_json({"type": "start", "call_id": "c", "sample_rate": 8000})
        assert await ws.receive_json(timeout=10) == {"type": "ready"}
        for chunk in pcm_chunks(bytes(16000), 8000):
            await ws.send_bytes(chunk)
        await ws.send_json({"type": "finalize", "turn": 1})
        final = await ws.receive_json(timeout=10)
        await ws.send_json({"type": "finalize", "turn": 2})
        empty = await ws.receive_json(timeout=10)
        await ws.send_json({"type": "stop"})
        usage = await ws.receive_json(timeout=10)

    assert final["text"] == DEFAULT_TRANSCRIPT
    assert final["turn"] == 1
    assert final["audio_seconds"] == pytest.approx(1.0)
    assert 0 <= final["compute_ms"] <= final["processing_ms"]  # the model's share alone
    assert empty["text"] == ""
    assert empty["compute_ms"] == 0  # nothing buffered: no model call
    assert usage == {"type": "usage", "audio_seconds": pytest.approx(1.0)}


async def test_stt_protocol_errors_are_the_real_servers(stub_url: str) -> None:
    ws_url = stub_url.replace("http://", "ws://") + "/v1/listen"
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
        await ws.send_bytes(bytes(640))
        error = await ws.receive_json(timeout=10)
        closing = await ws.receive(timeout=10)

    assert error == {"type": "error", "message": "audio before the start message"}
    assert closing.type == WSMsgType.CLOSE
    assert closing.data == 1008


@pytest.mark.parametrize("sample_rate", [8000, 16000, 48000])
async def test_speech_is_a_short_tone_at_the_asked_rate(stub_url: str, sample_rate: int) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{stub_url}/v1/speech", json={"text": "Anything.", "sample_rate": sample_rate}
        ) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"] == f"audio/L16; rate={sample_rate}; channels=1"
        assert 0 <= float(response.headers["X-Real-Time-Factor"]) < 1  # a stored tone
        body = await response.read()

    tone = np.frombuffer(body, dtype="<i2").astype(np.float32)
    assert tone.size == pytest.approx(0.3 * sample_rate, abs=2)
    spectrum = np.abs(np.fft.rfft(tone))
    peak_hz = np.argmax(spectrum) * sample_rate / tone.size
    assert peak_hz == pytest.approx(440, abs=5)


async def test_speech_errors_are_the_real_servers(stub_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stub_url}/v1/speech", json={"text": ""}) as response,
    ):
        assert response.status == 400
        assert await response.json() == {"error": "text is empty"}


async def test_streamed_chat_reply_with_usage(stub_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{stub_url}/v1", api_key="none", max_retries=0)
    stream = await client.chat.completions.create(
        model="stub",
        messages=[{"role": "user", "content": "Hello, who is this?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]

    with_choices = [chunk for chunk in chunks if chunk.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == DEFAULT_REPLY
    assert len(with_choices) > 3
    assert with_choices[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 4
    assert (chunks[-1].usage.model_extra or {})["compute_ms"] >= 0


async def test_plain_chat_reply(stub_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{stub_url}/v1", api_key="none", max_retries=0)
    completion = await client.chat.completions.create(
        model="stub", messages=[{"role": "user", "content": "Hi"}]
    )

    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.usage is not None


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"{not json", "invalid JSON"),
        (b'{"messages": []}', "messages must be a non-empty list"),
        (b'{"messages": ["hi"]}', "with a role"),
    ],
)
async def test_bad_chat_requests_get_400(stub_url: str, body: bytes, complaint: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stub_url}/v1/chat/completions", data=body) as response,
    ):
        assert response.status == 400
        error = (await response.json())["error"]

    assert error["type"] == "invalid_request_error"
    assert complaint in error["message"]


@pytest.fixture
def slow_stub_url(tmp_path) -> Iterator[str]:
    args = ["--llm-first-token-ms", "300"]
    with running_server("stub", "infra.stub_server", tmp_path, args, timeout=60) as server:
        yield server.base_url


async def test_the_llm_can_take_its_time_to_the_first_word(slow_stub_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{slow_stub_url}/v1", api_key="none")
    started = time.monotonic()
    stream = await client.chat.completions.create(
        model="stub", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    assert time.monotonic() - started >= 0.3  # never sooner


def test_a_negative_first_token_time_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infra.stub_server", "--llm-first-token-ms", "-5"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "--llm-first-token-ms must be 0 or more" in result.stderr
