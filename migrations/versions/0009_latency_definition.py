"""Which latency definition a turn was measured under (agent/ledger/latency.py).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05

The response figure changed meaning: it ran from the turn's commit, it now runs from
the VAD's stop (the end of the caller's speech as the pipeline detects it), so the
STT final and the end-of-turn decision are inside it. A stored turn cannot be
converted (the VAD's stop was not kept), so every existing row is marked 1 (legacy)
by the column's server default and left as it was; the code writes 2. Readers take
the response only from turns of the current definition; voice-to-voice kept its
meaning and reads over all. A plain added column, so SQLite needs no batch mode.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "turns",
        sa.Column("latency_definition", sa.SmallInteger(), server_default="1", nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("latency_definition")
