"""Consented callbacks: the window a consumer asked to be called in, and the attempts in it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04

Written by hand against agent.store.tables; tests/test_migrations.py checks that the
migrated schema compares equal to the models on SQLite and PostgreSQL.

A call the consumer asked for ("call me after six tonight"), placed within
7 days of that consent, neither counts towards the 7-in-7 cap nor is barred by
the 7 days after a conversation (Reg F 1006.14(b)(3)); the gate reads the
window from the debt, and marks the attempts placed in it ``consented`` so
that ``record_outcome`` cannot make them count again. Existing attempts were
none of them consented: the new flag defaults to false, so SQLite adds it in
place.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for column in ("callback_from", "callback_until", "callback_consented_at"):
        op.add_column("debts", sa.Column(column, sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "contact_attempts",
        sa.Column("consented", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("contact_attempts") as batch_op:
        batch_op.drop_column("consented")
    with op.batch_alter_table("debts") as batch_op:
        batch_op.drop_column("callback_consented_at")
        batch_op.drop_column("callback_until")
        batch_op.drop_column("callback_from")
