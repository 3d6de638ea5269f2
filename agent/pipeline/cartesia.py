"""Cartesia's websocket streaming TTS: the proprietary voice the TTS fallback adapter uses.

Why not pipecat's ``CartesiaTTSService``: it is a pipeline processor that owns
its audio contexts and pushes frames downstream from its own receive loop, so
it cannot be asked for one sentence's audio and then be told to keep quiet
while the self-hosted TTS still owns it. The adapter (``agent.pipeline.tts_fallback``)
needs a plain "text in, PCM out" call on a websocket that is already open
(its ``FallbackTTS``), which is this client: one
generation request per sentence, multiplexed by ``context_id`` on one
long-lived connection, in the wire format pipecat's client also speaks
(``transcript``/``context_id``/``output_format`` out; ``chunk``, ``done`` and
``error`` messages back; Cartesia's API docs, "TTS websocket").
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

import aiohttp

logger = logging.getLogger(__name__)

#: The API version this client is written against (the one pipecat 1.14's client sends).
CARTESIA_VERSION = "2026-03-01"
CARTESIA_MODEL = "sonic-3.6"


class CartesiaError(RuntimeError):
    """Cartesia could not speak a sentence (unreachable, refused, or an error message)."""


@dataclass(frozen=True)
class CartesiaConfig:
    """How to reach Cartesia; the API key comes from the environment only."""

    url: str
    api_key: str = field(repr=False)
    voice: str
    model: str = CARTESIA_MODEL
    language: str = "en"


class CartesiaClient:
    """One websocket to Cartesia, opened ahead of need and reopened when it drops."""

    #: The voice's name in the adapter's events and logs.
    name = "cartesia"

    def __init__(self, config: CartesiaConfig, session: aiohttp.ClientSession) -> None:
        self._config = config
        self._session = session
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._lock = asyncio.Lock()
        #: Set when the call ends: nothing opens a websocket from then on.
        self._closed = False

    async def connect(self) -> None:
        """Open the websocket now, so the first fallback does not pay the handshake."""
        async with self._lock:
            await self._open()

    async def _open(self) -> aiohttp.ClientWebSocketResponse:
        if self._closed:
            raise CartesiaError("closed: the call has ended")
        if self._ws is not None and not self._ws.closed:
            return self._ws
        headers = {"X-API-Key": self._config.api_key, "Cartesia-Version": CARTESIA_VERSION}
        try:
            ws = await self._session.ws_connect(self._config.url, headers=headers)
        except (aiohttp.ClientError, OSError) as e:
            raise CartesiaError(f"cannot connect to {self._config.url}: {e}") from e
        if self._closed:  # the call ended while this was connecting: nobody else closes it
            await ws.close()
            raise CartesiaError("closed: the call has ended")
        self._ws = ws
        return ws

    async def synthesize(self, text: str, sample_rate: int) -> AsyncGenerator[bytes, None]:
        """PCM s16le mono at ``sample_rate`` for ``text``, chunk by chunk as it streams."""
        async with self._lock:
            ws = await self._open()
            context_id = uuid.uuid4().hex
            request = {
                "model_id": self._config.model,
                "transcript": text,
                "voice": {"mode": "id", "id": self._config.voice},
                "language": self._config.language,
                "context_id": context_id,
                "continue": False,
                "output_format": {
                    "container": "raw",
                    "encoding": "pcm_s16le",
                    "sample_rate": sample_rate,
                },
                "add_timestamps": False,
            }
            done = False
            try:
                await ws.send_str(json.dumps(request))
                async for message in ws:
                    if message.type != aiohttp.WSMsgType.TEXT:
                        break
                    msg = json.loads(message.data)
                    if msg.get("context_id") != context_id:
                        continue
                    kind = msg.get("type")
                    if kind == "chunk":
                        yield base64.b64decode(msg["data"])
                    elif kind == "done":
                        done = True
                        return
                    elif kind == "error":
                        done = True
                        raise CartesiaError(f"Cartesia error: {msg.get('error', msg)}")
                raise CartesiaError(f"Cartesia closed the websocket ({ws.close_code})")
            except (aiohttp.ClientError, OSError, ValueError, KeyError) as e:
                raise CartesiaError(f"Cartesia stream failed: {e}") from e
            finally:
                if not done and not ws.closed:
                    # Abandoned mid-sentence (interrupted): stop the generation, keep the socket.
                    cancel = {"context_id": context_id, "cancel": True}
                    try:
                        await asyncio.shield(ws.send_str(json.dumps(cancel)))
                    except (aiohttp.ClientError, OSError, RuntimeError):
                        await ws.close()

    async def close(self) -> None:
        """Close the websocket for good: one still connecting is closed when it opens, and
        a sentence asked for later (a turn under way at the call's end) opens none."""
        self._closed = True
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()
