"""The agent server: the call page, WebRTC signalling, live transcripts, call records.

Routes:
    GET  /                               the page with the Call button
    POST /api/offer                      WebRTC offer in, answer (and call id) out
    GET  /api/calls/{id}/transcript      the call's transcript as server-sent events
    GET  /api/calls/{id}                 the stored call: turns, latency parts, costs
    GET  /health                         liveness
    POST /voice/{twilio|telnyx}          the carrier's voice webhook: TwiML/TeXML to stream
    GET  /media/{twilio|telnyx}          the carrier's media-stream websocket (docs/carriers.md)
    POST /api/livekit/dispatch           {room}: the agent joins that LiveKit room

With ``SIP_PORT`` set, the server also answers SIP calls on that UDP port
(``telephony/sip/``), and its calls are served exactly like the others.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from aiohttp import web
from pipecat.transports.base_transport import BaseTransport
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from agent.call import Call, CallContext
from agent.config import Settings
from agent.models import Call as CallRow
from agent.policy import ConversationPolicy, Templates
from agent.runtime import AgentRuntime
from agent.scenarios import account_from
from telephony.line import CallInfo, LineError
from telephony.livekit import LiveKitConfig
from telephony.livekit import add_routes as add_livekit_routes
from telephony.media_stream import StartedCall, carrier_config
from telephony.media_stream import add_routes as add_carrier_routes
from telephony.sip.ua import SipCall, SipEndpoint
from telephony.webrtc import Offer, OfferError, accept, transport_for

logger = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent / "web"
CTX = web.AppKey("ctx", CallContext)
SIP = web.AppKey("sip", SipEndpoint)


@dataclass
class LiveCall:
    """A call in progress as the page sees it: transcript lines and their listeners."""

    call: Call
    lines: list[dict[str, str]] = field(default_factory=list)
    listeners: set[asyncio.Queue[dict[str, str] | None]] = field(default_factory=set)
    task: asyncio.Task[Any] | None = None

    def publish(self, speaker: str, text: str) -> None:
        line = {"speaker": speaker, "text": text}
        self.lines.append(line)
        for queue in self.listeners:
            queue.put_nowait(line)

    def close(self) -> None:
        for queue in self.listeners:
            queue.put_nowait(None)


class LiveCalls:
    """Calls this process is carrying, by id; each is dropped a while after it ends."""

    def __init__(self, keep_ended_s: float = 300.0) -> None:
        self._calls: dict[str, LiveCall] = {}
        self._keep_ended_s = keep_ended_s

    def get(self, call_id: str) -> LiveCall | None:
        return self._calls.get(call_id)

    def add(self, live: LiveCall) -> None:
        self._calls[live.call.id] = live

    def ended(self, call_id: str) -> None:
        live = self._calls.get(call_id)
        if live is not None:
            live.close()
            asyncio.get_running_loop().call_later(
                self._keep_ended_s, self._calls.pop, call_id, None
            )

    def tasks(self) -> list[asyncio.Task[Any]]:
        return [c.task for c in self._calls.values() if c.task and not c.task.done()]


CALLS = web.AppKey("calls", LiveCalls)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(WEB_DIR / "index.html")


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "calls": len(request.app[CALLS].tasks())})


async def offer(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _error(400, "the body must be JSON: {'sdp': ..., 'type': 'offer'}")
    try:
        connection, answer = await accept(Offer.from_json(body))
    except OfferError as e:
        return _error(400, str(e))

    transport = transport_for(connection, ctx.settings.audio_in_sample_rate)
    started = start_call(request.app, transport, CallInfo(path="webrtc"))
    return web.json_response({**answer, "call_id": started.call_id})


def start_call(app: web.Application, transport: BaseTransport, info: CallInfo) -> StartedCall:
    """Start a call on ``transport`` the same way whatever path carried it: the policy, the
    records, the greeting once the peer is connected, the end when the peer is gone."""
    ctx, calls = app[CTX], app[CALLS]
    # Calls are held as the demo portfolio's consumer (see agent/scenarios.py).
    policy = ConversationPolicy(account_from({}), Templates(ctx.prompts.templates), date.today())
    live: LiveCall
    call = Call(
        ctx,
        transport,
        transport_name=info.path,
        direction=info.direction,
        on_transcript=lambda s, t: live.publish(s, t),
        policy=policy,
        number=info.remote_number,
        sample_rate=info.sample_rate,
    )
    live = LiveCall(call)
    calls.add(live)

    @transport.event_handler("on_client_connected")
    async def _connected(_transport: Any, _client: Any) -> None:
        await call.answer()

    @transport.event_handler("on_client_disconnected")
    async def _disconnected(_transport: Any, _client: Any) -> None:
        await call.cancel("caller_hung_up")

    async def run() -> None:
        try:
            await call.run()
        finally:
            calls.ended(call.id)

    live.task = asyncio.create_task(run(), name=f"call-{call.id}")
    return StartedCall(call.id, live.task)


async def transcript(request: web.Request) -> web.StreamResponse:
    live = request.app[CALLS].get(request.match_info["call_id"])
    if live is None:
        return _error(404, "no live call with this id (it may have ended: see /api/calls/{id})")
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    queue: asyncio.Queue[dict[str, str] | None] = asyncio.Queue()
    for line in live.lines:
        queue.put_nowait(line)
    live.listeners.add(queue)
    try:
        async for line in _drain(queue, ended=live.task is None or live.task.done()):
            await response.write(f"data: {json.dumps(line)}\n\n".encode())
        await response.write(b"event: end\ndata: {}\n\n")
    finally:
        live.listeners.discard(queue)
    return response


async def _drain(
    queue: asyncio.Queue[dict[str, str] | None], ended: bool
) -> AsyncIterator[dict[str, str]]:
    while True:
        if ended and queue.empty():
            return
        line = await queue.get()
        if line is None:
            return
        yield line


def _call_json(row: CallRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "transport": row.transport,
        "status": row.status,
        "started_at": row.started_at.isoformat() if row.started_at else None,
        "ended_at": row.ended_at.isoformat() if row.ended_at else None,
        "duration_s": row.duration_s,
        "end_reason": row.end_reason,
        "price_book_version": row.price_book_version,
        "cost_usd": float(row.cost_usd) if row.cost_usd is not None else None,
        "cost_per_minute_usd": row.cost_per_minute_usd,
        "turns": [
            {
                "number": t.number,
                "user_text": t.user_text,
                "agent_text": t.agent_text,
                "interrupted": t.interrupted,
                "endpointing_ms": t.endpointing_ms,
                "stt_ms": t.stt_ms,
                "llm_ttft_ms": t.llm_ttft_ms,
                "tts_ttfb_ms": t.tts_ttfb_ms,
                "transport_out_ms": t.transport_out_ms,
                "response_ms": t.response_ms,
                "voice_to_voice_ms": t.voice_to_voice_ms,
            }
            for t in row.turns
        ],
        "cost_lines": [
            {
                "component": c.component,
                "quantity": c.quantity,
                "unit": c.unit,
                "amount_usd": c.amount_usd,
            }
            for c in row.cost_lines
        ],
    }


async def call_record(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    call_id = request.match_info["call_id"]

    def load() -> dict[str, Any] | None:
        with Session(ctx.engine) as session:
            row = session.scalar(
                select(CallRow)
                .where(CallRow.id == call_id)
                .options(selectinload(CallRow.turns), selectinload(CallRow.cost_lines))
            )
            return _call_json(row) if row else None

    found = await asyncio.to_thread(load)
    if found is None:
        return _error(404, f"no call {call_id!r}")
    return web.json_response(found)


async def _end_calls(app: web.Application) -> None:
    """On shutdown, end the calls in progress; each writes its end record as it goes."""
    tasks = app[CALLS].tasks()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _answer_sip(app: web.Application, line: SipCall) -> None:
    """A SIP call: pick up, hold the call as any other, hand it to a person when the
    conversation asked for one (REFER to ``TRANSFER_TARGET``), else hang up."""
    await line.answer()
    if line.state != "confirmed":
        return  # cancelled while ringing
    started = start_call(app, line.transport(), line.info)
    try:
        await started.task
        live = app[CALLS].get(started.call_id)
        target = app[CTX].settings.transfer_target
        if target and live and live.call.policy and live.call.policy.transfer_requested:
            try:
                await line.transfer(target)
            except LineError as e:
                logger.warning("call %s not transferred: %s", started.call_id, e)
    finally:
        await line.hang_up()


async def _start_sip(app: web.Application) -> None:
    settings = app[CTX].settings
    if settings.sip_port is None:
        return
    endpoint = SipEndpoint(
        settings.sip_host,
        settings.sip_port,
        on_call=lambda line: _answer_sip(app, line),
        credentials=settings.sip_credentials or None,
        allow=settings.sip_allow,
        trunk_auth=settings.sip_trunk_auth,
    )
    await endpoint.start()
    if not (settings.sip_allow or settings.sip_credentials) and not _loopback(settings.sip_host):
        logger.warning("SIP on %s answers anyone: set SIP_ALLOW or SIP_CREDENTIALS", endpoint.via)
    app[SIP] = endpoint


async def _stop_sip(app: web.Application) -> None:
    if SIP in app:
        await app[SIP].close()


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def make_app(ctx: CallContext) -> web.Application:
    app = web.Application(client_max_size=256 * 1024)
    app[CTX] = ctx
    app[CALLS] = LiveCalls()
    app.router.add_get("/", index)
    app.router.add_get("/health", health)
    app.router.add_post("/api/offer", offer)
    app.router.add_get("/api/calls/{call_id}/transcript", transcript)
    app.router.add_get("/api/calls/{call_id}", call_record)
    app.router.add_static("/static", WEB_DIR)
    add_carrier_routes(app, carrier_config(ctx.settings), lambda t, i: start_call(app, t, i))
    add_livekit_routes(
        app,
        LiveKitConfig.from_settings(ctx.settings),
        ctx.settings.audio_in_sample_rate,
        lambda t, i: start_call(app, t, i),
    )
    app.on_startup.append(_start_sip)
    app.on_shutdown.append(_end_calls)
    app.on_cleanup.append(_stop_sip)
    return app


async def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Run the server until interrupted; calls in progress are ended and recorded."""
    host, port = host or settings.host, port or settings.port
    async with AgentRuntime(settings) as ctx:
        app = make_app(ctx)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        logger.info("agent ready: open http://%s:%d/ and press Call", host, port)
        if SIP in app:
            logger.info("SIP calls: sip:agent@%s:%d", app[SIP].host, app[SIP].port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            await stop.wait()
            logger.info("stopping: ending calls in progress")
        finally:
            await runner.cleanup()
