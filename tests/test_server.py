"""The server's routes, over HTTP, on an agent whose models are the instant stubs."""

import asyncio
import re

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiortc import RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack

from agent.config import Settings
from agent.console.users import Users
from agent.runtime.context import AgentRuntime
from agent.server.app import make_app

PASSWORD = "a long operator password"


@pytest.fixture
async def client(tmp_path):
    settings = Settings.from_env(
        {"DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}", "DATA_DIR": str(tmp_path)}
    )
    async with AgentRuntime(settings, stub_models=True) as ctx:
        await asyncio.to_thread(Users(ctx.engine).add, "olive", PASSWORD, "operator")
        async with TestClient(TestServer(make_app(ctx))) as client:
            yield client


async def log_in(client, username="olive"):
    form = await client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text()).group(1)
    done = await client.post(
        "/login",
        data={"username": username, "password": PASSWORD, "csrf_token": token},
        allow_redirects=False,
    )
    assert done.status in (302, 303), await done.text()


async def test_the_call_page_is_served(client):
    page = await client.get("/")
    assert page.status == 200
    assert 'id="call"' in await page.text()
    script = await client.get("/static/call.js")
    assert script.status == 200 and "RTCPeerConnection" in await script.text()
    health = await client.get("/health")
    assert (await health.json()) == {"status": "ok", "calls": 0}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "must be JSON"),
        ("[1, 2]", "JSON object"),
        ('{"type": "answer", "sdp": "v=0"}', "'type' must be 'offer'"),
        ('{"type": "offer", "sdp": "hello"}', "starting with 'v=0'"),
        ('{"type": "offer", "sdp": "v=0\\r\\nm=video 9 UDP/TLS/RTP/SAVPF 96\\r\\n"}', "no audio"),
    ],
)
async def test_bad_offers_get_a_400_that_says_why(client, body, message):
    response = await client.post("/api/offer", data=body)
    assert response.status == 400
    assert message in (await response.json())["error"]
    assert (await (await client.get("/health")).json())["calls"] == 0


async def test_an_oversized_body_is_refused(client):
    response = await client.post("/api/offer", data="x" * (300 * 1024))
    assert response.status == 413


async def test_call_records_and_transcripts_need_a_login(client):
    assert (await client.get("/api/calls/" + "0" * 32)).status == 401
    assert (await client.get("/api/calls/" + "0" * 32 + "/transcript")).status == 401
    wrong = await client.get("/api/calls/" + "0" * 32 + "/transcript?token=guess")
    assert wrong.status == 401


async def test_unknown_calls_are_404(client):
    await log_in(client)
    assert (await client.get("/api/calls/" + "0" * 32)).status == 404
    transcript = await client.get("/api/calls/" + "0" * 32 + "/transcript")
    assert transcript.status == 404
    assert "no live call" in (await transcript.json())["error"]


async def test_an_offer_is_answered_and_the_call_is_recorded(client):
    # A real aiortc peer makes the offer; ICE need not complete for signalling.
    peer = RTCPeerConnection()
    peer.addTrack(AudioStreamTrack())
    await peer.setLocalDescription(await peer.createOffer())
    response = await client.post(
        "/api/offer", json={"sdp": peer.localDescription.sdp, "type": "offer"}
    )
    assert response.status == 200
    answer = await response.json()
    assert answer["type"] == "answer" and "m=audio" in answer["sdp"]
    call_id = answer["call_id"]
    assert len(call_id) == 32
    # The caller's own page follows its transcript with the token it was given.
    own = await client.get(
        f"/api/calls/{call_id}/transcript", params={"token": answer["transcript_token"]}
    )
    assert own.status == 200 and own.headers["Content-Type"] == "text/event-stream"
    own.close()

    await log_in(client)
    record = None
    for _ in range(50):
        found = await client.get(f"/api/calls/{call_id}")
        if found.status == 200:
            record = await found.json()
            break
        await asyncio.sleep(0.1)
    assert record is not None
    assert record["transport"] == "webrtc" and record["status"] == "active"
    await peer.close()


# -- capacity and draining ---------------------------------------------------------


@pytest.fixture
async def small_client(tmp_path):
    """A worker that takes one call at a time and drains within half a second."""
    settings = Settings.from_env(
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
            "DATA_DIR": str(tmp_path),
            "MAX_CALLS": "1",
            "DRAIN_TIMEOUT_S": "0.5",
        }
    )
    async with AgentRuntime(settings, stub_models=True) as ctx:
        async with TestClient(TestServer(make_app(ctx))) as client:
            yield client


async def _offer(client):
    peer = RTCPeerConnection()
    peer.addTrack(AudioStreamTrack())
    await peer.setLocalDescription(await peer.createOffer())
    response = await client.post(
        "/api/offer", json={"sdp": peer.localDescription.sdp, "type": "offer"}
    )
    return peer, response


async def test_ready_reports_capacity_and_a_full_worker_refuses_calls(small_client):
    ready = await small_client.get("/ready")
    assert ready.status == 200
    assert await ready.json() == {"calls": 0, "capacity": 1, "draining": False}
    first, answered = await _offer(small_client)
    assert answered.status == 200
    full = await small_client.get("/ready")
    assert full.status == 503 and (await full.json())["calls"] == 1
    second, refused = await _offer(small_client)
    assert refused.status == 503 and refused.headers["Retry-After"] == "5"
    assert "full (1 calls)" in (await refused.json())["error"]
    # Liveness is not readiness: a full worker is alive.
    assert (await small_client.get("/health")).status == 200
    await first.close()
    await second.close()


async def test_drain_stops_new_calls_and_waits_for_the_current_ones(small_client):
    peer, answered = await _offer(small_client)
    assert answered.status == 200
    drained = await small_client.post("/drain")
    # The call goes on past the deadline (0.5 s): the drain says so.
    assert drained.status == 200 and await drained.json() == {"drained": False, "calls": 1}
    ready = await small_client.get("/ready")
    assert ready.status == 503 and (await ready.json())["draining"] is True
    _, refused = await _offer(small_client)
    assert refused.status == 503 and "shutting down" in (await refused.json())["error"]
    await peer.close()


async def test_drain_of_an_idle_worker_answers_at_once(small_client):
    drained = await small_client.post("/drain")
    assert await drained.json() == {"drained": True, "calls": 0}


async def an_offer() -> tuple[RTCPeerConnection, dict[str, str]]:
    peer = RTCPeerConnection()
    peer.addTrack(AudioStreamTrack())
    await peer.setLocalDescription(await peer.createOffer())
    return peer, {"sdp": peer.localDescription.sdp, "type": "offer"}


async def test_the_call_page_is_limited_per_address_and_in_all(tmp_path):
    settings = Settings.from_env(
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
            "DATA_DIR": str(tmp_path),
            "TRUST_FORWARDED_FOR": "1",
            "CALL_PAGE_CALLS_PER_ADDRESS": "1",
            "CALL_PAGE_MAX_CALLS": "2",
        }
    )
    peers = []
    async with AgentRuntime(settings, stub_models=True) as ctx:
        async with TestClient(TestServer(make_app(ctx))) as client:

            async def offer(address):
                peer, body = await an_offer()
                peers.append(peer)
                headers = {"X-Forwarded-For": address}
                return await client.post("/api/offer", json=body, headers=headers)

            # Sent together, so that no call is registered before the others are judged.
            first, again = await asyncio.gather(offer("203.0.113.1"), offer("203.0.113.1"))
            assert sorted([first.status, again.status]) == [200, 429]
            assert (await offer("203.0.113.2")).status == 200
            full = await offer("203.0.113.3")
            assert full.status == 503 and "call page" in (await full.json())["error"]
            assert full.headers["Retry-After"]
            # The page's limit leaves the rest of the worker's capacity to other callers.
            ready = await (await client.get("/ready")).json()
            assert ready == {"calls": 2, "capacity": 4, "draining": False}
    for peer in peers:
        await peer.close()
