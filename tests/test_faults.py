"""Fault injection: a real process killed or stopped in the middle of a real call.

Each test holds a call with the real pipeline over a loopback line, a caller speaking the
Piper voice into it in real time, and the model servers as child processes
(``infra.stub_server``: the instant stand-ins, since what is tested is the agent's answer
to a server going away, not the models). Then one part fails for real: a server is sent
SIGKILL or SIGSTOP, or a private PostgreSQL is stopped and started again. What the caller
hears is what the TTS was asked to say (an in-process server of our TTS protocol that
notes each text and answers with a tone) and what reached the caller's end of the line;
what is recorded is read back from the database. docs/faults.md is the map.

A worker process killed mid-call is covered where the workers are:
``tests/test_supervisor.py::test_two_workers_share_the_calls_survive_a_kill_and_drain`` and
``tests/test_store.py::test_call_and_finished_turns_survive_a_killed_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from sqlalchemy import select
from sqlalchemy.orm import Session

import agent.pipeline.llm
import agent.pipeline.stt
from agent.conversation.policy import ConversationPolicy
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Templates
from agent.conversation.scenarios import account_from
from agent.pipeline.call import Call, CallContext, CallSummary, ModelEndpoints
from agent.pipeline.stt import STT_UNAVAILABLE
from agent.runtime.context import AgentRuntime
from agent.runtime.embedded import ServerProcess, free_port
from agent.store.tables import Call as CallRow
from agent.store.tables import CallEvent, CallStatus
from telephony.loopback import CallerEnd, LoopbackTransport
from tests.audio import speech_pcm
from tests.conftest import settings_for
from tests.fallback_tts import API_KEY, FakeCartesia

TEXTS = PromptSet.load("collections-v3").templates
#: Every test is held to this, whatever hangs (no test takes more than about 40 s).
LIMIT_S = 90.0
RATE = 16000


# -- the parts -------------------------------------------------------------------------


@dataclass
class Speaker:
    """A TTS server of our protocol in this process: notes each text, answers with a tone."""

    texts: list[str] = field(default_factory=list)

    async def speech(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.texts.append(body["text"])
        rate = int(body.get("sample_rate", RATE))
        t = np.arange(int(0.3 * rate)) / rate
        pcm = (8000 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()
        response = web.StreamResponse(headers={"X-Sample-Rate": str(rate)})
        await response.prepare(request)
        await response.write(pcm)
        await response.write_eof()
        return response

    def said(self, since: int = 0) -> str:
        return " ".join(t.strip() for t in self.texts[since:])

    async def until_said(self, text: str, since: int = 0, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.said(since):
            if time.monotonic() > deadline:
                raise AssertionError(f"never said {text!r}; said: {self.said(since)!r}")
            await asyncio.sleep(0.05)


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free local port; yields ``host:port``."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def speaker() -> AsyncIterator[tuple[Speaker, str]]:
    state = Speaker()
    app = web.Application()
    app.router.add_post("/v1/speech", state.speech)
    async with serving(app) as host:
        yield state, f"http://{host}/v1/speech"


async def launch(
    name: str, log_dir: Path, port: int | None = None, args: tuple[str, ...] = ()
) -> ServerProcess:
    """The stub model server (all three protocols) as a child process, healthy."""
    server = ServerProcess.launch(name, "infra.stub_server", log_dir=log_dir, port=port, args=args)
    try:
        await server.wait_healthy(30)
    except BaseException:
        await server.stop()
        raise
    return server


@asynccontextmanager
async def stub_servers(
    log_dir: Path, *names: str, args: tuple[str, ...] = ()
) -> AsyncIterator[dict[str, ServerProcess]]:
    """One stub server process per name, stopped (and resumed first, if stopped) at the end."""
    servers: dict[str, ServerProcess] = {}
    try:
        for name in names:
            servers[name] = await launch(name, log_dir, args=args)
        yield servers
    finally:
        for server in servers.values():
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGCONT)
            await server.stop(grace=2)


def kill(server: ServerProcess, sig: signal.Signals = signal.SIGKILL) -> None:
    server.process.send_signal(sig)
    if sig in (signal.SIGKILL, signal.SIGTERM):
        server.process.wait(10)


def stt_url(server: ServerProcess) -> str:
    return f"{server.base_url.replace('http://', 'ws://', 1)}/v1/listen"


# -- a call ----------------------------------------------------------------------------


@dataclass
class HeldCall:
    call: Call
    run: asyncio.Task[CallSummary]
    caller: CallerEnd
    speaker: Speaker

    async def turn(self, pcm: bytes, *, timeout: float = 20.0) -> float:
        """The caller speaks, then listens; the seconds until the agent was heard."""
        done = await self.caller.speak(pcm)
        heard = await self.caller.listen(timeout_s=timeout)
        return heard.first_sound_at - done

    async def until_quiet(self, silence_s: float = 1.5, timeout: float = 20.0) -> None:
        """Until the agent has made no sound for ``silence_s``."""
        deadline = time.monotonic() + timeout
        log = self.caller.sound_log
        while time.monotonic() - (log[-1] if log else 0.0) < silence_s:
            if time.monotonic() > deadline:
                raise AssertionError(f"the agent did not go quiet in {timeout} s")
            await asyncio.sleep(0.1)

    async def summary(self, timeout: float = 30.0) -> CallSummary:
        return await asyncio.wait_for(asyncio.shield(self.run), timeout)


@asynccontextmanager
async def held_call(ctx: CallContext, speaker: Speaker) -> AsyncIterator[HeldCall]:
    """A call with the policy (the demo account), answered: its greeting has been heard."""
    line = LoopbackTransport(RATE)
    policy = ConversationPolicy(account_from({}), Templates(ctx.prompts.templates), date.today())
    call = Call(ctx, line, transport_name="loopback", scenario="fault", policy=policy)
    started = asyncio.Event()
    run = asyncio.create_task(call.run(on_started=lambda _: started.set()))
    await started.wait()
    held = HeldCall(call, run, line.caller, speaker)
    try:
        await asyncio.sleep(0.5)
        await call.answer()
        await line.caller.listen(timeout_s=20)
        yield held
    finally:
        if not run.done():
            await call.hang_up("caller_hung_up")
        with suppress(Exception):
            await held.summary()
        if not run.done():
            run.cancel()
        await ctx.writer.flush(timeout=30)


def stored(ctx: CallContext, call_id: str) -> tuple[CallRow, list[tuple[str, dict[str, Any]]]]:
    """The call's row (with its turns loaded) and its events, in order."""
    with Session(ctx.engine) as session:
        row = session.get_one(CallRow, call_id)
        _ = list(row.turns), list(row.cost_lines)
        session.expunge_all()
        events = session.scalars(
            select(CallEvent).where(CallEvent.call_id == call_id).order_by(CallEvent.id)
        ).all()
        return row, [(e.kind, e.detail) for e in events]


#: What the stub STT hears in a call that must go on turn after turn: the consumer, verified
#: at once, offering less than the creditor's minimum every time, so each turn is answered
#: with the policy's counter-offer (a reply the LLM may phrase) and the call never ends.
OFFERING = "Yes, this is Jordan Smith, born March 5th 1980. I can pay twenty dollars a month."
#: The policy's answer to OFFERING, and the stub LLM's own phrasing of it.
COUNTER = (
    "The lowest monthly payment I can set up is $100 a month, for 12 months. "
    "Would that work for you?"
)
PHRASED = "I can set up $100 a month for 12 months. Would that work for you?"
LOOPING = ("--transcript", OFFERING, "--reply", PHRASED)


@pytest.fixture(scope="module")
def yes() -> bytes:
    """The caller's line (the stub STT hears "yes that is me" in any speech)."""
    return speech_pcm("Yes, that is me.", RATE)


@pytest.fixture(scope="module")
def long_yes() -> bytes:
    """A line long enough to be cut in the middle (about four seconds)."""
    return speech_pcm(
        "Yes, that is me, Jordan Smith, and I am calling you back about the letter I got.", RATE
    )


def settings(models: ModelEndpoints, tmp_path: Path, database_url: str | None = None, **env: str):
    url = database_url or f"sqlite:///{tmp_path / 'agent.db'}"
    return settings_for(models, url, DATA_DIR=str(tmp_path), **env)


# -- the STT server dies ------------------------------------------------------------------


async def test_stt_killed_while_the_caller_speaks_holds_reconnects_and_asks_again(
    tmp_path: Path, yes: bytes, long_yes: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The restarted server may take a few seconds to come up on a loaded machine: wait longer.
    monkeypatch.setattr(agent.pipeline.stt, "RECONNECT_DELAYS_S", (0.0, *[0.5] * 40))
    monkeypatch.setattr(agent.pipeline.stt, "RECONNECT_BUDGET_S", 30.0)
    async with (
        asyncio.timeout(LIMIT_S),
        speaker() as (voice, tts),
        stub_servers(tmp_path, "llm") as s,
    ):
        stt = await launch("stt", tmp_path)
        try:
            models = ModelEndpoints(stt_url(stt), f"{s['llm'].base_url}/v1", tts)
            async with AgentRuntime(settings(models, tmp_path)) as ctx, held_call(ctx, voice) as c:
                await c.turn(yes)
                assert voice.texts[-1].strip() == TEXTS["ask_dob"]
                before = len(voice.texts)

                # Killed a second into the caller's sentence, started again at once.
                speaking = asyncio.create_task(c.caller.speak(long_yes))
                await asyncio.sleep(1.0)
                kill(stt)
                stt = await launch("stt", tmp_path, port=int(stt.base_url.rsplit(":", 1)[1]))
                await voice.until_said(TEXTS["technical_resume"], since=before, timeout=30)
                await speaking
                await asyncio.sleep(1.5)  # the caller pauses (else the VAD hears one utterance)
                await c.until_quiet()
                # The half-heard sentence was never answered; asked again, the caller is.
                assert (
                    voice.said(before) == f"{TEXTS['technical_hold']} {TEXTS['technical_resume']}"
                )
                after = len(voice.texts)
                await c.turn(yes)
                assert voice.said(after).startswith("I'm sorry, I didn't catch that.")
                call_id = c.call.id
            summary = await c.summary()
            row, events = stored(ctx, call_id)
        finally:
            await stt.stop(grace=2)

    kinds = [kind for kind, _ in events]
    assert "stt_unavailable" not in kinds
    lost = dict(events)["stt_lost"]
    assert lost["caller_speaking"] is True, lost
    assert dict(events)["stt_reconnected"]["attempts"] >= 1
    assert kinds.index("stt_lost") < kinds.index("stt_reconnected")
    assert summary.end_reason == row.end_reason == "caller_hung_up"
    assert row.status == CallStatus.ENDED
    assert [t.user_text for t in row.turns if t.user_text] == ["yes that is me"] * 2


async def test_stt_killed_for_good_ends_the_call_cleanly_and_says_why(
    tmp_path: Path, yes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # The real schedule: six attempts within about five seconds.
    async with asyncio.timeout(LIMIT_S), speaker() as (voice, tts):
        async with stub_servers(tmp_path, "stt", "llm") as s:
            models = ModelEndpoints(stt_url(s["stt"]), f"{s['llm'].base_url}/v1", tts)
            async with AgentRuntime(settings(models, tmp_path)) as ctx, held_call(ctx, voice) as c:
                await c.turn(yes)
                before = len(voice.texts)
                killed_at = time.monotonic()
                kill(s["stt"])  # between the caller's turns
                summary = await c.summary(timeout=30)  # the agent ends the call itself
                call_id = c.call.id
            row, events = stored(ctx, call_id)

    # The caller heard that something is wrong, then a goodbye, before the line went down.
    assert voice.said(before) == f"{TEXTS['technical_hold']} {TEXTS['technical_end']}"
    assert any(t > killed_at for t in c.caller.sound_log)
    assert summary.end_reason == row.end_reason == STT_UNAVAILABLE
    assert row.status == CallStatus.ENDED and row.duration_s
    assert [t.number for t in row.turns] == [1]
    kinds = [kind for kind, _ in events]
    assert kinds.index("stt_lost") < kinds.index("stt_unavailable")
    assert dict(events)["stt_lost"]["caller_speaking"] is False
    assert dict(events)["stt_unavailable"]["attempts"] == len(agent.pipeline.stt.RECONNECT_DELAYS_S)
    assert any(
        "ending the call" in r.getMessage()
        for r in caplog.records
        if r.name == "agent.pipeline.stt"
    )


# -- the LLM server dies ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "sig"),
    [
        ("templates", signal.SIGKILL),
        ("phrase", signal.SIGKILL),
        ("phrase", signal.SIGSTOP),
    ],
    ids=["templates-killed", "phrase-killed", "phrase-stopped"],
)
async def test_llm_gone_the_policy_speaks_its_own_text(
    tmp_path: Path, yes: bytes, mode: str, sig: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    async with asyncio.timeout(LIMIT_S), speaker() as (voice, tts):
        async with stub_servers(tmp_path, "stt", "llm", args=LOOPING) as s:
            models = ModelEndpoints(stt_url(s["stt"]), f"{s['llm'].base_url}/v1", tts)
            env = settings(models, tmp_path, LLM_MODE=mode)
            async with AgentRuntime(env) as ctx, held_call(ctx, voice) as c:
                await c.turn(yes)  # verification and disclosure: always the policy's own text
                before = len(voice.texts)
                await c.turn(yes)  # the counter-offer: the LLM phrases it, in phrase mode
                phrased = voice.said(before)
                kill(s["llm"], sig)
                with caplog.at_level(logging.INFO, logger="agent.pipeline.llm"):
                    answers = []
                    for _ in range(2):
                        before = len(voice.texts)
                        await c.turn(yes, timeout=10)  # answered: nobody waits on the LLM
                        answers.append(voice.said(before))
                call_id = c.call.id
            _, events = stored(ctx, call_id)

    if mode == "phrase":
        assert phrased == PHRASED  # the stub LLM's words, past the guard
    else:
        assert phrased == COUNTER
    assert answers == [COUNTER, COUNTER]
    unavailable = [d for kind, d in events if kind == "llm_unavailable"]
    warnings = [
        r for r in caplog.records if r.name == "agent.pipeline.llm" and r.levelno >= logging.WARNING
    ]
    if mode == "templates":
        assert unavailable == [] and warnings == []  # the LLM is never asked
    else:
        assert len(unavailable) == 1 and len(warnings) == 1, (unavailable, warnings)  # once


#: An LLM server that begins its answer (headers, the role chunk), then hangs for good.
_HANGING_LLM = """
import asyncio, sys
from aiohttp import web

ROLE = b'data: {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", '
ROLE += b'"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\\n\\n'

async def chat(request):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(ROLE)
    await asyncio.sleep(3600)
    return response

async def health(request):
    return web.json_response({"status": "ok"})

app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


async def test_llm_hanging_after_its_headers_is_given_up_each_turn_and_recorded_once(
    tmp_path: Path, yes: bytes
) -> None:
    """Each phrased turn, the policy speaks at the deadline and the hung request is given
    up (the next is not queued behind it); three in a row are one recorded outage."""
    port = free_port()
    log = tmp_path / "hanging-llm.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", _HANGING_LLM, str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    llm = ServerProcess("hanging-llm", process, f"http://127.0.0.1:{port}", log)
    answers = []
    try:
        await llm.wait_healthy(30)
        async with asyncio.timeout(LIMIT_S), speaker() as (voice, tts):
            async with stub_servers(tmp_path, "stt", args=LOOPING) as s:
                models = ModelEndpoints(stt_url(s["stt"]), f"{llm.base_url}/v1", tts)
                env = settings(models, tmp_path, LLM_MODE="phrase")
                async with AgentRuntime(env) as ctx, held_call(ctx, voice) as c:
                    await c.turn(yes)
                    for _ in range(agent.pipeline.llm.LATE_ANSWERS_FOR_OUTAGE):
                        before = len(voice.texts)
                        await c.turn(yes)  # phrased by the LLM, which hangs
                        answers.append(voice.said(before))
                    call_id = c.call.id
                _, events = stored(ctx, call_id)
    finally:
        await llm.stop(grace=2)
    assert answers == [COUNTER] * agent.pipeline.llm.LATE_ANSWERS_FOR_OUTAGE
    [unavailable] = [d for kind, d in events if kind == "llm_unavailable"]
    assert "came too late" in unavailable["reason"]


# -- the TTS primary dies --------------------------------------------------------------


async def test_tts_primary_killed_the_fallback_speaks_and_it_is_recorded(
    tmp_path: Path, yes: bytes
) -> None:
    fake = FakeCartesia()
    async with asyncio.timeout(LIMIT_S), serving(fake.app) as fallback_host:
        async with stub_servers(tmp_path, "stt", "tts", args=LOOPING) as s:
            models = ModelEndpoints(
                stt_url(s["stt"]), f"{s['stt'].base_url}/v1", f"{s['tts'].base_url}/v1/speech"
            )
            env = settings(
                models,
                tmp_path,
                TTS_FALLBACK="cartesia",
                TTS_FALLBACK_API_KEY=API_KEY,
                TTS_FALLBACK_VOICE="test-voice",
                TTS_FALLBACK_URL=f"ws://{fallback_host}/tts/websocket",
                TTS_FALLBACK_BREAKER_FAILURES="2",
                TTS_FALLBACK_PROBE_S="60",
            )
            async with AgentRuntime(env) as ctx, held_call(ctx, Speaker()) as c:
                await c.turn(yes)
                assert fake.transcripts == []  # the primary spoke the greeting and turn 1
                kill(s["tts"])
                for _ in range(3):
                    await c.turn(yes, timeout=10)
                call_id = c.call.id
            summary = await c.summary()
            row, events = stored(ctx, call_id)

    assert [t.strip() for t in fake.transcripts] == [COUNTER] * 3
    reasons = [d["reason"] for kind, d in events if kind == "tts_fallback"]
    assert len(reasons) == 3 and reasons[2] == "breaker_open", reasons
    assert all(r.startswith("error: ") for r in reasons[:2]), reasons
    assert summary.end_reason == row.end_reason == "caller_hung_up"
    billed = {line.component: line.quantity for line in row.cost_lines}
    # The fallback's characters are billed (each text with its trailing space).
    assert billed["tts_fallback"] * 1000 == pytest.approx(3 * len(COUNTER), abs=3)
    assert [t.number for t in row.turns] == [1, 2, 3, 4]


# -- PostgreSQL restarts -----------------------------------------------------------------


def _postgres_bin() -> Path | None:
    """The directory of initdb, pg_ctl and postgres, if the server is installed."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    if found := shutil.which("pg_ctl"):
        candidates.insert(0, Path(found).resolve().parent)
    for directory in candidates:
        if all((directory / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


@dataclass
class PrivatePostgres:
    """A PostgreSQL server of this test's own, in a temporary cluster, on a free port."""

    bin: Path
    data: Path
    port: int
    user: str | None  # run as this user (initdb refuses root)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        extra: dict[str, Any] = {"user": self.user} if self.user else {}
        subprocess.run(
            [str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=60,
            cwd=self.data.parent,
            **extra,
        )

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} "
            f"-c unix_socket_directories={self.data} -c fsync=off"
        )
        log = self.data.parent / "postgres.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    bin_dir = _postgres_bin()
    if bin_dir is None:
        pytest.skip(
            "the PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed: "
            "apt-get install postgresql"
        )
    user = None
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres").pw_name
        except KeyError:
            pytest.skip("running as root, and there is no 'postgres' user to run initdb as")
    # Not under pytest's tmp_path: its directories are private to this user.
    root = Path(tempfile.mkdtemp(prefix="faults-pg-"))
    if user:
        os.chown(root, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    server = PrivatePostgres(bin_dir, root / "data", free_port(), user)
    try:
        server.init()
        server.start()
        yield server
    finally:
        with suppress(Exception):
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


async def test_postgres_restarting_mid_call_loses_nothing(
    tmp_path: Path, yes: bytes, private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    async with asyncio.timeout(LIMIT_S), speaker() as (voice, tts):
        async with stub_servers(tmp_path, "stt", args=LOOPING) as s:
            models = ModelEndpoints(stt_url(s["stt"]), f"{s['stt'].base_url}/v1", tts)
            env = settings(models, tmp_path, private_postgres.url)
            async with AgentRuntime(env) as ctx, held_call(ctx, voice) as c:
                await c.turn(yes)
                await ctx.writer.flush(timeout=10)
                assert ctx.writer.pending == 0
                await asyncio.to_thread(private_postgres.stop, "fast")
                # The call goes on while the database is away; its records wait in order.
                for _ in range(2):
                    await c.turn(yes, timeout=10)
                assert ctx.writer.pending >= 2
                await asyncio.to_thread(private_postgres.start)
                await c.turn(yes, timeout=10)
                call_id = c.call.id
            summary = await c.summary()
            row, events = stored(ctx, call_id)

    assert [t.number for t in summary.turns] == [1, 2, 3, 4]
    assert [t.number for t in row.turns] == [1, 2, 3, 4]
    assert [t.agent_text for t in row.turns] == [t.agent_text for t in summary.turns]
    assert row.status == CallStatus.ENDED and row.end_reason == "caller_hung_up"
    assert row.cost_lines and row.cost_usd == summary.cost.total_usd
    kinds = [kind for kind, _ in events]
    assert kinds[0] in ("ai_disclosure", "greeting") and "greeting" in kinds
    # The writer saw the database go away and kept retrying (logged), then wrote it all.
    retries = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert retries and all(r.name == "agent.store.database" for r in retries)
