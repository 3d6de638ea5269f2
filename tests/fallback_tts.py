"""A local fake of Cartesia's TTS websocket (test helper only).

It speaks the wire format of Cartesia's ``/tts/websocket`` as pipecat's client
and ``agent.pipeline.cartesia`` use it: a JSON generation request per
``context_id``; ``chunk`` messages with base64 PCM at the requested rate, then
``done``; ``error`` for a request it rejects. The audio is real PCM: a square
wave of ``FALLBACK_LEVEL`` whose length grows with the text, so a test can tell
the fallback's voice from the primary's and see that every sentence came once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator

from aiohttp import WSMsgType, web

FALLBACK_LEVEL = 7000
API_KEY = "test-key"


def fallback_pcm(text: str, sample_rate: int) -> bytes:
    """20 ms of square wave per character of ``text``, s16le."""
    period = max(2, sample_rate // 200)
    n = sample_rate // 50 * len(text)
    wave = [FALLBACK_LEVEL if (i // (period // 2)) % 2 == 0 else -FALLBACK_LEVEL for i in range(n)]
    return b"".join(v.to_bytes(2, "little", signed=True) for v in wave)


class FakeCartesia:
    """The fake server; ``transcripts`` lists every text it was asked to speak."""

    def __init__(self) -> None:
        self.transcripts: list[str] = []
        self.connections = 0
        #: Set when a connection is asked for; while ``upgrade`` is clear, it waits there.
        self.asked = asyncio.Event()
        self.upgrade = asyncio.Event()
        self.upgrade.set()
        self._websockets: list[web.WebSocketResponse] = []
        self.app = web.Application()
        self.app.router.add_get("/tts/websocket", self._websocket)

    @property
    def open_websockets(self) -> int:
        return sum(not ws.closed for ws in self._websockets)

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        if request.headers.get("X-API-Key") != API_KEY:
            raise web.HTTPUnauthorized(text="invalid API key")
        self.asked.set()
        await self.upgrade.wait()
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self._websockets.append(ws)
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                break
            msg = json.loads(message.data)
            context_id = msg.get("context_id", "")
            if msg.get("cancel"):
                continue
            transcript = msg.get("transcript")
            fmt = msg.get("output_format", {})
            if not transcript or fmt.get("encoding") != "pcm_s16le":
                error = {"type": "error", "context_id": context_id, "done": True}
                await ws.send_str(json.dumps({**error, "error": "bad request", "status_code": 400}))
                continue
            self.transcripts.append(transcript)
            pcm = fallback_pcm(transcript, int(fmt["sample_rate"]))
            for i in range(0, len(pcm), 3200):
                chunk = base64.b64encode(pcm[i : i + 3200]).decode()
                await ws.send_str(
                    json.dumps(
                        {
                            "type": "chunk",
                            "context_id": context_id,
                            "data": chunk,
                            "done": False,
                            "status_code": 206,
                        }
                    )
                )
            done = {"type": "done", "context_id": context_id, "done": True, "status_code": 200}
            await ws.send_str(json.dumps(done))
        return ws


@contextlib.asynccontextmanager
async def fake_cartesia() -> AsyncIterator[tuple[FakeCartesia, str]]:
    """A ``FakeCartesia`` on a loopback port, and its websocket URL."""
    fake = FakeCartesia()
    runner = web.AppRunner(fake.app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield fake, f"ws://127.0.0.1:{runner.addresses[0][1]}/tts/websocket"
    finally:
        await runner.cleanup()
