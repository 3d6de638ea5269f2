import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agent.pipeline.http_pools import ServiceSessions


async def test_one_pooled_session_per_service():
    sessions = ServiceSessions()
    stt = sessions.session("stt")
    assert sessions.session("stt") is stt
    assert sessions.session("tts") is not stt
    await sessions.close()
    assert stt.closed
    assert sessions.session("stt") is not stt  # a closed session is replaced
    await sessions.close()


async def test_an_unknown_service_is_refused():
    with pytest.raises(ValueError, match="unknown service 'asr'"):
        ServiceSessions().session("asr")


async def test_requests_reuse_one_connection():
    peers = []

    async def hello(request):
        peers.append(request.transport.get_extra_info("peername"))
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    async with TestServer(app) as server:
        sessions = ServiceSessions()
        for _ in range(3):
            async with sessions.session("tts").get(server.make_url("/")) as response:
                assert await response.text() == "hi"
        await sessions.close()
    assert len(set(peers)) == 1  # keep-alive: one TCP connection served all three


async def test_the_llm_client_is_shared_by_calls():
    sessions = ServiceSessions()
    client = sessions.openai_client("http://127.0.0.1:9/v1", "none")
    assert sessions.openai_client("http://127.0.0.1:9/v1", "none") is client
    assert sessions.openai_client("http://127.0.0.1:9/v1", "other") is not client
    await sessions.close()
