"""What one agent process sets up once and every call shares.

The database is migrated and its writer started, calls left ``active`` by a
process that died are marked, the model servers are found (or, with no URLs
configured, the embedded CPU servers are started), the end-of-turn model's
process is started (``agent.pipeline.smart_turn``) and the price book and prompts are
loaded. The server, the simulator and the benchmark all start here.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from contextlib import AsyncExitStack
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from agent.config import ConfigError, Settings, hide_password
from agent.conversation.prompts import PromptSet
from agent.ledger.pricebook import PriceBook
from agent.pipeline import smart_turn
from agent.pipeline.breaker import CircuitBreaker
from agent.pipeline.call import CallContext, ModelEndpoints
from agent.pipeline.http_pools import ServiceSessions
from agent.runtime.embedded import ModelServers
from agent.store.database import StoreWriter, create_engine_for, mark_abandoned_calls, upgrade
from telephony.rtp.sender import SENDER

logger = logging.getLogger(__name__)


def health_url(service_url: str) -> str:
    """``/health`` on the host and port of a model server's URL (ws or http)."""
    parts = urlsplit(service_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "/health", "", ""))


async def _describe(session: aiohttp.ClientSession, url: str, key: str) -> str | None:
    """The model or voice name a server reports on its health route, if it does."""
    try:
        async with session.get(health_url(url), timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status == 200:
                value = (await r.json()).get(key)
                return str(value) if value is not None else None
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        logger.warning("could not read %s from %s: %s", key, hide_password(health_url(url)), e)
    return None


def load_assets(settings: Settings) -> tuple[PromptSet, PriceBook]:
    """The prompts and the price book the settings name, the price profile checked: a
    ``ConfigError`` naming the variable now rather than a failed price at the first call's end.
    """
    try:
        prompts = PromptSet.load(settings.prompt_version)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"PROMPT_VERSION: {exc}") from exc
    try:
        price_book = PriceBook.load(settings.price_book)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"PRICE_BOOK: {exc}") from exc
    try:
        price_book.profile(settings.price_profile)
    except ValueError as exc:
        raise ConfigError(f"PRICE_PROFILE: {exc}") from exc
    return prompts, price_book


class AgentRuntime:
    """Async context manager that yields the ``CallContext`` of this process."""

    def __init__(self, settings: Settings, *, stub_models: bool = False) -> None:
        self.settings = settings
        self._stub_models = stub_models
        self._stack = AsyncExitStack()
        self.writer: StoreWriter | None = None

    async def __aenter__(self) -> CallContext:
        settings = self.settings
        try:
            return await self._start(settings)
        except BaseException:
            await self._stack.aclose()
            raise

    async def _start(self, settings: Settings) -> CallContext:
        prompts, price_book = load_assets(settings)
        await asyncio.to_thread(upgrade, settings.database_url)
        engine = create_engine_for(settings.database_url)
        self._stack.callback(engine.dispose)
        abandoned = await asyncio.to_thread(mark_abandoned_calls, engine, settings.worker_id)
        if abandoned:
            logger.warning("marked %d call(s) of an earlier process as abnormal", abandoned)
        writer = StoreWriter(engine)
        writer.start()
        self.writer = writer
        self._stack.callback(writer.stop, 10.0)

        # What the settings leave to this process: the models with no URL (or the stub), the
        # smart-turn service with no SMART_TURN_URL (``serve --workers`` gives its workers one).
        servers = await ModelServers.for_settings(settings, stub=self._stub_models)
        self._stack.push_async_callback(servers.stop)
        urls = (servers.stt_url, servers.llm_url, servers.tts_url)
        assert servers.smart_turn_url is not None

        sessions = ServiceSessions()
        self._stack.push_async_callback(sessions.close)
        stt_model = await _describe(sessions.session("stt"), urls[0], "model")
        tts_voice = await _describe(sessions.session("tts"), urls[2], "voice")
        models = ModelEndpoints(*urls, stt_model=stt_model, tts_voice=tts_voice)
        logger.info(
            "models: STT %s, LLM %s, TTS %s, smart-turn %s",
            *map(hide_password, (*urls, servers.smart_turn_url)),
        )
        deadline = smart_turn.deadline_for(settings.turn_fallback_secs, settings.vad_stop_secs)
        client = smart_turn.SmartTurnClient(servers.smart_turn_url, deadline)
        self._stack.callback(client.close)
        # A connection to it open before the first call's first turn.
        await asyncio.to_thread(smart_turn.warm_up, client, settings.audio_in_sample_rate)
        if settings.sip_port is not None or settings.sip_trunk:
            # The RTP sender's process, up before the first call's first packet is due.
            await asyncio.to_thread(SENDER.start)
        # What is built by now (modules, models' clients, the app) lives as long as the
        # process: the cyclic collector need not walk it again. A full collection then
        # walks the calls' objects only: ~20 ms with twenty calls instead of ~130 ms,
        # every millisecond of it holding the interpreter (bench capacity).
        gc.collect()
        gc.freeze()
        breaker = None
        if settings.tts_fallback != "none":
            breaker = CircuitBreaker(
                threshold=settings.tts_fallback_breaker_failures,
                probe_interval_s=settings.tts_fallback_probe_s,
            )
            self._stack.push_async_callback(breaker.close)
        return CallContext(
            settings,
            models,
            sessions,
            writer,
            price_book,
            prompts,
            engine,
            smart_turn=client,
            tts_breaker=breaker,
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.writer is not None:
            try:
                await self.writer.flush(timeout=10)
            except (TimeoutError, RuntimeError) as e:
                logger.warning("store not flushed at exit: %s", e)
        await self._stack.aclose()
