"""agent.store.database against real databases: SQLite and PostgreSQL (see conftest.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from agent.ledger.pricebook import CallCost, CallUsage, PriceBook, price_call
from agent.ledger.records import CallEnded, CallEventRecord, CallStarted, TurnRecord, new_call_id
from agent.store.database import (
    PROJECT_ROOT,
    WORKER_STOPPED,
    StoreWriter,
    alembic_config,
    create_engine_for,
    mark_abandoned_calls,
    normalise_url,
    upgrade,
)
from agent.store.tables import Call, CallEvent, CallStatus, CostLine, Turn

T0 = dt.datetime(2026, 12, 2, 15, 0, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook.load()


def started(call_id: str, at: dt.datetime = T0) -> CallStarted:
    return CallStarted(
        call_id,
        "webrtc",
        "inbound",
        at,
        scenario="promise_to_pay",
        stt_model="whisper-large-v3-turbo",
        llm_model="gemma-3-27b",
        tts_voice="tara",
        prompt_version="greeting-v1",
    )


def turn(call_id: str, number: int, user_text: str = "hello") -> TurnRecord:
    begin = T0 + dt.timedelta(seconds=10 * number)
    return TurnRecord(
        call_id,
        number,
        started_at=begin,
        ended_at=begin + dt.timedelta(seconds=4),
        user_text=user_text,
        agent_text=f"answer {number}",
        interrupted=number == 2,
        endpointing_ms=200.0,
        stt_ms=55.5,
        llm_ttft_ms=98.0,
        tts_ttfb_ms=75.0,
        transport_out_ms=12.0,
        response_ms=240.5,
        voice_to_voice_ms=440.5,
        stt_audio_s=2.5,
        llm_prompt_tokens=812,
        llm_completion_tokens=31,
        tts_characters=120,
    )


def cost(book: PriceBook, duration_s: float = 120.0) -> CallCost:
    return price_call(book, "h100", CallUsage("webrtc", duration_s, fallback_tts_characters=400))


def ended(call_id: str, book: PriceBook, duration_s: float = 120.0) -> CallEnded:
    return CallEnded(
        call_id, T0 + dt.timedelta(seconds=duration_s), duration_s, "hangup", cost(book, duration_s)
    )


@pytest.fixture
def writer(db_engine: Engine) -> Iterator[StoreWriter]:
    writer = StoreWriter(db_engine, retry_initial_s=0.05, retry_max_s=0.2)
    writer.start()
    yield writer
    writer.stop(timeout=10)


# -- the writer --------------------------------------------------------------


async def test_writer_commits_call_turns_events_and_end(
    writer: StoreWriter, db_url: str, book: PriceBook
) -> None:
    call_id = new_call_id()
    # A start time in another zone comes back as the same instant in UTC.
    writer.submit(started(call_id, T0.astimezone(dt.timezone(dt.timedelta(hours=-5)))))
    writer.submit(turn(call_id, 1))
    writer.submit(CallEventRecord(call_id, T0, "ai_disclosure", {"text": "an automated assistant"}))
    writer.submit(turn(call_id, 2))
    writer.submit(ended(call_id, book))
    await writer.flush(timeout=10)
    assert writer.pending == 0

    # Read back through a separate engine: it is committed, not just flushed.
    engine = create_engine_for(db_url)
    try:
        with Session(engine) as session:
            call = session.get(Call, call_id)
            assert call is not None
            assert call.status == CallStatus.ENDED
            assert call.started_at == T0 and call.started_at.tzinfo == dt.UTC
            assert call.ended_at == T0 + dt.timedelta(minutes=2)
            assert (call.transport, call.direction, call.scenario) == (
                "webrtc",
                "inbound",
                "promise_to_pay",
            )
            assert (call.stt_model, call.llm_model, call.tts_voice, call.prompt_version) == (
                "whisper-large-v3-turbo",
                "gemma-3-27b",
                "tara",
                "greeting-v1",
            )
            assert call.duration_s == 120.0
            assert call.end_reason == "hangup"
            expected = cost(book)
            assert call.price_book_version == book.version
            assert call.cost_usd == pytest.approx(expected.total_usd)
            assert call.cost_per_minute_usd == pytest.approx(expected.per_minute_usd)

            assert [t.number for t in call.turns] == [1, 2]
            first, second = call.turns
            assert first.user_text == "hello" and first.agent_text == "answer 1"
            assert not first.interrupted and second.interrupted
            assert first.started_at == T0 + dt.timedelta(seconds=10)
            assert (first.endpointing_ms, first.stt_ms, first.llm_ttft_ms) == (200.0, 55.5, 98.0)
            assert (first.tts_ttfb_ms, first.transport_out_ms) == (75.0, 12.0)
            assert (first.response_ms, first.voice_to_voice_ms) == (240.5, 440.5)
            assert (first.stt_audio_s, first.llm_prompt_tokens) == (2.5, 812)
            assert (first.llm_completion_tokens, first.tts_characters) == (31, 120)

            lines = [
                (c.component, c.quantity, c.unit, c.basis, c.price_book_version)
                for c in call.cost_lines
            ]
            # Stored as priced, each line with its basis (docs/pricing.md).
            assert lines == [
                (line.component, line.quantity, line.unit, line.basis, book.version)
                for line in expected.lines
            ]
            assert ("telephony", 2.0, "minute", "measured", book.version) in lines
            assert ("tts_fallback", 0.4, "1k_characters", "measured", book.version) in lines
            assert [c.amount_usd for c in call.cost_lines] == pytest.approx(
                [line.amount_usd for line in expected.lines]
            )

            (event,) = call.events
            assert (event.kind, event.at, event.detail) == (
                "ai_disclosure",
                T0,
                {"text": "an automated assistant"},
            )
    finally:
        engine.dispose()


async def test_flush_returns_at_once_with_nothing_pending(writer: StoreWriter) -> None:
    await writer.flush(timeout=0.01)
    assert writer.pending == 0


async def test_duplicate_turn_is_skipped_and_later_records_land(
    writer: StoreWriter, db_engine: Engine, book: PriceBook, caplog: pytest.LogCaptureFixture
) -> None:
    call_id = new_call_id()
    writer.submit(started(call_id))
    writer.submit(turn(call_id, 1, "first"))
    with caplog.at_level(logging.ERROR, logger="agent.store.database"):
        writer.submit(turn(call_id, 1, "the duplicate"))
        writer.submit(turn(call_id, 2, "second"))
        writer.submit(ended(call_id, book))
        await writer.flush(timeout=10)

    with Session(db_engine) as session:
        call = session.get(Call, call_id)
        assert call is not None and call.status == CallStatus.ENDED
        assert [(t.number, t.user_text) for t in call.turns] == [(1, "first"), (2, "second")]
        assert len(call.cost_lines) == len(cost(book).lines)
    skipped = [r for r in caplog.records if "skipping invalid TurnRecord" in r.getMessage()]
    assert len(skipped) == 1 and call_id in skipped[0].getMessage()
    assert "the duplicate" not in caplog.text  # what was said stays out of the log


async def test_a_record_that_cannot_be_written_is_logged_without_what_was_said(
    writer: StoreWriter, caplog: pytest.LogCaptureFixture
) -> None:
    """The log names the record's type and call, never its fields: they hold transcripts."""
    call_id = new_call_id()
    said = "my card is 4111 1111 1111 1111, take two hundred"
    writer.submit(started(call_id))
    writer.submit(turn(call_id, 1, said))
    with caplog.at_level(logging.WARNING, logger="agent.store.database"):
        writer.submit(turn(call_id, 1, said))  # a duplicate: the database refuses it
        # Not a boolean: SQLAlchemy refuses it, quoting it in its message.
        writer.submit(dataclasses.replace(turn(call_id, 2, said), interrupted=said))
        await writer.flush(timeout=10)
    skipped = [r for r in caplog.records if r.getMessage().startswith("store: skipping")]
    assert len(skipped) == 2
    assert all("TurnRecord" in r.getMessage() and call_id in r.getMessage() for r in skipped)
    assert "4111" not in caplog.text and "two hundred" not in caplog.text


async def test_records_for_a_call_without_a_row_are_skipped(
    writer: StoreWriter, db_engine: Engine, book: PriceBook
) -> None:
    """A turn or an end whose call never started is refused (foreign keys on, both backends)."""
    ghost, real = new_call_id(), new_call_id()
    writer.submit(turn(ghost, 1))
    writer.submit(CallEventRecord(ghost, T0, "greeting", {}))
    writer.submit(ended(ghost, book))
    writer.submit(started(real))
    await writer.flush(timeout=10)

    with Session(db_engine) as session:
        assert session.scalars(select(Call.id)).all() == [real]
        assert session.scalars(select(Turn)).all() == []
        assert session.scalars(select(CallEvent)).all() == []
        assert session.scalars(select(CostLine)).all() == []


async def test_a_second_end_does_not_duplicate_cost_lines(
    writer: StoreWriter, db_engine: Engine, book: PriceBook
) -> None:
    call_id = new_call_id()
    writer.submit(started(call_id))
    writer.submit(ended(call_id, book, 120.0))
    writer.submit(ended(call_id, book, 999.0))
    await writer.flush(timeout=10)

    with Session(db_engine) as session:
        call = session.get(Call, call_id)
        assert call is not None
        assert call.duration_s == 120.0
        assert len(call.cost_lines) == len(cost(book).lines)


async def test_stop_writes_what_was_queued_before_start(db_engine: Engine) -> None:
    writer = StoreWriter(db_engine)
    call_id = new_call_id()
    writer.submit(started(call_id))
    writer.submit(turn(call_id, 1))
    assert writer.pending == 2
    writer.start()
    assert writer.stop(timeout=10) is True
    assert writer.pending == 0
    with Session(db_engine) as session:
        assert session.scalar(select(Turn.number).where(Turn.call_id == call_id)) == 1
    with pytest.raises(RuntimeError, match="stopped"):
        writer.submit(turn(call_id, 2))


async def test_submit_refuses_what_is_not_a_record(db_engine: Engine) -> None:
    writer = StoreWriter(db_engine)
    with pytest.raises(TypeError):
        writer.submit({"call_id": "x"})  # type: ignore[arg-type]


async def test_flush_of_a_writer_that_never_started_raises(db_engine: Engine) -> None:
    writer = StoreWriter(db_engine)
    writer.submit(started(new_call_id()))
    with pytest.raises(RuntimeError, match="not running"):
        await writer.flush(timeout=1)


# -- a crash mid-call ----------------------------------------------------------

_CRASHING_WORKER = """
import asyncio, datetime as dt, sys, time
from agent.ledger.records import CallStarted, TurnRecord
from agent.store.database import StoreWriter, create_engine_for

url, call_id = sys.argv[1], sys.argv[2]
now = dt.datetime.now(dt.UTC)

async def main():
    writer = StoreWriter(create_engine_for(url))
    writer.start()
    writer.submit(CallStarted(call_id, "loopback", "inbound", now, worker="worker-a"))
    writer.submit(TurnRecord(call_id, 1, now, now, "hello", "hi, this is an automated assistant"))
    writer.submit(TurnRecord(call_id, 2, now, now, "who is calling", "Acme Recovery"))
    await writer.flush(timeout=30)

asyncio.run(main())
print("flushed", flush=True)
time.sleep(600)
"""


def test_call_and_finished_turns_survive_a_killed_worker(db_url: str, db_engine: Engine) -> None:
    """SIGKILL a worker mid-call: what it flushed is there, and start-up marks the call abnormal."""
    call_id = new_call_id()
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    worker = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_WORKER, db_url, call_id],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line.strip() == "flushed", worker.stderr.read() if worker.stderr else ""
    finally:
        worker.kill()
        worker.wait(timeout=30)

    # A new engine, as the restarted server would open.
    engine = create_engine_for(db_url)
    try:
        with Session(engine) as session:
            call = session.get(Call, call_id)
            assert call is not None and call.status == CallStatus.ACTIVE
            assert [t.number for t in call.turns] == [1, 2]
            assert call.turns[1].agent_text == "Acme Recovery"

        finished = new_call_id()
        with Session(engine) as session, session.begin():
            session.add(Call(id=finished, transport="sip", direction="outbound", started_at=T0))
            session.flush()
            session.get_one(Call, finished).status = CallStatus.ENDED

        # Another worker's start leaves worker-a's call alone (worker-a may be running).
        assert mark_abandoned_calls(engine, "worker-b") == 0
        assert mark_abandoned_calls(engine, "worker-a") == 1
        assert mark_abandoned_calls(engine, "worker-a") == 0
        with Session(engine) as session:
            call = session.get_one(Call, call_id)
            assert (call.status, call.end_reason) == (CallStatus.ABNORMAL, WORKER_STOPPED)
            assert session.get_one(Call, finished).status == CallStatus.ENDED
    finally:
        engine.dispose()


# -- the database away, then back --------------------------------------------


class _ListenLater:
    """A TCP forwarder to PostgreSQL whose port refuses connections until ``up()``.

    The port is bound but not listening, so clients get "connection refused",
    exactly as while the server is down or restarting.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.bind(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False

    def up(self) -> None:
        self._server.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        for s in [self._server, *self._sockets]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            self._sockets += [client, upstream]
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.fixture
def outage(db_url: str) -> Iterator[tuple[Engine, Callable[[], None]]]:
    """An engine on the migrated database that cannot reach it yet, and how to bring it back.

    SQLite: the database's directory is moved away after the engine is made (a
    volume not mounted yet) and moved back. PostgreSQL: the engine points at a
    port nothing listens on until it starts forwarding to the server.
    """
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        assert url.database is not None
        engine = create_engine_for(db_url)
        directory = Path(url.database).parent
        away = directory.with_name(directory.name + "-away")
        directory.rename(away)

        def bring_back() -> None:
            away.rename(directory)

        try:
            yield engine, bring_back
        finally:
            engine.dispose()
            if away.exists():
                away.rename(directory)
        return
    proxy = _ListenLater((url.host or "127.0.0.1", url.port or 5432))
    engine = create_engine_for(url.set(host="127.0.0.1", port=proxy.port))
    try:
        yield engine, proxy.up
    finally:
        engine.dispose()
        proxy.close()


async def test_nothing_is_lost_while_the_database_is_away(
    outage: tuple[Engine, Callable[[], None]],
    db_url: str,
    book: PriceBook,
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine, bring_back = outage
    writer = StoreWriter(engine, retry_initial_s=0.05, retry_max_s=0.2)
    writer.start()
    call_id = new_call_id()
    try:
        with caplog.at_level(logging.WARNING, logger="agent.store.database"):
            writer.submit(started(call_id))
            for number in (1, 2, 3):
                writer.submit(turn(call_id, number))
            writer.submit(ended(call_id, book))
            with pytest.raises(TimeoutError):
                await writer.flush(timeout=0.5)
            assert writer.pending == 5
            bring_back()
            await writer.flush(timeout=30)
        assert writer.pending == 0
        retries = [r for r in caplog.records if "database unavailable" in r.getMessage()]
        assert retries and all(r.levelno == logging.WARNING for r in retries)
    finally:
        writer.stop(timeout=10)

    check = create_engine_for(db_url)
    try:
        with Session(check) as session:
            call = session.get_one(Call, call_id)
            assert call.status == CallStatus.ENDED
            assert [t.number for t in call.turns] == [1, 2, 3]
            assert len(call.cost_lines) == len(cost(book).lines)
    finally:
        check.dispose()


# -- engines and migrations ----------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/agent", "postgresql+psycopg://u:p@db:5432/agent"),
        ("postgres://u@db/agent", "postgresql+psycopg://u@db/agent"),
        ("postgresql+psycopg://u@db/agent", "postgresql+psycopg://u@db/agent"),
        ("postgresql+asyncpg://u@db/agent", "postgresql+asyncpg://u@db/agent"),
        ("sqlite:///data/agent.db", "sqlite:///data/agent.db"),
    ],
)
def test_normalise_url_picks_psycopg_3(given: str, expected: str) -> None:
    assert normalise_url(given).render_as_string(hide_password=False) == expected


def test_sqlite_engine_makes_its_directory_and_enforces_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "agent.db"
    engine = create_engine_for(f"sqlite:///{path}")
    try:
        assert path.parent.is_dir()
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()


def test_engine_for_each_backend(db_engine: Engine) -> None:
    if db_engine.dialect.name == "postgresql":
        assert db_engine.dialect.driver == "psycopg"
        assert db_engine.pool._pre_ping  # type: ignore[attr-defined]
    with db_engine.connect() as connection:
        assert connection.execute(text("SELECT 1")).scalar() == 1


def test_upgrade_works_from_any_directory(
    empty_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    upgrade(empty_db_url)
    upgrade(empty_db_url)  # already at head: nothing to do
    engine = create_engine_for(empty_db_url)
    try:
        tables = set(inspect(engine).get_table_names())
        assert {"calls", "turns", "cost_lines", "call_events", "alembic_version"} <= tables
        with engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        head = ScriptDirectory.from_config(alembic_config(empty_db_url)).get_current_head()
        assert version == head
    finally:
        engine.dispose()
    assert not (tmp_path / "data").exists()


def test_upgrade_leaves_the_applications_logging_alone(
    empty_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app_logger = logging.getLogger("agent.some_module")
    upgrade(empty_db_url)
    assert not app_logger.disabled
    assert not logging.getLogger("agent.store.database").disabled
