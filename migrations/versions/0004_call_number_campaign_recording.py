"""A call's number, campaign, recording and worker; indexes for the console's call list.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

Written by hand against agent.store.tables; tests/test_migrations.py checks that the
migrated schema compares equal to the models on SQLite and PostgreSQL.

The number used to be found only through a call's contact attempt, so an
inbound caller could not be looked up by number; the number is copied onto
existing rows from their first attempt. ``worker`` names the process that
carries a call, so a worker starting again closes only its own dead calls,
not those of the workers still running beside it. New columns are nullable and carry no
constraint, so SQLite adds them in place. ``ix_calls_started_at`` gains ``id``
to match the list's keyset order (newest first, id breaking ties);
``ix_call_events_kind_call_id`` finds the calls with a compliance flag.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("calls", sa.Column("number", sa.String(length=16), nullable=True))
    op.add_column("calls", sa.Column("campaign", sa.String(length=128), nullable=True))
    op.add_column("calls", sa.Column("recording_uri", sa.String(length=1024), nullable=True))
    op.add_column("calls", sa.Column("worker", sa.String(length=64), nullable=True))
    op.execute(
        "UPDATE calls SET number = (SELECT a.number FROM contact_attempts a"
        " WHERE a.call_id = calls.id ORDER BY a.id LIMIT 1)"
    )
    op.drop_index("ix_calls_started_at", table_name="calls")
    op.create_index("ix_calls_started_at", "calls", ["started_at", "id"])
    op.create_index("ix_calls_disposition_started_at", "calls", ["disposition", "started_at"])
    op.create_index("ix_calls_campaign_started_at", "calls", ["campaign", "started_at"])
    op.create_index("ix_calls_number", "calls", ["number"])
    op.create_index("ix_call_events_kind_call_id", "call_events", ["kind", "call_id"])


def downgrade() -> None:
    op.drop_index("ix_call_events_kind_call_id", table_name="call_events")
    op.drop_index("ix_calls_number", table_name="calls")
    op.drop_index("ix_calls_campaign_started_at", table_name="calls")
    op.drop_index("ix_calls_disposition_started_at", table_name="calls")
    op.drop_index("ix_calls_started_at", table_name="calls")
    op.create_index("ix_calls_started_at", "calls", ["started_at"])
    with op.batch_alter_table("calls") as batch_op:
        batch_op.drop_column("worker")
        batch_op.drop_column("recording_uri")
        batch_op.drop_column("campaign")
        batch_op.drop_column("number")
