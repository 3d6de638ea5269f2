"""``bench pooling``: time to first byte with pooled connections vs a new one per request.

The TTS request (our protocol, ``POST /v1/speech``) and the LLM request (a
streamed OpenAI chat completion) go to the stub model server in this process,
over loopback, in plain HTTP and in HTTPS with a self-signed certificate made
for the run. "pooled" sends every request on one long-lived aiohttp session
whose keep-alive connection was opened by a warm-up request (what
``agent.pipeline.http_pools`` does for every call); "fresh" opens a new session, so a new
TCP (and TLS) connection, per request. The clock stops at the first body byte.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.ledger.quantiles import percentile
from infra.stub_server import create_app
from tools.bench import _machine, _write_report

TTS_BODY = {"text": "Hello, this is Sam from Acme Collections.", "sample_rate": 16000}
LLM_BODY = {
    "model": "stub",
    "stream": True,
    "max_tokens": 20,
    "messages": [{"role": "user", "content": "Is this a good time?"}],
}


def self_signed(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A certificate for 127.0.0.1: the server's TLS context and a client one that trusts it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


async def first_byte_ms(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], tls: ssl.SSLContext | None
) -> float:
    """Milliseconds from sending the request to the first byte of the response body."""
    t0 = time.perf_counter()
    async with session.post(url, json=body, ssl=tls if tls is not None else True) as response:
        response.raise_for_status()
        await response.content.readany()
        elapsed = (time.perf_counter() - t0) * 1000
        await response.read()
    return elapsed


async def sample(
    make_session: Callable[[], aiohttp.ClientSession],
    pooled: bool,
    request: Callable[[aiohttp.ClientSession], Awaitable[float]],
    n: int,
) -> list[float]:
    if pooled:
        async with make_session() as session:
            await request(session)  # opens the keep-alive connection, as a call's warm-up does
            return [await request(session) for _ in range(n)]
    times = []
    for _ in range(n):
        async with make_session() as session:
            times.append(await request(session))
    return times


async def measure(requests: int) -> list[tuple[str, str, str, list[float]]]:
    """(client, transport, mode, first-byte times) for every combination, same run."""
    with tempfile.TemporaryDirectory() as tmp:
        server_tls, client_tls = self_signed(Path(tmp))
        runner = web.AppRunner(create_app())
        await runner.setup()
        plain = web.TCPSite(runner, "127.0.0.1", 0)
        secure = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
        await plain.start()
        await secure.start()
        ports = [a[1] for a in runner.addresses]
        try:
            results = []
            for transport, scheme, port, tls in (
                ("http", "http", ports[0], None),
                ("https", "https", ports[1], client_tls),
            ):
                for client, path, body in (
                    ("TTS", "/v1/speech", TTS_BODY),
                    ("LLM", "/v1/chat/completions", LLM_BODY),
                ):
                    url = f"{scheme}://127.0.0.1:{port}{path}"

                    async def request(
                        s: aiohttp.ClientSession,
                        url: str = url,
                        body: dict[str, object] = body,
                        tls: ssl.SSLContext | None = tls,
                    ) -> float:
                        return await first_byte_ms(s, url, body, tls)

                    for mode in ("fresh", "pooled"):
                        times = await sample(
                            aiohttp.ClientSession, mode == "pooled", request, requests
                        )
                        results.append((client, transport, mode, times))
            return results
        finally:
            await runner.cleanup()


def table(results: list[tuple[str, str, str, list[float]]]) -> str:
    lines = [
        "| client | transport | connection | p50 ms | p95 ms |",
        "|---|---|---|---:|---:|",
    ]
    for client, transport, mode, times in results:
        label = "pooled (keep-alive)" if mode == "pooled" else "new per request"
        lines.append(
            f"| {client} | {transport} | {label} | {percentile(times, 0.5):.2f} "
            f"| {percentile(times, 0.95):.2f} |"
        )
    return "\n".join(lines)


def run_pooling_bench(requests: int, output: str) -> int:
    """``python -m agent bench pooling``: print the table and write it to ``output``."""
    results = asyncio.run(measure(requests))
    rendered = table(results)
    print(rendered)
    report = "\n".join(
        [
            "# Connection pooling: time to first byte",
            "",
            f"`python -m agent bench pooling --requests {requests}` on {_machine()}, "
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d}.",
            "",
            "The stub model server in the same process, over loopback: the TTS request of our",
            "protocol and a streamed OpenAI chat completion, each timed to the first body byte.",
            "`pooled` reuses one session whose keep-alive connection a warm-up request opened",
            "(what `agent/pipeline/http_pools.py` gives every call); `new per request` opens a new",
            "session, so a new TCP (and, for https, TLS) connection, each time.",
            "",
            rendered,
            "",
            "What it shows: on loopback a round trip costs microseconds, so what pooling saves",
            "here is only the CPU cost of connection setup: a fraction of a millisecond for TCP,",
            "about 2-3 ms for a TLS handshake (both ends on this machine's CPU). Across a network",
            "every new connection also pays its round trips before the first request byte (TCP 1,",
            "TLS 1.3 one more, TLS 1.2 two more), so at a 50-100 ms cloud RTT a fresh HTTPS",
            "connection costs 100-300 ms: the gap the reference talk closed (>500 ms to <250 ms)",
            "by pooling. This loopback run cannot show that part and does not claim to.",
            "The fallback TTS websocket (agent/pipeline/cartesia.py) is opened at call start",
            "for the same reason.",
            "",
        ]
    )
    return _write_report(output, report)
