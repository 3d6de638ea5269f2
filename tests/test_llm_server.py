"""The LLM server: Gemma 3 270M through llama-cpp-python, as the agent's OpenAI client sees it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp
import openai
import pytest
from fastapi.testclient import TestClient
from openai.types.chat import ChatCompletionMessageParam

from agent.pipeline.call import ModelEndpoints
from infra.llm_server import MODEL_ALIAS, create_app, gemma_model_file

pytestmark = pytest.mark.models

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are Sam, a polite agent of Acme Collections."},
    {"role": "user", "content": "Hello, who is calling?"},
]
END_OF_TURN_TOKEN = "106"


@pytest.fixture(scope="session")
def llm_url(cpu_models: ModelEndpoints) -> str:
    """http://host:port of the run's real LLM server (``cpu_models``, tests/conftest.py)."""
    return cpu_models.llm_url.removesuffix("/v1")


@pytest.fixture
def client(llm_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{llm_url}/v1", api_key="none", max_retries=0)


async def test_health_is_ok_once_warmed_up(llm_url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{llm_url}/health") as response:
        assert response.status == 200
        assert await response.json() == {"status": "ok", "model": MODEL_ALIAS}


def test_health_is_503_until_the_warm_up_is_done() -> None:
    app = create_app(gemma_model_file())
    with TestClient(app) as http:
        loading = http.get("/health")
        app.state.ready = True
        ready = http.get("/health")

    assert loading.status_code == 503
    assert loading.json() == {"status": "loading", "model": MODEL_ALIAS}
    assert ready.status_code == 200


async def test_streamed_completion_with_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL_ALIAS,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=12,
        temperature=0.0,
    )
    chunks = [chunk async for chunk in stream]

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish_reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert content.strip()
    assert "<end_of_turn>" not in content
    assert finish_reasons[-1] in ("stop", "length")
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage is not None
    assert usage.prompt_tokens > 20  # the system text is in the prompt
    assert 1 <= usage.completion_tokens <= 14  # re-tokenized text: about max_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert (usage.model_extra or {})["compute_ms"] > 0  # the model's time, for the ledger
    assert all(c.usage is None for c in chunks[:-1])


async def test_streamed_completion_without_usage_has_no_usage_chunk(
    client: openai.AsyncOpenAI,
) -> None:
    stream = await client.chat.completions.create(
        model=MODEL_ALIAS,
        messages=MESSAGES,
        stream=True,
        max_tokens=4,
    )
    chunks = [chunk async for chunk in stream]

    assert all(chunk.choices for chunk in chunks)
    assert all(chunk.usage is None for chunk in chunks)


async def test_generation_stops_at_end_of_turn(client: openai.AsyncOpenAI) -> None:
    # The base model rarely ends a turn by itself: make <end_of_turn> its first choice.
    stream = await client.chat.completions.create(
        model=MODEL_ALIAS,
        messages=MESSAGES,
        stream=True,
        max_tokens=20,
        logit_bias={END_OF_TURN_TOKEN: 100},
    )
    chunks = [chunk async for chunk in stream]

    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_concurrent_streams_each_run_to_their_end(client: openai.AsyncOpenAI) -> None:
    async def finish_reason(user: str) -> str | None:
        stream = await client.chat.completions.create(
            model=MODEL_ALIAS,
            messages=[MESSAGES[0], {"role": "user", "content": user}],
            stream=True,
            max_tokens=8,
        )
        chunks = [chunk async for chunk in stream]
        return chunks[-1].choices[0].finish_reason

    reasons = await asyncio.gather(finish_reason("Hello?"), finish_reason("Who is this?"))

    assert all(reason in ("stop", "length") for reason in reasons)


async def test_plain_completion_reports_usage(client: openai.AsyncOpenAI) -> None:
    completion = await client.chat.completions.create(
        model=MODEL_ALIAS,
        messages=MESSAGES,
        max_tokens=5,
    )

    assert completion.choices[0].message.role == "assistant"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 5


async def test_models_lists_the_alias(client: openai.AsyncOpenAI) -> None:
    models = await client.models.list()

    assert [model.id async for model in models] == [MODEL_ALIAS]


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"{not json", "invalid JSON"),
        (b'{"messages": "hello"}', "messages"),
        (b'{"messages": []}', "at least one message"),
        (b"{}", "at least one message"),
    ],
)
async def test_bad_requests_get_400(llm_url: str, body: bytes, complaint: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{llm_url}/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        assert response.status == 400
        error = (await response.json())["error"]

    assert error["type"] == "invalid_request_error"
    assert complaint in error["message"]


def test_the_model_file_is_assembled_once(tmp_path: Path) -> None:
    path = tmp_path / "gemma.gguf"

    assert gemma_model_file(path) == path
    first = path.stat()
    assert gemma_model_file(path) == path
    assert path.stat().st_mtime_ns == first.st_mtime_ns  # not rewritten
    path.write_bytes(b"truncated")
    gemma_model_file(path)
    assert path.stat().st_size == first.st_size
    assert os.listdir(tmp_path) == ["gemma.gguf"]  # no partial file left behind
