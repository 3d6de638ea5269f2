"""The embedded default: the model servers started as child processes of the agent.

With no model URLs configured, the agent starts the STT, LLM and TTS servers of ``infra/``
on this machine, on free ports, and talks to them over the network like to any other
deployment (one code path from a laptop to a cluster). ``stub=True`` starts the one stub
server instead, which answers all three protocols instantly. The smart-turn service
(``infra/smart_turn_server.py``), a small CPU model that decides the end of every turn of
the host's calls, is started the same way unless ``SMART_TURN_URL`` names one, stubbed or
not: the stub set's calls too need real decisions.

Children die with the agent. Each child runs in its own session, so a Ctrl-C in the
terminal reaches only the agent, which stops them in order (SIGTERM, then SIGKILL after
5 s). If the agent dies without stopping them, the kernel kills them: they ask for
``PR_SET_PDEATHSIG`` (Linux) before they exec. That signal follows the *thread* that
started the child, so start the servers from a thread that lives as long as the agent
(the event loop's). Elsewhere than Linux only the orderly stop applies.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import aiohttp

from agent.config import Settings

logger = logging.getLogger(__name__)

DEFAULT_LOG_DIR = Path("data/logs")
DEFAULT_START_TIMEOUT_S = 180.0
STOP_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODEL_SERVERS = {"stt": "infra.stt_server", "llm": "infra.llm_server", "tts": "infra.tts_server"}
STUB_SERVER = {"stub": "infra.stub_server"}
SMART_TURN_SERVER = {"smart-turn": "infra.smart_turn_server"}


class ServerStartError(RuntimeError):
    """A model server died or did not become healthy in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS's choice for port 0)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _url_host(host: str) -> str:
    """The host to put in a URL for a server bound to ``host``."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when this thread exits (Linux).

    libc's ``prctl`` is looked up here, before the fork, so the child does one system
    call and no imports. SIGKILL, because the servers hold nothing worth flushing.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).prctl
    except (OSError, AttributeError):
        logger.warning("prctl unavailable: model servers may outlive a crashed agent")
        return None
    parent_pid = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return set_death_signal


class ServerProcess:
    """One model server child process, its URL and its log file."""

    def __init__(
        self, name: str, process: subprocess.Popen[bytes], base_url: str, log_path: Path
    ) -> None:
        self.name = name
        self.process = process
        self.base_url = base_url
        self.log_path = log_path

    @classmethod
    def launch(
        cls,
        name: str,
        module: str,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_dir: Path = DEFAULT_LOG_DIR,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> ServerProcess:
        """Start ``python -m <module> --host H --port P``, output to ``<log_dir>/<name>.log``,
        with ``env`` over this process's environment."""
        port = port or free_port(host)
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir.resolve() / f"{name}.log"
        command = [sys.executable, "-m", module, "--host", host, "--port", str(port), *args]
        env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(_PROJECT_ROOT), os.environ.get("PYTHONPATH")])
        )
        log: IO[bytes]
        with log_path.open("ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
            log.flush()
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent(),
            )
        logger.info(
            "starting %s server (pid %d) on %s:%d, log %s", name, process.pid, host, port, log_path
        )
        return cls(name, process, f"http://{_url_host(host)}:{port}", log_path)

    async def wait_healthy(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> float:
        """Poll ``GET /health`` until it answers 200; return the seconds it took.

        Raises ServerStartError, with the end of the server's log, if the child exits or
        is not healthy within ``timeout`` seconds.
        """
        started = time.monotonic()
        probe_timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=probe_timeout) as session:
            while True:
                if self.process.poll() is not None:
                    raise ServerStartError(
                        f"{self.name} server exited with code {self.process.returncode}"
                        f" before it was ready; the end of {self.log_path}:\n{self.log_tail()}"
                    )
                try:
                    async with session.get(f"{self.base_url}/health") as response:
                        if response.status == 200:
                            return time.monotonic() - started
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() - started > timeout:
                    raise ServerStartError(
                        f"{self.name} server not ready after {timeout:.0f} s;"
                        f" the end of {self.log_path}:\n{self.log_tail()}"
                    )
                await asyncio.sleep(0.1)

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL if the child is still there after ``grace`` seconds."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        deadline = time.monotonic() + grace
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.process.poll() is None:
            logger.warning("%s server ignored SIGTERM for %.0f s; killing it", self.name, grace)
            self.process.kill()
            await asyncio.to_thread(self.process.wait)
        logger.info("%s server stopped (exit code %s)", self.name, self.process.returncode)

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of the server's log, for error messages."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 16384))
                text = log.read().decode(errors="replace")
        except OSError as error:
            return f"(log unreadable: {error})"
        return "\n".join(text.splitlines()[-lines:])


class ModelServers:
    """The model servers running as children of this process, and every model's URL.

    Use as ``async with await ModelServers.start() as servers: ...``, or
    ``ModelServers.for_settings(settings)`` for what a host runs itself.
    """

    def __init__(
        self,
        servers: Sequence[ServerProcess],
        stt_url: str,
        llm_url: str,
        tts_url: str,
        smart_turn_url: str | None = None,
    ) -> None:
        self.servers = list(servers)
        self.stt_url = stt_url
        self.llm_url = llm_url
        self.tts_url = tts_url
        self.smart_turn_url = smart_turn_url

    @classmethod
    async def start(
        cls,
        stub: bool = False,
        host: str = "127.0.0.1",
        *,
        smart_turn: bool = False,
        log_dir: Path = DEFAULT_LOG_DIR,
        timeout: float = DEFAULT_START_TIMEOUT_S,
        args: Mapping[str, Sequence[str]] | None = None,
    ) -> ModelServers:
        """Start the STT, LLM and TTS servers (or the stub), and the smart-turn service with
        ``smart_turn``, in parallel, each with its ``args`` by name if any; return once
        every ``/health`` answers 200."""
        names = {**(STUB_SERVER if stub else MODEL_SERVERS)}
        if smart_turn:
            names.update(SMART_TURN_SERVER)
        servers = await _launch(names, host, log_dir, timeout, args)
        urls = _urls(servers)
        return cls(
            servers, urls["stt_url"], urls["llm_url"], urls["tts_url"], urls.get("smart_turn_url")
        )

    @classmethod
    async def for_settings(
        cls, settings: Settings, *, stub: bool = False, host: str = "127.0.0.1"
    ) -> ModelServers:
        """What ``settings`` leave to this host, started: the models when no model URL is
        set (the stub with ``stub``), the smart-turn service when ``SMART_TURN_URL`` is not;
        with every URL, the configured ones as they are. Logs in ``DATA_DIR/logs``."""
        names: dict[str, str] = {}
        if stub or settings.embedded_models:
            names.update(STUB_SERVER if stub else MODEL_SERVERS)
        if not settings.smart_turn_url:
            names.update(SMART_TURN_SERVER)
        log_dir = settings.data_dir / "logs"
        servers = await _launch(names, host, log_dir, DEFAULT_START_TIMEOUT_S) if names else []
        urls = _urls(servers)
        return cls(
            servers,
            urls.get("stt_url") or settings.stt_url or "",
            urls.get("llm_url") or settings.llm_url or "",
            urls.get("tts_url") or settings.tts_url or "",
            urls.get("smart_turn_url") or settings.smart_turn_url,
        )

    def env(self) -> dict[str, str]:
        """The URLs as the settings' variables, for worker processes."""
        urls = {
            "STT_URL": self.stt_url,
            "LLM_URL": self.llm_url,
            "TTS_URL": self.tts_url,
            "SMART_TURN_URL": self.smart_turn_url,
        }
        return {name: url for name, url in urls.items() if url}

    async def stop(self) -> None:
        """Stop every server (in parallel); safe to call twice."""
        await asyncio.gather(*(server.stop() for server in self.servers))

    async def __aenter__(self) -> ModelServers:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


async def _launch(
    names: Mapping[str, str],
    host: str,
    log_dir: Path,
    timeout: float,
    args: Mapping[str, Sequence[str]] | None = None,
) -> list[ServerProcess]:
    """Start the servers ``names`` (name -> module) in parallel, healthy; none left
    running if one fails."""
    started = time.monotonic()
    servers: list[ServerProcess] = []
    try:
        for name, module in names.items():
            extra = (args or {}).get(name, ())
            servers.append(
                ServerProcess.launch(name, module, host=host, log_dir=log_dir, args=extra)
            )
        await _wait_all_healthy(servers, timeout)
    except BaseException:
        await asyncio.gather(*(server.stop() for server in servers))
        raise
    logger.info("model servers ready in %.1f s", time.monotonic() - started)
    return servers


def _urls(servers: Sequence[ServerProcess]) -> dict[str, str]:
    """The service URLs the started ``servers`` serve, by ``ModelServers`` argument."""
    base = {server.name: server.base_url for server in servers}
    urls: dict[str, str] = {}
    stt = base.get("stt", base.get("stub"))
    llm = base.get("llm", base.get("stub"))
    tts = base.get("tts", base.get("stub"))
    if stt and llm and tts:
        urls.update(
            stt_url=f"{stt.replace('http://', 'ws://', 1)}/v1/listen",
            llm_url=f"{llm}/v1",
            tts_url=f"{tts}/v1/speech",
        )
    if "smart-turn" in base:
        urls["smart_turn_url"] = f"{base['smart-turn']}/v1/end-of-turn"
    return urls


async def _wait_all_healthy(servers: Sequence[ServerProcess], timeout: float) -> None:
    """Wait for all servers; the first failure cancels the other waits and is raised."""

    async def wait(server: ServerProcess) -> None:
        seconds = await server.wait_healthy(timeout)
        logger.info("%s server ready in %.1f s", server.name, seconds)

    tasks = [asyncio.create_task(wait(server)) for server in servers]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        error = task.exception()
        if error is not None:
            raise error
