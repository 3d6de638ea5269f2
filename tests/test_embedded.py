"""The embedded launcher: model servers as child processes, their health, their end."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from agent.config import Settings
from agent.pipeline.smart_turn import SmartTurnClient
from agent.runtime import embedded
from agent.runtime.embedded import ModelServers, ServerProcess, ServerStartError

PROJECT_ROOT = Path(__file__).resolve().parents[1]


async def get_json(url: str) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


def is_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts: init may not reap it at once)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split() == ["State:", "Z", "(zombie)"] for line in status)
    except FileNotFoundError:
        return True


async def test_stub_mode_serves_all_three_urls_from_one_child(tmp_path: Path) -> None:
    async with await ModelServers.start(stub=True, log_dir=tmp_path) as servers:
        [stub] = servers.servers
        base = stub.base_url
        assert base.startswith("http://127.0.0.1:")
        assert servers.stt_url == base.replace("http://", "ws://") + "/v1/listen"
        assert servers.llm_url == f"{base}/v1"
        assert servers.tts_url == f"{base}/v1/speech"
        status, health = await get_json(f"{base}/health")
        assert status == 200
        assert health["model"] == "stub"
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(servers.stt_url) as ws:
                await ws.send_json({"type": "start", "call_id": "c", "sample_rate": 16000})
                assert await ws.receive_json(timeout=10) == {"type": "ready"}

    assert stub.process.returncode is not None
    assert (tmp_path / "stub.log").read_text().startswith("--- ")


MODEL_URLS = {
    "STT_URL": "ws://models:9000/v1/listen",
    "LLM_URL": "http://models:8000/v1",
    "TTS_URL": "http://models:9001/v1/speech",
}


async def test_a_host_with_model_urls_starts_its_smart_turn_service_alone(tmp_path: Path) -> None:
    settings = Settings.from_env({**MODEL_URLS, "DATA_DIR": str(tmp_path)})
    async with await ModelServers.for_settings(settings) as servers:
        [service] = servers.servers
        assert service.name == "smart-turn"
        assert servers.smart_turn_url == f"{service.base_url}/v1/end-of-turn"
        assert servers.env() == {**MODEL_URLS, "SMART_TURN_URL": servers.smart_turn_url}
        status, health = await get_json(f"{service.base_url}/health")
        assert (status, health["providers"]) == (200, ["CPUExecutionProvider"])
    assert service.process.returncode is not None
    assert (tmp_path / "logs" / "smart-turn.log").exists()


async def test_a_host_given_every_url_starts_nothing() -> None:
    url = "http://turns:8004/v1/end-of-turn"
    servers = await ModelServers.for_settings(
        Settings.from_env({**MODEL_URLS, "SMART_TURN_URL": url})
    )
    assert servers.servers == []
    assert servers.env() == {**MODEL_URLS, "SMART_TURN_URL": url}


async def test_the_stub_set_decides_the_end_of_turns_for_real(tmp_path: Path) -> None:
    settings = Settings.from_env({"DATA_DIR": str(tmp_path)})
    async with await ModelServers.for_settings(settings, stub=True) as servers:
        assert sorted(server.name for server in servers.servers) == ["smart-turn", "stub"]
        assert servers.smart_turn_url is not None
        client = SmartTurnClient(servers.smart_turn_url, deadline_s=30)
        silence = np.zeros(16000, dtype=np.float32)
        answer = await asyncio.to_thread(client.decide, silence, 16000)
        client.close()
        assert answer["prediction"] in (0, 1) and 0 < answer["probability"] < 1


async def test_a_child_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    server = ServerProcess.launch("broken", "infra.no_such_server", log_dir=tmp_path)

    with pytest.raises(ServerStartError) as raised:
        await server.wait_healthy(timeout=60)

    message = str(raised.value)
    assert "broken server exited with code 1 before it was ready" in message
    assert str(tmp_path / "broken.log") in message
    assert "No module named infra.no_such_server" in message


async def test_a_child_that_is_not_ready_in_time_is_stopped_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched: list[ServerProcess] = []
    launch = ServerProcess.launch.__func__  # type: ignore[attr-defined]

    def spy(cls: type[ServerProcess], *args: object, **kwargs: object) -> ServerProcess:
        launched.append(launch(cls, *args, **kwargs))
        return launched[-1]

    monkeypatch.setattr(ServerProcess, "launch", classmethod(spy))

    with pytest.raises(ServerStartError, match="stub server not ready after 0 s"):
        await ModelServers.start(stub=True, log_dir=tmp_path, timeout=0.0)

    assert [server.process.returncode is not None for server in launched] == [True]


async def test_one_failing_server_stops_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched: list[ServerProcess] = []
    launch = ServerProcess.launch.__func__  # type: ignore[attr-defined]

    def spy(cls: type[ServerProcess], *args: object, **kwargs: object) -> ServerProcess:
        launched.append(launch(cls, *args, **kwargs))
        return launched[-1]

    monkeypatch.setattr(ServerProcess, "launch", classmethod(spy))
    monkeypatch.setattr(
        embedded,
        "MODEL_SERVERS",
        {"stt": "infra.stub_server", "llm": "infra.no_such_server", "tts": "infra.stub_server"},
    )

    with pytest.raises(ServerStartError, match="llm server exited"):
        await ModelServers.start(log_dir=tmp_path)

    assert len(launched) == 3
    assert all(server.process.returncode is not None for server in launched)


def test_children_die_with_their_parent(tmp_path: Path) -> None:
    script = (
        "import time; from pathlib import Path; from agent.runtime.embedded import ServerProcess;"
        f" s = ServerProcess.launch('stub', 'infra.stub_server', log_dir=Path({str(tmp_path)!r}));"
        " print(s.process.pid, flush=True); time.sleep(120)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    assert not is_gone(child_pid)

    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while not is_gone(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)

    if not is_gone(child_pid):
        os.kill(child_pid, signal.SIGKILL)
        pytest.fail("the server outlived its parent")


@pytest.mark.models
async def test_real_mode_starts_the_three_model_servers(tmp_path: Path) -> None:
    started = time.monotonic()
    async with await ModelServers.start(log_dir=tmp_path) as servers:
        seconds = time.monotonic() - started
        stt_health = servers.stt_url.replace("ws://", "http://").replace("/v1/listen", "/health")
        llm_health = servers.llm_url.removesuffix("/v1") + "/health"
        tts_health = servers.tts_url.removesuffix("/v1/speech") + "/health"
        status, stt = await get_json(stt_health)
        assert (status, stt["status"], stt["model"]) == (200, "ok", "whisper-tiny.en")
        assert await get_json(llm_health) == (200, {"status": "ok", "model": "gemma-3-270m"})
        status, tts = await get_json(tts_health)
        assert status == 200
        assert tts["voice"] == "en_US-joe-medium"
        ports = {url.split(":")[2].split("/")[0] for url in (stt_health, llm_health, tts_health)}
        assert len(ports) == 3

    print(f"three model servers ready in {seconds:.1f} s")
    assert {path.name for path in tmp_path.iterdir()} == {"stt.log", "llm.log", "tts.log"}
    assert "warm-up done" in (tmp_path / "llm.log").read_text()
