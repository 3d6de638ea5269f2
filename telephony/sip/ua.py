"""The SIP user agent: one UDP endpoint that answers and places calls (RFC 3261, 3264, 3515).

``SipEndpoint`` listens on host:port. An inbound INVITE gets 100 Trying (from the transaction
layer), a digest challenge when the source is not allowed outright, 488 when no codec is shared;
then the application's ``on_call(call)`` is called, before anything rings, so that it can refuse
the call there by raising ``LineBusy`` (503 with Retry-After, and no 180: the caller's network
tries elsewhere at once); otherwise 180 Ringing goes out and what ``on_call`` returned is
awaited (an ``async def`` runs entirely then). ``await call.answer()`` sends the 200 with our
SDP answer and waits for the ACK. ``await endpoint.invite(uri)`` dials out and returns a
:class:`DialResult` the dialer records. Media is an RTP session per call, opened through the
``media`` factory; audio frames go through the pipecat transport ``transport_factory`` builds.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from pipecat.transports.base_transport import BaseTransport

from telephony.line import CallInfo, LineBusy
from telephony.sip import sdp, session_timer
from telephony.sip.auth import AuthError, DigestChallenger, authorization
from telephony.sip.call import (
    ALLOW,
    SAMPLE_RATE,
    SUPPORTED,
    Address,
    MediaFactory,
    MediaSession,
    SipCall,
)
from telephony.sip.dialog import Dialog
from telephony.sip.message import (
    NameAddr,
    SipRequest,
    SipResponse,
    make_response,
    new_branch,
    new_tag,
    uri_host_port,
    uri_user,
)
from telephony.sip.ratelimit import RateLimiter
from telephony.sip.session_timer import (
    Session,
    SessionTimers,
    TimerRefusal,
)
from telephony.sip.transaction import (
    ServerTransaction,
    Timers,
    TransactionLayer,
    TransactionTimeout,
)

log = logging.getLogger(__name__)


async def open_rtp(host: str) -> MediaSession:
    """The default media factory: our RTP engine, imported when the first call needs it."""
    from telephony.rtp.session import RtpSession

    return await RtpSession.open(host, port=0)


@dataclass
class DialResult:
    """How an outbound attempt ended: ``answered``, ``busy``, ``no_answer`` or ``failed``.

    ``reached`` is False when nothing answered the INVITE at all, not even 100 Trying
    (nothing listens at the address, the host is down or unreachable, the name does not
    resolve): the call never left for the phone network, so no phone rang.
    """

    outcome: str
    status: int | None = None
    reason: str = ""
    call: SipCall | None = None
    reached: bool = True


#: The URI schemes a request may address us by (RFC 3261 §8.2.2.1).
SCHEMES = frozenset({"sip", "sips", "tel"})


def required_extensions(request: SipRequest) -> set[str]:
    """The option tags of the request's Require headers (RFC 3261 §20.32), lower-cased."""
    return {
        tag.strip().lower()
        for value in request.headers.get_all("Require")
        for tag in value.split(",")
        if tag.strip()
    }


def _refusal_before_reading(request: SipRequest) -> SipResponse | None:
    """RFC 3261 §8.2.2 and §8.2.3: what a UAS refuses before it looks at what is asked: an
    unknown URI scheme (416), an extension it lacks but the peer requires (420: its meaning
    might bind us, so it is refused, not ignored), a body it cannot read (415). CANCEL is
    answered as its INVITE was; ACK never reaches here."""
    if request.method == "CANCEL":
        return None
    if request.uri.partition(":")[0].lower() not in SCHEMES:
        return make_response(request, 416)
    if unknown := required_extensions(request) - {SUPPORTED}:
        return make_response(request, 420, headers=[("Unsupported", ", ".join(sorted(unknown)))])
    kind = (request.headers.get("Content-Type") or "").partition(";")[0].strip().lower()
    if request.body and request.method in ("INVITE", "UPDATE") and kind != "application/sdp":
        return make_response(request, 415, headers=[("Accept", "application/sdp")])
    return None


def _retrieve(future: asyncio.Future[SipResponse]) -> None:
    """Read a transaction's outcome nobody awaits, so asyncio does not report it lost."""
    if not future.cancelled():
        future.exception()


class SipEndpoint:
    """Our SIP user agent on one UDP address; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int = 5060,
        *,
        on_call: Callable[[SipCall], Awaitable[None]],
        credentials: Mapping[str, str] | None = None,
        realm: str = "collections-agent",
        allow: Iterable[str] = (),
        trunk_auth: tuple[str, str] | None = None,
        outbound_proxy: str | None = None,
        media: MediaFactory = open_rtp,
        transport_factory: Callable[[SipCall], BaseTransport] | None = None,
        timers: Timers | None = None,
        session_timers: SessionTimers | None = None,
        rate: float = 20.0,
        burst: float = 40.0,
    ) -> None:
        self.host, self.port = host, port
        self.on_call = on_call
        self.challenger = DigestChallenger(realm, credentials) if credentials else None
        self.allow = [ipaddress.ip_network(net, strict=False) for net in allow]
        self.trunk_auth, self.outbound_proxy = trunk_auth, outbound_proxy
        self.media, self.transport_factory = media, transport_factory
        self.timers = timers or Timers()
        self.session_timers = session_timers or SessionTimers()
        self.limiter = RateLimiter(rate, burst)
        self.calls: dict[str, SipCall] = {}
        #: Answers refused because the INVITE had already ended (a CANCEL's 487 came first).
        self.cancelled_answers = 0
        #: 200s to an INVITE never acknowledged (timer H): each call ended with a BYE.
        self.unacked_2xx = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._layer: TransactionLayer | None = None
        self.loop = asyncio.get_event_loop()

    @property
    def layer(self) -> TransactionLayer:
        if self._layer is None:
            raise RuntimeError("SipEndpoint.start() has not run")
        return self._layer

    @property
    def via(self) -> str:
        return f"SIP/2.0/UDP {self.host}:{self.port}"

    @property
    def contact(self) -> str:
        return f"sip:agent@{self.host}:{self.port}"

    def layer_send(self, message: SipRequest | SipResponse, address: Address) -> None:
        self.layer.send(message, address)

    async def start(self) -> None:
        """Bind the UDP socket (port 0 picks a free one; ``self.port`` then holds it)."""
        self.loop = asyncio.get_running_loop()
        _, protocol = await self.loop.create_datagram_endpoint(
            lambda: TransactionLayer(
                self._on_request,
                self._on_stray,
                self.timers,
                accept=lambda source: self.limiter.allow(source[0]),  # before any state
            ),
            local_addr=(self.host, self.port),
        )
        self._layer = protocol
        assert protocol.transport is not None
        self.port = protocol.transport.get_extra_info("sockname")[1]
        log.info("SIP endpoint listening on udp %s:%d", self.host, self.port)

    async def close(self) -> None:
        """Hang up every call and close the socket."""
        for call in list(self.calls.values()):
            await call.hang_up()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._layer is not None:
            self._layer.close()

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await coroutine
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("SIP handler failed")

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _allowed(self, source: str) -> bool:
        address = ipaddress.ip_address(source)
        return any(address in net for net in self.allow)

    # -- inbound --------------------------------------------------------------------------

    def _on_request(self, txn: ServerTransaction) -> None:
        request = txn.request
        call = self.calls.get(request.call_id)
        to_tag = NameAddr.parse(request.headers.get("To") or "").tag
        if refusal := _refusal_before_reading(request):
            txn.respond(refusal)
        elif request.method == "CANCEL":
            self._spawn(self._on_cancel(txn))
        elif request.method == "OPTIONS" and to_tag is None:
            txn.respond(
                make_response(
                    request,
                    200,
                    to_tag=new_tag(),
                    headers=[
                        ("Allow", ALLOW),
                        ("Accept", "application/sdp"),
                        ("Supported", SUPPORTED),
                    ],
                )
            )
        elif to_tag is not None:
            if call is None or not call.dialog.matches(request):
                txn.respond(make_response(request, 481))
            else:
                self._spawn(call.on_request(txn))
        elif request.method == "INVITE":
            self._spawn(self._on_invite(txn))
        elif request.method == "BYE":
            txn.respond(make_response(request, 481))
        else:
            txn.respond(
                make_response(
                    request, 405 if request.method in ALLOW else 501, headers=[("Allow", ALLOW)]
                )
            )

    def _on_stray(self, message: SipRequest | SipResponse, source: Address) -> None:
        call = self.calls.get(message.call_id)
        if call is None:
            return
        if isinstance(message, SipRequest):
            call.on_ack(message)
        elif 200 <= message.status < 300 and call._last_ack is not None:
            self.layer_send(call._last_ack, source)  # our ACK was lost: the 2xx came again

    async def _on_invite(self, txn: ServerTransaction) -> None:
        request = txn.request
        if self._turned_away(txn):
            return
        offer = self._check_offer(txn)
        if offer is None:
            return
        media, timer, dialog = offer
        session = await self.media(self.host)
        if txn.final:  # cancelled while the RTP port was opened: 487 has gone out
            await session.close()
            return
        info = CallInfo(
            path="sip",
            direction="inbound",
            remote_number=uri_user(dialog.remote_uri),
            local_number=uri_user(request.uri),
            network_id=request.call_id,
            sample_rate=SAMPLE_RATE,
            extra={"remote_address": f"{txn.source[0]}:{txn.source[1]}"},
        )
        call = SipCall(
            self, dialog, session, sdp.LocalSession(self.host, session.local_address[1]), info
        )
        call.invite_txn, call.negotiated, call._uas_timer = txn, media, timer
        call.peer_allows_update = session_timer.allows(request.headers, "UPDATE")
        try:
            answering = self.on_call(call)  # before the 180: a refusal never rings
        except Exception as exc:
            txn.respond(self._refusal(request, dialog.local_tag, exc))
            await session.close()
            return
        self.calls[request.call_id] = call
        txn.respond(
            make_response(
                request, 180, to_tag=dialog.local_tag, headers=[("Contact", f"<{self.contact}>")]
            )
        )
        try:
            await answering
        except Exception as exc:
            if call.state == "ringing":
                txn.respond(self._refusal(request, dialog.local_tag, exc))
                await call._end("busy" if isinstance(exc, LineBusy) else "application error")
            else:
                log.error("on_call failed for %s: hanging up", request.call_id, exc_info=exc)
                await call.hang_up()

    def _turned_away(self, txn: ServerTransaction) -> bool:
        """Whether an INVITE from a source not allowed was answered 401 (its credentials
        missing or wrong) or 403; one with good credentials, or from an allowed source,
        goes on."""
        request = txn.request
        if self._allowed(txn.source[0]):
            return False
        if self.challenger is not None:
            verdict = self.challenger.check(
                request.headers.get("Authorization"), "INVITE", request.uri
            )
            if verdict == "ok":
                return False
            challenge = ("WWW-Authenticate", self.challenger.challenge(verdict == "stale"))
            txn.respond(make_response(request, 401, to_tag=new_tag(), headers=[challenge]))
            return True
        if self.allow:
            txn.respond(make_response(request, 403, to_tag=new_tag()))
            return True
        return False

    def _check_offer(
        self, txn: ServerTransaction
    ) -> tuple[sdp.Media, tuple[Session, list[tuple[str, str]]], Dialog] | None:
        """The INVITE's media, session timer and dialog, or None once it was refused (488
        for its SDP, 422 or 400 for its timers, 400 for a caller we could not reach): before
        anything is taken for the call (its RTP port, its place), so no 18x goes out."""
        request = txn.request
        try:
            media = sdp.negotiate(sdp.parse(request.body))
        except sdp.SdpError as exc:
            txn.respond(
                make_response(
                    request, 488, to_tag=new_tag(), headers=[("Warning", f'305 - "{exc}"')]
                )
            )
            return None
        try:
            timer = session_timer.answer(request.headers, self.session_timers)
        except TimerRefusal as exc:
            txn.respond(
                make_response(
                    request, exc.status, exc.reason, to_tag=new_tag(), headers=exc.headers
                )
            )
            return None
        dialog = Dialog.as_uas(request, new_tag())
        try:
            dialog.destination()  # where our BYE will go: a sip: URI (Contact or Record-Route)
        except ValueError as exc:
            warning = ("Warning", f'399 - "cannot reach the caller: {str(exc)[:100]}"')
            txn.respond(make_response(request, 400, to_tag=dialog.local_tag, headers=[warning]))
            return None
        return media, timer, dialog

    def _refusal(self, request: SipRequest, to_tag: str, exc: Exception) -> SipResponse:
        """The final response to an INVITE the application refused (``LineBusy``: 503 with
        Retry-After, so the caller's network tries another agent) or failed on (500)."""
        if isinstance(exc, LineBusy):
            log.info("INVITE %s refused: %s", request.call_id, exc)
            retry = ("Retry-After", str(exc.retry_after_s))
            return make_response(request, 503, to_tag=to_tag, headers=[retry])
        log.error("on_call failed for %s", request.call_id, exc_info=exc)
        return make_response(request, 500, to_tag=to_tag)

    async def _on_cancel(self, txn: ServerTransaction) -> None:
        request = txn.request
        via = request.top_via()
        invite = self.layer.server.get((via.branch, via.sent_by, "INVITE"))
        if invite is None:
            txn.respond(make_response(request, 481))
            return
        txn.respond(make_response(request, 200))
        if invite.final:
            return
        call = self.calls.get(request.call_id)
        to_tag = call.dialog.local_tag if call is not None else new_tag()
        invite.respond(make_response(invite.request, 487, to_tag=to_tag))
        if call is not None:
            await call._end("cancelled by the caller")

    # -- outbound -------------------------------------------------------------------------

    async def invite(
        self, uri: str, *, caller: str | None = None, ring_timeout: float = 45.0
    ) -> DialResult:
        """Dial ``uri`` (through ``outbound_proxy`` when set) and wait for the outcome."""
        try:
            host, port = uri_host_port(self.outbound_proxy or uri)
            infos = await self.loop.getaddrinfo(host, port, type=2)  # SOCK_DGRAM
        except (ValueError, OSError) as exc:
            return DialResult("failed", reason=f"cannot reach {uri}: {exc}", reached=False)
        destination: Address = (str(infos[0][4][0]), int(infos[0][4][1]))
        session = await self.media(self.host)
        local = sdp.LocalSession(self.host, session.local_address[1])
        user = caller or "agent"
        invite = self._invite_request(uri, user, local)
        final = await self._final_response(
            invite, destination, session, self.loop.time() + ring_timeout
        )
        if isinstance(final, DialResult):
            return final
        invite, response = final
        if response.status >= 300:
            await session.close()
            outcome = {
                486: "busy",
                600: "busy",
                480: "no_answer",
                408: "no_answer",
                487: "no_answer",
            }.get(response.status, "failed")
            return DialResult(outcome, response.status, response.reason)
        info = CallInfo(
            path="sip",
            direction="outbound",
            remote_number=uri_user(uri),
            local_number=user,
            network_id=invite.call_id,
            sample_rate=SAMPLE_RATE,
        )
        call = SipCall(self, Dialog.as_uac(invite, response), session, local, info)
        return await self._confirm(call, invite, response)

    def _invite_request(self, uri: str, user: str, local: sdp.LocalSession) -> SipRequest:
        """A new INVITE to ``uri`` from ``user``, offering ``local``'s media and our timers."""
        invite = SipRequest(method="INVITE", uri=uri)
        invite.headers.add("Via", f"{self.via};branch={new_branch()};rport")
        invite.headers.add("Max-Forwards", "70")
        invite.headers.add("From", f"<sip:{user}@{self.host}>;tag={new_tag()}")
        invite.headers.add("To", f"<{uri}>")
        invite.headers.add("Call-ID", f"{secrets.token_hex(12)}@{self.host}")
        invite.headers.add("CSeq", "1 INVITE")
        invite.headers.add("Contact", f"<{self.contact}>")
        invite.headers.add("Allow", ALLOW)
        for name, value in session_timer.offer(self.session_timers):
            invite.headers.add(name, value)
        invite.headers.add("Content-Type", "application/sdp")
        invite.body = local.offer()
        return invite

    async def _final_response(
        self, invite: SipRequest, destination: Address, session: MediaSession, deadline: float
    ) -> tuple[SipRequest, SipResponse] | DialResult:
        """The INVITE's final response (and the INVITE that got it: it may have been sent
        again with credentials or a larger session interval), or the dial's outcome when
        none came (the media session then closed or left to the abandoned INVITE)."""
        authenticated = too_small = False
        while True:
            txn = self.layer.request(invite, destination)
            try:
                remaining = max(0.0, deadline - self.loop.time())
                response = await asyncio.wait_for(asyncio.shield(txn.final), remaining)
            except TimeoutError:
                if not txn.proceeding:
                    # Silence since the INVITE: a dead trunk, not a phone left ringing. The
                    # INVITE is abandoned (hung up should it be answered after all).
                    self._spawn(self._abandon(invite, destination, txn.final, session))
                    return DialResult("failed", reason="no response to INVITE", reached=False)
                cancelled = await self._cancel(invite, destination, txn.final)
                if cancelled is None or cancelled.status >= 300:
                    await session.close()
                    return DialResult(
                        "no_answer",
                        cancelled.status if cancelled is not None else None,
                        "no answer before the ring timeout",
                    )
                response = cancelled
            except TransactionTimeout:
                await session.close()
                return DialResult(
                    "failed", reason="no response to INVITE (timer B)", reached=txn.proceeding
                )
            except asyncio.CancelledError:
                # Whoever dialed gave up (a campaign stopped): the phone must stop ringing.
                self._spawn(self._abandon(invite, destination, txn.final, session))
                raise
            if response.status in (401, 407) and self.trunk_auth and not authenticated:
                authenticated = True
                invite = self._with_credentials(invite, response)
                continue
            if response.status == 422 and not too_small:
                # RFC 4028 §7.1: the interval we asked for is under the UAS's Min-SE; once
                # more with its Min-SE (and no more: a second 422 ends the attempt).
                too_small = True
                larger = session_timer.retry_after_422(response.headers, self.session_timers)
                if larger is not None:
                    invite = self._again(invite)
                    for name, value in session_timer.offer(larger):
                        invite.headers.set(name, value)
                    continue
            return invite, response

    async def _confirm(
        self, call: SipCall, invite: SipRequest, response: SipResponse
    ) -> DialResult:
        """An answered dial: the ACK sent, the answer's media started, the call confirmed."""
        dialog = call.dialog
        call.peer_allows_update = session_timer.allows(response.headers, "UPDATE")
        self.calls[invite.call_id] = call
        ack = dialog.request("ACK", self.via, self.contact, cseq=invite.cseq[0])
        for name in ("Authorization", "Proxy-Authorization"):
            for value in invite.headers.get_all(name):
                ack.headers.add(name, value)
        call._last_ack = ack
        self.layer_send(ack, dialog.destination())
        try:
            media = sdp.negotiate(sdp.parse(response.body))
        except sdp.SdpError as exc:
            await call._end(f"unusable SDP answer: {exc}", send_bye=True)
            return DialResult("failed", response.status, str(exc))
        await call._start_media(media)
        call.state = "confirmed"
        call.timer.arm(session_timer.accepted(response.headers))
        return DialResult("answered", response.status, response.reason, call)

    def _again(self, invite: SipRequest) -> SipRequest:
        """``invite`` sent anew after a final response: a new branch, the next CSeq."""
        retry = SipRequest(method="INVITE", uri=invite.uri, body=invite.body)
        retry.headers = type(invite.headers)(invite.headers.items())
        retry.headers.set("Via", f"{self.via};branch={new_branch()};rport")
        retry.headers.set("CSeq", f"{invite.cseq[0] + 1} INVITE")
        return retry

    def _with_credentials(self, invite: SipRequest, challenge: SipResponse) -> SipRequest:
        assert self.trunk_auth is not None
        username, password = self.trunk_auth
        proxy = challenge.status == 407
        header = challenge.headers.get("Proxy-Authenticate" if proxy else "WWW-Authenticate")
        retry = self._again(invite)
        try:
            value = authorization(
                header or "", username=username, password=password, method="INVITE", uri=invite.uri
            )
        except AuthError as exc:
            log.warning("cannot answer the trunk's challenge: %s", exc)
            return retry
        retry.headers.set("Proxy-Authorization" if proxy else "Authorization", value)
        return retry

    async def _cancel(
        self, invite: SipRequest, destination: Address, final: asyncio.Future[SipResponse]
    ) -> SipResponse | None:
        cancel = SipRequest(method="CANCEL", uri=invite.uri)
        cancel.headers.add("Via", invite.headers.get_all("Via")[0])
        for name in ("From", "To", "Call-ID", "Route"):
            for value in invite.headers.get_all(name):
                cancel.headers.add(name, value)
        cancel.headers.add("CSeq", f"{invite.cseq[0]} CANCEL")
        cancel.headers.add("Max-Forwards", "70")
        # The INVITE's final response is what tells; the CANCEL's own is only read.
        self.layer.request(cancel, destination).final.add_done_callback(_retrieve)
        try:
            return await final
        except TransactionTimeout:
            return None

    async def _abandon(
        self,
        invite: SipRequest,
        destination: Address,
        final: asyncio.Future[SipResponse],
        session: MediaSession,
    ) -> None:
        """CANCEL a call nobody waits for; if it was answered all the same, ACK and BYE."""
        try:
            response = await self._cancel(invite, destination, final)
            if response is not None and response.status < 300:
                dialog = Dialog.as_uac(invite, response)
                ack = dialog.request("ACK", self.via, self.contact, cseq=invite.cseq[0])
                self.layer_send(ack, dialog.destination())
                bye = dialog.request("BYE", self.via, self.contact)
                await self.layer.request(bye, dialog.destination()).final
        except TransactionTimeout:
            log.info("no answer to the BYE of an abandoned call %s", invite.call_id)
        finally:
            await session.close()
