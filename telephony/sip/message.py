"""SIP messages (RFC 3261 §7): a strict parser with size limits, and serialisation.

The parser refuses what it cannot read safely, raising :class:`SipParseError` (and nothing
else, whatever the bytes: tests/test_fuzz.py holds it to that); when the start line was a
request it keeps the headers it could read, so the endpoint can still answer 400. Numbers are
ASCII digits of bounded length, and control characters (bar tab) are refused in the start line
and the headers, so nothing downstream (logs, the call ledger) sees a NUL or a bare CR.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

MAX_MESSAGE_SIZE = 65_535
MAX_HEADERS = 100
MAX_HEADER_LINE = 8_192

#: RFC 3261 §7.3.3 compact forms.
COMPACT = {
    "i": "Call-ID",
    "m": "Contact",
    "e": "Content-Encoding",
    "l": "Content-Length",
    "c": "Content-Type",
    "f": "From",
    "s": "Subject",
    "k": "Supported",
    "t": "To",
    "v": "Via",
    "r": "Refer-To",
}
_CANONICAL = {
    name.lower(): name
    for name in (
        "Via",
        "From",
        "To",
        "Call-ID",
        "CSeq",
        "Contact",
        "Max-Forwards",
        "Content-Type",
        "Content-Length",
        "WWW-Authenticate",
        "Proxy-Authenticate",
        "Authorization",
        "Proxy-Authorization",
        "Record-Route",
        "Route",
        "Allow",
        "Supported",
        "User-Agent",
        "Server",
        "Warning",
        "Retry-After",
        "Refer-To",
        "Event",
        "Subscription-State",
        "Accept",
    )
}
REQUIRED_REQUEST_HEADERS = ("Via", "From", "To", "Call-ID", "CSeq")
METHODS = frozenset(
    {"INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "REGISTER", "INFO", "UPDATE", "REFER", "NOTIFY"}
    | {"SUBSCRIBE", "MESSAGE", "PRACK", "PUBLISH"}
)
_TOKEN = re.compile(r"^[A-Za-z0-9.!%*_+`'~-]+$")
#: A Request-URI (RFC 3261 §25.1): a scheme, a colon, no white space, quotes or brackets.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s<>\"]+")
_STATUS_LINE = re.compile(r"^SIP/2\.0 ([1-6]\d\d) (.*)$")
#: RFC 3261 SLASH is SWS "/" SWS: "SIP / 2.0 / UDP" is a valid sent-protocol (RFC 4475 wsinv).
_VIA = re.compile(r"^SIP\s*/\s*2\.0\s*/\s*([A-Za-z0-9.!%*_+`'~-]+)\s+([^;\s]+)\s*(.*)$", re.S)
#: An unquoted display name: tokens and the white space between them (RFC 3261 §25.1).
_DISPLAY_TOKENS = re.compile(r"[A-Za-z0-9.!%*_+`'~-]+(?:[ \t]+[A-Za-z0-9.!%*_+`'~-]+)*")
_WHITE = re.compile(r"\s")
#: Headers a request has at most one of (RFC 3261 §7.3.1: only list headers may repeat).
SINGLE_HEADERS = ("From", "To", "Call-ID", "CSeq", "Max-Forwards", "Content-Length")
#: What RFC 3261's grammar has no room for in a start line or a header: C0 controls but HTAB, DEL.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NUMBER = re.compile(r"[0-9]{1,10}")

REASONS = {
    100: "Trying",
    180: "Ringing",
    183: "Session Progress",
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    415: "Unsupported Media Type",
    480: "Temporarily Unavailable",
    481: "Call/Transaction Does Not Exist",
    486: "Busy Here",
    487: "Request Terminated",
    488: "Not Acceptable Here",
    491: "Request Pending",
    500: "Server Internal Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    513: "Message Too Large",
    600: "Busy Everywhere",
    603: "Decline",
}


class SipParseError(ValueError):
    """A message we refuse to read; ``partial`` holds a request's readable headers, if any."""

    def __init__(self, message: str, partial: SipRequest | None = None, status: int = 400):
        super().__init__(message)
        self.partial = partial
        self.status = status


def _number(text: str) -> int | None:
    """A header's decimal number: ASCII digits only (``str.isdigit`` takes "\u00b2", which
    ``int`` refuses) and at most ten of them (``int`` refuses over 4,300)."""
    return int(text) if _NUMBER.fullmatch(text) else None


def canonical(name: str) -> str:
    """A header name in its usual spelling (compact forms expanded)."""
    lowered = name.lower()
    if lowered in COMPACT:
        return COMPACT[lowered]
    return _CANONICAL.get(lowered, name)


class Headers:
    """Ordered, case-insensitive SIP headers; a name may repeat (Via, Route, ...)."""

    def __init__(self, items: list[tuple[str, str]] | None = None) -> None:
        self._items: list[tuple[str, str]] = []
        for name, value in items or []:
            self.add(name, value)

    def add(self, name: str, value: str) -> None:
        self._items.append((canonical(name), value))

    def get(self, name: str) -> str | None:
        key = canonical(name).lower()
        for item_name, value in self._items:
            if item_name.lower() == key:
                return value
        return None

    def get_all(self, name: str) -> list[str]:
        key = canonical(name).lower()
        return [value for item_name, value in self._items if item_name.lower() == key]

    def set(self, name: str, value: str) -> None:
        self.remove(name)
        self.add(name, value)

    def remove(self, name: str) -> None:
        key = canonical(name).lower()
        self._items = [(n, v) for n, v in self._items if n.lower() != key]

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class SipMessage:
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""

    @property
    def call_id(self) -> str:
        return self.headers.get("Call-ID") or ""

    @property
    def cseq(self) -> tuple[int, str]:
        """(number, method) of the CSeq header; the parser has checked it."""
        number, method = (self.headers.get("CSeq") or "0 NONE").split()
        return int(number), method

    def top_via(self) -> Via:
        return Via.parse(self.headers.get_all("Via")[0])

    def _serialize(self, start_line: str) -> bytes:
        lines = [start_line]
        lines += [f"{n}: {v}" for n, v in self.headers.items() if n != "Content-Length"]
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


@dataclass
class SipRequest(SipMessage):
    method: str = ""
    uri: str = ""

    def serialize(self) -> bytes:
        return self._serialize(f"{self.method} {self.uri} SIP/2.0")


@dataclass
class SipResponse(SipMessage):
    status: int = 0
    reason: str = ""

    def serialize(self) -> bytes:
        return self._serialize(f"SIP/2.0 {self.status} {self.reason}")


def _split_params(text: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        params[key.strip().lower()] = value.strip().strip('"')
    return params


@dataclass
class Via:
    """One Via value (RFC 3261 §20.42)."""

    transport: str
    host: str
    port: int | None
    params: dict[str, str]

    @classmethod
    def parse(cls, value: str) -> Via:
        match = _VIA.match(value.strip())
        if not match:
            raise SipParseError(f"malformed Via: {value!r}")
        transport, sent_by, rest = match.groups()
        host, port = split_host_port(sent_by)
        return cls(transport.upper(), host, port, _split_params(rest))

    @property
    def branch(self) -> str:
        return self.params.get("branch", "")

    @property
    def sent_by(self) -> str:
        return f"{self.host}:{self.port or 5060}"


@dataclass
class NameAddr:
    """A From/To/Contact value: optional display name, URI, header parameters (tag)."""

    uri: str
    display: str = ""
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: str) -> NameAddr:
        """Read a name-addr or addr-spec as RFC 3261 §20.10 and §25.1 write them; what RFC 4475
        holds invalid (quotbal, baddn, badaspec, regbadct) is refused, so it is answered 400.

        A quoted display name keeps its backslash escapes, so ``str()`` writes it back as it came.
        """
        value = value.strip()
        display = ""
        if value.startswith('"'):
            end = _quoted_end(value)
            if end < 0:
                raise SipParseError(f"unterminated quoted string: {value[:80]!r}")
            display, rest = value[1:end], value[end + 1 :].lstrip()
            if not rest.startswith("<"):
                raise SipParseError(f"malformed address: {value[:80]!r}")
        elif "<" in value:
            display, _, rest = value.partition("<")
            display, rest = display.strip(), "<" + rest
            if display and not _DISPLAY_TOKENS.fullmatch(display):
                raise SipParseError(f"display name must be quoted: {value[:80]!r}")
        else:
            uri, _, params = value.partition(";")
            uri = uri.strip()
            # Unbracketed, a URI with "?" or "," is ambiguous: §20.10 requires the brackets.
            if not uri or _WHITE.search(uri) or "?" in uri or "," in uri:
                raise SipParseError(f"malformed address: {value[:80]!r}")
            return cls(uri, "", _split_params(params))
        uri, sep, params = rest[1:].partition(">")
        # LAQUOT and RAQUOT take no white space inside the brackets (RFC 4475 badaspec).
        if not sep or not uri or _WHITE.search(uri):
            raise SipParseError(f"malformed address: {value[:80]!r}")
        params = params.strip()
        if params and not params.startswith(";"):
            raise SipParseError(f"malformed address: {value[:80]!r}")
        return cls(uri, display, _split_params(params))

    @property
    def tag(self) -> str | None:
        return self.params.get("tag")

    def __str__(self) -> str:
        display = f'"{self.display}" ' if self.display else ""
        params = "".join(f";{k}={v}" if v else f";{k}" for k, v in self.params.items())
        return f"{display}<{self.uri}>{params}"


def _quoted_end(text: str) -> int:
    """The index of the quote closing the quoted string ``text`` opens; -1 if none does."""
    index = 1
    while index < len(text):
        if text[index] == "\\":
            index += 2  # quoted-pair
            continue
        if text[index] == '"':
            return index
        index += 1
    return -1


def split_host_port(text: str) -> tuple[str, int | None]:
    """``host[:port]`` (IPv6 in brackets) into its parts; a bad port is a parse error."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise SipParseError(f"missing host in {text!r}")
    if not port_text:
        return host, None
    port = _number(port_text)
    if port is None or not 0 < port < 65536:
        raise SipParseError(f"bad port in {text!r}")
    return host, port


def uri_host_port(uri: str) -> tuple[str, int]:
    """Where a ``sip:`` URI points (no DNS SRV: host and port, 5060 by default)."""
    if not uri.lower().startswith("sip:"):
        raise ValueError(f"not a sip: URI: {uri!r}")
    rest = uri[4:].split(";", 1)[0].split("?", 1)[0]
    hostport = rest.rsplit("@", 1)[-1]
    host, port = split_host_port(hostport)
    return host, port or 5060


def uri_user(uri: str) -> str | None:
    """The user part of a SIP URI (the number, for a trunk)."""
    rest = uri.split(":", 1)[-1]
    return rest.split("@", 1)[0] if "@" in rest else None


def new_branch() -> str:
    """An RFC 3261 §8.1.1.7 branch (magic cookie prefix)."""
    return "z9hG4bK" + secrets.token_hex(10)


def new_tag() -> str:
    return secrets.token_hex(6)


def parse(data: bytes) -> SipRequest | SipResponse:
    """Read one datagram as a SIP message, strictly; see the module docstring."""
    if len(data) > MAX_MESSAGE_SIZE:
        raise SipParseError("message too large", status=513)
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = data.partition(b"\n\n")
        if not sep:
            raise SipParseError("no blank line after the headers")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SipParseError("headers are not UTF-8") from exc
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[0]:
        lines.pop(0)  # RFC 3261 §7.5: tolerate leading CRLFs
    if not lines:
        raise SipParseError("empty message")
    start = lines[0]
    message: SipRequest | SipResponse
    if _CONTROL.search(start):
        raise SipParseError(f"control character in the start line: {start[:80]!r}")
    start_error = None
    if status_match := _STATUS_LINE.match(start):
        message = SipResponse(status=int(status_match.group(1)), reason=status_match.group(2))
    else:
        parts = start.split()
        if len(parts) < 3 or not _TOKEN.match(parts[0]) or not parts[-1].startswith("SIP/"):
            raise SipParseError(f"bad start line: {start[:80]!r}")
        # Shaped like a request: read its headers, so that even a bad request line is answered.
        message = SipRequest(method=parts[0], uri=parts[1])
        start_error = _request_line_error(start, parts)
    errors = _read_headers(lines[1:], message.headers)
    partial = message if isinstance(message, SipRequest) else None
    if start_error or errors:
        raise SipParseError(start_error or errors[0], partial)
    _check(message, body, partial)
    return message


def _request_line_error(start: str, parts: list[str]) -> str | None:
    """What is wrong with a request line (RFC 4475 §3.1.2: badvers, lwsruri, lwsstart, trws,
    ltgtruri, escruri), or None."""
    if parts[-1] != "SIP/2.0":
        return f"unsupported version {parts[-1][:20]!r}"
    if len(parts) > 3:
        return f"white space in the Request-URI: {start[:80]!r}"
    if start != " ".join(parts):
        return f"extra white space in the request line: {start[:80]!r}"
    uri = parts[1]
    if not _URI.fullmatch(uri):
        return f"malformed Request-URI: {uri[:80]!r}"
    scheme, _, rest = uri.partition(":")
    if scheme.lower() in ("sip", "sips") and "?" in rest.rpartition("@")[2]:
        return f"headers in the Request-URI: {uri[:80]!r}"  # §19.1.1: not allowed there
    return None


def _read_headers(lines: list[str], headers: Headers) -> list[str]:
    errors: list[str] = []
    folded: list[str] = []
    for line in lines:
        if line[:1] in (" ", "\t") and folded:
            folded[-1] += " " + line.strip()  # RFC 3261 §7.3.1 line folding
        else:
            folded.append(line)
    if len(folded) > MAX_HEADERS:
        return [f"more than {MAX_HEADERS} header lines"]
    for line in folded:
        if len(line) > MAX_HEADER_LINE:
            errors.append("header line too long")
            continue
        if _CONTROL.search(line):
            errors.append(f"control character in a header line: {line[:80]!r}")
            continue
        name, sep, value = line.partition(":")
        name = name.strip()
        if not sep or not _TOKEN.match(name):
            errors.append(f"malformed header line: {line[:80]!r}")
            continue
        value = value.strip()
        if canonical(name) in ("Via", "Contact", "Route", "Record-Route", "Allow", "Supported"):
            items = _split_commas(value)  # RFC 3261 §7.3.1: comma-joined values
        else:
            items = [value]
        for item in items:
            # Each comma-joined value counts: a datagram of thousands of Vias would come back
            # as thousands of lines in our 400 (to a source address anyone can forge).
            if len(headers) == MAX_HEADERS:
                return [f"more than {MAX_HEADERS} headers"]
            headers.add(name, item)
    return errors


def _split_commas(value: str) -> list[str]:
    items: list[str] = []
    current: list[str] = []
    depth, quoted, escaped = 0, False, False
    for char in value:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True  # a quoted-pair: \" does not end the string
        elif char == '"':
            quoted = not quoted
        elif not quoted and char == "<":
            depth += 1
        elif not quoted and char == ">":
            depth -= 1
        if char == "," and not quoted and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    items.append("".join(current).strip())
    return [item for item in items if item]


def _check(message: SipRequest | SipResponse, body: bytes, partial: SipRequest | None) -> None:
    headers = message.headers
    for name in REQUIRED_REQUEST_HEADERS:
        if name not in headers:
            raise SipParseError(f"missing {name} header", partial)
    for name in SINGLE_HEADERS:
        if len(headers.get_all(name)) > 1:  # which one would we believe? (multi01, mcl01)
            raise SipParseError(f"more than one {name} header", partial)
    cseq = (headers.get("CSeq") or "").split()
    number = _number(cseq[0]) if len(cseq) == 2 else None
    if number is None or number >= 2**31:
        raise SipParseError(f"malformed CSeq: {(headers.get('CSeq') or '')[:40]!r}", partial)
    if isinstance(message, SipRequest) and cseq[1] != message.method:
        raise SipParseError("CSeq method does not match the request method", partial)
    for via in headers.get_all("Via"):
        try:
            Via.parse(via)
        except SipParseError as exc:
            raise SipParseError(str(exc), partial) from exc
    # The addresses a dialog is made of (dialog.py reads them): From, To, Contact, Record-Route.
    addresses = [headers.get("From") or "", headers.get("To") or ""]
    for value in addresses + headers.get_all("Contact") + headers.get_all("Record-Route"):
        try:
            NameAddr.parse(value)
        except SipParseError as exc:
            raise SipParseError(str(exc), partial) from exc
    max_forwards = headers.get("Max-Forwards")
    if max_forwards is not None and _number(max_forwards) is None:
        raise SipParseError(f"malformed Max-Forwards: {max_forwards[:20]!r}", partial)
    length_text = headers.get("Content-Length")
    if length_text is not None:
        length = _number(length_text)
        if length is None:
            raise SipParseError(f"malformed Content-Length: {length_text[:20]!r}", partial)
        if length > len(body):
            raise SipParseError("body shorter than Content-Length", partial)
        body = body[:length]
    message.body = body


def make_response(
    request: SipRequest,
    status: int,
    reason: str | None = None,
    *,
    to_tag: str | None = None,
    body: bytes = b"",
    content_type: str | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> SipResponse:
    """A response to ``request`` per RFC 3261 §8.2.6 (Via, From, To, Call-ID, CSeq copied).

    A response that makes or confirms a dialog (a 101-299 to an INVITE) also carries
    the request's Record-Route (§12.1.1), so the caller's in-dialog requests go back
    through the proxies that asked to stay on the path.
    """
    response = SipResponse(status=status, reason=reason or REASONS.get(status, "Unknown"))
    for via in request.headers.get_all("Via"):
        response.headers.add("Via", via)
    if request.method == "INVITE" and 100 < status < 300:
        for route in request.headers.get_all("Record-Route"):
            response.headers.add("Record-Route", route)
    for name in ("From", "To", "Call-ID", "CSeq"):
        value = request.headers.get(name)
        if value is not None:
            response.headers.add(name, value)
    to_value = request.headers.get("To")
    if to_tag and to_value is not None and status != 100:
        to = NameAddr.parse(to_value)
        if to.tag is None:
            to.params["tag"] = to_tag
            response.headers.set("To", str(to))
    for name, value in headers or []:
        response.headers.add(name, value)
    if body:
        response.body = body
        response.headers.set("Content-Type", content_type or "application/sdp")
    return response
