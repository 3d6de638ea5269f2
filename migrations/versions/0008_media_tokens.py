"""Carrier media tokens and the webhook replay memory, shared by every worker and pod.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-11

Written by hand against agent.store.tables (``MediaStreamToken``, ``SeenWebhook``);
tests/test_migrations.py checks that the migrated schema compares equal to the models on
SQLite and PostgreSQL. Both held in process memory before, so there is nothing to carry
over: a token minted by the old code is lost with its process, as it was on a restart.
Both are found by their hash (the primary key) and purged by ``expires_at`` (indexed).
Only new tables, so SQLite needs no batch mode.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "media_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("carrier", sa.String(length=16), nullable=False),
        sa.Column("remote_number", sa.Text(), nullable=True),
        sa.Column("local_number", sa.Text(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_media_tokens")),
    )
    op.create_index(op.f("ix_media_tokens_expires_at"), "media_tokens", ["expires_at"])

    op.create_table(
        "seen_webhooks",
        sa.Column("carrier", sa.String(length=16), nullable=False),
        sa.Column("signed_hash", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("carrier", "signed_hash", name=op.f("pk_seen_webhooks")),
    )
    op.create_index(op.f("ix_seen_webhooks_expires_at"), "seen_webhooks", ["expires_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_seen_webhooks_expires_at"), table_name="seen_webhooks")
    op.drop_table("seen_webhooks")
    op.drop_index(op.f("ix_media_tokens_expires_at"), table_name="media_tokens")
    op.drop_table("media_tokens")
