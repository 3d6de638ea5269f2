"""The STT websocket server with the real Whisper tiny.en model, driven like the agent does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer

from agent.pipeline.call import ModelEndpoints
from infra import stt_server
from tests.audio import pcm_chunks, pcm_seconds, silence_pcm, speech_pcm, words

IDENTITY = "Hello, my name is John Smith."
PROMISE = "Yes, that is me. I can pay one hundred dollars on Friday."
CALLBACK = "Please call me back tomorrow morning."
RECEIVE_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def stt_url(cpu_models: ModelEndpoints) -> str:
    """ws://.../v1/listen of the run's real STT server (``cpu_models``, tests/conftest.py)."""
    return cpu_models.stt_url


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        yield ws


async def start(
    ws: aiohttp.ClientWebSocketResponse, sample_rate: int = 16000, call_id: str = "call-1"
) -> None:
    await ws.send_json(
        {"type": "start", "call_id": call_id, "sample_rate": sample_rate, "language": "en"}
    )
    assert await receive(ws) == {"type": "ready"}


async def receive(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    message: dict[str, Any] = await ws.receive_json(timeout=RECEIVE_TIMEOUT_S)
    return message


async def send_audio(ws: aiohttp.ClientWebSocketResponse, pcm: bytes, sample_rate: int) -> None:
    for chunk in pcm_chunks(pcm, sample_rate, ms=20):
        await ws.send_bytes(chunk)


async def finalize(ws: aiohttp.ClientWebSocketResponse, turn: int) -> dict[str, Any]:
    await ws.send_json({"type": "finalize", "turn": turn})
    return await receive(ws)


@pytest.mark.models
async def test_health_names_the_model(stt_url: str) -> None:
    health_url = stt_url.replace("ws://", "http://").replace("/v1/listen", "/health")
    async with aiohttp.ClientSession() as session, session.get(health_url) as response:
        assert response.status == 200
        health = await response.json()
    assert health == {
        "status": "ok",
        "backend": "faster-whisper",
        "model": "whisper-tiny.en",
        "open_streams": health["open_streams"],
        "batching": {
            "window_ms": 20.0,
            "max_batch": 16,
            "model_calls": health["batching"]["model_calls"],
            "finals": health["batching"]["finals"],
            "largest_batch": health["batching"]["largest_batch"],
            "retried_batches": health["batching"]["retried_batches"],
        },
    }


@pytest.mark.models
@pytest.mark.parametrize("sample_rate", [16000, 8000])
async def test_a_finalized_turn_comes_back_as_its_words(stt_url: str, sample_rate: int) -> None:
    pcm = speech_pcm(PROMISE, sample_rate)
    async with connect(stt_url) as ws:
        await start(ws, sample_rate)
        await send_audio(ws, pcm, sample_rate)
        final = await finalize(ws, 1)

    assert final["type"] == "final"
    assert final["turn"] == 1
    assert "forced" not in final
    assert final["text"] == final["text"].strip()
    heard = words(final["text"])
    # Whisper writes "one hundred dollars" as "$100": the words that carry the meaning.
    for word in ("yes", "that", "is", "me", "pay", "friday"):
        assert word in heard, final["text"]
    assert final["audio_seconds"] == pytest.approx(pcm_seconds(pcm, sample_rate), abs=0.001)
    assert final["processing_ms"] > 0
    assert 0 < final["compute_ms"] <= final["processing_ms"]


@pytest.mark.models
async def test_each_turn_has_only_the_audio_since_the_last_final(stt_url: str) -> None:
    async with connect(stt_url) as ws:
        await start(ws, 24000)
        await send_audio(ws, speech_pcm(IDENTITY, 24000), 24000)
        first = await finalize(ws, 1)
        await send_audio(ws, speech_pcm(CALLBACK, 24000), 24000)
        second = await finalize(ws, 2)

    assert {"john", "smith"} <= set(words(first["text"]))
    assert {"call", "back", "tomorrow", "morning"} <= set(words(second["text"]))
    assert "smith" not in words(second["text"])


@pytest.mark.models
async def test_audio_in_odd_sized_pieces_is_reassembled(stt_url: str) -> None:
    pcm = speech_pcm(CALLBACK, 48000)
    async with connect(stt_url) as ws:
        await start(ws, 48000)
        for offset in range(0, len(pcm), 333):  # cuts samples in half
            await ws.send_bytes(pcm[offset : offset + 333])
        final = await finalize(ws, 3)

    assert {"call", "back", "tomorrow", "morning"} <= set(words(final["text"]))
    assert final["audio_seconds"] == pytest.approx(pcm_seconds(pcm, 48000), abs=0.001)


@pytest.mark.models
async def test_finalize_with_no_audio_is_an_empty_final(stt_url: str) -> None:
    async with connect(stt_url) as ws:
        await start(ws)
        final = await finalize(ws, 5)

    assert final["type"] == "final"
    assert final["turn"] == 5
    assert final["text"] == ""
    assert final["audio_seconds"] == 0


@pytest.mark.models
async def test_thirty_seconds_without_finalize_force_a_final(stt_url: str) -> None:
    identity = speech_pcm(IDENTITY, 16000)
    callback = speech_pcm(CALLBACK, 16000)
    padding = silence_pcm(30.0 - pcm_seconds(identity, 16000), 16000)
    async with connect(stt_url) as ws:
        await start(ws)
        await send_audio(ws, identity + padding + callback, 16000)
        forced = await receive(ws)
        rest = await finalize(ws, 9)

    assert forced["type"] == "final"
    assert forced["turn"] is None
    assert forced["forced"] is True
    assert forced["audio_seconds"] == pytest.approx(30.0)
    assert {"john", "smith"} <= set(words(forced["text"]))
    assert rest["turn"] == 9
    assert rest["audio_seconds"] == pytest.approx(pcm_seconds(callback, 16000), abs=0.001)
    assert {"call", "back"} <= set(words(rest["text"]))


@pytest.mark.models
async def test_stop_reports_the_audio_received_and_closes(stt_url: str) -> None:
    pcm = speech_pcm(IDENTITY, 8000)
    async with connect(stt_url) as ws:
        await start(ws, 8000)
        await send_audio(ws, pcm, 8000)
        await finalize(ws, 1)
        await send_audio(ws, pcm, 8000)  # never finalized, still counted
        await ws.send_json({"type": "stop"})
        usage = await receive(ws)
        closing = await ws.receive(timeout=RECEIVE_TIMEOUT_S)

    assert usage == {"type": "usage", "audio_seconds": pytest.approx(2 * pcm_seconds(pcm, 8000))}
    assert closing.type == WSMsgType.CLOSE
    assert closing.data == 1000


BAD_STARTS: list[tuple[str, Any, int, str]] = [
    ("audio before start", b"\x00\x00" * 160, 1008, "before the start"),
    ("invalid JSON", "{not json", 1003, "invalid JSON"),
    ("JSON that is not an object", "[1, 2]", 1003, "JSON object"),
    ("unknown first type", {"type": "hello"}, 1008, "expected a start"),
    (
        "bad sample rate",
        {"type": "start", "call_id": "c", "sample_rate": 44100, "language": "en"},
        1008,
        "sample_rate",
    ),
    ("missing call_id", {"type": "start", "sample_rate": 16000}, 1008, "call_id"),
    (
        "unsupported language",
        {"type": "start", "call_id": "c", "sample_rate": 16000, "language": "fr"},
        1008,
        "language",
    ),
]


@pytest.mark.models
@pytest.mark.parametrize(
    ("first", "close_code", "complaint"),
    [case[1:] for case in BAD_STARTS],
    ids=[case[0] for case in BAD_STARTS],
)
async def test_a_bad_first_message_is_refused_with_a_reason(
    stt_url: str, first: Any, close_code: int, complaint: str
) -> None:
    async with connect(stt_url) as ws:
        if isinstance(first, bytes):
            await ws.send_bytes(first)
        elif isinstance(first, str):
            await ws.send_str(first)
        else:
            await ws.send_json(first)
        error = await receive(ws)
        closing = await ws.receive(timeout=RECEIVE_TIMEOUT_S)

    assert error["type"] == "error"
    assert complaint in error["message"]
    assert closing.type == WSMsgType.CLOSE
    assert closing.data == close_code


@pytest.mark.models
@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        ({"type": "transcribe"}, "unknown message type 'transcribe'"),
        ({"type": "finalize", "turn": "one"}, "turn must be an integer"),
        ({"type": "start", "call_id": "again", "sample_rate": 16000}, "already started"),
    ],
    ids=["unknown type", "turn not an integer", "second start"],
)
async def test_a_protocol_error_closes_only_its_own_stream(
    stt_url: str, message: dict[str, Any], complaint: str
) -> None:
    async with connect(stt_url) as healthy, connect(stt_url) as broken:
        await start(healthy, 16000, "healthy-call")
        await send_audio(healthy, speech_pcm(IDENTITY, 16000), 16000)
        await start(broken, 16000, "broken-call")
        await broken.send_json(message)
        error = await receive(broken)
        closing = await broken.receive(timeout=RECEIVE_TIMEOUT_S)
        final = await finalize(healthy, 1)

    assert error["type"] == "error"
    assert complaint in error["message"]
    assert closing.type == WSMsgType.CLOSE
    assert closing.data == 1008
    assert {"john", "smith"} <= set(words(final["text"]))


@pytest.fixture(scope="module")
def whisper() -> Iterator[stt_server.WhisperTranscriber]:
    """The real Whisper tiny.en, loaded in this process to serve an app of a test's own."""
    yield stt_server.WhisperTranscriber()


@pytest.mark.models
async def test_two_concurrent_streams_are_batched_into_one_model_call(
    whisper: stt_server.WhisperTranscriber,
) -> None:
    # The window is longer than any test takes: the batch closes when the second final
    # arrives (max_batch 2), so what is asserted does not depend on timing.
    app = stt_server.create_app(whisper, window_ms=600_000, max_batch=2)
    async with (
        TestClient(TestServer(app, host="127.0.0.1", port=0)) as client,
        client.ws_connect("/v1/listen") as first,
        client.ws_connect("/v1/listen") as second,
    ):
        await start(first, 16000, "call-a")
        await start(second, 8000, "call-b")
        await send_audio(first, speech_pcm(IDENTITY, 16000), 16000)
        await send_audio(second, speech_pcm(CALLBACK, 8000), 8000)
        await first.send_json({"type": "finalize", "turn": 1})
        await second.send_json({"type": "finalize", "turn": 7})
        final_a, final_b = await receive(first), await receive(second)
        async with client.get("/health") as response:
            batching = (await response.json())["batching"]

    assert final_a["turn"] == 1
    assert {"john", "smith"} <= set(words(final_a["text"]))
    assert final_b["turn"] == 7
    assert {"call", "back", "tomorrow", "morning"} <= set(words(final_b["text"]))
    assert "smith" not in words(final_b["text"])
    assert batching["model_calls"] == 1
    assert batching["finals"] == 2
    assert batching["largest_batch"] == 2


class SilentTranscriber:
    """A fake backend for protocol tests that need no model."""

    name = "silent"

    def transcribe(self, audio: np.ndarray) -> str:
        return ""

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        return ["" for _ in audios]


class BrokenTranscriber(SilentTranscriber):
    """A backend whose model call fails."""

    name = "broken"

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        raise RuntimeError("CUDA out of memory")


async def test_a_failing_model_closes_the_stream_with_1011() -> None:
    async with (
        TestClient(TestServer(stt_server.create_app(BrokenTranscriber()))) as client,
        client.ws_connect("/v1/listen") as ws,
    ):
        await start(ws)
        await ws.send_bytes(b"\x01\x00" * 1600)
        error = await finalize(ws, 1)
        closing = await ws.receive(timeout=RECEIVE_TIMEOUT_S)

    assert error == {"type": "error", "message": "internal error: CUDA out of memory"}
    assert closing.type == WSMsgType.CLOSE
    assert closing.data == 1011


async def test_a_stream_that_never_starts_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stt_server, "START_TIMEOUT_S", 0.2)
    async with (
        TestClient(TestServer(stt_server.create_app(SilentTranscriber()))) as client,
        client.ws_connect("/v1/listen") as ws,
    ):
        error = await receive(ws)
        closing = await ws.receive(timeout=RECEIVE_TIMEOUT_S)

    assert error == {"type": "error", "message": "no start message within 0.2 s"}
    assert closing.data == 1008


class LengthTranscriber(SilentTranscriber):
    """A fake backend that answers with the length of each audio it is given, in samples."""

    name = "length"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        self.calls.extend(audio.size for audio in audios)
        return [str(audio.size) for audio in audios]


async def test_a_pause_decodes_ahead_and_the_final_answers_with_it() -> None:
    model = LengthTranscriber()
    async with (
        TestClient(TestServer(stt_server.create_app(model, window_ms=0))) as client,
        client.ws_connect("/v1/listen") as ws,
    ):
        await start(ws)
        await ws.send_bytes(b"\x01\x00" * 8000)  # the utterance
        await ws.send_json({"type": "pause"})
        await ws.send_bytes(bytes(3200))  # the quiet that ends it
        final = await finalize(ws, 1)

    # The final is the decode of the audio before the pause, not a second decode.
    assert final["text"] == "8000"
    assert model.calls == [8000]
    assert final["audio_seconds"] == pytest.approx(0.6)  # usage counts all it streamed


async def test_a_resume_drops_the_decode_ahead() -> None:
    model = LengthTranscriber()
    async with (
        TestClient(TestServer(stt_server.create_app(model, window_ms=0))) as client,
        client.ws_connect("/v1/listen") as ws,
    ):
        await start(ws)
        await ws.send_bytes(b"\x01\x00" * 8000)
        await ws.send_json({"type": "pause"})
        await ws.send_json({"type": "resume"})
        await ws.send_bytes(b"\x01\x00" * 4000)  # the caller went on
        first = await finalize(ws, 1)
        await ws.send_bytes(b"\x01\x00" * 1600)
        second = await finalize(ws, 2)  # no pause this time: decoded at the finalize

    assert first["text"] == "12000"
    assert second["text"] == "1600"
    assert model.calls[-2:] == [12000, 1600]


@pytest.mark.models
def test_a_turn_is_decoded_in_the_short_window_unless_it_needs_whisper_s_own(
    whisper: stt_server.WhisperTranscriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows: list[tuple[int, ...]] = []
    encode = whisper._model.encode
    monkeypatch.setattr(
        whisper._model,
        "encode",
        lambda features: windows.append(features.shape) or encode(features),
    )
    turn = np.frombuffer(speech_pcm(PROMISE, 16000), dtype="<i2").astype(np.float32) / 32768
    long_turn = np.concatenate([turn, np.zeros(9 * 16000, np.float32)])

    short, whole = whisper.transcribe(turn), whisper.transcribe(long_turn)

    assert windows == [(1, 80, 1000), (1, 80, 3000)]
    assert {"pay", "friday"} <= set(words(short)) and {"pay", "friday"} <= set(words(whole))


def test_a_window_without_room_for_its_margin_is_refused() -> None:
    with pytest.raises(SystemExit):
        stt_server.main(["--window-s", "2"])
