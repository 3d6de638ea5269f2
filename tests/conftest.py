"""Shared fixtures. Each owner keeps their fixtures in their own marked section."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from agent.call import ModelEndpoints
from agent.config import Settings
from agent.embedded import ModelServers
from agent.store import create_engine_for, normalise_url, upgrade

# ---------------------------------------------------------------------------
# Databases (agent.store, agent.models, migrations/)
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
# Calls (agent.call, agent.simulate, agent.server): the real CPU model servers,
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
