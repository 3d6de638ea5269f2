"""A fake carrier for the tests: signs voice webhooks as Twilio and Telnyx document it.

The signing here is written from the carriers' documentation, apart from the code
under test, so that a shared misreading would not pass unnoticed (the Twilio
algorithm is also pinned to Twilio's published example in test_carrier_auth.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

PUBLIC_URL = "https://agent.example.com"
TWILIO_AUTH_TOKEN = "test-twilio-auth-token"
#: A fixed "now" for the tests that inject a clock (Unix seconds).
NOW = 1_700_000_000.0


@dataclass
class Clock:
    """A clock the test moves by hand."""

    now: float = NOW

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeCarrier:
    """Twilio's auth token and a Telnyx account's Ed25519 key pair, made for the test."""

    twilio_auth_token: str = TWILIO_AUTH_TOKEN
    telnyx_key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    @property
    def telnyx_public_key(self) -> str:
        """The public key as the Telnyx portal shows it: base64 of the 32 raw bytes."""
        raw = self.telnyx_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return base64.b64encode(raw).decode()

    def sign(
        self, carrier: str, url: str, form: dict[str, str], timestamp: float = NOW
    ) -> tuple[bytes, dict[str, str]]:
        """The form-encoded body and the headers of a webhook to ``url``, signed."""
        body = urlencode(form).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if carrier == "twilio":
            data = url + "".join(k + v for k, v in sorted(form.items()))
            key = self.twilio_auth_token.encode()
            digest = hmac.new(key, data.encode(), hashlib.sha1).digest()
            headers["X-Twilio-Signature"] = base64.b64encode(digest).decode()
        else:
            stamp = str(int(timestamp))
            signature = self.telnyx_key.sign(stamp.encode() + b"|" + body)
            headers["telnyx-timestamp"] = stamp
            headers["telnyx-signature-ed25519"] = base64.b64encode(signature).decode()
        return body, headers

    async def post(
        self,
        client: TestClient,
        carrier: str,
        form: dict[str, str],
        timestamp: float = NOW,
        public_url: str = PUBLIC_URL,
    ) -> ClientResponse:
        """Post ``form`` to ``/voice/{carrier}`` as the carrier does, signed for the URL it
        was configured with (``public_url``)."""
        path = f"/voice/{carrier}"
        body, headers = self.sign(carrier, public_url + path, form, timestamp)
        return await client.post(path, data=body, headers=headers)


def stream_path(document: str) -> str:
    """The path of the ``<Stream url>`` in a TwiML/TeXML answer (the test server's host
    is not the public one)."""
    match = re.search(r'<Stream url="([^"]+)"', document)
    assert match, document
    return urlsplit(match.group(1)).path
