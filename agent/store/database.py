"""The store: engines, migrations at start-up, and the background writer.

A call's audio path must never wait on the database, and a call's record must
never be lost because the database hiccuped. So the pipeline hands immutable
records (``agent.ledger.records``) to a ``StoreWriter``, which commits them one
transaction each, in order, on its own thread, and retries while the database
is away.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, or_, update
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DataError, DBAPIError, IntegrityError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from agent.config import ConfigError, hide_password
from agent.ledger.records import (
    RECORD_TYPES,
    CallEnded,
    CallEventRecord,
    CallStarted,
    Record,
    TurnRecord,
)
from agent.store.tables import Call, CallEvent, CallStatus, CostLine, Promise, Turn

logger = logging.getLogger(__name__)

#: Where ``alembic.ini`` and ``migrations/`` live: the repository root, found
#: from this file so that migrations run from any working directory.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"

#: The embedded default: a file next to wherever the agent was started.
DEFAULT_DATABASE_URL = "sqlite:///data/agent.db"

#: ``end_reason`` of the calls a stopped worker left open.
WORKER_STOPPED = "worker_stopped"


# -- engines -----------------------------------------------------------------


def normalise_url(url: str | URL) -> URL:
    """Pick psycopg 3 for PostgreSQL URLs that name no driver.

    ``postgresql://`` and ``postgres://`` (what hosting platforms hand out)
    would otherwise select psycopg2, which is not installed.
    """
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def create_engine_for(url: str | URL, **kwargs: Any) -> Engine:
    """An engine set up for this project's use of the backend.

    SQLite: the file's directory is created, and every connection gets WAL
    (the console reads while the writer writes), enforced foreign keys, and
    real transactions (pysqlite otherwise commits DDL implicitly, so a failed
    migration would be half applied). PostgreSQL: connections are pinged
    before use, so a restarted server costs a reconnect, not a failed write.
    Extra keyword arguments go to ``sqlalchemy.create_engine``.
    """
    parsed = normalise_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, **kwargs)
        _configure_sqlite(engine)
        return engine
    if backend == "postgresql":
        kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, **kwargs)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide where transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")


# -- migrations --------------------------------------------------------------


def alembic_config(url: str | URL) -> Config:
    """An Alembic ``Config`` for the repository's migrations against ``url``.

    The URL travels in ``config.attributes`` (``migrations/env.py`` reads it
    there first), so it needs no escaping for the ini parser, and env.py
    leaves the host application's logging alone.
    """
    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = normalise_url(url)
    config.attributes["configure_logger"] = False
    return config


def shown(url: str | URL) -> str:
    """``url`` as logs and messages may show it: no password (``agent.config.hide_password``)."""
    return hide_password(normalise_url(url).render_as_string(hide_password=False))


def check_database(url: str | URL) -> None:
    """Connect once to the database at ``url``, or raise ``ConfigError`` naming
    ``DATABASE_URL`` (where the commands' URL comes from): a URL that cannot be read and a
    database that cannot be reached are settings to fix, said in one line, not a traceback.
    """
    try:
        engine = create_engine_for(url, poolclass=NullPool)
    except (ArgumentError, ValueError, ImportError) as exc:
        raise ConfigError(f"DATABASE_URL is not a database URL this agent can use: {exc}") from exc
    except OSError as exc:  # SQLite: the file's directory cannot be made
        raise ConfigError(f"DATABASE_URL: cannot open {shown(url)}: {exc}") from exc
    try:
        with engine.connect():
            pass
    except DBAPIError as exc:
        reason = " ".join(_reason(exc).split())  # libpq's messages run over two lines
        raise ConfigError(f"DATABASE_URL: cannot connect to {shown(url)}: {reason}") from exc
    finally:
        engine.dispose()


def upgrade(url: str | URL) -> None:
    """Bring the database at ``url`` to the newest schema (``alembic upgrade head``).

    The server calls this at start, so a fresh database just works; one that cannot be
    reached is a ``ConfigError`` (``check_database``).
    """
    check_database(url)
    logger.info("migrating %s to head", shown(url))
    command.upgrade(alembic_config(url), "head")


def mark_abandoned_calls(engine: Engine, worker: str | None = None) -> int:
    """Close the calls a previous run of ``worker`` left ``active``; return how many.

    A call can only be active while its worker carries it, so when the worker
    starts again its active rows are calls it stopped in the middle of. Other
    workers' rows are theirs (they may be running); rows naming no worker are
    from before calls named theirs, and are closed by any. The end time is not
    known and is left empty.
    """
    mine = (
        Call.worker.is_(None)
        if worker is None
        else or_(Call.worker == worker, Call.worker.is_(None))
    )
    with engine.begin() as connection:
        result = connection.execute(
            update(Call)
            .where(Call.status == CallStatus.ACTIVE.value, mine)
            .values(status=CallStatus.ABNORMAL.value, end_reason=WORKER_STOPPED)
        )
    count = result.rowcount
    if count:
        logger.info("marked %d call(s) left active by a stopped worker as abnormal", count)
    return count


# -- the writer --------------------------------------------------------------


class InvalidRecordError(Exception):
    """A record that can never be written (its call is missing or already ended)."""


class StoreWriter:
    """Commits records on a dedicated thread, in submission order.

    ``submit`` never blocks, so the asyncio loop carrying the call's audio is
    never held up by the database. Each record is its own transaction: a
    crash loses at most what was still queued. While the database is
    unreachable the record at the head of the queue is retried with
    exponential backoff and nothing behind it overtakes it. A record the
    database rejects as invalid (a duplicate turn, say) is logged and skipped,
    so one bad record cannot stall every call behind it.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        retry_initial_s: float = 0.5,
        retry_max_s: float = 30.0,
    ) -> None:
        self._engine = engine
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._queue: queue.Queue[tuple[int, Record] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._submitted = 0
        self._done = 0
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Records submitted but not yet committed (or skipped)."""
        with self._lock:
            return self._submitted - self._done

    def start(self) -> None:
        """Start the writer thread; records submitted before are kept and written."""
        if self._thread is not None:
            raise RuntimeError("StoreWriter already started")
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._thread.start()

    def submit(self, record: Record) -> None:
        """Queue a record for writing; returns at once. Safe from any thread."""
        if not isinstance(record, RECORD_TYPES):
            raise TypeError(f"not a store record: {record!r}")
        with self._lock:
            if self._closed:
                raise RuntimeError("StoreWriter is stopped")
            self._submitted += 1
            # Under the lock, so queue order matches the sequence numbers.
            self._queue.put((self._submitted, record))

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until everything submitted so far is committed (or skipped as invalid).

        Raises ``TimeoutError`` if that takes longer than ``timeout`` seconds,
        e.g. while the database is down; the records stay queued.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            target = self._submitted
            if self._done >= target:
                return
            if self._thread is None or not self._thread.is_alive():
                raise RuntimeError(f"StoreWriter is not running; {target - self._done} pending")
            waiter: asyncio.Future[None] = loop.create_future()
            entry = (target, loop, waiter)
            self._waiters.append(entry)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"store flush timed out after {timeout}s with {self.pending} record(s) pending"
            ) from None
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def stop(self, timeout: float | None = None) -> bool:
        """Write what is queued, then end the thread. True if everything was written.

        After ``timeout`` seconds it gives up waiting and logs what is still
        queued; the daemon thread keeps retrying until the process exits.
        """
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
        left = self.pending
        if left:
            logger.warning("store writer stopped with %d record(s) not written", left)
        return left == 0

    # The rest runs on the writer thread.

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            sequence, record = item
            self._write_until_done(record)
            self._mark_done(sequence)

    def _mark_done(self, sequence: int) -> None:
        with self._lock:
            self._done = sequence
            ready = [entry for entry in self._waiters if entry[0] <= sequence]
        for _target, loop, waiter in ready:
            try:
                loop.call_soon_threadsafe(_resolve, waiter)
            except RuntimeError:  # the waiting loop has closed meanwhile
                pass

    def _write_until_done(self, record: Record) -> None:
        delay = self._retry_initial_s
        attempt = 0
        while True:
            try:
                self._write(record)
                return
            except (IntegrityError, DataError, InvalidRecordError) as exc:
                logger.error(
                    "store: skipping invalid %s of call %s: %s",
                    type(record).__name__,
                    record.call_id,
                    _reason(exc),
                )
                return
            except (DBAPIError, PoolTimeoutError) as exc:
                attempt += 1
                logger.warning(
                    "store: database unavailable, retrying %s for call %s in %.1fs "
                    "(attempt %d): %s",
                    type(record).__name__,
                    record.call_id,
                    delay,
                    attempt,
                    _reason(exc),
                )
                time.sleep(delay)
                delay = min(delay * 2, self._retry_max_s)
            except Exception as exc:
                # Not the database's fault: the record cannot be turned into rows.
                logger.error(
                    "store: skipping %s of call %s that cannot be written: %s",
                    type(record).__name__,
                    record.call_id,
                    _reason(exc),
                )
                return

    def _write(self, record: Record) -> None:
        with Session(self._engine) as session, session.begin():
            if isinstance(record, CallStarted):
                session.add(
                    Call(
                        id=record.call_id,
                        transport=record.transport,
                        direction=record.direction,
                        scenario=record.scenario,
                        status=CallStatus.ACTIVE.value,
                        started_at=record.started_at,
                        stt_model=record.stt_model,
                        llm_model=record.llm_model,
                        tts_voice=record.tts_voice,
                        prompt_version=record.prompt_version,
                        number=record.number,
                        campaign=record.campaign,
                        worker=record.worker,
                    )
                )
            elif isinstance(record, TurnRecord):
                session.add(Turn(**_fields(record)))
            elif isinstance(record, CallEventRecord):
                session.add(
                    CallEvent(
                        call_id=record.call_id, at=record.at, kind=record.kind, detail=record.detail
                    )
                )
            elif isinstance(record, CallEnded):
                self._end_call(session, record)
            else:  # pragma: no cover - submit() refuses other types
                raise InvalidRecordError(f"unknown record type {type(record).__name__}")

    @staticmethod
    def _end_call(session: Session, record: CallEnded) -> None:
        call = session.get(Call, record.call_id, with_for_update=True)
        if call is None:
            raise InvalidRecordError(f"call {record.call_id} has no row")
        if call.status == CallStatus.ENDED.value:
            raise InvalidRecordError(f"call {record.call_id} has already ended")
        cost = record.cost
        call.status = CallStatus.ENDED.value
        call.ended_at = record.ended_at
        call.duration_s = record.duration_s
        call.end_reason = record.end_reason
        call.recording_uri = record.recording_uri
        outcome = record.outcome
        if outcome is not None:
            call.party = outcome.party
            call.disposition = outcome.disposition
            call.verified_at = outcome.verified_at
            call.debt_id = outcome.debt_id
            if outcome.promise is not None and outcome.debt_id is not None:
                promise = outcome.promise
                session.add(
                    Promise(
                        call_id=record.call_id,
                        debt_id=outcome.debt_id,
                        amount_cents=promise.amount_cents,
                        due_date=promise.due_date,
                        method=promise.method,
                        created_at=record.ended_at,
                    )
                )
        if cost is None:  # not priced (its cost_error event says why): the rest stands
            return
        call.price_book_version = cost.price_book_version
        call.cost_usd = cost.total_usd
        call.cost_per_minute_usd = cost.per_minute_usd
        session.add_all(
            CostLine(
                call_id=record.call_id,
                component=line.component,
                quantity=line.quantity,
                unit=line.unit,
                unit_price_usd=line.unit_price_usd,
                amount_usd=line.amount_usd,
                price_book_version=cost.price_book_version,
                basis=line.basis,
                compute_s=line.compute_s,
            )
            for line in cost.lines
        )


def _fields(record: TurnRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def _reason(exc: Exception) -> str:
    """The database's own message, without SQLAlchemy's echo of the statement.

    The statement's parameters hold transcripts; a retry warning every few
    seconds should not copy them into the logs. Any other error is named by its
    type and where it was raised, not its message: Python's messages quote the
    value they could not take (``could not convert string to float: '...'``).
    """
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return f"{type(exc.orig).__name__}: {exc.orig}".strip()
    if isinstance(exc, InvalidRecordError):
        return str(exc)
    cause = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    frames = traceback.extract_tb(cause.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(cause).__name__}{where}"


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
