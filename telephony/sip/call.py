"""One SIP call, a :class:`telephony.line.PhoneLine`: its dialog, media and session timer.

The endpoint (``telephony.sip.ua``) creates a ``SipCall`` for each call it answers or places
and hands it the requests of its dialog; the call answers, holds, transfers and hangs up,
answers the peer's re-INVITEs and UPDATEs, and keeps its session alive (RFC 4028).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from pipecat.transports.base_transport import BaseTransport

from telephony.line import CallInfo, LineError
from telephony.sip import sdp, session_timer
from telephony.sip.dialog import Dialog
from telephony.sip.message import (
    SipRequest,
    SipResponse,
    make_response,
)
from telephony.sip.session_timer import (
    SESSION_EXPIRED,
    Session,
    SessionGone,
    SessionTimer,
    TimerRefusal,
)
from telephony.sip.transaction import (
    ServerTransaction,
    TransactionTimeout,
)

if TYPE_CHECKING:
    from telephony.sip.ua import SipEndpoint

log = logging.getLogger(__name__)
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, NOTIFY, UPDATE"
#: The extensions we support: session timers (RFC 4028).
SUPPORTED = "timer"
#: G.711's rate: a SIP call's pipeline runs at it.
SAMPLE_RATE = 8000
Address = tuple[str, int]


class MediaSession(Protocol):
    """What the UA needs of a call's RTP session (telephony/rtp/session.py's ``RtpSession``)."""

    @property
    def local_address(self) -> Address: ...

    def start(
        self, remote: Address, codec: str, dtmf_payload_type: int | None, direction: str
    ) -> None: ...

    def update(self, *, remote: Address | None = None, direction: str | None = None) -> None: ...

    async def close(self) -> None: ...


MediaFactory = Callable[[str], Awaitable[MediaSession]]


class SipCall:
    """One SIP call; a :class:`telephony.line.PhoneLine`."""

    def __init__(
        self,
        endpoint: SipEndpoint,
        dialog: Dialog,
        media: MediaSession,
        local: sdp.LocalSession,
        info: CallInfo,
    ) -> None:
        self.endpoint, self.dialog, self.media, self.local = endpoint, dialog, media, local
        self.info = info
        self.state = "ringing" if info.direction == "inbound" else "calling"
        self.ended = asyncio.Event()
        self.end_reason = ""
        self.negotiated: sdp.Media | None = None
        self.invite_txn: ServerTransaction | None = None
        self.direction = "sendrecv"
        self._ack_waiters: dict[int, asyncio.Event] = {}
        self._transport: BaseTransport | None = None
        self._last_ack: SipRequest | None = None
        #: RFC 4028: the session timer, armed once answered; the one an inbound INVITE
        #: negotiated (with its headers for our 200) waits in ``_uas_timer`` till then.
        self.timer = SessionTimer(self._refresh, self._expire)
        self._uas_timer: tuple[Session, list[tuple[str, str]]] | None = None
        #: Whether the peer's Allow lists UPDATE: our refreshes are then UPDATEs.
        self.peer_allows_update = False
        #: Awaited when the session timer runs out, before our BYE: the application
        #: records why the call ended (``session_expired``).
        self.on_session_expired: Callable[[], Awaitable[None]] | None = None
        self.expired = False
        #: The caller acknowledged our 200: the call took place, however soon it ended
        #: (a BYE may come with the ACK, before ``answer`` returns).
        self.answered = False

    def transport(self) -> BaseTransport:
        """``transport_factory(call)`` when the endpoint has one, else our RTP transport."""
        if self._transport is None:
            if self.endpoint.transport_factory is not None:
                self._transport = self.endpoint.transport_factory(self)
            else:
                from telephony.rtp.session import RtpSession
                from telephony.sip.media import SipTransport

                if not isinstance(self.media, RtpSession):
                    raise LineError("the default SIP transport needs an RtpSession for media")
                self._transport = SipTransport(self.media)
        return self._transport

    async def answer(self) -> None:
        """Send the 200 and wait for its ACK. The call ends instead, quietly (``state`` tells),
        when the INVITE already has its final response (a CANCEL's 487 won the race) or when
        the 200 is never acknowledged (timer H: BYE, RFC 3261 §13.3.1.4)."""
        txn = self.invite_txn
        if self.state != "ringing" or txn is None or self.negotiated is None:
            return
        await self._start_media(self.negotiated)
        session, timer_headers = self._uas_timer or (None, [])
        body = self.local.answer(self.negotiated)
        response = self._response(txn.request, 200, body, timer_headers)
        if not txn.respond(response):
            self.endpoint.cancelled_answers += 1
            log.info("SIP call %s: no 200, the INVITE already ended", self.dialog.call_id)
            await self._end("cancelled by the caller")
            return
        self.state = "confirmed"
        self.timer.arm(session)
        if not await self._retransmit_2xx(txn, response):
            self.endpoint.unacked_2xx += 1
            log.warning("SIP call %s: our 200 was never acknowledged", self.dialog.call_id)
            await self._end("no ACK for our 200 (timer H)", send_bye=True)
            return
        self.answered = True

    async def hang_up(self) -> None:
        if self.state == "ringing" and self.invite_txn is not None:
            self.invite_txn.respond(self._response(self.invite_txn.request, 603))
            await self._end("declined")
        elif self.state == "confirmed":
            await self._end(SESSION_EXPIRED if self.expired else "hung up by the agent", True)

    async def hold(self, on: bool) -> None:
        if self.state != "confirmed" or self.negotiated is None:
            raise LineError("only an answered call can be put on hold")
        direction = "sendonly" if on else "sendrecv"
        media = self.negotiated
        body = self.local.describe(
            [(media.payload_type, media.codec)], media.dtmf_payload_type, direction
        )
        response = await self._offer("INVITE", body)
        if response.status >= 300:
            raise LineError(f"hold re-INVITE refused: {response.status} {response.reason}")
        self.direction = direction
        self.media.update(direction=direction)
        self.timer.arm(session_timer.accepted(response.headers) or self.timer.session)

    async def transfer(self, target: str) -> None:
        if self.state != "confirmed":
            raise LineError("only an answered call can be transferred")
        response = await self._in_dialog("REFER", b"", [("Refer-To", f"<{target}>")])
        if response.status >= 300:
            raise LineError(f"REFER refused: {response.status} {response.reason}")
        await self._end(f"transferred to {target}", send_bye=True)

    # -- internals ------------------------------------------------------------------------

    def _response(
        self,
        request: SipRequest,
        status: int,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
    ) -> SipResponse:
        ours = [("Contact", f"<{self.endpoint.contact}>"), ("Allow", ALLOW)]
        ours.append(("Supported", SUPPORTED))
        return make_response(
            request,
            status,
            to_tag=self.dialog.local_tag,
            body=body,
            headers=ours + (headers or []) if status < 300 else None,
        )

    async def _start_media(self, media: sdp.Media) -> None:
        from telephony.rtp.session import RtpSession

        self.negotiated = media
        dtmf = media.dtmf_payload_type
        if isinstance(self.media, RtpSession) and self.invite_txn is not None:
            # Whence the INVITE came: an SDP address elsewhere means NAT (symmetric RTP).
            self.media.signalling = self.invite_txn.source[0]
        self.media.start(
            remote=(media.remote_ip, media.remote_port),
            codec=media.codec,
            dtmf_payload_type=dtmf if dtmf is not None and 96 <= dtmf <= 127 else None,
            direction=media.direction,
        )

    async def _retransmit_2xx(self, txn: ServerTransaction, response: SipResponse) -> bool:
        """Retransmit the 2xx ``txn`` sent (T1 doubling to T2) until the ACK or 64*T1
        (§13.3.1.4): the UA's job, not the transaction's, for a 2xx (RFC 6026)."""
        acked = asyncio.Event()
        self._ack_waiters[txn.request.cseq[0]] = acked
        timers = self.endpoint.timers
        interval, deadline = timers.t1, self.endpoint.loop.time() + timers.timeout
        try:
            while not acked.is_set():
                remaining = deadline - self.endpoint.loop.time()
                if remaining <= 0 or self.ended.is_set():
                    return acked.is_set()
                try:
                    await asyncio.wait_for(acked.wait(), min(interval, remaining))
                except TimeoutError:
                    self.endpoint.layer_send(response, txn.source)
                    interval = min(2 * interval, timers.t2)
            return True
        finally:
            self._ack_waiters.pop(txn.request.cseq[0], None)

    def on_ack(self, request: SipRequest) -> None:
        waiter = self._ack_waiters.get(request.cseq[0])
        if waiter is not None:
            waiter.set()

    async def _in_dialog(
        self, method: str, body: bytes, headers: list[tuple[str, str]] | None = None
    ) -> SipResponse:
        request = self.dialog.request(method, self.endpoint.via, self.endpoint.contact)
        for name, value in headers or []:
            request.headers.add(name, value)
        if body:
            request.headers.add("Content-Type", "application/sdp")
            request.body = body
        txn = self.endpoint.layer.request(request, self.dialog.destination())
        try:
            return await txn.final
        except TransactionTimeout as exc:
            raise LineError(f"no answer to {method}") from exc

    async def on_request(self, txn: ServerTransaction) -> None:
        request = txn.request
        if not self.dialog.accept_cseq(request):
            txn.respond(make_response(request, 500, headers=[("Retry-After", "1")]))
            return
        if request.method == "BYE":
            txn.respond(make_response(request, 200))
            await self._end("hung up by the caller")
        elif request.method in ("INVITE", "UPDATE"):
            await self._on_offer(txn)
        elif request.method == "NOTIFY":
            txn.respond(make_response(request, 200))
        else:
            txn.respond(make_response(request, 501, headers=[("Allow", ALLOW)]))

    async def _on_offer(self, txn: ServerTransaction) -> None:
        """A re-INVITE, or an UPDATE (RFC 3311), from the peer: its SDP offer (a re-INVITE
        always has one here, an UPDATE may) is answered in our 200, and either refreshes
        the session timer (RFC 4028 §9: negotiated as for a new INVITE)."""
        request = txn.request
        try:
            session, timer_headers = session_timer.answer(
                request.headers, self.endpoint.session_timers
            )
        except TimerRefusal as exc:
            txn.respond(make_response(request, exc.status, exc.reason, headers=exc.headers))
            return
        body = b""
        if request.method == "INVITE" or request.body:
            try:
                media = sdp.negotiate(sdp.parse(request.body))
            except sdp.SdpError as exc:
                txn.respond(make_response(request, 488, headers=[("Warning", f'305 - "{exc}"')]))
                return
            self._apply_offer(media)
            body = self.local.answer(media)
        response = self._response(request, 200, body, timer_headers)
        if not txn.respond(response):
            return
        if self.state == "confirmed":
            self.timer.arm(session)
        if request.method == "INVITE":
            await self._retransmit_2xx(txn, response)

    def _apply_offer(self, media: sdp.Media) -> None:
        """Take the peer's new offer; the RTP session follows once it runs (an UPDATE may
        come while the call rings: the answer's 200 then uses it)."""
        previous = self.negotiated
        self.negotiated = media
        self.direction = media.direction
        if self.state != "confirmed":
            return
        if previous is not None and (previous.remote_ip, previous.remote_port) != (
            media.remote_ip,
            media.remote_port,
        ):
            self.media.update(remote=(media.remote_ip, media.remote_port))
        self.media.update(direction=media.direction)

    async def _offer(self, method: str, body: bytes) -> SipResponse:
        """Our re-INVITE or UPDATE, with the session timer's headers (RFC 4028 §7.4); a
        re-INVITE's 2xx is acknowledged here."""
        session = self.timer.session
        settings = self.endpoint.session_timers
        headers = session_timer.offer(settings, session) if session else [("Supported", SUPPORTED)]
        response = await self._in_dialog(method, body, headers)
        if method == "INVITE" and 200 <= response.status < 300:
            ack = self.dialog.request(
                "ACK", self.endpoint.via, self.endpoint.contact, cseq=response.cseq[0]
            )
            self._last_ack = ack
            self.endpoint.layer_send(ack, self.dialog.destination())
        return response

    async def _refresh(self, session: Session) -> Session | None:
        """Refresh the session as its refresher (RFC 4028 §7.4): an UPDATE without a body
        when the peer allows it, else a re-INVITE with our SDP unchanged. The renewed
        session; None when refused (it lasts to its end); ``SessionGone`` when nothing
        answered or the peer no longer knows the dialog (408, 481: RFC 3261 §12.2.1.2)."""
        if self.state != "confirmed" or self.negotiated is None:
            raise SessionGone(self.state)
        media = self.negotiated
        if self.peer_allows_update:
            method, body = "UPDATE", b""
        else:
            payloads = [(media.payload_type, media.codec)]
            method = "INVITE"
            body = self.local.describe(payloads, media.dtmf_payload_type, self.direction)
        try:
            # Shielded: a refresh from the peer re-arms the timer (cancelling this task),
            # and a re-INVITE of ours under way must still get its ACK.
            response = await asyncio.shield(self._offer(method, body))
        except LineError as exc:
            raise SessionGone(str(exc)) from exc
        if response.status in (408, 481):
            raise SessionGone(f"{response.status} {response.reason}")
        if response.status >= 300:
            log.info(
                "SIP call %s: refresh %s refused: %d", self.dialog.call_id, method, response.status
            )
            return None
        return session_timer.accepted(response.headers) or session

    async def _expire(self) -> None:
        """The session was not refreshed in time (RFC 4028 §10): the peer is gone. The
        application is told first, so that the call's record says why; then our BYE."""
        if self.state != "confirmed":
            return
        self.expired = True
        log.warning("SIP call %s: session timer expired, hanging up", self.dialog.call_id)
        if self.on_session_expired is not None:
            try:
                await self.on_session_expired()
            except Exception:
                log.exception("on_session_expired failed for %s", self.dialog.call_id)
        await self._end(SESSION_EXPIRED, send_bye=True)

    async def _end(self, reason: str, send_bye: bool = False) -> None:
        if self.state == "ended":
            return
        self.state = "ended"
        self.end_reason = reason
        self.timer.stop()
        self.endpoint.calls.pop(self.dialog.call_id, None)
        if send_bye:
            request = self.dialog.request("BYE", self.endpoint.via, self.endpoint.contact)
            txn = self.endpoint.layer.request(request, self.dialog.destination())
            try:
                await txn.final
            except TransactionTimeout:
                log.info("no answer to our BYE on %s", self.dialog.call_id)
        await self.media.close()
        self.ended.set()
        log.info("SIP call %s ended: %s", self.dialog.call_id, reason)
