"""HTTP digest for SIP (RFC 2617, RFC 8760): answering a challenge, and challenging a caller.

Nonces are stateless: a timestamp signed with a per-process key, so any nonce we issued can be
checked for age without a table; ``nc`` replays are refused per nonce while it is fresh.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping

_PARAM = re.compile(r'([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]+)')
ALGORITHMS = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}


class AuthError(ValueError):
    """A challenge we cannot answer."""


def parse_digest(value: str) -> dict[str, str]:
    """The parameters of a ``Digest ...`` header value (keys lower-cased)."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        raise AuthError(f"not a digest header: {scheme!r}")
    return {k.lower(): v.strip('"') for k, v in _PARAM.findall(rest)}


def _h(algorithm: str, text: str) -> str:
    return ALGORITHMS[algorithm](text.encode()).hexdigest()


def digest_response(
    params: Mapping[str, str],
    *,
    username: str,
    password: str,
    method: str,
    uri: str,
    cnonce: str | None,
    nc: str | None,
) -> str:
    algorithm = params.get("algorithm", "MD5").upper()
    ha1 = _h(algorithm, f"{username}:{params['realm']}:{password}")
    ha2 = _h(algorithm, f"{method}:{uri}")
    if params.get("qop"):
        return _h(algorithm, f"{ha1}:{params['nonce']}:{nc}:{cnonce}:{params['qop']}:{ha2}")
    return _h(algorithm, f"{ha1}:{params['nonce']}:{ha2}")


def authorization(challenge: str, *, username: str, password: str, method: str, uri: str) -> str:
    """The Authorization/Proxy-Authorization value answering a WWW-/Proxy-Authenticate value."""
    params = dict(parse_digest(challenge))
    algorithm = params.get("algorithm", "MD5").upper()
    if algorithm not in ALGORITHMS or "nonce" not in params or "realm" not in params:
        raise AuthError(f"unsupported digest challenge: {challenge!r}")
    qops = [q.strip() for q in params.get("qop", "").split(",") if q.strip()]
    if qops and "auth" not in qops:
        raise AuthError("challenge wants qop=auth-int only")
    cnonce = nc = None
    if qops:
        params["qop"], cnonce, nc = "auth", secrets.token_hex(8), "00000001"
    else:
        params.pop("qop", None)
    response = digest_response(
        params, username=username, password=password, method=method, uri=uri, cnonce=cnonce, nc=nc
    )
    parts = [
        f'username="{username}"',
        f'realm="{params["realm"]}"',
        f'nonce="{params["nonce"]}"',
        f'uri="{uri}"',
        f'response="{response}"',
        f"algorithm={algorithm}",
    ]
    if "opaque" in params:
        parts.append(f'opaque="{params["opaque"]}"')
    if qops:
        parts += ["qop=auth", f"nc={nc}", f'cnonce="{cnonce}"']
    return "Digest " + ", ".join(parts)


def _same(expected: str, given: str) -> bool:
    """A constant-time comparison that also takes non-ASCII text from the wire (as bytes:
    ``hmac.compare_digest`` raises TypeError on a non-ASCII ``str``)."""
    return hmac.compare_digest(expected.encode(), given.encode())


class DigestChallenger:
    """Challenges requests (401) and checks their credentials against ``users``."""

    def __init__(self, realm: str, users: Mapping[str, str], nonce_ttl: float = 300.0) -> None:
        self.realm, self.users, self.nonce_ttl = realm, dict(users), nonce_ttl
        self._key = secrets.token_bytes(32)
        self._seen_nc: dict[str, int] = {}

    def _sign(self, stamp: str) -> str:
        return hmac.new(self._key, stamp.encode(), hashlib.sha256).hexdigest()[:32]

    def challenge(self, stale: bool = False) -> str:
        """A WWW-Authenticate value with a fresh nonce."""
        stamp = f"{time.time():.3f}"
        nonce = f"{stamp}.{self._sign(stamp)}"
        stale_part = ", stale=true" if stale else ""
        return (
            f'Digest realm="{self.realm}", nonce="{nonce}", qop="auth", algorithm=MD5{stale_part}'
        )

    def _nonce_age(self, nonce: str) -> float | None:
        stamp_full, _, signature = nonce.rpartition(".")
        if not _same(self._sign(stamp_full), signature):
            return None
        try:
            return time.time() - float(stamp_full)
        except ValueError:
            return None

    def check(self, header: str | None, method: str, uri: str) -> str:
        """``ok``, ``stale`` (right password, old nonce) or ``denied``.

        ``uri`` is the request's Request-URI: the digest's ``uri`` must be that very string
        (RFC 2617 §3.2.2.5), else credentials signed for another request would be taken here.
        """
        if not header:
            return "denied"
        try:
            params = parse_digest(header)
        except AuthError:
            return "denied"
        username, nonce = params.get("username", ""), params.get("nonce", "")
        password = self.users.get(username)
        age = self._nonce_age(nonce)
        if password is None or age is None or params.get("realm") != self.realm:
            return "denied"
        if params.get("algorithm", "MD5").upper() != "MD5" or params.get("uri") != uri:
            return "denied"
        # Our challenge offers qop=auth, so a client MUST answer with it (RFC 2617 3.2.2);
        # without it nothing counts nc, and a captured answer would replay until the nonce ages.
        qop = params.get("qop")
        nc = params.get("nc", "")
        if qop != "auth" or not re.fullmatch(r"[0-9a-fA-F]{8}", nc):
            return "denied"
        expected = digest_response(
            params,
            username=username,
            password=password,
            method=method,
            uri=uri,
            cnonce=params.get("cnonce"),
            nc=nc,
        )
        if not _same(expected, params.get("response", "")):
            return "denied"
        if age > self.nonce_ttl:
            return "stale"
        count = int(nc, 16)
        self._seen_nc = {
            n: c for n, c in self._seen_nc.items() if (self._nonce_age(n) or 1e9) <= self.nonce_ttl
        }
        if count <= self._seen_nc.get(nonce, 0):
            return "denied"
        self._seen_nc[nonce] = count
        return "ok"
