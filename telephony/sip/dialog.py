"""A SIP dialog (RFC 3261 §12): the state two user agents share for one call."""

from __future__ import annotations

from dataclasses import dataclass, field

from telephony.sip.message import NameAddr, SipRequest, SipResponse, new_branch, uri_host_port


@dataclass
class Dialog:
    """Call-ID, tags, URIs, CSeq counters, remote target and route set (loose routing only)."""

    call_id: str
    local_tag: str
    remote_tag: str
    local_uri: str
    remote_uri: str
    remote_target: str
    local_cseq: int
    remote_cseq: int
    route_set: list[str] = field(default_factory=list)

    @classmethod
    def as_uas(cls, invite: SipRequest, local_tag: str) -> Dialog:
        """The dialog a 2xx/1xx-with-tag to ``invite`` creates on our side (§12.1.1)."""
        remote = NameAddr.parse(invite.headers.get("From") or "")
        local = NameAddr.parse(invite.headers.get("To") or "")
        contact = invite.headers.get("Contact")
        return cls(
            call_id=invite.call_id,
            local_tag=local_tag,
            remote_tag=remote.tag or "",
            local_uri=local.uri,
            remote_uri=remote.uri,
            remote_target=NameAddr.parse(contact).uri if contact else remote.uri,
            local_cseq=0,
            remote_cseq=invite.cseq[0],
            route_set=invite.headers.get_all("Record-Route"),
        )

    @classmethod
    def as_uac(cls, invite: SipRequest, response: SipResponse) -> Dialog:
        """The dialog a 2xx to our ``invite`` creates (§12.1.2)."""
        local = NameAddr.parse(invite.headers.get("From") or "")
        remote = NameAddr.parse(response.headers.get("To") or "")
        contact = response.headers.get("Contact")
        return cls(
            call_id=invite.call_id,
            local_tag=local.tag or "",
            remote_tag=remote.tag or "",
            local_uri=local.uri,
            remote_uri=remote.uri,
            remote_target=NameAddr.parse(contact).uri if contact else invite.uri,
            local_cseq=invite.cseq[0],
            remote_cseq=0,
            route_set=list(reversed(response.headers.get_all("Record-Route"))),
        )

    def matches(self, message: SipRequest) -> bool:
        to_tag = NameAddr.parse(message.headers.get("To") or "").tag
        from_tag = NameAddr.parse(message.headers.get("From") or "").tag
        return (message.call_id, to_tag, from_tag) == (
            self.call_id,
            self.local_tag,
            self.remote_tag,
        )

    def accept_cseq(self, request: SipRequest) -> bool:
        """False for an out-of-order in-dialog request (§12.2.2: answer 500)."""
        number = request.cseq[0]
        if number <= self.remote_cseq and request.method != "ACK":
            return False
        self.remote_cseq = max(self.remote_cseq, number)
        return True

    def destination(self) -> tuple[str, int]:
        first = NameAddr.parse(self.route_set[0]).uri if self.route_set else self.remote_target
        return uri_host_port(first)

    def request(self, method: str, via: str, contact: str, cseq: int | None = None) -> SipRequest:
        """A new in-dialog request (§12.2.1.1); ACK and CANCEL reuse the INVITE's CSeq."""
        if cseq is None:
            self.local_cseq += 1
            cseq = self.local_cseq
        request = SipRequest(method=method, uri=self.remote_target)
        request.headers.add("Via", f"{via};branch={new_branch()};rport")
        request.headers.add("Max-Forwards", "70")
        request.headers.add("From", f"<{self.local_uri}>;tag={self.local_tag}")
        request.headers.add("To", f"<{self.remote_uri}>;tag={self.remote_tag}")
        request.headers.add("Call-ID", self.call_id)
        request.headers.add("CSeq", f"{cseq} {method}")
        for route in self.route_set:
            request.headers.add("Route", route)
        request.headers.add("Contact", f"<{contact}>")
        return request
