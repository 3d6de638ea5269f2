"""Every cost line says its basis and its servers' time; turns count cached prompt tokens.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

Calls are priced by what they used (agent/ledger/pricebook.py): a cost line now says
whether its unit price rests on a measured throughput or a declared one (``basis``) and
how many device seconds the model servers reported for it (``compute_s``, the dashboard's
utilization). Every line written before was a share of the compute per connected minute
from declared calls-per-unit figures, or a list rate of a metered quantity; they are
marked ``declared`` by the column's server default, which is right for the first and
cautious for the second, and keep their quantities and prices. ``compute_s`` is NULL for
them: no server's time was recorded. ``turns.llm_cached_tokens`` is NULL on old turns
(not known). Plain added columns, so SQLite needs no batch mode to upgrade.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "cost_lines",
        sa.Column("basis", sa.String(16), server_default="declared", nullable=False),
    )
    op.add_column("cost_lines", sa.Column("compute_s", sa.Float(), nullable=True))
    op.add_column("turns", sa.Column("llm_cached_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("llm_cached_tokens")
    with op.batch_alter_table("cost_lines") as batch:
        batch.drop_column("compute_s")
        batch.drop_column("basis")
