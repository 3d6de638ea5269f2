"""Shared fixtures. Each owner keeps their fixtures in their own marked section."""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from agent.config import Settings
from agent.pipeline.call import ModelEndpoints
from agent.runtime.embedded import ModelServers
from agent.store.database import create_engine_for, normalise_url, upgrade

# ---------------------------------------------------------------------------
# Databases (agent.store.database, agent.store.tables, migrations/)
#
# Every store test runs against SQLite and PostgreSQL. PostgreSQL tests get a
# schema of their own (t_<random>), selected through the URL's search_path and
# dropped afterwards, so parallel runs and real data never meet. The server is
# TEST_POSTGRES_URL (default below); when it cannot be reached those tests
# fail; set TEST_POSTGRES_URL= (empty) to skip them instead.
# ---------------------------------------------------------------------------

DEFAULT_TEST_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BACKENDS = ("sqlite", "postgresql")


def postgres_test_url() -> str | None:
    """The PostgreSQL server for tests, or None when deliberately turned off."""
    value = os.environ.get("TEST_POSTGRES_URL")
    if value is None:
        return DEFAULT_TEST_POSTGRES_URL
    return value.strip() or None


def url_with_search_path(url: str, schema: str) -> str:
    """``url`` with every connection's search_path set to ``schema``."""
    parsed = normalise_url(url)
    options = parsed.query.get("options")
    option = f"-csearch_path={schema}"
    if isinstance(options, str):
        option = f"{options} {option}"
    return parsed.update_query_dict({"options": option}).render_as_string(hide_password=False)


@pytest.fixture(params=BACKENDS)
def empty_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A URL of a fresh, empty database: a SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        directory = tmp_path_factory.mktemp("db")
        yield f"sqlite:///{directory / 'agent.db'}"
        return

    base = postgres_test_url()
    if base is None:
        pytest.skip("TEST_POSTGRES_URL is empty: PostgreSQL tests turned off")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_engine_for(base, poolclass=NullPool)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        admin.dispose()
        shown = make_url(base).render_as_string(hide_password=True)
        pytest.fail(
            f"PostgreSQL at {shown} is unreachable: {exc.orig}\n"
            "Start it, point TEST_POSTGRES_URL at one, or set TEST_POSTGRES_URL= to skip.",
            pytrace=False,
        )
    try:
        yield url_with_search_path(base, schema)
    finally:
        with admin.begin() as connection:
            # A test that leaked an open transaction must not hang the run.
            connection.execute(text("SET LOCAL lock_timeout = '10s'"))
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """A URL of a fresh database migrated to head, on SQLite and on PostgreSQL."""
    upgrade(empty_db_url)
    return empty_db_url


@pytest.fixture
def db_engine(db_url: str) -> Iterator[Engine]:
    """An engine on ``db_url`` (as the agent makes it), disposed afterwards."""
    engine = create_engine_for(db_url)
    yield engine
    engine.dispose()


# --- end of databases -------------------------------------------------------


# ---------------------------------------------------------------------------
# Calls (agent.pipeline.call, tools.simulate, agent.server.app): the real CPU model servers,
# started once per test run and shared by every test that holds a call.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def model_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the shared CPU model servers write their logs."""
    return tmp_path_factory.mktemp("model-logs")


@pytest.fixture(scope="session")
def cpu_models(model_log_dir: Path) -> Iterator[ModelEndpoints]:
    """The embedded CPU model servers (Whisper tiny.en, Gemma 3 270M, Piper)."""
    servers = asyncio.run(ModelServers.start(log_dir=model_log_dir))
    try:
        yield ModelEndpoints(servers.stt_url, servers.llm_url, servers.tts_url)
    finally:
        asyncio.run(servers.stop())


def settings_for(models: ModelEndpoints, database_url: str, **env: str) -> Settings:
    """Settings of an agent that uses ``models`` and ``database_url``."""
    return Settings.from_env(
        {
            "STT_URL": models.stt_url,
            "LLM_URL": models.llm_url,
            "TTS_URL": models.tts_url,
            "DATABASE_URL": database_url,
            **env,
        }
    )


@pytest.fixture(scope="session")
def speech_16k() -> bytes:
    """A caller's sentence, spoken by the Piper voice, 16 kHz s16le mono."""
    from tests.audio import speech_pcm

    return speech_pcm("Yes, this is Jordan Smith speaking.", 16000)


# ---------------------------------------------------------------------------
# Processes (issue 18): a test run leaves no process running. The run is the
# subreaper of everything it starts, so what a killed process orphans (a
# SIGKILLed worker's children) is adopted by the run rather than by
# init and is seen here; at the end, a descendant still running fails the run,
# named. Linux (/proc, prctl); elsewhere the check is skipped.
# ---------------------------------------------------------------------------

#: prctl(2): orphaned descendants are re-parented to this process, not to init.
PR_SET_CHILD_SUBREAPER = 36
#: How long descendants ended at the very end (a fixture's last SIGTERM) may take to go.
EXIT_GRACE_S = 10.0
#: What the check found, for the summary: pid -> command line.
LEFT_RUNNING = pytest.StashKey[dict[int, str]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if sys.platform != "linux":
        return
    deadline = time.monotonic() + EXIT_GRACE_S
    while (left := _running_descendants()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        session.config.stash[LEFT_RUNNING] = left


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    left = terminalreporter.config.stash.get(LEFT_RUNNING, {})
    if left:
        terminalreporter.write_sep("=", "the test run left processes running", red=True)
        for pid, command in sorted(left.items()):
            terminalreporter.write_line(f"pid {pid}: {command}", red=True)


def _running_descendants() -> dict[int, str]:
    """pid -> command line of this process's descendants that are still running (not
    zombies), less the helpers that end with this process: the RTP sender and
    multiprocessing's resource tracker (each waits on a socket or pipe that only this
    process holds open, and their own tests end their parents)."""
    from multiprocessing import resource_tracker

    from telephony.rtp.sender import SENDER

    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            children.setdefault(int(ppid), []).append(int(entry.name))
    ours = {SENDER.pid, getattr(resource_tracker._resource_tracker, "_pid", None)}
    found: dict[int, str] = {}
    todo = [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            if pid not in ours:
                found[pid] = _command(pid)
    return found


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "(gone)"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200] or "(no command)"


# --- end of processes -------------------------------------------------------
