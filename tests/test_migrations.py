"""migrations/ on SQLite and PostgreSQL, through Alembic's command API."""

from __future__ import annotations

import io

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session

from agent.ledger.latency import DEFINITION, LEGACY_DEFINITION
from agent.store.database import alembic_config, create_engine_for
from agent.store.tables import Base, CostLine, Turn

TABLES = {
    "calls",
    "turns",
    "cost_lines",
    "call_events",
    "consumers",
    "phones",
    "debts",
    "contact_attempts",
    "promises",
    "users",
    "sessions",
    "audit_log",
    "api_tokens",
    "media_tokens",
    "seen_webhooks",
}


def table_names(url: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def schema_differences(engine: Engine) -> list[object]:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


def test_upgrade_head_then_downgrade_base(empty_db_url: str) -> None:
    config = alembic_config(empty_db_url)
    command.upgrade(config, "head")
    assert TABLES | {"alembic_version"} <= table_names(empty_db_url)

    command.downgrade(config, "base")
    assert table_names(empty_db_url) == {"alembic_version"}

    # And back up again: downgrade really removed everything upgrade made.
    command.upgrade(config, "head")
    assert TABLES <= table_names(empty_db_url)


def test_migrated_schema_matches_the_models(db_url: str) -> None:
    engine = create_engine_for(db_url)
    try:
        assert schema_differences(engine) == []
        with engine.connect() as connection:
            head = ScriptDirectory.from_config(alembic_config(db_url)).get_current_head()
            current = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            assert current == head == "0011"
    finally:
        engine.dispose()


def test_comparison_would_notice_a_difference(db_url: str) -> None:
    """The check above is not vacuous: a dropped index shows up as a difference."""
    engine = create_engine_for(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("DROP INDEX ix_calls_status"))
        differences = schema_differences(engine)
        assert [d[0] for d in differences if isinstance(d, tuple)] == ["add_index"]
    finally:
        engine.dispose()


def test_single_linear_history() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1
    assert [r.revision for r in script.walk_revisions()][-1] == "0001"


@pytest.mark.parametrize("url", ["sqlite:///unused.db", "postgresql://u@db/agent"])
def test_offline_sql_script(url: str) -> None:
    """``alembic upgrade head --sql`` renders a script for a DBA, without a database."""
    config = alembic_config(url)
    buffer = io.StringIO()
    config.output_buffer = buffer
    command.upgrade(config, "head", sql=True)
    script = buffer.getvalue()
    for table in TABLES:
        assert f"CREATE TABLE {table}" in script
    assert "ON DELETE CASCADE" in script


def test_upgrade_to_0002_keeps_the_calls_already_recorded(empty_db_url: str) -> None:
    """SQLite copies ``calls`` to add its foreign key: rows and their turns must survive."""
    config = alembic_config(empty_db_url)
    command.upgrade(config, "0001")
    engine = create_engine_for(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO calls (id, transport, direction, status, started_at)"
                    " VALUES ('c1', 'sip', 'outbound', 'ended', '2026-12-01 15:00:00')"
                )
            )
            connection.execute(
                text("INSERT INTO turns (call_id, number, interrupted) VALUES ('c1', 1, false)")
            )
        command.upgrade(config, "head")
        with engine.begin() as connection:
            row = connection.execute(text("SELECT id, debt_id, party FROM calls")).one()
            assert tuple(row) == ("c1", None, None)
            assert connection.execute(text("SELECT call_id FROM turns")).scalar() == "c1"
            # The children still point at the (copied) calls table: the cascade works.
            connection.execute(text("DELETE FROM calls"))
            assert connection.execute(text("SELECT count(*) FROM turns")).scalar() == 0
        assert schema_differences(engine) == []
    finally:
        engine.dispose()


def test_upgrade_to_0009_marks_the_turns_already_recorded_legacy(empty_db_url: str) -> None:
    """Their response ran from the commit: kept as it was and marked, never reread as new."""
    config = alembic_config(empty_db_url)
    command.upgrade(config, "0008")
    engine = create_engine_for(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO calls (id, transport, direction, status, started_at)"
                    " VALUES ('c1', 'sip', 'inbound', 'ended', '2026-12-01 15:00:00')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO turns (call_id, number, interrupted, response_ms)"
                    " VALUES ('c1', 1, false, 120.0)"
                )
            )
        command.upgrade(config, "head")
        with Session(engine) as session:
            session.add(Turn(call_id="c1", number=2, response_ms=300.0))
            session.commit()
            rows = session.execute(
                select(Turn.number, Turn.response_ms, Turn.latency_definition).order_by(Turn.number)
            ).all()
        assert [tuple(r) for r in rows] == [
            (1, 120.0, LEGACY_DEFINITION),
            (2, 300.0, DEFINITION),
        ]
    finally:
        engine.dispose()


def test_upgrade_to_0011_keeps_the_cost_lines_already_priced_as_declared(empty_db_url: str) -> None:
    """Lines priced per call minute before the basis was kept: readable, and declared."""
    config = alembic_config(empty_db_url)
    command.upgrade(config, "0010")
    engine = create_engine_for(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO calls (id, transport, direction, status, started_at)"
                    " VALUES ('c1', 'sip', 'inbound', 'ended', '2026-12-01 15:00:00')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO cost_lines (call_id, component, quantity, unit, unit_price_usd,"
                    " amount_usd, price_book_version)"
                    " VALUES ('c1', 'stt', 2.0, 'call_minute', 0.001, 0.002, '2026-12-01')"
                )
            )
        command.upgrade(config, "head")
        with Session(engine) as session:
            session.add(
                CostLine(
                    call_id="c1",
                    component="stt",
                    quantity=30.0,
                    unit="audio_second",
                    unit_price_usd=0.00003,
                    amount_usd=0.0009,
                    price_book_version="2026-12-06",
                    basis="measured",
                    compute_s=4.5,
                )
            )
            session.commit()
            rows = session.execute(
                select(
                    CostLine.unit, CostLine.amount_usd, CostLine.basis, CostLine.compute_s
                ).order_by(CostLine.id)
            ).all()
        assert [tuple(r) for r in rows] == [
            ("call_minute", 0.002, "declared", None),
            ("audio_second", 0.0009, "measured", 4.5),
        ]
    finally:
        engine.dispose()
