"""The TTS router against real local servers: our TTS protocol and a fake of Cartesia's."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from pipecat.frames.frames import TTSAudioRawFrame, TTSSpeakFrame
from pipecat.tests.utils import run_test

from agent.conversation.replies import PolicyEvent
from agent.pipeline.cartesia import CartesiaClient, FallbackConfig, FallbackError
from agent.pipeline.tts_fallback import CircuitBreaker, RoutedTTSService, is_voiced
from tests.fallback_tts import API_KEY, FALLBACK_LEVEL, FakeCartesia

PRIMARY_LEVEL = 3000
SENTENCES = ["Hello, this is Sam.", "Is this a good time?", "Thank you."]


@dataclass
class Primary:
    """A real aiohttp server speaking our TTS protocol, in one of several moods."""

    mode: str = "healthy"  # healthy | slow | failing | silent
    requests: list[str] = field(default_factory=list)
    #: A slow primary answers only once this is set (at teardown): always past the deadline.
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def speech(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body["text"])
        if self.mode == "failing":
            return web.json_response({"error": "synthesis failed: boom"}, status=500)
        if self.mode == "slow":
            await self.released.wait()
        rate = int(body.get("sample_rate", 16000))
        level = 0 if self.mode == "silent" else PRIMARY_LEVEL
        response = web.StreamResponse(headers={"X-Sample-Rate": str(rate)})
        await response.prepare(request)
        sample = level.to_bytes(2, "little", signed=True)
        await response.write(sample * (rate // 10))
        await response.write_eof()
        return response


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"127.0.0.1:{port}"


@pytest.fixture
async def fallback() -> AsyncIterator[tuple[FakeCartesia, str]]:
    fake = FakeCartesia()
    runner, host = await serve(fake.app)
    yield fake, f"ws://{host}/tts/websocket"
    await runner.cleanup()


@pytest.fixture
async def primary() -> AsyncIterator[tuple[Primary, str]]:
    state = Primary()
    app = web.Application()
    app.router.add_post("/v1/speech", state.speech)
    runner, host = await serve(app)
    yield state, f"http://{host}/v1/speech"
    state.released.set()
    await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def refused_url() -> str:
    """A loopback port with nobody listening (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/speech"


def router(
    url: str,
    fallback_url: str,
    session: aiohttp.ClientSession,
    events: list[PolicyEvent],
    breaker: CircuitBreaker | None = None,
    deadline_s: float = 0.2,
) -> RoutedTTSService:
    config = FallbackConfig("cartesia", fallback_url, API_KEY, voice="voice-1")
    return RoutedTTSService(
        url=url,
        session=session,
        fallback=CartesiaClient(config, session),
        breaker=breaker or CircuitBreaker(threshold=10, probe_interval_s=0.05),
        deadline_s=deadline_s,
        on_event=events.append,
    )


async def speak(tts: RoutedTTSService, sentences: list[str]) -> list[list[int]]:
    """Run the sentences through a pipeline; per sentence, the levels of its audio frames."""
    down, _ = await run_test(tts, frames_to_send=[TTSSpeakFrame(s) for s in sentences])
    by_context: dict[str, list[int]] = {}
    for frame in down:
        if isinstance(frame, TTSAudioRawFrame) and frame.context_id and is_voiced(frame.audio):
            level = abs(int.from_bytes(frame.audio[:2], "little", signed=True))
            by_context.setdefault(frame.context_id, []).append(level)
    return list(by_context.values())


def voices(spoken: list[list[int]]) -> list[set[int]]:
    return [set(levels) for levels in spoken]


async def test_a_healthy_primary_speaks_every_sentence_itself(primary, fallback, session):
    state, url = primary
    fake, fallback_url = fallback
    events: list[PolicyEvent] = []
    tts = router(url, fallback_url, session, events)
    spoken = await speak(tts, SENTENCES)
    assert voices(spoken) == [{PRIMARY_LEVEL}] * 3
    assert state.requests == SENTENCES and fake.transcripts == []
    assert events == [] and tts.fallback_characters == 0


@pytest.mark.parametrize("mode", ["slow", "failing", "silent", "refused"])
async def test_a_bad_primary_is_covered_by_the_fallback_once_per_sentence(
    mode, primary, fallback, session
):
    state, url = primary
    state.mode = mode
    fake, fallback_url = fallback
    events: list[PolicyEvent] = []
    tts = router(refused_url() if mode == "refused" else url, fallback_url, session, events)
    spoken = await speak(tts, SENTENCES)
    # Each sentence reaches the output exactly once, in the fallback's voice only.
    assert voices(spoken) == [{FALLBACK_LEVEL}] * 3
    assert fake.transcripts == SENTENCES
    assert fake.connections == 1  # opened at the start, reused for every sentence
    reasons = [e.detail["reason"].split(":")[0] for e in events]
    expected = {"slow": "deadline", "failing": "error", "silent": "silence", "refused": "error"}
    assert reasons == [expected[mode]] * 3
    assert [e.kind for e in events] == ["tts_fallback"] * 3
    assert [e.detail["text"] for e in events] == SENTENCES
    assert tts.fallback_characters == sum(len(s) for s in SENTENCES)


async def test_a_late_primary_still_speaks_when_the_fallback_is_down(primary, session):
    state, url = primary
    state.mode = "healthy"
    events: list[PolicyEvent] = []
    # A zero deadline: every answer of the primary is late.
    tts = router(url, refused_url().replace("http", "ws"), session, events, deadline_s=0.0)
    spoken = await speak(tts, SENTENCES[:1])
    assert voices(spoken) == [{PRIMARY_LEVEL}]
    assert [e.detail["reason"].split(":")[0] for e in events] == ["deadline", "fallback_failed"]
    assert tts.fallback_characters == 0


async def test_the_breaker_opens_after_k_failures_and_a_probe_closes_it(primary, fallback, session):
    state, url = primary
    state.mode = "failing"
    fake, fallback_url = fallback
    events: list[PolicyEvent] = []
    breaker = CircuitBreaker(threshold=2, probe_interval_s=3600)
    tts = router(url, fallback_url, session, events, breaker)
    await speak(tts, SENTENCES)
    assert breaker.open
    # Two failures opened it: the third sentence went straight to the fallback.
    assert state.requests == SENTENCES[:2] and fake.transcripts == SENTENCES
    assert [e.detail["reason"] for e in events][2] == "breaker_open"

    state.mode = "healthy"
    assert await tts.probe()
    breaker.succeeded()
    await breaker.close()
    spoken = await speak(tts, SENTENCES[:1])
    assert voices(spoken) == [{PRIMARY_LEVEL}]


async def test_the_background_probe_closes_the_breaker(primary, session):
    state, url = primary
    state.mode = "healthy"
    breaker = CircuitBreaker(threshold=1, probe_interval_s=0.01)
    tts = router(url, "ws://127.0.0.1:9/unused", session, [], breaker)
    tts._sample_rate = 16000
    breaker.failed(tts.probe)
    assert breaker.open
    while breaker.open:
        await asyncio.sleep(0.01)
    assert state.requests == ["Hello."]
    await breaker.close()


def test_silence_is_told_from_voice():
    assert not is_voiced(b"\x00\x00" * 100)
    assert not is_voiced((50).to_bytes(2, "little", signed=True) * 10)
    assert is_voiced((-3000).to_bytes(2, "little", signed=True) * 10)
    assert not is_voiced(b"")


def test_a_configured_fallback_needs_its_key_and_voice():
    from agent.config import ConfigError, Settings

    assert Settings.from_env({}, dotenv=False).tts_fallback == "none"
    env = {"TTS_FALLBACK": "cartesia", "CARTESIA_API_KEY": "k", "TTS_FALLBACK_VOICE": "v"}
    settings = Settings.from_env(env, dotenv=False)
    assert settings.tts_fallback_api_key == "k" and settings.tts_fallback_deadline_ms == 200
    with pytest.raises(ConfigError, match="TTS_FALLBACK_VOICE"):
        Settings.from_env({"TTS_FALLBACK": "cartesia", "CARTESIA_API_KEY": "k"}, dotenv=False)
    with pytest.raises(ConfigError, match="cartesia or none"):
        Settings.from_env({"TTS_FALLBACK": "azure"}, dotenv=False)
    with pytest.raises(ConfigError, match="DEADLINE"):
        Settings.from_env({**env, "TTS_FALLBACK_DEADLINE_MS": "0"}, dotenv=False)


# -- no websocket outlives its call (issue 19) -------------------------------------------


def cartesia(url: str, session: aiohttp.ClientSession) -> CartesiaClient:
    return CartesiaClient(FallbackConfig("cartesia", url, API_KEY, voice="voice-1"), session)


async def test_a_fallback_websocket_opening_when_the_call_ends_is_closed(fallback, session):
    """The router connects the fallback as its call starts and closes it at the call's end;
    a call ended within milliseconds closes it while the handshake is under way."""
    fake, url = fallback
    fake.upgrade.clear()
    client = cartesia(url, session)
    connecting = asyncio.create_task(client.connect())
    await fake.asked.wait()
    await client.close()
    fake.upgrade.set()
    with pytest.raises(FallbackError, match="call has ended"):
        await connecting
    assert fake.connections == 1 and fake.open_websockets == 0


async def test_a_sentence_asked_for_after_the_call_ended_opens_no_websocket(fallback, session):
    """A turn still under way when the call ends may fall back after the close."""
    fake, url = fallback
    client = cartesia(url, session)
    await client.close()
    with pytest.raises(FallbackError, match="call has ended"):
        async for _ in client.synthesize("Goodbye.", 16000):
            pass
    assert fake.connections == 0
