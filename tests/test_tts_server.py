"""The TTS HTTP server with the real Piper voice: streamed PCM at the asked rate."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import numpy as np
import pytest
import soxr
from aiohttp.test_utils import TestClient, TestServer

from agent.pipeline.call import ModelEndpoints
from infra.tts_server import SpeechStream, create_app

THREE_SENTENCES = (
    "Hello, this is Sam from Acme Collections. I am calling about your account. "
    "Is this a good time to talk?"
)


@pytest.fixture(scope="session")
def tts_url(cpu_models: ModelEndpoints) -> str:
    """http://host:port of the run's real TTS server (``cpu_models``, tests/conftest.py)."""
    return cpu_models.tts_url.removesuffix("/v1/speech")


async def speak(url: str, body: object) -> tuple[aiohttp.ClientResponse, list[bytes]]:
    """POST /v1/speech; the body as the pieces it arrived in."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/v1/speech", json=body) as response:
            pieces = [piece async for piece in response.content.iter_any()]
    return response, pieces


@pytest.mark.models
async def test_health_names_the_voice_and_its_rate(tts_url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{tts_url}/health") as response:
        assert response.status == 200
        assert await response.json() == {
            "status": "ok",
            "voice": "en_US-joe-medium",
            "sample_rate": 22050,
        }


@pytest.mark.models
@pytest.mark.parametrize("sample_rate", [8000, 16000, 22050, 24000, 48000])
async def test_speech_streams_as_pcm_at_the_asked_rate(tts_url: str, sample_rate: int) -> None:
    response, pieces = await speak(tts_url, {"text": THREE_SENTENCES, "sample_rate": sample_rate})

    assert response.status == 200
    assert response.headers["Content-Type"] == f"audio/L16; rate={sample_rate}; channels=1"
    assert response.headers["X-Sample-Rate"] == str(sample_rate)
    assert 0 < float(response.headers["X-Real-Time-Factor"]) < 1  # Piper: faster than real time
    assert response.headers["Transfer-Encoding"] == "chunked"
    body = b"".join(pieces)
    assert len(body) % 2 == 0
    audio = np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768
    seconds = audio.size / sample_rate
    # 19 words at a speaking rate of 2 to 4 words a second, plus pauses.
    assert 4.0 < seconds < 12.0
    assert np.sqrt(np.mean(audio**2)) > 0.02  # speech, not silence


@pytest.mark.models
async def test_sample_rate_defaults_to_16k(tts_url: str) -> None:
    response, pieces = await speak(tts_url, {"text": "Thank you."})

    assert response.status == 200
    assert response.headers["X-Sample-Rate"] == "16000"
    assert 0.3 < len(b"".join(pieces)) / 2 / 16000 < 3.0


@pytest.mark.models
async def test_first_audio_arrives_before_the_rest_is_synthesized(tts_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{tts_url}/v1/speech", json={"text": THREE_SENTENCES, "sample_rate": 16000}
        ) as response:
            first = await response.content.readany()
            more_to_come = not response.content.at_eof()
            rest = await response.content.read()

    assert first
    assert more_to_come
    assert len(rest) > len(first)  # the first sentence is the shortest part


@pytest.mark.models
async def test_concurrent_requests_are_both_served(tts_url: str) -> None:
    results = await asyncio.gather(
        speak(tts_url, {"text": THREE_SENTENCES, "sample_rate": 8000}),
        speak(tts_url, {"text": "Goodbye.", "sample_rate": 48000}),
    )

    for response, pieces in results:
        assert response.status == 200
        assert b"".join(pieces)


@pytest.mark.models
@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("{not json", "invalid JSON"),
        (["text"], "JSON object"),
        ({"sample_rate": 16000}, "text must be a string"),
        ({"text": 42}, "text must be a string"),
        ({"text": ""}, "text is empty"),
        ({"text": "   \n"}, "text is empty"),
        ({"text": "a" * 2001}, "2001 characters; the limit is 2000"),
        ({"text": "Hello.", "sample_rate": 44100}, "sample_rate must be one of"),
        ({"text": "Hello.", "sample_rate": "16000"}, "sample_rate must be one of"),
        ({"text": "Hello.", "sample_rate": True}, "sample_rate must be one of"),
    ],
)
async def test_bad_requests_get_400_with_a_reason(
    tts_url: str, body: object, complaint: str
) -> None:
    async with aiohttp.ClientSession() as session:
        data = body if isinstance(body, str) else None
        json_body = None if isinstance(body, str) else body
        async with session.post(f"{tts_url}/v1/speech", data=data, json=json_body) as response:
            assert response.status == 400
            error = await response.json()

    assert complaint in error["error"]


class SineSynthesizer:
    """A fake backend: one continuous tone delivered in uneven chunks."""

    name = "sine"
    sample_rate = 22050
    concurrent_streams = 1

    def __init__(self) -> None:
        t = np.arange(22050) / 22050
        self.tone = (0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        for start, end in [(0, 1000), (1000, 1001), (1001, 9000), (9000, 22050)]:
            yield self.tone[start:end]


@pytest.mark.parametrize("sample_rate", [8000, 48000])
def test_resampling_is_continuous_across_chunks(sample_rate: int) -> None:
    synthesizer = SineSynthesizer()
    stream = SpeechStream(synthesizer, "any", sample_rate)
    pieces = []
    while (piece := stream.next_chunk()) is not None:
        pieces.append(piece)
    streamed = np.frombuffer(b"".join(pieces), dtype="<i2").astype(np.float32) / 32767
    whole = soxr.resample(synthesizer.tone, 22050, sample_rate)

    assert abs(streamed.size - whole.size) <= 2
    n = min(streamed.size, whole.size)
    assert np.max(np.abs(streamed[:n] - whole[:n])) < 0.01


class BrokenSynthesizer:
    """A fake backend that fails after ``good_chunks`` chunks."""

    name = "broken"
    sample_rate = 16000
    concurrent_streams = 1

    def __init__(self, good_chunks: int) -> None:
        self.good_chunks = good_chunks

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        for _ in range(self.good_chunks):
            yield np.zeros(1600, np.float32)
        raise RuntimeError("voice exploded")


async def test_a_failure_before_any_audio_is_a_500() -> None:
    async with TestClient(TestServer(create_app(BrokenSynthesizer(0)))) as client:
        response = await client.post("/v1/speech", json={"text": "Hello."})

        assert response.status == 500
        assert await response.json() == {"error": "synthesis failed: voice exploded"}


async def test_a_failure_after_audio_breaks_the_body_rather_than_ending_it() -> None:
    async with TestClient(TestServer(create_app(BrokenSynthesizer(1)))) as client:
        response = await client.post("/v1/speech", json={"text": "Hello."})

        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
