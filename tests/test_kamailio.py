"""The Kamailio edge (infra/kamailio) in front of two of our SIP workers, sipp as the caller.

The shipped kamailio.cfg runs unchanged; the test sets its listen address, its
dispatcher list and short probe timers with ``-A`` defines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from telephony.sip.call import SipCall
from telephony.sip.transaction import Timers
from telephony.sip.ua import SipEndpoint

ROOT = Path(__file__).parent.parent
CONFIG = ROOT / "infra" / "kamailio" / "kamailio.cfg"
SCENARIOS = Path(__file__).parent / "sipp"
TIMERS = Timers(t1=0.1, t2=0.4, t4=0.5)
#: Probe each worker every second and skip it after one unanswered probe (1 s).
FAST_PROBES = {"PING_INTERVAL": "1", "PROBING_THRESHOLD": "1", "FR_TIMER": "1000"}


def kamailio_binary() -> str:
    found = shutil.which("kamailio") or shutil.which("kamailio", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        pytest.fail("kamailio is not installed: apt-get install kamailio (make system-test-deps)")
    return found


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Answer:
    """One call a worker answered (its ACK came): its media addresses, its in-dialog next hop."""

    worker: str
    call_id: str
    rtp: tuple[str, int]
    caller_rtp: tuple[str, int]
    next_hop: tuple[str, int]


@dataclass
class Worker:
    """A SIP endpoint that answers every call, notes it in ``answers``, maybe hangs up."""

    name: str
    answers: list[Answer]
    hang_up: bool = False
    endpoint: SipEndpoint = field(init=False)

    def __post_init__(self) -> None:
        self.endpoint = SipEndpoint("127.0.0.1", 0, on_call=self.on_call, timers=TIMERS)

    async def on_call(self, call: SipCall) -> None:
        await call.answer()
        assert call.negotiated is not None and call.info.network_id is not None
        self.answers.append(
            Answer(
                self.name,
                call.info.network_id,
                call.media.local_address,
                (call.negotiated.remote_ip, call.negotiated.remote_port),
                call.dialog.destination(),
            )
        )
        if self.hang_up:
            await call.hang_up()

    @property
    def uri(self) -> str:
        return f"sip:127.0.0.1:{self.endpoint.port}"


@contextlib.asynccontextmanager
async def workers(
    *names: str, hang_up: bool = False
) -> AsyncIterator[tuple[list[Answer], list[Worker]]]:
    answers: list[Answer] = []
    started = [Worker(name, answers, hang_up) for name in names]
    try:
        for worker in started:
            await worker.endpoint.start()
        yield answers, started
    finally:
        for worker in started:
            await worker.endpoint.close()


class Kamailio:
    """A running kamailio in its own process group, and the lines it has logged."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process, self.port = process, port
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            async with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip())
                self._changed.notify_all()

    def log(self) -> str:
        return "\n".join(self.lines[-80:])

    async def logged(self, text: str, since: int = 0, timeout: float = 10.0) -> None:
        """Wait until a line from ``since`` on contains ``text``."""

        def seen() -> bool:
            return any(text in line for line in self.lines[since:])

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(seen), timeout)
        except TimeoutError:
            pytest.fail(f"kamailio never logged {text!r} in {timeout} s:\n{self.log()}")

    async def wait_ready(self, timeout: float = 10.0) -> None:
        """Until an OPTIONS through the proxy gets a worker's 200: it listens and routes."""
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
            local = sock.getsockname()[1]
            request = (
                f"OPTIONS sip:agent@127.0.0.1:{self.port} SIP/2.0\r\n"
                f"Via: SIP/2.0/UDP 127.0.0.1:{local};branch=z9hG4bK{uuid.uuid4().hex}\r\n"
                f"From: <sip:probe@127.0.0.1:{local}>;tag=probe\r\n"
                f"To: <sip:agent@127.0.0.1:{self.port}>\r\n"
                f"Call-ID: {uuid.uuid4().hex}\r\nCSeq: 1 OPTIONS\r\n"
                "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
            ).encode()
            deadline = loop.time() + timeout
            while loop.time() < deadline:
                if self.process.returncode is not None:
                    pytest.fail(f"kamailio exited ({self.process.returncode}):\n{self.log()}")
                await loop.sock_sendto(sock, request, ("127.0.0.1", self.port))
                with contextlib.suppress(TimeoutError):  # not up yet: send again, like T1
                    data, _ = await asyncio.wait_for(loop.sock_recvfrom(sock, 65535), 0.2)
                    if data.startswith(b"SIP/2.0 200"):
                        return
        pytest.fail(f"no 200 to OPTIONS through kamailio in {timeout} s:\n{self.log()}")

    async def stop(self) -> None:
        """SIGTERM its process group, SIGKILL whatever is left, and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), 10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        await self.process.wait()
        try:
            await asyncio.wait_for(self._reader, 5)
        except TimeoutError:
            self._reader.cancel()


@contextlib.asynccontextmanager
async def kamailio(
    tmp_path: Path, destinations: list[Worker], **defines: str
) -> AsyncIterator[Kamailio]:
    """kamailio.cfg on a free loopback port, dispatching to ``destinations``."""
    binary = kamailio_binary()
    run = tmp_path / "kamailio-run"
    run.mkdir()
    dispatcher = tmp_path / "dispatcher.list"
    dispatcher.write_text("".join(f"1 {worker.uri}\n" for worker in destinations))
    port = free_udp_port()
    settings = {
        "LISTEN": f"udp:127.0.0.1:{port}",
        "DISPATCHER_LIST": f'"{dispatcher}"',
        "CHILDREN": "2",
        **defines,
    }
    command = [
        "timeout", "-k", "5", "120", binary, "-f", str(CONFIG), "-DD", "-E",
        "-m", "32", "-M", "8", "-Y", str(run), "-P", str(run / "kamailio.pid"),
    ]  # fmt: skip
    for name, value in settings.items():
        command += ["-A", f"{name}={value}"]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    edge = Kamailio(process, port)
    try:
        await edge.wait_ready()
        yield edge
    finally:
        await edge.stop()


@dataclass
class Placed:
    """What sipp saw: the media address in each 200 OK, and its own media port."""

    answers: dict[str, tuple[str, int]]
    media_port: int


async def place_calls(
    edge: Kamailio, count: int, cwd: Path, scenario: str = "kamailio_call.xml"
) -> Placed:
    """``count`` sipp calls through the proxy; every one must be answered and hung up."""
    log_file = cwd / f"sipp-{uuid.uuid4().hex[:8]}.log"
    media_port = free_udp_port()
    command = [
        "timeout", "30", "sipp", f"127.0.0.1:{edge.port}",
        "-sf", str(SCENARIOS / scenario), "-s", "agent", "-m", str(count),
        "-i", "127.0.0.1", "-p", str(free_udp_port()),
        "-mi", "127.0.0.1", "-mp", str(media_port),
        "-timeout", "20s", "-timeout_error", "-nostdin", "-nd",
        "-trace_logs", "-log_file", str(log_file),
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=cwd
    )
    try:
        output, _ = await process.communicate()
    finally:
        if process.returncode is None:  # cancelled: leave no sipp behind
            process.kill()
            await process.wait()
    assert process.returncode == 0, (
        f"sipp failed ({process.returncode}):\n{output.decode(errors='replace')[-3000:]}\n"
        f"kamailio:\n{edge.log()}"
    )
    answers = {}
    for match in re.finditer(r"^answer (\S+) (\S+) (\d+)$", log_file.read_text(), re.M):
        answers[match[1]] = (match[2], int(match[3]))
    assert len(answers) == count, log_file.read_text()
    return Placed(answers, media_port)


async def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Poll ``condition`` (a worker's state has no event to wait on) every 50 ms."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)
    assert condition(), what


def by_worker(answers: list[Answer]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for answer in answers:
        counts[answer.worker] = counts.get(answer.worker, 0) + 1
    return counts


async def all_hung_up(pool: list[Worker]) -> None:
    """The callers' BYEs reached the workers through the proxy."""
    await until(lambda: all(not w.endpoint.calls for w in pool), "calls left open on a worker")


async def test_calls_spread_skip_a_stopped_worker_and_media_goes_direct(tmp_path: Path) -> None:
    async with (
        workers("a", "b") as (answers, pool),
        kamailio(tmp_path, pool, **FAST_PROBES) as edge,
    ):
        a, _ = pool
        placed = await place_calls(edge, 4, tmp_path)
        assert by_worker(answers) == {"a": 2, "b": 2}, "round-robin over both workers"
        await all_hung_up(pool)
        # The proxy left the SDP alone: each side sees the other's own RTP address.
        for answer in answers:
            assert placed.answers[answer.call_id] == answer.rtp
            assert answer.caller_rtp == ("127.0.0.1", placed.media_port)
            assert answer.next_hop == ("127.0.0.1", edge.port), "the proxy record-routed"
        assert edge.port not in {port for _, port in placed.answers.values()}

        mark = len(edge.lines)
        await a.endpoint.close()
        await edge.logged(f"worker down: {a.uri}", since=mark)
        answers.clear()
        await place_calls(edge, 4, tmp_path)
        assert by_worker(answers) == {"b": 4}, "the stopped worker is skipped"
        await all_hung_up(pool)

        # A worker back on its address takes calls again after one answered probe.
        mark = len(edge.lines)
        a.endpoint = SipEndpoint("127.0.0.1", a.endpoint.port, on_call=a.on_call, timers=TIMERS)
        await a.endpoint.start()
        await edge.logged(f"worker up: {a.uri}", since=mark)
        answers.clear()
        await place_calls(edge, 2, tmp_path)
        assert by_worker(answers) == {"a": 1, "b": 1}
        await all_hung_up(pool)


async def test_a_call_to_a_dead_worker_fails_over(tmp_path: Path) -> None:
    """Before any probe notices (probes off here), the INVITE's timeout moves the call on."""
    async with (
        workers("a", "b") as (answers, pool),
        kamailio(tmp_path, pool, PING_INTERVAL="0", FR_TIMER="1000") as edge,
    ):
        a, _ = pool
        await a.endpoint.close()
        mark = len(edge.lines)
        await place_calls(edge, 2, tmp_path)
        assert by_worker(answers) == {"b": 2}
        await edge.logged(f"worker {a.uri} never replied", since=mark, timeout=1)
        await edge.logged("failover: INVITE to sip:127.0.0.1:", since=mark, timeout=1)
        await all_hung_up(pool)


async def test_the_agents_bye_goes_back_through_the_proxy(tmp_path: Path) -> None:
    """The worker's BYE follows the Record-Route to the proxy, which relays it to the caller."""
    async with workers("a", hang_up=True) as (answers, pool), kamailio(tmp_path, pool) as edge:
        await place_calls(edge, 1, tmp_path, "kamailio_bye_from_agent.xml")
        (answer,) = answers
        assert answer.next_hop == ("127.0.0.1", edge.port)
        await all_hung_up(pool)
