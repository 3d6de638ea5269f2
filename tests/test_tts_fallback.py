"""The TTS fallback adapter against real local servers: our TTS protocol and fakes of
Cartesia's."""

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
from agent.pipeline.breaker import CircuitBreaker
from agent.pipeline.cartesia import CartesiaClient, CartesiaConfig
from agent.pipeline.tts_fallback import Fallback, TTSFallbackAdapter, is_voiced
from tests.fallback_tts import API_KEY, FALLBACK_LEVEL, FakeCartesia, fake_cartesia

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
    async with fake_cartesia() as served:
        yield served


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


def cartesia(url: str, session: aiohttp.ClientSession) -> CartesiaClient:
    return CartesiaClient(CartesiaConfig(url, API_KEY, voice="voice-1"), session)


def adapter(
    url: str,
    fallback_url: str,
    session: aiohttp.ClientSession,
    events: list[PolicyEvent],
    breaker: CircuitBreaker | None = None,
    deadline_s: float = 0.2,
    more: tuple[Fallback, ...] = (),
) -> TTSFallbackAdapter:
    """The self-hosted TTS at ``url``, the fake Cartesia at ``fallback_url``, then ``more``."""
    return TTSFallbackAdapter(
        url=url,
        session=session,
        breaker=breaker or CircuitBreaker(threshold=10, probe_interval_s=0.05),
        fallbacks=[Fallback(cartesia(fallback_url, session)), *more],
        deadline_s=deadline_s,
        on_event=events.append,
    )


async def speak(tts: TTSFallbackAdapter, sentences: list[str]) -> list[list[int]]:
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
    tts = adapter(url, fallback_url, session, events)
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
    tts = adapter(refused_url() if mode == "refused" else url, fallback_url, session, events)
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
    tts = adapter(url, refused_url().replace("http", "ws"), session, events, deadline_s=0.0)
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
    tts = adapter(url, fallback_url, session, events, breaker)
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
    tts = adapter(url, "ws://127.0.0.1:9/unused", session, [], breaker)
    tts._sample_rate = 16000
    breaker.attach(tts.probe)
    assert breaker.failed() and breaker.open
    while breaker.open:
        await asyncio.sleep(0.01)
    assert state.requests == ["Hello."]
    await breaker.close()


async def test_a_second_fallback_covers_the_first_and_its_breaker_skips_it(
    primary, fallback, session
):
    """Three voices: a dead primary, a first fallback that is down, a second that speaks.
    The first fallback's own breaker opens after two failures and keeps it out."""
    state, url = primary
    state.mode = "failing"
    fake, fallback_url = fallback
    down = CircuitBreaker(threshold=2, probe_interval_s=3600)
    events: list[PolicyEvent] = []
    tts = TTSFallbackAdapter(
        url=url,
        session=session,
        breaker=CircuitBreaker(threshold=10, probe_interval_s=3600),
        fallbacks=[
            Fallback(cartesia(refused_url().replace("http", "ws"), session), down),
            Fallback(cartesia(fallback_url, session)),
        ],
        on_event=events.append,
    )
    spoken = await speak(tts, SENTENCES)
    assert voices(spoken) == [{FALLBACK_LEVEL}] * 3 and fake.transcripts == SENTENCES
    reasons = [e.detail["reason"] for e in events]
    assert [r.split(":")[0] for r in reasons[::2]] == ["error"] * 3  # the primary's
    assert reasons[1].startswith("fallback_failed: error: TTS cartesia failed: cannot connect")
    assert reasons[3].startswith("fallback_failed: error:")
    assert reasons[5] == "fallback_failed: breaker_open" and down.open
    assert tts.fallback_characters == sum(len(s) for s in SENTENCES)
    await down.close()


async def test_a_late_primary_speaks_when_every_fallback_fails(primary, session):
    state, url = primary
    events: list[PolicyEvent] = []
    dead = refused_url().replace("http", "ws")
    more = (Fallback(cartesia(dead, session)),)
    tts = adapter(url, dead, session, events, deadline_s=0.0, more=more)
    spoken = await speak(tts, SENTENCES[:1])
    assert voices(spoken) == [{PRIMARY_LEVEL}]
    reasons = [e.detail["reason"].split(":")[0] for e in events]
    assert reasons == ["deadline", "fallback_failed", "fallback_failed"]
    assert tts.fallback_characters == 0


async def test_a_call_probes_its_breakers_only_while_it_runs(primary, fallback, session):
    """A probe speaks through its call's connections: the breaker drops it when the call
    ends, and probes through the next call instead of a closed one."""
    state, url = primary
    state.mode = "failing"
    _, fallback_url = fallback
    breaker = CircuitBreaker(threshold=1, probe_interval_s=0.01)
    first = adapter(url, fallback_url, session, [], breaker)
    await speak(first, SENTENCES[:1])
    assert breaker.open
    state.mode = "healthy"
    await asyncio.sleep(0.05)
    assert breaker.open and state.requests == SENTENCES[:1]  # nobody probed: no call ran
    second = adapter(url, fallback_url, session, [], breaker)
    second._sample_rate = 16000
    breaker.attach(second.probe)  # as its start does
    while breaker.open:
        await asyncio.sleep(0.01)
    assert state.requests == [SENTENCES[0], "Hello."]
    await breaker.close()


def test_an_adapter_needs_a_fallback(session):
    with pytest.raises(ValueError, match="at least one fallback"):
        TTSFallbackAdapter(
            url="http://127.0.0.1:9/v1/speech",
            session=session,
            breaker=CircuitBreaker(),
            fallbacks=[],
        )


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
