"""Carrier webhooks must be signed and media streams announced by one (issue 18).

A fake carrier signs as Twilio and Telnyx document it (tests/carriers.py); the routes
are the real ones, with the clock injected, on SQLite and PostgreSQL: the tokens and the
replay memory are in the database, shared by workers (apps) on one database.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import pytest
from aiohttp import WSMsgType, WSServerHandshakeError, web
from aiohttp.test_utils import TestClient, TestServer
from pipecat.transports.base_transport import BaseTransport
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from agent.access import check_routes, rules_of
from agent.config import ConfigError, Settings
from agent.console.context import ENGINE
from agent.server.carrier_auth import TOKEN_TTL_S, SeenWebhooks, StreamTokens
from agent.server.carriers import MediaStreamConfig, StartedCall, add_carrier_routes
from agent.store.database import create_engine_for
from agent.store.tables import MediaStreamToken, SeenWebhook
from telephony.carriers.media_stream import CarrierCredentials
from telephony.carriers.signatures import (
    MAX_AGE_S,
    MAX_AHEAD_S,
    REPLAY_WINDOW_S,
    Announced,
    twilio_signature,
)
from telephony.line import CallInfo
from tests.carriers import PUBLIC_URL, Clock, FakeCarrier, stream_path

CALLER = "+15551234567"
OUR_NUMBER = "+15557654321"
#: What a forged or tampered stream would claim.
OTHER_NUMBER = "+15550000000"
WEBHOOK = {"CallSid": "CA0123456789abcdef0123456789abcdef", "From": CALLER, "To": OUR_NUMBER}
CARRIERS = ("twilio", "telnyx")


def start_event(carrier: str, caller: str = OTHER_NUMBER) -> dict[str, Any]:
    """A ``start`` whose numbers are not the webhook's: the webhook's must win."""
    if carrier == "twilio":
        return {
            "event": "start",
            "streamSid": "MZ1",
            "start": {
                "streamSid": "MZ1",
                "callSid": WEBHOOK["CallSid"],
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
                "customParameters": {"from": caller, "to": caller},
            },
        }
    return {
        "event": "start",
        "stream_id": "S1",
        "start": {
            "call_control_id": "v3:1",
            "from": caller,
            "to": caller,
            "media_format": {"encoding": "PCMU", "sample_rate": 8000},
        },
    }


@dataclass
class Routes:
    """The carrier routes on a test server: the carrier that signs, the calls they
    started, the clock."""

    client: TestClient
    carrier: FakeCarrier
    clock: Clock
    calls: list[CallInfo]


def _config(carrier: FakeCarrier, clock: Clock, **credentials: str | None) -> MediaStreamConfig:
    keys: dict[str, Any] = {
        "twilio_auth_token": carrier.twilio_auth_token,
        "telnyx_public_key": carrier.telnyx_public_key,
        "hang_up": False,
    }
    return MediaStreamConfig(
        credentials=CarrierCredentials(**(keys | credentials)),
        public_url=PUBLIC_URL,
        start_timeout_s=2.0,
        clock=clock,
    )


def _start_call(calls: list[CallInfo]) -> Callable[[BaseTransport, CallInfo], StartedCall]:
    def start_call(_transport: BaseTransport, info: CallInfo) -> StartedCall:
        calls.append(info)
        # The call ends at once: the socket is then closed by the route.
        return StartedCall("c" * 32, asyncio.get_running_loop().create_task(asyncio.sleep(0)))

    return start_call


def _app(config: MediaStreamConfig, calls: list[CallInfo], engine: Engine) -> web.Application:
    """A worker: the carrier routes on the database at ``engine`` (as ``setup_auth`` sets it)."""
    app = web.Application()
    app[ENGINE] = engine
    add_carrier_routes(app, config, _start_call(calls))
    return app


@pytest.fixture
async def routes(db_engine):
    carrier, clock, calls = FakeCarrier(), Clock(), []
    app = _app(_config(carrier, clock), calls, db_engine)
    async with TestClient(TestServer(app)) as client:
        yield Routes(client, carrier, clock, calls)


async def connect_and_start(r: Routes, carrier: str, path: str) -> WSMsgType:
    """Open the stream at ``path``, send ``start``, and answer how the socket ended."""
    ws = await r.client.ws_connect(path)
    await ws.send_json({"event": "connected"})
    await ws.send_json(start_event(carrier))
    msg = await ws.receive(timeout=10)
    await ws.close()
    return msg.type


async def refused_status(r: Routes, path: str) -> int:
    with pytest.raises(WSServerHandshakeError) as refused:
        await r.client.ws_connect(path)
    return refused.value.status


# --- The signature algorithms --------------------------------------------------------------


def test_the_twilio_signature_is_twilios_published_example():
    # Twilio's "Webhooks security" page: auth token 12345, this URL and these parameters.
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+12349013030",
        "Digits": "1234",
        "From": "+12349013030",
        "To": "+18005551212",
    }
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    assert twilio_signature("12345", url, params.items()) == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="


# --- Signed webhooks -----------------------------------------------------------------------


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_signed_webhook_gets_a_stream_whose_call_has_the_webhooks_numbers(routes, carrier):
    response = await routes.carrier.post(routes.client, carrier, WEBHOOK)
    assert response.status == 200
    document = await response.text()
    path = stream_path(document)
    assert path.startswith(f"/media/{carrier}/") and len(path.rsplit("/", 1)[1]) >= 40
    assert f'<Stream url="wss://agent.example.com{path}"' in document

    # The stream claims another caller; the call is stored with the signed webhook's.
    assert await connect_and_start(routes, carrier, path) in (WSMsgType.CLOSE, WSMsgType.CLOSED)
    [info] = routes.calls
    assert info.remote_number == CALLER and info.local_number == OUR_NUMBER


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_an_unsigned_webhook_is_refused_and_logged_without_secrets(routes, carrier, caplog):
    caplog.set_level(logging.WARNING, logger="agent.server.carrier_auth")
    response = await routes.client.post(f"/voice/{carrier}", data=WEBHOOK)
    assert response.status == 403
    assert "unsigned" in (await response.json())["error"]
    [record] = [r for r in caplog.records if r.name == "agent.server.carrier_auth"]
    assert carrier in record.getMessage() and "refused" in record.getMessage()
    assert routes.carrier.twilio_auth_token not in caplog.text


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_tampered_body_is_refused(routes, carrier, caplog):
    caplog.set_level(logging.WARNING, logger="agent.server.carrier_auth")
    body, headers = routes.carrier.sign(carrier, f"{PUBLIC_URL}/voice/{carrier}", WEBHOOK)
    forged = body.replace(b"5551234567", b"5550000000")
    assert forged != body
    response = await routes.client.post(f"/voice/{carrier}", data=forged, headers=headers)
    assert response.status == 403
    signature = headers.get("X-Twilio-Signature") or headers["telnyx-signature-ed25519"]
    assert "does not match" in caplog.text and signature not in caplog.text


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_tampered_signature_is_refused(routes, carrier):
    body, headers = routes.carrier.sign(carrier, f"{PUBLIC_URL}/voice/{carrier}", WEBHOOK)
    name = "X-Twilio-Signature" if carrier == "twilio" else "telnyx-signature-ed25519"
    for wrong in ("A" + headers[name][1:], headers[name][:-4], "not base64!", ""):
        if wrong == headers[name]:
            continue
        response = await routes.client.post(
            f"/voice/{carrier}", data=body, headers=headers | {name: wrong}
        )
        assert response.status == 403, wrong


async def test_a_telnyx_webhook_signed_with_another_key_is_refused(routes):
    impostor = FakeCarrier()
    assert (await impostor.post(routes.client, "telnyx", WEBHOOK)).status == 403


@pytest.mark.parametrize(
    "signed_url",
    [
        f"{PUBLIC_URL}/voice/telnyx",
        "https://evil.example/voice/twilio",
        f"{PUBLIC_URL}/voice/twilio?x=1",
    ],
)
async def test_a_twilio_signature_for_another_url_is_refused(routes, signed_url):
    # Telnyx's signature covers the body alone; Twilio's covers the URL it called.
    body, headers = routes.carrier.sign("twilio", signed_url, WEBHOOK)
    response = await routes.client.post("/voice/twilio", data=body, headers=headers)
    assert response.status == 403


async def test_twilio_may_sign_the_url_with_its_default_port(routes):
    body, headers = routes.carrier.sign(
        "twilio", "https://agent.example.com:443/voice/twilio", WEBHOOK
    )
    assert (await routes.client.post("/voice/twilio", data=body, headers=headers)).status == 200


async def test_without_public_url_the_signed_url_is_the_requests_host(db_engine):
    carrier, calls = FakeCarrier(), []
    config = replace(_config(carrier, Clock()), public_url=None)
    async with TestClient(TestServer(_app(config, calls, db_engine))) as client:
        host = f"{client.host}:{client.port}"
        body, headers = carrier.sign("twilio", f"https://{host}/voice/twilio", WEBHOOK)
        headers["X-Forwarded-Proto"] = "https"
        response = await client.post("/voice/twilio", data=body, headers=headers)
        assert response.status == 200
        assert f'<Stream url="wss://{host}/media/twilio/' in await response.text()


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_replayed_webhook_is_refused(routes, carrier):
    body, headers = routes.carrier.sign(carrier, f"{PUBLIC_URL}/voice/{carrier}", WEBHOOK)
    first = await routes.client.post(f"/voice/{carrier}", data=body, headers=headers)
    assert first.status == 200
    routes.clock.now += MAX_AGE_S - 1
    again = await routes.client.post(f"/voice/{carrier}", data=body, headers=headers)
    assert again.status == 403 and "replayed" in (await again.json())["error"]


async def test_the_replay_memory_is_bounded_by_its_window(routes):
    # Twilio signs no time, so an old request is known as a replay only this long.
    body, headers = routes.carrier.sign("twilio", f"{PUBLIC_URL}/voice/twilio", WEBHOOK)
    assert (await routes.client.post("/voice/twilio", data=body, headers=headers)).status == 200
    routes.clock.now += REPLAY_WINDOW_S + 1
    assert (await routes.client.post("/voice/twilio", data=body, headers=headers)).status == 200


@pytest.mark.parametrize(
    ("age_s", "status"),
    [
        (MAX_AGE_S - 1, 200),
        (MAX_AGE_S + 1, 403),
        (-(MAX_AHEAD_S - 1), 200),
        (-(MAX_AHEAD_S + 1), 403),
    ],
)
async def test_a_telnyx_timestamp_must_be_fresh(routes, age_s, status, caplog):
    caplog.set_level(logging.WARNING, logger="agent.server.carrier_auth")
    signed_at = routes.clock.now - age_s
    response = await routes.carrier.post(routes.client, "telnyx", WEBHOOK, timestamp=signed_at)
    assert response.status == status
    if status == 403:
        assert ("stale" if age_s > 0 else "ahead") in caplog.text


async def test_a_malformed_telnyx_timestamp_is_refused(routes):
    body, headers = routes.carrier.sign("telnyx", f"{PUBLIC_URL}/voice/telnyx", WEBHOOK)
    headers["telnyx-timestamp"] = "yesterday"
    assert (await routes.client.post("/voice/telnyx", data=body, headers=headers)).status == 403


# --- Configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("missing", "unconfigured", "variable"),
    [
        ("twilio_auth_token", "twilio", "TWILIO_AUTH_TOKEN"),
        ("telnyx_public_key", "telnyx", "TELNYX_PUBLIC_KEY"),
    ],
)
async def test_a_carrier_without_its_key_refuses_its_webhook_with_503(
    missing, unconfigured, variable, db_engine
):
    carrier = FakeCarrier()
    app = _app(_config(carrier, Clock(), **{missing: None}), [], db_engine)
    async with TestClient(TestServer(app)) as client:
        response = await carrier.post(client, unconfigured, WEBHOOK)
        assert response.status == 503
        assert variable in (await response.json())["error"]
        other = "telnyx" if unconfigured == "twilio" else "twilio"
        assert (await carrier.post(client, other, WEBHOOK)).status == 200


@pytest.mark.parametrize("key", ["not base64!", "c2hvcnQ=", "A" * 100])
def test_a_malformed_telnyx_public_key_stops_the_server(key, db_engine):
    config = _config(FakeCarrier(), Clock(), telnyx_public_key=key)
    with pytest.raises(ConfigError, match="TELNYX_PUBLIC_KEY"):
        _app(config, [], db_engine)


def test_the_carrier_routes_need_the_database():
    with pytest.raises(RuntimeError, match="setup_auth"):
        add_carrier_routes(web.Application(), _config(FakeCarrier(), Clock()), _start_call([]))


def test_the_carrier_secrets_are_not_in_the_settings_repr():
    settings = Settings.from_env(
        {
            "TWILIO_AUTH_TOKEN": "tw-s3cret",
            "TELNYX_API_KEY": "tx-s3cret",
            "TELNYX_PUBLIC_KEY": "cHVibGlj",
        }
    )
    assert settings.twilio_auth_token == "tw-s3cret" and settings.telnyx_public_key == "cHVibGlj"
    assert "s3cret" not in repr(settings)
    credentials = CarrierCredentials(twilio_auth_token="tw-s3cret", telnyx_api_key="tx-s3cret")
    assert "s3cret" not in repr(credentials)


async def test_every_carrier_route_declares_its_guard(routes):
    app = routes.client.server.app
    check_routes(app)
    names = {
        route.resource.canonical: [rule.name for rule in rules_of(route.handler) or ()]
        for route in app.router.routes()
        if route.resource is not None
    }
    assert "carrier signature" in names["/voice/{carrier}"][0]
    assert "media token" in names["/media/{carrier}/{token}"][0]
    assert "media token" in names["/media/{carrier}"][0]


# --- One-time media tokens -----------------------------------------------------------------


async def stream_of(r: Routes, carrier: str) -> str:
    response = await r.carrier.post(r.client, carrier, WEBHOOK)
    assert response.status == 200
    return stream_path(await response.text())


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_media_connect_without_a_token_is_refused_before_the_upgrade(routes, carrier):
    assert await refused_status(routes, f"/media/{carrier}") == 403
    assert await refused_status(routes, f"/media/{carrier}/made-up-token") == 403
    response = await routes.client.get(f"/media/{carrier}")
    assert response.status == 403 and "signed voice webhook" in (await response.json())["error"]
    assert routes.calls == []


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_media_token_is_good_once(routes, carrier):
    path = await stream_of(routes, carrier)
    await connect_and_start(routes, carrier, path)
    assert await refused_status(routes, path) == 403
    assert len(routes.calls) == 1


async def test_a_media_token_expires(routes):
    path = await stream_of(routes, "twilio")
    routes.clock.now += TOKEN_TTL_S
    assert await refused_status(routes, path) == 403
    assert routes.calls == []


async def test_a_media_token_is_for_its_carrier_only(routes):
    path = await stream_of(routes, "twilio")
    assert await refused_status(routes, path.replace("/twilio/", "/telnyx/")) == 403
    # Spent by the try: not good on its own carrier either.
    assert await refused_status(routes, path) == 403


async def test_a_token_spent_on_a_plain_get_is_spent(routes):
    path = await stream_of(routes, "telnyx")
    response = await routes.client.get(path)
    assert response.status == 400 and "websocket" in (await response.json())["error"]
    assert await refused_status(routes, path) == 403


# --- Several workers on one database ------------------------------------------------------

T = TypeVar("T")


@pytest.fixture
def two_engines(db_url):
    """Two engines on one database, as two worker processes or pods have."""
    engines = [create_engine_for(db_url) for _ in range(2)]
    yield engines
    for engine in engines:
        engine.dispose()


@pytest.fixture
async def workers(two_engines):
    """Two workers on one database, signed for by one carrier, on one clock."""
    carrier, clock, calls = FakeCarrier(), Clock(), []
    apps = [_app(_config(carrier, clock), calls, engine) for engine in two_engines]
    async with TestClient(TestServer(apps[0])) as a, TestClient(TestServer(apps[1])) as b:
        yield Routes(a, carrier, clock, calls), Routes(b, carrier, clock, calls)


def race(*attempts: Callable[[], T]) -> list[T]:
    """Run ``attempts`` on threads of their own, released at the same moment."""
    start = threading.Barrier(len(attempts))

    def run(attempt: Callable[[], T]) -> T:
        start.wait()
        return attempt()

    with ThreadPoolExecutor(len(attempts)) as pool:
        return list(pool.map(run, attempts))


def rows(engine: Engine, table: type[MediaStreamToken | SeenWebhook]) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(table)) or 0


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_token_minted_by_one_worker_is_spent_by_another_once(workers, carrier):
    minter, spender = workers
    path = await stream_of(minter, carrier)
    assert await connect_and_start(spender, carrier, path) in (WSMsgType.CLOSE, WSMsgType.CLOSED)
    [info] = spender.calls
    assert info.remote_number == CALLER and info.local_number == OUR_NUMBER
    assert await refused_status(minter, path) == 403
    assert await refused_status(spender, path) == 403
    assert len(spender.calls) == 1


async def test_two_sockets_for_one_token_on_two_workers_let_one_in(workers):
    path = await stream_of(workers[0], "twilio")

    async def connect(r: Routes) -> int:
        try:
            ws = await r.client.ws_connect(path)
        except WSServerHandshakeError as e:
            return e.status
        await ws.close()
        return 101

    assert sorted(await asyncio.gather(*(connect(r) for r in workers))) == [101, 403]


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_webhook_replayed_to_another_worker_is_refused(workers, carrier):
    first, other = workers
    body, headers = first.carrier.sign(carrier, f"{PUBLIC_URL}/voice/{carrier}", WEBHOOK)
    assert (await first.client.post(f"/voice/{carrier}", data=body, headers=headers)).status == 200
    again = await other.client.post(f"/voice/{carrier}", data=body, headers=headers)
    assert again.status == 403 and "replayed" in (await again.json())["error"]


def test_of_two_workers_spending_one_token_at_once_one_wins(two_engines):
    clock = Clock()
    minter, other = (StreamTokens(engine, clock) for engine in two_engines)
    announced = Announced("telnyx", CALLER, OUR_NUMBER)
    for _ in range(20):
        token = minter.mint(announced)
        won = race(partial(minter.spend, "telnyx", token), partial(other.spend, "telnyx", token))
        assert sorted(won, key=bool) == [None, announced]


def test_of_one_webhook_taken_by_two_workers_at_once_one_is_a_replay(two_engines):
    clock = Clock()
    first, other = (SeenWebhooks(engine) for engine in two_engines)
    for i in range(20):
        signed = f"webhook {i}".encode()
        taken = race(*(partial(s.first_time, "twilio", signed, clock.now) for s in (first, other)))
        assert sorted(taken) == [False, True]


def test_the_table_keeps_only_the_tokens_hash(db_engine):
    token = StreamTokens(db_engine, Clock()).mint(Announced("twilio", CALLER, OUR_NUMBER))
    with Session(db_engine) as session:
        [row] = session.scalars(select(MediaStreamToken))
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert (row.carrier, row.remote_number, row.local_number) == ("twilio", CALLER, OUR_NUMBER)


def test_expired_rows_are_purged_as_new_ones_come(db_engine):
    clock = Clock()
    tokens, seen = StreamTokens(db_engine, clock), SeenWebhooks(db_engine)
    for signed in (b"one", b"two"):
        tokens.mint(Announced("twilio"))
        assert seen.first_time("twilio", signed, clock.now)
        # Past both lives: the next mint and webhook drop these rows.
        clock.now += max(TOKEN_TTL_S, REPLAY_WINDOW_S)
    assert rows(db_engine, MediaStreamToken) == rows(db_engine, SeenWebhook) == 1
