"""Several worker processes on one machine, behind one HTTP entry.

One asyncio loop carries every call of a process, and a call's 20 ms audio is
late as soon as that loop is busy (docs/benchmarks/sip.md), so a machine's
cores are used by running one worker process per core rather than more calls
in one. ``python -m agent serve --workers N`` is this module:

- the **model servers** are started once (the embedded CPU ones, when no model
  URL is set; the smart-turn service, when ``SMART_TURN_URL`` is not) and every
  worker is given their URLs, so N workers do not load N copies of the models
  and the end-of-turn decisions of all their calls are batched together;
- **workers** are ``python -m agent serve`` child processes, worker ``i`` on
  ``PORT + 1 + i`` (and ``SIP_PORT + 1 + i`` on ``SIP_HOST`` when SIP is on),
  HTTP bound to the loopback address, with ``WORKER_ID`` ``<host>-w<i>`` so that a worker
  started again closes only its own dead calls; a worker that dies is started
  again (after 1 s, doubling to 30 s while it keeps dying);
- the **entry** is an HTTP reverse proxy on ``HOST:PORT``. What starts a call
  (a WebRTC offer, a carrier's media stream, a LiveKit dispatch) goes to the
  ready worker carrying the fewest calls, read from each worker's ``/ready``
  every ``POLL_S``; what follows a call (its transcript) goes to the worker
  holding it; everything else (the console, the API: the database is shared)
  goes round-robin. Responses are streamed, so server-sent events pass.
  SIP does not go through here: the SIP entry is Kamailio's dispatcher over
  the workers' SIP ports (``infra/kamailio/``), which the supervisor writes
  as ``dispatcher.list`` in ``DATA_DIR``.

On SIGTERM every worker drains (no new calls; those in progress finish within
``DRAIN_TIMEOUT_S``), then the model servers stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import itertools
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from agent.access import Anonymous, Loopback, check_routes, guard
from agent.config import Settings
from agent.runtime.embedded import ModelServers

logger = logging.getLogger(__name__)

#: How often each worker's ``/ready`` is read.
POLL_S = 0.5
#: How long a worker may take to answer ``/health`` after it is started.
START_TIMEOUT_S = 120.0
#: The longest wait before a dead worker is started again.
MAX_BACKOFF_S = 30.0
#: Paths whose request starts a call: they go to the least-loaded ready worker.
CALL_STARTS = ("/api/offer", "/media/", "/voice/", "/api/livekit/dispatch")
#: Headers that belong to one hop (RFC 9110 7.6.1), not passed through.
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)


@dataclass
class Worker:
    """One worker process and what its last ``/ready`` said."""

    index: int
    port: int
    sip_port: int | None
    worker_id: str
    process: asyncio.subprocess.Process | None = None
    ready: bool = False
    calls: int = 0
    capacity: int = 0
    restarts: int = 0
    call_ids: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker_id,
            "port": self.port,
            "sip_port": self.sip_port,
            "pid": self.process.pid if self.process else None,
            "ready": self.ready,
            "calls": self.calls,
            "capacity": self.capacity,
            "restarts": self.restarts,
        }


def workers_sip_host(sip_host: str) -> str:
    """The address the workers' SIP endpoints listen on and advertise: ``SIP_HOST`` (by
    default ``HOST``), except a wildcard (``0.0.0.0``, ``::``: the entry listening on every
    interface), which is no address a Contact or an SDP can name; then the loopback, which
    a Kamailio on the same machine reaches."""
    try:
        wildcard = ipaddress.ip_address(sip_host).is_unspecified
    except ValueError:  # a host name
        wildcard = False
    return "127.0.0.1" if wildcard else sip_host


class Supervisor:
    """Starts the workers, keeps them running, and spreads the HTTP requests over them."""

    def __init__(self, settings: Settings, workers: int, model_env: dict[str, str]) -> None:
        if workers < 1:
            raise ValueError("--workers must be at least 1")
        host = socket.gethostname()
        sip = settings.sip_port
        self.settings = settings
        self.sip_host = workers_sip_host(settings.sip_host)
        self.workers = [
            Worker(
                index=i,
                port=settings.port + 1 + i,
                sip_port=sip + 1 + i if sip else None,
                worker_id=f"{host}-w{i}"[:64],
            )
            for i in range(workers)
        ]
        self._model_env = model_env
        self._round_robin = itertools.cycle(self.workers)
        self._owner: dict[str, Worker] = {}
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._client: aiohttp.ClientSession | None = None

    # -- the workers --------------------------------------------------------------------

    def _env(self, worker: Worker) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self._model_env)
        env.update(
            HOST="127.0.0.1",
            PORT=str(worker.port),
            WORKER_ID=worker.worker_id,
            # Only this entry reaches a worker (it listens on loopback): the caller's
            # address is the one the entry saw.
            TRUST_FORWARDED_FOR="1",
        )
        if worker.sip_port is not None:
            env.update(SIP_HOST=self.sip_host, SIP_PORT=str(worker.sip_port))
        return env

    async def _spawn(self, worker: Worker) -> None:
        worker.ready = False
        # A session of its own: a terminal's Ctrl-C reaches the supervisor only, which then
        # drains each worker once (a second signal would end a worker's calls at once).
        worker.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent", "serve", env=self._env(worker), start_new_session=True
        )
        logger.info("worker %s started (pid %d)", worker.worker_id, worker.process.pid)

    async def _keep_running(self, worker: Worker) -> None:
        backoff = 1.0
        while not self._stopping:
            assert worker.process is not None
            code = await worker.process.wait()
            worker.ready = False
            if self._stopping:
                return
            for call_id in worker.call_ids:
                self._owner.pop(call_id, None)
            worker.call_ids.clear()
            logger.error(
                "worker %s exited (status %s): starting it again in %.0f s",
                worker.worker_id,
                code,
                backoff,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            worker.restarts += 1
            await self._spawn(worker)

    async def _poll(self) -> None:
        assert self._client is not None
        timeout = aiohttp.ClientTimeout(total=POLL_S * 2)
        while not self._stopping:
            for worker in self.workers:
                try:
                    async with self._client.get(f"{worker.url}/ready", timeout=timeout) as r:
                        body = await r.json()
                        worker.ready = r.status == 200
                        worker.calls, worker.capacity = body["calls"], body["capacity"]
                except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                    worker.ready = False
            await asyncio.sleep(POLL_S)

    async def _wait_started(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while not all(w.ready for w in self.workers):
            if loop.time() > deadline:
                late = [w.worker_id for w in self.workers if not w.ready]
                raise RuntimeError(f"workers not ready after {START_TIMEOUT_S:.0f} s: {late}")
            await asyncio.sleep(POLL_S)

    def write_dispatcher_list(self, path: Path) -> None:
        """Kamailio's dispatcher list (set 1): each worker's SIP address, the one it listens
        on and puts in its Contact and SDP (``sip_host``), so the edge reaches the workers
        wherever it runs."""
        lines = [
            f"1 sip:{self.sip_host}:{w.sip_port}\n" for w in self.workers if w.sip_port is not None
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# set destination (written by agent.runtime.supervisor)\n" + "".join(lines)
        )

    async def start(self) -> None:
        self._client = aiohttp.ClientSession(auto_decompress=False)
        for worker in self.workers:
            await self._spawn(worker)
        self._tasks = [asyncio.create_task(self._keep_running(w)) for w in self.workers]
        self._tasks.append(asyncio.create_task(self._poll()))
        await self._wait_started()
        if self.settings.sip_port:
            self.write_dispatcher_list(self.settings.data_dir / "dispatcher.list")

    async def stop(self) -> None:
        """Drain every worker (SIGTERM: each finishes its calls) and wait for them; safe to
        call twice."""
        self._stopping = True
        running = [w.process for w in self.workers if w.process and w.process.returncode is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        grace = self.settings.drain_timeout_s + 30
        for process in running:
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                logger.error("worker pid %d did not stop in %.0f s: killing it", process.pid, grace)
                process.kill()
                await process.wait()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    # -- the entry ----------------------------------------------------------------------

    def _least_loaded(self) -> Worker | None:
        ready = [w for w in self.workers if w.ready and w.calls < w.capacity]
        return min(ready, key=lambda w: (w.calls, w.index), default=None)

    def _any(self) -> Worker | None:
        for _ in self.workers:
            worker = next(self._round_robin)
            if worker.process is not None and worker.process.returncode is None:
                return worker
        return None

    def _route(self, request: web.Request) -> Worker | None:
        path = request.path
        if path.startswith(CALL_STARTS):
            return self._least_loaded()
        if path.startswith("/api/calls/"):
            call_id = path.split("/")[3]
            if call_id in self._owner:
                return self._owner[call_id]
        return self._any()

    def _started(self, worker: Worker, call_id: object) -> None:
        """A call began on ``worker``: follow-up requests go there; count it at once, so
        the next call does not go to the same worker before ``/ready`` is read again."""
        if isinstance(call_id, str):
            self._owner[call_id] = worker
            worker.call_ids.add(call_id)
            worker.calls += 1

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self._stopping and request.path.startswith(CALL_STARTS):
            return _unavailable("the agent is shutting down: no new calls")
        worker = self._route(request)
        if worker is None:
            return _unavailable(f"all {len(self.workers)} workers are full or not ready")
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._proxy_websocket(request, worker)
        return await self._proxy(request, worker)

    def _headers(self, request: web.Request) -> CIMultiDict[str]:
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP
        )
        forwarded = request.headers.get("X-Forwarded-For")
        remote = request.remote or ""
        headers["X-Forwarded-For"] = f"{forwarded}, {remote}" if forwarded else remote
        return headers

    async def _proxy(self, request: web.Request, worker: Worker) -> web.StreamResponse:
        assert self._client is not None
        body = await request.read()
        try:
            upstream = await self._client.request(
                request.method,
                f"{worker.url}{request.rel_url}",
                headers=self._headers(request),
                data=body or None,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            )
        except aiohttp.ClientError as e:
            logger.warning("worker %s did not answer: %s", worker.worker_id, e)
            return _unavailable(f"worker {worker.worker_id} did not answer")
        async with upstream:
            # A multidict: a response may set several cookies.
            headers = CIMultiDict(
                (k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP
            )
            if request.path == "/api/offer" and upstream.status == 200:
                payload = await upstream.read()
                with contextlib.suppress(ValueError):
                    self._started(worker, (await upstream.json(content_type=None)).get("call_id"))
                return web.Response(status=upstream.status, body=payload, headers=headers)
            response = web.StreamResponse(status=upstream.status, headers=headers)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except (ConnectionResetError, aiohttp.ClientPayloadError):
                pass  # one side went away: the other is closed with it
            return response

    async def _proxy_websocket(self, request: web.Request, worker: Worker) -> web.StreamResponse:
        assert self._client is not None
        headers = CIMultiDict(
            (k, v)
            for k, v in self._headers(request).items()
            if not k.lower().startswith("sec-websocket")
        )
        try:
            upstream = await self._client.ws_connect(
                f"{worker.url}{request.rel_url}", headers=headers
            )
        except aiohttp.ClientError as e:
            logger.warning("worker %s took no websocket: %s", worker.worker_id, e)
            return _unavailable(f"worker {worker.worker_id} did not answer")
        downstream = web.WebSocketResponse()
        await downstream.prepare(request)
        worker.calls += 1  # counted until the next /ready says otherwise

        async def pump(source: Any, sink: Any) -> None:
            async for message in source:
                if message.type == WSMsgType.TEXT:
                    await sink.send_str(message.data)
                elif message.type == WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
            await sink.close(code=source.close_code or 1000)

        async with upstream:
            await asyncio.gather(
                pump(downstream, upstream), pump(upstream, downstream), return_exceptions=True
            )
        return downstream

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "workers": [w.to_json() for w in self.workers]})

    async def ready(self, request: web.Request) -> web.Response:
        calls = sum(w.calls for w in self.workers)
        capacity = sum(w.capacity for w in self.workers if w.ready)
        body = {"calls": calls, "capacity": capacity, "draining": self._stopping}
        ok = not self._stopping and self._least_loaded() is not None
        return web.json_response(body, status=200 if ok else 503)

    async def drain(self, request: web.Request) -> web.Response:
        """Drain every worker at once (a pod's preStop hook; from this host only)."""
        assert self._client is not None
        self._stopping = True

        async def one(worker: Worker) -> int:
            assert self._client is not None
            try:
                no_limit = aiohttp.ClientTimeout(total=None)  # the worker keeps its deadline
                async with self._client.post(f"{worker.url}/drain", timeout=no_limit) as r:
                    return int((await r.json())["calls"])
            except (aiohttp.ClientError, ValueError, KeyError):
                return 0  # not running: nothing to drain

        left = sum(await asyncio.gather(*(one(w) for w in self.workers)))
        return web.json_response({"drained": left == 0, "calls": left})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024)
        probe = guard(Anonymous("a probe: worker counts and capacity, nothing else"))
        app.router.add_get("/health", probe(self.health))
        app.router.add_get("/ready", probe(self.ready))
        app.router.add_post("/drain", guard(Loopback())(self.drain))
        forward = guard(Anonymous("the entry forwards to a worker, which guards each route"))
        app.router.add_route("*", "/{tail:.*}", forward(self.handle))
        check_routes(app)
        return app


def _unavailable(message: str) -> web.Response:
    return web.json_response({"error": message}, status=503, headers={"Retry-After": "5"})


async def run(settings: Settings, workers: int, host: str | None, port: int | None) -> None:
    """Serve with ``workers`` worker processes until SIGTERM or SIGINT."""
    host, port = host or settings.host, port or settings.port
    settings = dataclasses.replace(settings, host=host, port=port)
    async with contextlib.AsyncExitStack() as stack:
        servers = await ModelServers.for_settings(settings)
        stack.push_async_callback(servers.stop)
        supervisor = Supervisor(settings, workers, servers.env())
        stack.push_async_callback(supervisor.stop)
        await supervisor.start()
        runner = web.AppRunner(supervisor.app())
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        # Runs first: the workers drain while the entry still serves what is not a new call.
        stack.push_async_callback(supervisor.stop)
        await web.TCPSite(runner, host, port).start()
        logger.info("agent ready with %d workers: open http://%s:%d/", workers, host, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        logger.info("stopping: draining %d workers", workers)
