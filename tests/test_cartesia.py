"""Cartesia's websocket client against a local fake of its API: no websocket outlives its
call (issue 19)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from agent.pipeline.cartesia import CartesiaClient, CartesiaConfig, CartesiaError
from tests.fallback_tts import API_KEY, FALLBACK_LEVEL, FakeCartesia, fake_cartesia


@pytest.fixture
async def fallback() -> AsyncIterator[tuple[FakeCartesia, str]]:
    async with fake_cartesia() as served:
        yield served


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def cartesia(url: str, session: aiohttp.ClientSession) -> CartesiaClient:
    return CartesiaClient(CartesiaConfig(url, API_KEY, voice="voice-1"), session)


async def test_sentences_share_one_websocket_and_stream_pcm(fallback, session):
    fake, url = fallback
    client = cartesia(url, session)
    await client.connect()
    for text in ("Hello.", "Thank you."):
        pcm = b"".join([chunk async for chunk in client.synthesize(text, 8000)])
        # 20 ms per character at 8 kHz, 16-bit: the fake's square wave, whole.
        assert len(pcm) == 2 * 160 * len(text)
        assert abs(int.from_bytes(pcm[:2], "little", signed=True)) == FALLBACK_LEVEL
    assert fake.transcripts == ["Hello.", "Thank you."] and fake.connections == 1
    await client.close()


async def test_a_rejected_request_is_an_error(fallback, session):
    _, url = fallback
    client = cartesia(url, session)
    with pytest.raises(CartesiaError, match="bad request"):
        async for _ in client.synthesize("", 8000):
            pass
    await client.close()


async def test_a_fallback_websocket_opening_when_the_call_ends_is_closed(fallback, session):
    """The adapter connects the fallback as its call starts and closes it at the call's end;
    a call ended within milliseconds closes it while the handshake is under way."""
    fake, url = fallback
    fake.upgrade.clear()
    client = cartesia(url, session)
    connecting = asyncio.create_task(client.connect())
    await fake.asked.wait()
    await client.close()
    fake.upgrade.set()
    with pytest.raises(CartesiaError, match="call has ended"):
        await connecting
    assert fake.connections == 1 and fake.open_websockets == 0


async def test_a_sentence_asked_for_after_the_call_ended_opens_no_websocket(fallback, session):
    """A turn still under way when the call ends may fall back after the close."""
    fake, url = fallback
    client = cartesia(url, session)
    await client.close()
    with pytest.raises(CartesiaError, match="call has ended"):
        async for _ in client.synthesize("Goodbye.", 16000):
            pass
    assert fake.connections == 0
