"""Carrier media streams: a fake carrier speaks Twilio's and Telnyx's protocol to the real app."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import numpy as np
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestClient, TestServer
from pipecat.audio.utils import create_stream_resampler, pcm_to_ulaw, ulaw_to_pcm
from pipecat.frames.frames import Frame, InputDTMFFrame, InterruptionFrame, OutputAudioRawFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.telnyx import TelnyxFrameSerializer
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.workers.runner import WorkerRunner
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.console.context import ENGINE
from agent.runtime.context import AgentRuntime
from agent.server.app import make_app
from agent.server.carriers import MediaStreamConfig, StartedCall, add_carrier_routes
from agent.store.tables import Call as CallRow
from telephony.carriers.media_stream import (
    POLICY_VIOLATION,
    CarrierCredentials,
    MediaStreamTransport,
    StreamProtocolError,
    connect_document,
    parse_start,
    serializer_for,
)
from tests.carriers import PUBLIC_URL, Clock, FakeCarrier, stream_path

CALLER = "+15551234567"
OUR_NUMBER = "+15557654321"
WEBHOOK = {"From": CALLER, "To": OUR_NUMBER, "CallSid": "CA0123456789abcdef0123456789abcdef"}


@pytest.fixture
def signer() -> FakeCarrier:
    """Signs the voice webhooks with the keys the agent is configured with."""
    return FakeCarrier()


@pytest.fixture
async def agent(tmp_path, signer):
    settings = Settings.from_env(
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}",
            "DATA_DIR": str(tmp_path),
            "PUBLIC_URL": PUBLIC_URL,
            "TWILIO_AUTH_TOKEN": signer.twilio_auth_token,
            "TELNYX_PUBLIC_KEY": signer.telnyx_public_key,
            # No REST hang-up: the test's calls are not the carriers'.
            "CARRIER_HANG_UP": "0",
        }
    )
    async with AgentRuntime(settings, stub_models=True) as ctx:
        async with TestClient(TestServer(make_app(ctx))) as client:
            yield client, ctx


def start_event(carrier: str, encoding: str | None = None, caller: str = CALLER) -> dict[str, Any]:
    """The ``start`` event exactly as each carrier documents it."""
    if carrier == "twilio":
        return {
            "event": "start",
            "sequenceNumber": "1",
            "streamSid": "MZ0123456789abcdef0123456789abcdef",
            "start": {
                "accountSid": "AC0123456789abcdef0123456789abcdef",
                "streamSid": "MZ0123456789abcdef0123456789abcdef",
                "callSid": "CA0123456789abcdef0123456789abcdef",
                "tracks": ["inbound"],
                "mediaFormat": {
                    "encoding": encoding or "audio/x-mulaw",
                    "sampleRate": 8000,
                    "channels": 1,
                },
                "customParameters": {"from": caller, "to": OUR_NUMBER},
            },
        }
    return {
        "event": "start",
        "sequence_number": "1",
        "stream_id": "32DE0DEA-53CB-4B21-89A4-9E1819C043BC",
        "start": {
            "user_id": "3E6F995F-85F7-4705-9741-53B116D28237",
            "call_control_id": "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg",
            "call_session_id": "ff55a038-6f5d-11ef-9692-02420aeffb1f",
            "from": caller,
            "to": OUR_NUMBER,
            "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
            "media_format": {"encoding": encoding or "PCMU", "sample_rate": 8000, "channels": 1},
        },
    }


def connected_event(carrier: str) -> dict[str, Any]:
    if carrier == "twilio":
        return {"event": "connected", "protocol": "Call", "version": "1.0.0"}
    return {"event": "connected", "version": "1.0.0"}


def stream_fields(carrier: str) -> dict[str, str]:
    start = start_event(carrier)
    if carrier == "twilio":
        return {"streamSid": start["streamSid"]}
    return {"stream_id": start["stream_id"]}


async def tone_ulaw(seconds: float) -> bytes:
    """A 300 Hz tone as 8 kHz mu-law: what a caller's line carries."""
    t = np.arange(int(8000 * seconds)) / 8000
    pcm = (8000 * np.sin(2 * np.pi * 300 * t)).astype("<i2").tobytes()
    return await pcm_to_ulaw(pcm, 8000, 8000, create_stream_resampler())


async def loudness(payload: bytes) -> int:
    pcm = await ulaw_to_pcm(payload, 8000, 8000, create_stream_resampler())
    return int(np.abs(np.frombuffer(pcm, dtype="<i2")).max())


def stored_calls(ctx) -> list[CallRow]:
    with Session(ctx.engine) as session:
        return list(session.scalars(select(CallRow)))


async def until_ended(ctx) -> CallRow:
    for _ in range(200):
        rows = stored_calls(ctx)
        if rows and rows[0].ended_at is not None:
            return rows[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the call was never recorded as ended")


async def stream_of(client: TestClient, signer: FakeCarrier, carrier: str, now: float) -> str:
    """The media path (with its one-time token) a signed voice webhook answers."""
    response = await signer.post(client, carrier, WEBHOOK, timestamp=now)
    assert response.status == 200, await response.text()
    return stream_path(await response.text())


@pytest.mark.parametrize("carrier", ["twilio", "telnyx"])
async def test_a_carrier_call_gets_agent_audio_and_is_stored(agent, signer, carrier):
    client, ctx = agent
    # The app runs on the real clock: Telnyx signs "now" as it would.
    path = await stream_of(client, signer, carrier, time.time())
    ws = await client.ws_connect(path)
    await ws.send_json(connected_event(carrier))
    # The stream's claim is not signed: the call is stored with the webhook's caller.
    await ws.send_json(start_event(carrier, caller="+15550000000"))
    caller_audio = await tone_ulaw(1.0)
    for i in range(0, len(caller_audio), 160):
        payload = base64.b64encode(caller_audio[i : i + 160]).decode()
        media: dict[str, Any] = {"payload": payload}
        if carrier == "twilio":
            media |= {"track": "inbound", "chunk": str(i // 160 + 1), "timestamp": str(i // 8)}
        await ws.send_json({"event": "media", **stream_fields(carrier), "media": media})
    digit = {"digit": "1"} | ({"track": "inbound_track"} if carrier == "twilio" else {})
    await ws.send_json({"event": "dtmf", **stream_fields(carrier), "dtmf": digit})

    # The greeting comes back as media packets, then a mark after the utterance.
    packets: list[bytes] = []
    mark = None
    while mark is None:
        msg = await ws.receive(timeout=30)
        assert msg.type == WSMsgType.TEXT, msg
        event = json.loads(msg.data)
        if event["event"] == "media":
            assert event.get("streamSid", "MZ") == stream_fields(carrier).get("streamSid", "MZ")
            packets.append(base64.b64decode(event["media"]["payload"]))
        elif event["event"] == "mark":
            mark = event["mark"]["name"]
    assert packets and all(len(p) == 160 for p in packets), "20 ms mu-law packets"
    assert max([await loudness(p) for p in packets]) > 1000, "the agent's audio is not silent"
    # As the carrier does once the audio before the mark has played.
    await ws.send_json({"event": "mark", **stream_fields(carrier), "mark": {"name": mark}})

    live = stored_calls(ctx)
    assert len(live) == 1 and live[0].transport == carrier and live[0].ended_at is None
    await ws.send_json({"event": "stop", **stream_fields(carrier), "stop": {}})
    while not ws.closed:
        msg = await ws.receive(timeout=30)
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING):
            break
    row = await until_ended(ctx)
    assert row.transport == carrier
    assert row.number == CALLER
    assert row.direction == "inbound"
    assert row.end_reason == "caller_hung_up"
    health = await (await client.get("/health")).json()
    assert health == {"status": "ok", "calls": 0}


def routes_config(signer: FakeCarrier, **changes: Any) -> MediaStreamConfig:
    """The carrier routes with both carriers' keys, on a clock of the test's own."""
    credentials = CarrierCredentials(
        twilio_auth_token=signer.twilio_auth_token,
        telnyx_public_key=signer.telnyx_public_key,
        hang_up=False,
    )
    return MediaStreamConfig(
        credentials=credentials, public_url=PUBLIC_URL, clock=Clock(), **changes
    )


def carrier_app(db_engine: Engine) -> web.Application:
    """An app for the carrier routes alone, on the database that keeps their tokens."""
    app = web.Application()
    app[ENGINE] = db_engine
    return app


@pytest.fixture
async def bare_routes(signer, db_engine):
    """The carrier routes alone, with a short start timeout and a starter that must not run."""
    app = carrier_app(db_engine)

    def refuse(_transport, _info):
        raise AssertionError("no call may start on a broken stream")

    add_carrier_routes(app, routes_config(signer, start_timeout_s=0.3), refuse)
    async with TestClient(TestServer(app)) as client:
        yield client, signer


async def refusal(
    routes: tuple[TestClient, FakeCarrier], carrier: str, *messages: str
) -> tuple[int | None, str]:
    client, signer = routes
    ws = await client.ws_connect(await stream_of(client, signer, carrier, Clock().now))
    for message in messages:
        await ws.send_str(message)
    msg = await ws.receive(timeout=10)
    assert msg.type == WSMsgType.CLOSE
    return ws.close_code, msg.extra or ""


@pytest.mark.parametrize("carrier", ["twilio", "telnyx"])
@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        (["hello"], "not JSON"),
        (['{"no": "event"}'], "no 'event'"),
        (['{"event": "media", "media": {"payload": "AAAA"}}'], "expected 'start' first"),
        (['{"event": "connected"}', '{"event": "start"}'], "no 'start' object"),
        ([], "no 'start' event within"),
    ],
)
async def test_broken_streams_are_closed_with_a_reason(bare_routes, carrier, messages, reason):
    code, text = await refusal(bare_routes, carrier, *messages)
    assert code == POLICY_VIOLATION
    assert reason in text


@pytest.mark.parametrize(("carrier", "encoding"), [("twilio", "audio/l16"), ("telnyx", "OPUS")])
async def test_an_unsupported_media_format_is_refused(bare_routes, carrier, encoding):
    start = json.dumps(start_event(carrier, encoding))
    code, text = await refusal(bare_routes, carrier, start)
    assert code == POLICY_VIOLATION and "unsupported media format" in text


async def test_the_media_route_wants_a_websocket_and_a_token(agent, signer):
    client, _ctx = agent
    response = await client.get(await stream_of(client, signer, "twilio", time.time()))
    assert response.status == 400 and "websocket" in (await response.json())["error"]
    assert (await client.get("/media/twilio")).status == 403
    assert (await client.get("/media/vonage")).status == 404
    assert (await (await client.get("/health")).json())["status"] == "ok"


@pytest.mark.parametrize("carrier", ["twilio", "telnyx"])
async def test_the_voice_webhook_connects_the_call_to_our_stream(agent, signer, carrier):
    client, _ctx = agent
    assert (await client.post(f"/voice/{carrier}", data=WEBHOOK)).status == 403, "unsigned"
    response = await signer.post(client, carrier, WEBHOOK, timestamp=time.time())
    assert response.status == 200 and response.content_type == "application/xml"
    body = await response.text()
    assert f'<Stream url="wss://agent.example.com/media/{carrier}/' in body
    assert f'<Parameter name="from" value="{CALLER}" />' in body
    assert body.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Connect>')


def test_the_stream_url_comes_from_the_host_without_a_public_url():
    document = connect_document("telnyx", "ws://127.0.0.1:8080/media/telnyx", {})
    assert 'bidirectionalMode="rtp"' in document and 'bidirectionalCodec="PCMU"' in document


@pytest.mark.parametrize("carrier", ["twilio", "telnyx"])
def test_the_start_event_gives_the_call_info(carrier):
    start = parse_start(carrier, start_event(carrier))
    info = start.call_info()
    assert info.path == carrier
    assert info.remote_number == CALLER and info.local_number == OUR_NUMBER
    assert info.network_id == start.call_id and info.sample_rate == 8000
    with pytest.raises(StreamProtocolError):
        parse_start(carrier, {"event": "start", "start": {}})


@pytest.mark.parametrize("carrier", ["twilio", "telnyx"])
async def test_hang_up_by_rest_only_with_credentials_and_clear_on_barge_in(carrier):
    start = parse_start(carrier, start_event(carrier))
    bare = serializer_for(start, CarrierCredentials())
    assert not bare._params.auto_hang_up  # noqa: SLF001 - pipecat keeps it there
    credentials = CarrierCredentials(twilio_auth_token="secret", telnyx_api_key="KEY")
    assert serializer_for(start, credentials)._params.auto_hang_up  # noqa: SLF001
    off = CarrierCredentials(twilio_auth_token="secret", telnyx_api_key="KEY", hang_up=False)
    assert not serializer_for(start, off)._params.auto_hang_up  # noqa: SLF001
    kind = TwilioFrameSerializer if carrier == "twilio" else TelnyxFrameSerializer
    assert isinstance(bare, kind)
    clear = json.loads(await bare.serialize(InterruptionFrame()))
    assert clear["event"] == "clear"


class KeypadScript(FrameProcessor):
    """Plays 3 s of tone on the caller's first digit and barges in on the second."""

    def __init__(self) -> None:
        super().__init__()
        self.digits: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputDTMFFrame):
            self.digits.append(frame.button.value)
            if len(self.digits) == 1:
                t = np.arange(3 * 16000) / 16000
                tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()
                await self.push_frame(OutputAudioRawFrame(tone, 16000, 1))
            else:
                await self.push_frame(InterruptionFrame())
            return
        await self.push_frame(frame, direction)


async def test_the_transport_carries_digits_paces_audio_and_clears_on_barge_in(signer, db_engine):
    script = KeypadScript()
    runs: list[asyncio.Task[None]] = []

    def start(transport: MediaStreamTransport, _info: object) -> StartedCall:
        pipeline = Pipeline([transport.input(), script, transport.output()])
        worker = PipelineWorker(
            pipeline,
            params=PipelineParams(audio_in_sample_rate=16000, audio_out_sample_rate=16000),
            enable_rtvi=False,
            idle_timeout_secs=None,
        )

        @transport.event_handler("on_client_disconnected")
        async def _gone(_transport, _ws):
            await worker.cancel(reason="caller_hung_up")

        async def run() -> None:
            runner = WorkerRunner(handle_sigint=False)
            await runner.add_workers(worker)
            await runner.run()

        runs.append(asyncio.get_running_loop().create_task(run()))
        return StartedCall("t" * 32, runs[0])

    app = carrier_app(db_engine)
    add_carrier_routes(app, routes_config(signer), start)
    async with TestClient(TestServer(app)) as client:
        ws = await client.ws_connect(await stream_of(client, signer, "twilio", Clock().now))
        sid = stream_fields("twilio")
        await ws.send_json(connected_event("twilio"))
        await ws.send_json(start_event("twilio"))
        dtmf = {"track": "inbound_track"}
        await ws.send_json({"event": "dtmf", **sid, "dtmf": dtmf | {"digit": "5"}})
        events: list[dict[str, Any]] = []
        while len([e for e in events if e["event"] == "media"]) < 5:
            events.append(json.loads((await ws.receive(timeout=30)).data))
        await ws.send_json({"event": "dtmf", **sid, "dtmf": dtmf | {"digit": "#"}})
        while events[-1]["event"] != "clear":
            events.append(json.loads((await ws.receive(timeout=30)).data))
        media = [e for e in events if e["event"] == "media"]
        # 3 s of audio is 150 packets; the clear came long before they were all sent.
        assert 5 <= len(media) < 150
        assert all(e["streamSid"] == sid["streamSid"] for e in events)
        assert script.digits == ["5", "#"]
        await ws.send_json({"event": "stop", **sid, "stop": {}})
        # ``stop`` ends the call: the socket is closed and the pipeline finishes.
        while (await ws.receive(timeout=30)).type not in (WSMsgType.CLOSE, WSMsgType.CLOSED):
            pass
        await asyncio.wait_for(runs[0], 30)
