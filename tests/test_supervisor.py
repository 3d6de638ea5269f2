"""``serve --workers 2``: real worker processes behind the entry, one killed, all drained."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiortc import RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.console.users import Users
from agent.runtime.supervisor import Supervisor
from agent.store.tables import Call
from tests.console import PEOPLE, hidden
from tests.servers import running_server

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def stub_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("stub-logs")
    with running_server("stub", "infra.stub_server", logs) as server:
        yield server.base_url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _health(base: str, client: aiohttp.ClientSession) -> dict | None:
    try:
        async with client.get(f"{base}/health") as r:
            return await r.json() if r.status == 200 else None
    except aiohttp.ClientError:
        return None


async def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := await predicate():
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def _offer(client: aiohttp.ClientSession, base: str) -> tuple[RTCPeerConnection, int, dict]:
    peer = RTCPeerConnection()
    peer.addTrack(AudioStreamTrack())
    await peer.setLocalDescription(await peer.createOffer())
    body = {"sdp": peer.localDescription.sdp, "type": "offer"}
    async with client.post(f"{base}/api/offer", json=body) as r:
        return peer, r.status, await r.json()


def _smart_turn_parents(parents: set[int]) -> list[int]:
    """The parent of every smart-turn service that one of ``parents`` started."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # not a process, or gone meanwhile
            continue
        if ppid in parents and b"infra.smart_turn_server" in command:
            found.append(ppid)
    return found


def _rows(engine: Engine) -> dict[str, tuple[str | None, str, str | None]]:
    with Session(engine) as session:
        return {c.id: (c.worker, c.status, c.end_reason) for c in session.scalars(select(Call))}


async def test_two_workers_share_the_calls_survive_a_kill_and_drain(
    db_url: str, db_engine: Engine, stub_url: str, tmp_path: Path
) -> None:
    Users(db_engine).add("olive", PEOPLE["olive"][0], "operator")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    host = socket.gethostname()
    stub = stub_url
    env = dict(
        os.environ,
        PYTHONPATH=str(PROJECT_ROOT),
        DATABASE_URL=db_url,
        DATA_DIR=str(tmp_path),
        PORT=str(port),
        STT_URL=f"{stub.replace('http://', 'ws://')}/v1/listen",
        LLM_URL=f"{stub}/v1",
        TTS_URL=f"{stub}/v1/speech",
        MAX_CALLS="1",
        DRAIN_TIMEOUT_S="2",
    )
    env.pop("SIP_PORT", None)
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "agent", "serve", "--workers", "2"],
        cwd=tmp_path,
        env=env,
        stderr=open(tmp_path / "supervisor.log", "wb"),  # noqa: SIM115 - closed with the process
    )
    peers: list[RTCPeerConnection] = []
    try:
        # unsafe: keep cookies from an IP address (127.0.0.1), as a browser does.
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:

            async def both_ready():
                health = await _health(base, client)
                return health if health and all(w["ready"] for w in health["workers"]) else None

            health = await _until(both_ready, 120, "two ready workers")
            assert [w["worker"] for w in health["workers"]] == [f"{host}-w0", f"{host}-w1"]
            # One smart-turn service for the host's calls: the supervisor's, none per worker.
            pids = {supervisor.pid, *(w["pid"] for w in health["workers"])}
            assert _smart_turn_parents(pids) == [supervisor.pid]

            # Each call goes to the worker with room; the third finds none.
            calls = []
            for _ in range(2):
                peer, status, answer = await _offer(client, base)
                peers.append(peer)
                assert status == 200, answer
                calls.append(answer["call_id"])
            peer, status, refused = await _offer(client, base)
            peers.append(peer)
            assert status == 503 and "full" in refused["error"]

            async def both_stored():
                rows = await asyncio.to_thread(_rows, db_engine)
                return rows if all(c in rows for c in calls) else None

            rows = await _until(both_stored, 20, "the calls' rows")
            workers = {rows[c][0]: c for c in calls}
            assert set(workers) == {f"{host}-w0", f"{host}-w1"}

            # The console through the entry: log in, read a call (from any worker).
            form = await (await client.get(f"{base}/login")).text()
            login = await client.post(
                f"{base}/login",
                data={
                    "username": "olive",
                    "password": PEOPLE["olive"][0],
                    "csrf_token": hidden(form),
                },
                allow_redirects=False,
            )
            assert login.status == 303
            record = await client.get(f"{base}/api/calls/{calls[0]}")
            assert record.status == 200 and (await record.json())["id"] == calls[0]

            # Kill worker 0: it is started again and closes its own dead call, not the other's.
            w0 = health["workers"][0]
            os.kill(w0["pid"], signal.SIGKILL)

            async def restarted():
                health = await _health(base, client)
                w = health["workers"][0] if health else None
                return w if w and w["restarts"] == 1 and w["ready"] else None

            await _until(restarted, 60, "worker 0 started again")
            rows = await asyncio.to_thread(_rows, db_engine)
            dead, alive = workers[f"{host}-w0"], workers[f"{host}-w1"]
            assert rows[dead][1:] == ("abnormal", "worker_stopped")
            assert rows[alive][1] == "active"

        # SIGTERM: the workers drain (2 s), end what is left, write it, and all exit.
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(60) == 0, (tmp_path / "supervisor.log").read_text()[-3000:]
        rows = await asyncio.to_thread(_rows, db_engine)
        assert rows[alive][1:] == ("ended", "server_stopped")
        assert all(status != "active" for _, status, _ in rows.values())
    finally:
        for peer in peers:
            await peer.close()
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(10)


@pytest.mark.parametrize(
    ("env", "address"),
    [
        ({}, "127.0.0.1"),
        ({"SIP_HOST": "10.0.0.5"}, "10.0.0.5"),
        ({"HOST": "10.0.0.6"}, "10.0.0.6"),  # SIP_HOST's default
        ({"HOST": "0.0.0.0"}, "127.0.0.1"),  # a wildcard is no address to reach
        ({"SIP_HOST": "::"}, "127.0.0.1"),
    ],
)
def test_the_dispatcher_list_names_each_workers_sip_address(
    tmp_path: Path, env: dict[str, str], address: str
) -> None:
    from agent.config import Settings

    settings = Settings.from_env(
        {"PORT": "8080", "SIP_PORT": "5060", "DATA_DIR": str(tmp_path), **env}
    )
    supervisor = Supervisor(settings, 3, {})
    supervisor.write_dispatcher_list(tmp_path / "dispatcher.list")
    lines = (tmp_path / "dispatcher.list").read_text().splitlines()[1:]
    assert lines == [f"1 sip:{address}:{5061 + i}" for i in range(3)]
    assert [w.port for w in supervisor.workers] == [8081, 8082, 8083]
    # What each worker is started with: the address and port the list names.
    started = [supervisor._env(w) for w in supervisor.workers]
    assert [(e["SIP_HOST"], e["SIP_PORT"], e["HOST"]) for e in started] == [
        (address, str(5061 + i), "127.0.0.1") for i in range(3)
    ]


def test_at_least_one_worker() -> None:
    from agent.config import Settings

    with pytest.raises(ValueError, match="at least 1"):
        Supervisor(Settings.from_env({}), 0, {})
