"""The agent server: the call page, WebRTC signalling, live transcripts, call records.

Routes:
    GET  /                               the page with the Call button
    POST /api/offer                      WebRTC offer in, answer (and call id) out
    GET  /api/calls/{id}/transcript      the call's transcript as server-sent events
    GET  /api/calls/{id}                 the stored call: turns, latency parts, costs
    GET  /api/calls/{id}/recording       its stereo recording (WAV, range requests)
    GET  /ready, POST /drain             readiness with capacity; stop taking calls
    GET  /health                         liveness
    POST /voice/{twilio|telnyx}          the carrier's voice webhook: TwiML/TeXML to stream
    GET  /media/{twilio|telnyx}/{token}  the carrier's media-stream websocket (docs/carriers.md)
    POST /api/livekit/dispatch           {room}: the agent joins that LiveKit room
    POST /api/campaigns                  a campaign CSV: dial it through SIP_TRUNK (docs/dialing.md)
    GET  /api/campaigns/{id}             the campaign's attempts so far and its tallies

Each route declares who may use it (``agent.access``: anyone, the caller's own call token,
a console role with CSRF, an API token's scope, a carrier's signature, the worker's own
host), and the app refuses to start with a route that declares no one.

With ``SIP_PORT`` set, the server also answers SIP calls on that UDP port
(``telephony/sip/``), and its calls are served exactly like the others.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import logging
import secrets
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from pipecat.transports.base_transport import BaseTransport
from sqlalchemy.orm import Session

from agent.access import Anonymous, Loopback, Refusal, check_routes, guard, is_loopback, refuse
from agent.campaigns.contact_rules import masked
from agent.campaigns.dialer import (
    DEFAULT_CONCURRENCY,
    DEFAULT_RATE_PER_S,
    CampaignError,
    CampaignReport,
    Conversation,
    Dialer,
    read_campaign,
)
from agent.campaigns.portfolio import UNMATCHED_CALLER, CallerMatch, match_caller
from agent.config import Settings
from agent.console.admin import add_admin_pages
from agent.console.api import add_api
from agent.console.audit import audit
from agent.console.auth import Roles, setup_auth
from agent.console.context import current_user
from agent.console.dashboard import add_dashboard
from agent.console.kpis import Provisioning
from agent.console.live import add_live_calls
from agent.console.pages import add_console_pages
from agent.console.recordings import add_recording_routes
from agent.console.tokens import Token
from agent.conversation.account import Account
from agent.conversation.policy import ConversationPolicy
from agent.conversation.replies import Templates
from agent.pipeline.call import Call, CallContext
from agent.pipeline.live_calls import CALLS, LiveCall, LiveCalls, Reservation
from agent.runtime.context import AgentRuntime
from agent.server.carriers import (
    StartedCall,
    add_carrier_routes,
    add_livekit_routes,
    carrier_config,
    livekit_config,
)
from agent.server.hygiene import add_security
from agent.server.metrics import add_metrics, observe_call
from agent.store.tables import Role
from telephony.carriers.webrtc import Offer, OfferError, accept, transport_for
from telephony.line import CallInfo, LineBusy, LineError
from telephony.rtp.session import RtpSession
from telephony.sip.call import SipCall
from telephony.sip.session_timer import SESSION_EXPIRED, SessionTimers
from telephony.sip.ua import SipEndpoint

logger = logging.getLogger(__name__)

#: The paths whose line can hand a caller to ``TRANSFER_TARGET`` (a SIP REFER).
TRANSFERRING_PATHS = frozenset({"sip"})

WEB_DIR = Path(__file__).resolve().parent / "web"
CTX = web.AppKey("ctx", CallContext)
SIP = web.AppKey("sip", SipEndpoint)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@guard(Anonymous("the call page: anyone may call the agent"))
async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(WEB_DIR / "index.html")


@guard(Anonymous("liveness probe: a count, nothing else"))
async def health(request: web.Request) -> web.Response:
    """Liveness: the process answers (whether or not it takes calls)."""
    return web.json_response({"status": "ok", "calls": request.app[CALLS].active})


@guard(Anonymous("readiness probe: calls and capacity, for the edge and the autoscaler"))
async def ready(request: web.Request) -> web.Response:
    """Readiness: 200 while this worker takes calls, 503 when it is full or draining; the
    body says how many it carries of how many it may (for the autoscaler and the edge)."""
    calls = request.app[CALLS]
    body = {"calls": calls.active, "capacity": calls.capacity, "draining": calls.draining}
    return web.json_response(body, status=200 if calls.accepting else 503)


@guard(Loopback())
async def drain(request: web.Request) -> web.Response:
    """Stop taking calls and answer once those in progress have ended, or after
    ``DRAIN_TIMEOUT_S`` (a pod's preStop hook; only from the worker's own host)."""
    app = request.app
    await _stop_campaigns(app)
    left = await app[CALLS].drain(app[CTX].settings.drain_timeout_s)
    return web.json_response({"drained": left == 0, "calls": left})


def _busy(e: LineBusy) -> web.Response:
    response = _error(503, str(e))
    response.headers["Retry-After"] = str(e.retry_after_s)
    return response


@guard(Anonymous("the call page's offer: limited per address and in total"))
async def offer(request: web.Request) -> web.Response:
    ctx, calls = request.app[CTX], request.app[CALLS]
    address = request.remote or "unknown"
    per_address = ctx.settings.call_page_calls_per_address
    if calls.page_calls(address) >= per_address:
        response = _error(429, f"this address already has {per_address} calls in progress")
        response.headers["Retry-After"] = str(LineBusy.retry_after_s)
        return response
    try:
        if calls.page_calls() >= ctx.settings.call_page_max_calls:
            raise LineBusy("the call page carries all the calls it may now: try again later")
        reservation = calls.reserve(page_address=address)
    except LineBusy as e:
        return _busy(e)
    with reservation:
        return await _answer_offer(request, reservation)


async def _answer_offer(request: web.Request, reservation: Reservation) -> web.Response:
    ctx, calls = request.app[CTX], request.app[CALLS]
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _error(400, "the body must be JSON: {'sdp': ..., 'type': 'offer'}")
    try:
        connection, answer = await accept(Offer.from_json(body))
    except OfferError as e:
        return _error(400, str(e))

    transport = transport_for(connection, ctx.settings.audio_in_sample_rate)
    started = start_call(request.app, transport, CallInfo(path="webrtc"), reservation=reservation)
    live = calls.get(started.call_id)
    assert live is not None
    # However the call ends (the peer left, never connected, a limit), the peer connection
    # and its ports go with it.
    started.task.add_done_callback(lambda _: asyncio.ensure_future(connection.disconnect()))
    return web.json_response(
        {**answer, "call_id": started.call_id, "transcript_token": live.caller_token}
    )


def start_call(
    app: web.Application,
    transport: BaseTransport,
    info: CallInfo,
    account: Account | None = None,
    reservation: Reservation | None = None,
) -> StartedCall:
    """Start a call on ``transport`` the same way whatever path carried it: the policy, the
    records, the greeting once the peer is connected, the end when the peer is gone.

    The call takes the place ``reservation`` holds for it (taken when it was offered, before
    it was answered); without one it takes a place now (``LineBusy`` when there is none)."""
    ctx, calls = app[CTX], app[CALLS]
    with reservation or calls.reserve() as place:
        number = info.remote_number
        if account is None:
            account, number = inbound_account(ctx, info)
        # The policy reads "tonight" in the consumer's zone, on its own clock.
        policy = ConversationPolicy(
            account,
            Templates(ctx.prompts.templates),
            transfer_available=ctx.settings.transfer_target is not None
            and info.path in TRANSFERRING_PATHS,
        )
        live: LiveCall
        call = Call(
            ctx,
            transport,
            transport_name=info.path,
            direction=info.direction,
            on_transcript=lambda s, t: live.publish(s, t),
            policy=policy,
            number=number,
            campaign=info.campaign,
            sample_rate=info.sample_rate,
        )
        live = LiveCall(call)
        calls.add(live, place)

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


def inbound_account(ctx: CallContext, info: CallInfo) -> tuple[Account, str | None]:
    """Whom a call not placed about a debt is about, and the caller's number (E.164 when
    it reads as one).

    The caller's number is looked up in the portfolio (``match_caller``): on file for
    one consumer with one open debt, the call is about that debt, and the policy
    verifies the person before it says anything of it; the conversation then counts
    for the gate like an outbound one (D2 starts, signals are honoured). Otherwise
    the call is about no debt (nothing to verify against, nothing disclosed), except
    on the embedded CPU models (the laptop demo, the call page), where it is held as
    the demo portfolio's consumer (agent/conversation/scenarios.py). docs/dialing.md.
    """
    try:
        with Session(ctx.engine) as session:
            match = match_caller(session, info.remote_number)
    except Exception:
        logger.exception("inbound call: the portfolio could not be searched for the caller")
        match = CallerMatch(None, "the portfolio could not be searched")
    number = match.number or info.remote_number
    if match.account is not None:
        logger.info("inbound call from %s: %s", masked(number or ""), match.reason)
        return match.account, number
    demo = ctx.settings.embedded_models
    logger.info(
        "inbound call%s: %s; held as %s",
        f" from {masked(number)}" if number else "",
        match.reason,
        "the demo account" if demo else "about no debt",
    )
    return (Account.demo() if demo else UNMATCHED_CALLER), number


@dataclass(frozen=True)
class CallerToken:
    """The caller's own page: the ``?token=`` its offer was answered with, for its call."""

    name: str = "the caller's own call token"

    async def check(self, request: web.Request) -> Refusal | None:
        live = request.app[CALLS].get(request.match_info.get("call_id", ""))
        token = request.query.get("token", "")
        if live is not None and token and secrets.compare_digest(token, live.caller_token):
            return None
        return refuse(401, "a wrong or expired call token", presented=bool(token))


@guard(CallerToken(), Roles(Role.OPERATOR, Role.OWNER))
async def transcript(request: web.Request) -> web.StreamResponse:
    """The live transcript: for the caller's own page (its ``?token=``), or for the console
    (audited)."""
    call_id = request.match_info["call_id"]
    live = request.app[CALLS].get(call_id)
    if live is None:
        return _error(404, "no live call with this id (it may have ended: see /api/calls/{id})")
    if current_user(request) is not None:
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


#: How long a call ended at shutdown may take to write its end; then its task is cancelled.
END_TIMEOUT_S = 10.0


async def _end_calls(app: web.Application) -> None:
    """On shutdown, end the calls in progress (``server_stopped``); each writes its end record
    as it goes."""
    calls = app[CALLS]
    await asyncio.gather(*(live.call.cancel("server_stopped") for live in calls.in_progress()))
    tasks = calls.tasks()
    _, late = await asyncio.wait(tasks, timeout=END_TIMEOUT_S) if tasks else (set(), set())
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)


def _take_sip(app: web.Application, line: SipCall) -> Awaitable[None]:
    """An inbound SIP call, before it rings: a place among this worker's calls, else
    ``LineBusy`` (the UA answers 503 with Retry-After and never rings); then it is answered
    in that place."""
    return _answer_sip(app, line, app[CALLS].reserve())


async def _answer_sip(app: web.Application, line: SipCall, reservation: Reservation) -> None:
    """Pick up and hold the call as any other; its place is freed however it goes (cancelled
    while ringing, our answer never acknowledged, an error, the call's end). A call the caller
    acknowledged is recorded even when its BYE came with the ACK: it took place."""
    with reservation:
        await line.answer()
        if line.answered:
            await converse(app, line, reservation=reservation)


async def converse(
    app: web.Application,
    line: SipCall,
    account: Account | None = None,
    reservation: Reservation | None = None,
) -> Conversation:
    """Hold the conversation on an answered SIP call (about ``account``'s debt when it is an
    outbound one, ``agent.campaigns.dialer``); hand the caller to a person when the conversation
    asked for one (REFER to ``TRANSFER_TARGET``), else hang up when it is over, or when the
    caller's RTP stopped (``RTP_TIMEOUT_S``: its network is gone) or its SIP session was not
    refreshed in time (RFC 4028, ``session_expired``). An inbound call brings
    the place reserved for it before it rang; an outbound one takes a place now."""
    transport = line.transport()
    started = start_call(app, transport, line.info, account, reservation)
    live = app[CALLS].get(started.call_id)
    assert live is not None  # start_call registered it
    call = live.call

    @transport.event_handler("on_media_timeout")
    async def _media_timeout(_transport: Any, _session: Any) -> None:
        await call.cancel("media_timeout")

    line.on_session_expired = partial(call.cancel, SESSION_EXPIRED)  # RFC 4028: peer gone

    policy = call.policy
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


#: The fastest a campaign may dial, whatever it asks: a trunk's usual calls-per-second limit.
MAX_CAMPAIGN_RATE_PER_S = 5.0
#: What a campaign body may be (docs/dialing.md); anything else, a cross-site form's
#: ``text/plain`` included, is refused before it is read.
CAMPAIGN_TYPES = ("text/csv", "application/json")


@guard(Token("campaigns:write"), Roles(Role.OWNER))
async def create_campaign(request: web.Request) -> web.Response:
    """A campaign in the body, as CSV (``text/csv``) or JSON (``application/json``:
    ``{"entries": [{"account_ref": ..., "number": ...}]}``), docs/dialing.md;
    ``?rate=`` (calls a second) and ``?concurrency=`` (calls at once, at most the
    worker's capacity)."""
    app, ctx = request.app, request.app[CTX]
    if request.content_type not in CAMPAIGN_TYPES:
        return _error(415, "a campaign is text/csv or application/json (docs/dialing.md)")
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
    if not 0 < rate <= MAX_CAMPAIGN_RATE_PER_S:
        return _error(400, f"rate must be above 0 and at most {MAX_CAMPAIGN_RATE_PER_S:g} a second")
    capacity = app[CALLS].capacity
    if not 1 <= concurrency <= capacity:
        return _error(400, f"concurrency must be 1 to {capacity} (this worker's MAX_CALLS)")
    dialer = Dialer(
        ctx.engine,
        app[SIP],
        trunk,
        converse=partial(converse, app),
        rate_per_s=rate,
        concurrency=concurrency,
    )
    try:
        text = await _campaign_csv(request)
        campaign = await asyncio.to_thread(read_campaign, ctx.engine, text, "the request body")
    except UnicodeDecodeError:
        return _error(400, "the body must be UTF-8 (docs/dialing.md)")
    except CampaignError as e:
        # A JSON campaign's rows are its entries, counted from 0 (the CSV's line 2).
        key, first = ("line", 0) if request.content_type == "text/csv" else ("entry", 2)
        rejected = [{key: r.line - first, "reasons": list(r.reasons)} for r in e.rejected]
        return web.json_response({"error": str(e), "rejected": rejected}, status=400)
    campaign_id = secrets.token_hex(8)
    report = CampaignReport(f"campaign {campaign_id}", len(campaign.entries))
    task = asyncio.create_task(dialer.run(campaign, report), name=f"campaign-{campaign_id}")
    app[CAMPAIGNS][campaign_id] = CampaignRun(report, task)
    url = f"/api/campaigns/{campaign_id}"
    return web.json_response(
        {"id": campaign_id, "entries": len(campaign.entries), "url": url}, status=202
    )


async def _campaign_csv(request: web.Request) -> str:
    """The campaign's CSV text: the body itself, or a JSON body's entries written as the
    same CSV, so that both are read, checked and refused by one parser."""
    text = (await request.read()).decode("utf-8")
    if request.content_type == "text/csv":
        return text
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        raise CampaignError(f"the body is not JSON: {e.msg} (line {e.lineno})") from None
    entries = body.get("entries") if isinstance(body, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CampaignError('a JSON campaign is {"entries": [{"account_ref": ..., "number": ...}]}')
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=("account_ref", "number"), extrasaction="ignore")
    writer.writeheader()
    writer.writerows({k: str(e.get(k, "")) for k in ("account_ref", "number")} for e in entries)
    return out.getvalue()


@guard(Token("campaigns:read"), Roles(Role.OPERATOR, Role.OWNER))
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


def sip_endpoint(
    settings: Settings, on_call: Callable[[SipCall], Awaitable[None]], port: int
) -> SipEndpoint:
    """Our SIP user agent as the settings describe it: who may call, the trunk's
    credentials, RTP (symmetric, its inactivity timeout), the session timers."""
    return SipEndpoint(
        settings.sip_host,
        port,
        on_call=on_call,
        credentials=settings.sip_credentials or None,
        allow=settings.sip_allow,
        trunk_auth=settings.sip_trunk_auth,
        media=partial(
            RtpSession.open,
            symmetric_rtp=settings.sip_symmetric_rtp,
            timeout_s=settings.rtp_timeout_s,
        ),
        session_timers=SessionTimers(settings.sip_session_expires_s, settings.sip_min_se_s),
    )


async def _start_sip(app: web.Application) -> None:
    settings = app[CTX].settings
    if settings.sip_port is None:
        return
    endpoint = sip_endpoint(settings, partial(_take_sip, app), settings.sip_port)
    await endpoint.start()
    if not (settings.sip_allow or settings.sip_credentials) and not is_loopback(settings.sip_host):
        logger.warning("SIP on %s answers anyone: set SIP_ALLOW or SIP_CREDENTIALS", endpoint.via)
    app[SIP] = endpoint


async def _stop_sip(app: web.Application) -> None:
    if SIP in app:
        await app[SIP].close()


@web.middleware
async def _forwarded_for(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Behind the supervisor's entry, the caller's address is what the entry saw (the login
    rate limit and the audit log count callers, not the entry)."""
    forwarded = request.headers.get("X-Forwarded-For")
    if forwarded and is_loopback(request.remote or ""):
        request = request.clone(remote=forwarded.rsplit(",", 1)[-1].strip())
    return await handler(request)


def make_app(ctx: CallContext) -> web.Application:
    middlewares = [_forwarded_for] if ctx.settings.trust_forwarded_for else []
    app = web.Application(client_max_size=256 * 1024, middlewares=middlewares)
    add_security(app, ctx.settings.public_url)
    app[CTX] = ctx
    app[CALLS] = LiveCalls(capacity=ctx.settings.max_calls)
    app[CAMPAIGNS] = {}
    setup_auth(app, ctx.engine, secure_cookies=ctx.settings.secure_cookies)
    add_dashboard(
        app,
        ctx.price_book.target_usd_per_minute,
        Provisioning.of(ctx.price_book, ctx.settings.price_profile),
    )
    add_metrics(app)
    add_console_pages(app)
    add_api(app)
    add_live_calls(app)
    add_admin_pages(app)
    add_recording_routes(app, ctx.settings)
    app.router.add_get("/", index)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_post("/drain", drain)
    app.router.add_post("/api/offer", offer)
    app.router.add_get("/api/calls/{call_id}/transcript", transcript)
    app.router.add_post("/api/campaigns", create_campaign)
    app.router.add_get("/api/campaigns/{campaign_id}", campaign_progress)
    app.router.add_static("/static", WEB_DIR)
    add_carrier_routes(app, carrier_config(ctx.settings), lambda t, i: start_call(app, t, i))
    add_livekit_routes(
        app,
        livekit_config(ctx.settings),
        ctx.settings.audio_in_sample_rate,
        lambda t, i: start_call(app, t, i),
    )
    check_routes(app)
    app.on_startup.append(_start_sip)
    app.on_shutdown.append(_stop_campaigns)
    app.on_shutdown.append(_end_calls)
    app.on_cleanup.append(_stop_sip)
    return app


async def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Run the server until SIGTERM or SIGINT: then it takes no new calls, lets those in
    progress finish for up to ``DRAIN_TIMEOUT_S`` (a second signal: at once), ends the rest
    and writes every record before it exits."""
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
        signals: asyncio.Queue[int] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, signals.put_nowait, signum)
        try:
            await signals.get()
            calls, timeout = app[CALLS], settings.drain_timeout_s
            logger.info("draining: %d call(s) in progress, up to %.0f s", calls.active, timeout)
            await _stop_campaigns(app)
            draining = asyncio.ensure_future(calls.drain(timeout))
            again = asyncio.ensure_future(signals.get())
            await asyncio.wait({draining, again}, return_when=asyncio.FIRST_COMPLETED)
            again.cancel()
            if calls.active:
                logger.info("stopping: ending %d call(s) still in progress", calls.active)
        finally:
            await runner.cleanup()
