"""When a third party answered a number: it is not dialled again (rule C3).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05

A third party is contacted once. The gate cannot know who will answer a number, so a
number someone other than the consumer answered is not dialled again for any of the
consumer's debts (agent/campaigns/contact_rules.py). Existing rows have no such time:
the calls before this revision did not keep it per number. A plain added column, so
SQLite needs no batch mode to add it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "phones", sa.Column("third_party_reached_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("phones") as batch:
        batch.drop_column("third_party_reached_at")
