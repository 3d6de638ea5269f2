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
    POST /api/campaigns                  a campaign CSV: dial it through SIP_TRUNK (docs/dialing.md)
    GET  /api/campaigns/{id}             the campaign's attempts so far and its tallies

With ``SIP_PORT`` set, the server also answers SIP calls on that UDP port
(``telephony/sip/``), and its calls are served exactly like the others.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web
from pipecat.transports.base_transport import BaseTransport
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from agent.call import Call, CallContext
from agent.config import Settings
from agent.console.audit import audit
from agent.console.auth import require_role, setup_auth
from agent.console.dashboard import add_dashboard
from agent.console.pages import add_console_pages
from agent.dialer import (
    DEFAULT_CONCURRENCY,
    DEFAULT_RATE_PER_S,
    CampaignError,
    CampaignReport,
    Conversation,
    Dialer,
    read_campaign,
)
from agent.metrics import add_metrics, observe_call
from agent.models import Call as CallRow
from agent.models import Role
from agent.policy import Account, ConversationPolicy, Templates
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
    #: What the caller's own page shows to follow its live transcript without a login.
    caller_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))

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
    live = request.app[CALLS].get(started.call_id)
    assert live is not None
    return web.json_response(
        {**answer, "call_id": started.call_id, "transcript_token": live.caller_token}
    )


def start_call(
    app: web.Application,
    transport: BaseTransport,
    info: CallInfo,
    account: Account | None = None,
) -> StartedCall:
    """Start a call on ``transport`` the same way whatever path carried it: the policy, the
    records, the greeting once the peer is connected, the end when the peer is gone."""
    ctx, calls = app[CTX], app[CALLS]
    # Outbound calls are about their debt; others are held as the demo portfolio's
    # consumer (see agent/scenarios.py).
    account = account or account_from({})
    policy = ConversationPolicy(account, Templates(ctx.prompts.templates), date.today())
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
            observe_call(app, await call.run())
        finally:
            calls.ended(call.id)

    live.task = asyncio.create_task(run(), name=f"call-{call.id}")
    return StartedCall(call.id, live.task)


async def transcript(request: web.Request) -> web.StreamResponse:
    """The live transcript: for the caller's own page (its ``?token=``), or for the console."""
    live = request.app[CALLS].get(request.match_info["call_id"])
    token = request.query.get("token", "")
    if live is not None and token and secrets.compare_digest(token, live.caller_token):
        return await _stream_transcript(request, live)
    return await _console_transcript(request)


@require_role(Role.OPERATOR, Role.OWNER)
async def _console_transcript(request: web.Request) -> web.StreamResponse:
    call_id = request.match_info["call_id"]
    live = request.app[CALLS].get(call_id)
    if live is None:
        return _error(404, "no live call with this id (it may have ended: see /api/calls/{id})")
    await audit(request, "view_transcript", call_id)
    return await _stream_transcript(request, live)


async def _stream_transcript(request: web.Request, live: LiveCall) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
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


@require_role(Role.OPERATOR, Role.OWNER)
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
    await audit(request, "view_call", call_id)
    return web.json_response(found)


async def _end_calls(app: web.Application) -> None:
    """On shutdown, end the calls in progress; each writes its end record as it goes."""
    tasks = app[CALLS].tasks()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _answer_sip(app: web.Application, line: SipCall) -> None:
    """An inbound SIP call: pick up, then hold it as any other."""
    await line.answer()
    if line.state == "confirmed":  # not cancelled while ringing
        await converse(app, line)


async def converse(
    app: web.Application, line: SipCall, account: Account | None = None
) -> Conversation:
    """Hold the conversation on an answered SIP call (about ``account``'s debt when it is an
    outbound one, ``agent.dialer``); hand the caller to a person when the conversation asked
    for one (REFER to ``TRANSFER_TARGET``), else hang up when it is over."""
    started = start_call(app, line.transport(), line.info, account)
    live = app[CALLS].get(started.call_id)
    assert live is not None  # start_call registered it
    policy = live.call.policy
    try:
        await started.task
        target = app[CTX].settings.transfer_target
        if target and policy and policy.transfer_requested:
            try:
                await line.transfer(target)
            except LineError as e:
                logger.warning("call %s not transferred: %s", started.call_id, e)
    finally:
        await line.hang_up()
    disposition = policy.disposition if policy else None
    try:
        # An attempt links the call's row, so the row must be written first.
        await app[CTX].writer.flush(timeout=10)
    except (TimeoutError, RuntimeError) as e:
        logger.warning("call %s not stored yet (%s): its attempt won't link it", started.call_id, e)
        return Conversation(None, disposition)
    return Conversation(started.call_id, disposition)


@dataclass
class CampaignRun:
    """A campaign this server dials or has dialed: its report so far and the task dialing it."""

    report: CampaignReport
    task: asyncio.Task[CampaignReport]


CAMPAIGNS = web.AppKey("campaigns", dict[str, CampaignRun])


async def create_campaign(request: web.Request) -> web.Response:
    """A campaign CSV in the body (docs/dialing.md); ``?rate=`` and ``?concurrency=``."""
    app, ctx = request.app, request.app[CTX]
    trunk = ctx.settings.sip_trunk
    if SIP not in app:
        return _error(503, "outbound dialing needs the SIP endpoint: set SIP_PORT and SIP_TRUNK")
    if trunk is None:
        return _error(503, "no trunk to dial through: set SIP_TRUNK (sip:host:port)")
    try:
        rate = float(request.query.get("rate", DEFAULT_RATE_PER_S))
        concurrency = int(request.query.get("concurrency", DEFAULT_CONCURRENCY))
    except ValueError:
        return _error(400, "rate must be a number (calls a second), concurrency a whole number")
    try:
        dialer = Dialer(
            ctx.engine,
            app[SIP],
            trunk,
            converse=partial(converse, app),
            rate_per_s=rate,
            concurrency=concurrency,
        )
    except ValueError as e:
        return _error(400, str(e))
    try:
        text = (await request.read()).decode("utf-8")
        campaign = await asyncio.to_thread(read_campaign, ctx.engine, text, "the request body")
    except UnicodeDecodeError:
        return _error(400, "the body must be a campaign CSV in UTF-8 (docs/dialing.md)")
    except CampaignError as e:
        rejected = [{"line": r.line, "reasons": list(r.reasons)} for r in e.rejected]
        return web.json_response({"error": str(e), "rejected": rejected}, status=400)
    campaign_id = secrets.token_hex(8)
    report = CampaignReport(f"campaign {campaign_id}", len(campaign.entries))
    task = asyncio.create_task(dialer.run(campaign, report), name=f"campaign-{campaign_id}")
    app[CAMPAIGNS][campaign_id] = CampaignRun(report, task)
    url = f"/api/campaigns/{campaign_id}"
    return web.json_response(
        {"id": campaign_id, "entries": len(campaign.entries), "url": url}, status=202
    )


async def campaign_progress(request: web.Request) -> web.Response:
    campaign_id = request.match_info["campaign_id"]
    run = request.app[CAMPAIGNS].get(campaign_id)
    if run is None:
        return _error(404, f"no campaign {campaign_id!r} on this server")
    return web.json_response({"id": campaign_id, **run.report.to_json()})


async def _stop_campaigns(app: web.Application) -> None:
    """On shutdown, stop dialing first, so that no new call starts while calls are ended."""
    tasks = [run.task for run in app[CAMPAIGNS].values() if not run.task.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


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
    app[CAMPAIGNS] = {}
    setup_auth(app, ctx.engine, secure_cookies=ctx.settings.secure_cookies)
    add_dashboard(app, ctx.price_book.target_usd_per_minute)
    add_metrics(app)
    add_console_pages(app)
    app.router.add_get("/", index)
    app.router.add_get("/health", health)
    app.router.add_post("/api/offer", offer)
    app.router.add_get("/api/calls/{call_id}/transcript", transcript)
    app.router.add_get("/api/calls/{call_id}", call_record)
    app.router.add_post("/api/campaigns", create_campaign)
    app.router.add_get("/api/campaigns/{campaign_id}", campaign_progress)
    app.router.add_static("/static", WEB_DIR)
    add_carrier_routes(app, carrier_config(ctx.settings), lambda t, i: start_call(app, t, i))
    add_livekit_routes(
        app,
        LiveKitConfig.from_settings(ctx.settings),
        ctx.settings.audio_in_sample_rate,
        lambda t, i: start_call(app, t, i),
    )
    app.on_startup.append(_start_sip)
    app.on_shutdown.append(_stop_campaigns)
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
