"""The audit log's detail: the role granted, the range of a recording read, why a login failed.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-10

Written by hand against agent.store.tables (``AuditEntry.detail``); tests/test_migrations.py
checks that the migrated schema compares equal to the models on SQLite and PostgreSQL.
Existing entries have no detail: the new column is nullable, so SQLite adds it in place.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("audit_log", sa.Column("detail", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_column("detail")
