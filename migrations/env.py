"""Alembic environment: which database, which models, and the care SQLite needs.

The URL comes from, in order: ``config.attributes["url"]`` (set by
``agent.store.database.alembic_config`` for the server and the tests), ``-x url=...``
on the command line, the ``DATABASE_URL`` environment variable, and the
embedded default ``sqlite:///data/agent.db``. Engines come from
``agent.store.database.create_engine_for`` so migrations see the database exactly as
the agent does.
"""

from __future__ import annotations

import logging.config
import os
from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import event, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from agent.store.database import DEFAULT_DATABASE_URL, create_engine_for, normalise_url
from agent.store.tables import Base, UTCDateTime

config = context.config

# Configure logging only for the alembic command line: an application that
# migrates at start-up keeps its own logging.
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def database_url() -> URL:
    """The database to migrate (see the module docstring for the order)."""
    if config.attributes.get("url") is not None:
        return normalise_url(config.attributes["url"])
    url = (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("DATABASE_URL")
        or DEFAULT_DATABASE_URL
    )
    return normalise_url(url)


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Write the portable type into generated migrations, not our decorator."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations_offline() -> None:
    """Emit the SQL as a script instead of running it (``alembic upgrade --sql``)."""
    url = database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.get_backend_name() == "sqlite",
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def _foreign_keys_off(dbapi_connection: Any, _record: Any) -> None:
    # SQLite's batch mode copies a table, drops it and renames the copy; with
    # foreign keys enforced, dropping `calls` would cascade into every child
    # row. Turn enforcement off for the migration's connection (it has to be
    # outside a transaction, hence on connect) and check integrity at the end.
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=OFF")
    finally:
        cursor.close()


def run_migrations_online() -> None:
    """Run the migrations in one transaction (SQLite included, see create_engine_for)."""
    url = database_url()
    sqlite = url.get_backend_name() == "sqlite"
    engine = create_engine_for(url, poolclass=NullPool)
    if sqlite:
        event.listen(engine, "connect", _foreign_keys_off)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=sqlite,
                render_item=render_item,
                compare_type=True,
                # create_engine_for gives SQLite real transactions, DDL included,
                # so a failed migration rolls back on both backends.
                transactional_ddl=True,
            )
            with context.begin_transaction():
                context.run_migrations()
                if sqlite:
                    broken = connection.execute(text("PRAGMA foreign_key_check")).fetchall()
                    if broken:
                        raise RuntimeError(f"migration left broken foreign keys: {broken}")
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
