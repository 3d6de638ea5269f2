"""LiveKit: the agent's access token, the transport it joins with, the dispatch route.

No LiveKit server can run here, so joining a room is not exercised (see docs/carriers.md).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from livekit.api import TokenVerifier
from pipecat.transports.livekit.transport import LiveKitTransport

from agent.config import Settings
from agent.console.audit import BY_CODE
from agent.console.context import CLOCK, ENGINE, utc_now
from agent.console.tokens import Tokens
from agent.runtime.context import AgentRuntime
from agent.server.app import make_app
from agent.server.carriers import (
    LiveKitConfigError,
    StartedCall,
    add_livekit_routes,
    livekit_config,
)
from telephony.carriers.livekit import AGENT_IDENTITY, LiveKitConfig, access_token, transport_for

CONFIG = LiveKitConfig(url="wss://livekit.example.com", api_key="APIkey", api_secret="s" * 32)


def settings(**env: str) -> Settings:
    return Settings.from_env(env, dotenv=False)


def test_the_token_lets_the_agent_join_that_room_only_for_a_while():
    before = int(time.time())
    token = access_token(CONFIG, "debt-42", ttl=timedelta(minutes=5))
    claims = TokenVerifier(CONFIG.api_key, CONFIG.api_secret).verify(token)
    assert claims.identity == AGENT_IDENTITY and claims.kind == "agent"
    assert claims.video is not None
    assert claims.video.room_join is True and claims.video.room == "debt-42"
    assert claims.video.can_publish and claims.video.can_subscribe
    assert not claims.video.room_admin and not claims.video.room_create
    raw = jwt.decode(token, CONFIG.api_secret, algorithms=["HS256"], issuer=CONFIG.api_key)
    assert raw["sub"] == AGENT_IDENTITY
    assert before + 300 - 5 <= raw["exp"] <= int(time.time()) + 300 + 5


def test_a_token_signed_with_another_secret_is_rejected():
    token = access_token(CONFIG, "debt-42")
    with pytest.raises(jwt.InvalidSignatureError):
        TokenVerifier(CONFIG.api_key, "another-secret-" + "x" * 20).verify(token)


def test_the_transport_joins_the_configured_server_and_room():
    transport = transport_for(CONFIG, "debt-42", 16000)
    assert isinstance(transport, LiveKitTransport)
    client = transport._client  # noqa: SLF001 - what pipecat will connect with
    assert client._url == CONFIG.url and client._room_name == "debt-42"  # noqa: SLF001
    claims = TokenVerifier(CONFIG.api_key, CONFIG.api_secret).verify(client._token)  # noqa: SLF001
    assert claims.video is not None and claims.video.room == "debt-42"
    params = transport._params  # noqa: SLF001
    assert params.audio_in_enabled and params.audio_out_enabled
    assert params.audio_in_sample_rate == 16000 and params.audio_out_sample_rate == 16000


def test_configuration_is_all_three_or_nothing():
    assert livekit_config(settings()) is None
    full = livekit_config(
        settings(LIVEKIT_URL="wss://lk", LIVEKIT_API_KEY="k", LIVEKIT_API_SECRET="s")
    )
    assert full == LiveKitConfig("wss://lk", "k", "s")
    with pytest.raises(LiveKitConfigError, match="missing: LIVEKIT_API_SECRET"):
        livekit_config(settings(LIVEKIT_URL="wss://lk", LIVEKIT_API_KEY="k"))
    with pytest.raises(LiveKitConfigError, match="LIVEKIT_URL must be"):
        livekit_config(
            settings(LIVEKIT_URL="lk.example.com", LIVEKIT_API_KEY="k", LIVEKIT_API_SECRET="s")
        )


@pytest.fixture
async def dispatcher(db_engine):
    """The dispatch route with a starter that records what it was asked to start, and a
    client with a ``livekit:dispatch`` token."""
    started: list[tuple[object, object]] = []

    async def idle() -> None:
        return None

    def start(transport, info):
        started.append((transport, info))
        return StartedCall("c" * 32, asyncio.get_running_loop().create_task(idle()))

    app = web.Application()
    app[ENGINE], app[CLOCK] = db_engine, utc_now
    add_livekit_routes(app, CONFIG, 16000, start)
    token, _ = Tokens(db_engine).create("room", ["livekit:dispatch"], utc_now(), by=BY_CODE)
    headers = {"Authorization": f"Bearer {token}"}
    async with TestClient(TestServer(app), headers=headers) as client:
        yield client, started


@pytest.mark.parametrize("authorization", ["", "Bearer agt_guessed", "Basic dXNlcjpwYXNz"])
async def test_a_dispatch_needs_a_livekit_token(dispatcher, authorization):
    client, started = dispatcher
    response = await client.post(
        "/api/livekit/dispatch", json={"room": "debt-42"}, headers={"Authorization": authorization}
    )
    assert response.status == 401
    assert started == []


async def test_a_dispatch_starts_a_call_in_the_room(dispatcher):
    client, started = dispatcher
    response = await client.post("/api/livekit/dispatch", json={"room": "debt-42"})
    assert response.status == 200
    assert await response.json() == {
        "call_id": "c" * 32,
        "room": "debt-42",
        "identity": AGENT_IDENTITY,
    }
    [(transport, info)] = started
    assert isinstance(transport, LiveKitTransport)
    assert info.path == "livekit" and info.network_id == "debt-42"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "must be JSON"),
        ("[]", "JSON object"),
        ("{}", "'room' must be"),
        ('{"room": ""}', "'room' must be"),
        ('{"room": "../etc"}', "'room' must be"),
        ('{"room": 7}', "'room' must be"),
    ],
)
async def test_bad_dispatches_get_a_400_that_says_why(dispatcher, body, message):
    client, started = dispatcher
    response = await client.post("/api/livekit/dispatch", data=body)
    assert response.status == 400 and message in (await response.json())["error"]
    assert started == []


async def test_without_livekit_configured_the_route_says_so(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}", "DATA_DIR": str(tmp_path)}
    async with AgentRuntime(Settings.from_env(env), stub_models=True) as ctx:
        token, _ = Tokens(ctx.engine).create("room", ["livekit:dispatch"], utc_now(), by=BY_CODE)
        headers = {"Authorization": f"Bearer {token}"}
        async with TestClient(TestServer(make_app(ctx)), headers=headers) as client:
            response = await client.post("/api/livekit/dispatch", json={"room": "debt-42"})
            assert response.status == 503
            assert "LIVEKIT_URL" in (await response.json())["error"]
