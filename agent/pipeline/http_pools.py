"""One long-lived, pooled HTTP session per model service for the whole process.

A new TCP (and TLS) connection per request or per call costs more than the
whole TTS budget (the reference talk took one TTS from >500 ms to <250 ms by
pooling), so every call in a process shares these sessions and their
keep-alive connections.
"""

from __future__ import annotations

import aiohttp
from openai import AsyncOpenAI, DefaultAioHttpClient

SERVICES = ("stt", "llm", "tts")


class ServiceSessions:
    """The process's HTTP sessions, keyed by service; created on first use."""

    def __init__(self, *, limit_per_host: int = 0, keepalive_s: float = 300.0) -> None:
        self._limit_per_host = limit_per_host
        self._keepalive_s = keepalive_s
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._openai: dict[tuple[str, str], AsyncOpenAI] = {}

    def session(self, service: str) -> aiohttp.ClientSession:
        """The pooled aiohttp session of ``service`` (one of ``SERVICES``)."""
        if service not in SERVICES:
            raise ValueError(f"unknown service {service!r}; expected one of {SERVICES}")
        session = self._sessions.get(service)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=0,
                limit_per_host=self._limit_per_host,
                keepalive_timeout=self._keepalive_s,
            )
            session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=5)
            )
            self._sessions[service] = session
        return session

    def openai_client(self, base_url: str, api_key: str) -> AsyncOpenAI:
        """An OpenAI-compatible client on a pooled aiohttp transport, shared by all calls."""
        key = (base_url, api_key)
        client = self._openai.get(key)
        if client is None:
            client = AsyncOpenAI(
                base_url=base_url, api_key=api_key, http_client=DefaultAioHttpClient()
            )
            self._openai[key] = client
        return client

    async def close(self) -> None:
        for client in self._openai.values():
            await client.close()
        for session in self._sessions.values():
            await session.close()
        self._openai.clear()
        self._sessions.clear()
