"""The text search configuration each memory's lexemes were made in (``english`` for every memory
stored before: pgmem made English lemmas only).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgmem.migrate import current_settings

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    # A constant default: PostgreSQL fills the existing rows without rewriting the table.
    op.add_column(
        "memories",
        sa.Column("ts_config", sa.Text, nullable=False, server_default=sa.text("'english'")),
        schema=schema,
    )


def downgrade() -> None:
    schema = current_settings().schema
    op.drop_column("memories", "ts_config", schema=schema)
