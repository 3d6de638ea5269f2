"""Digest authentication both ways (telephony/sip/auth.py)."""

from __future__ import annotations

import hashlib

import pytest

from telephony.sip.auth import AuthError, DigestChallenger, authorization, parse_digest


def test_rfc2617_style_response_without_qop() -> None:
    challenge = 'Digest realm="r", nonce="n"'
    header = authorization(challenge, username="u", password="p", method="INVITE", uri="sip:x")
    params = parse_digest(header)
    ha1 = hashlib.md5(b"u:r:p").hexdigest()
    ha2 = hashlib.md5(b"INVITE:sip:x").hexdigest()
    assert params["response"] == hashlib.md5(f"{ha1}:n:{ha2}".encode()).hexdigest()


def test_challenger_accepts_its_own_challenge_answered_with_qop() -> None:
    challenger = DigestChallenger("agent", {"trunk": "s3cret"})
    challenge = challenger.challenge()
    good = authorization(
        challenge, username="trunk", password="s3cret", method="INVITE", uri="sip:agent@127.0.0.1"
    )
    assert "qop=auth" in good
    assert challenger.check(good, "INVITE", "sip:agent@127.0.0.1") == "ok"
    assert challenger.check(good, "INVITE", "sip:agent@127.0.0.1") == "denied"  # nc replay
    bad = authorization(
        challenge, username="trunk", password="nope", method="INVITE", uri="sip:agent@127.0.0.1"
    )
    assert challenger.check(bad, "INVITE", "sip:agent@127.0.0.1") == "denied"
    assert challenger.check(None, "INVITE", "sip:agent@127.0.0.1") == "denied"
    forged = good.replace(challenge.split('nonce="')[1].split('"')[0], "1.abc")
    assert challenger.check(forged, "INVITE", "sip:agent@127.0.0.1") == "denied"


def test_stale_nonce() -> None:
    challenger = DigestChallenger("agent", {"trunk": "s3cret"}, nonce_ttl=-1)
    header = authorization(
        challenger.challenge(), username="trunk", password="s3cret", method="INVITE", uri="sip:a"
    )
    assert challenger.check(header, "INVITE", "sip:a") == "stale"


def test_unsupported_challenges() -> None:
    with pytest.raises(AuthError):
        authorization('Basic realm="r"', username="u", password="p", method="INVITE", uri="x")
    with pytest.raises(AuthError):
        authorization(
            'Digest realm="r", nonce="n", qop="auth-int"',
            username="u",
            password="p",
            method="INVITE",
            uri="x",
        )


def test_an_answer_without_qop_is_a_replay_risk_and_refused() -> None:
    """Our challenge offers qop=auth; an answer without it has no nc, so it could replay."""
    challenger = DigestChallenger("agent", {"trunk": "s3cret"})
    challenge = challenger.challenge().replace(', qop="auth"', "")
    header = authorization(
        challenge, username="trunk", password="s3cret", method="INVITE", uri="sip:agent@h"
    )
    assert "qop" not in header
    assert challenger.check(header, "INVITE", "sip:agent@h") == "denied"


def test_an_answer_signed_for_another_request_uri_is_refused() -> None:
    """RFC 2617 §3.2.2.5: the digest's ``uri`` is the Request-URI, as the client sent it.

    Exact strings, not RFC 3261 §19.1.4 URI equality: a client copies the Request-URI into
    ``uri`` verbatim (and hashes that very text), so only a replay or a forgery differs.
    """
    challenger = DigestChallenger("agent", {"trunk": "s3cret"})
    header = authorization(
        challenger.challenge(),
        username="trunk",
        password="s3cret",
        method="INVITE",
        uri="sip:agent@127.0.0.1",
    )
    assert challenger.check(header, "INVITE", "sip:other@127.0.0.1") == "denied"
    assert challenger.check(header, "INVITE", "sip:AGENT@127.0.0.1") == "denied"
    assert challenger.check(header, "INVITE", "sip:agent@127.0.0.1") == "ok"
