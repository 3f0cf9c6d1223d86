"""The scope ids of each entity link, copied from its memory, with an index per scope id: a
search reads the links of its scope in one index range instead of one probe per memory.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgmem.migrate import current_settings

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCOPE_IDS = ("user_id", "agent_id", "run_id")


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    for column in SCOPE_IDS:
        op.add_column("memory_entities", sa.Column(column, sa.Text), schema=schema)
    op.execute(
        f'UPDATE "{schema}".memory_entities me'
        "   SET user_id = m.user_id, agent_id = m.agent_id, run_id = m.run_id"
        f'  FROM "{schema}".memories m'
        " WHERE m.tenant = me.tenant AND m.id = me.memory_id"
    )
    for column in SCOPE_IDS:
        op.create_index(
            f"memory_entities_{column.removesuffix('_id')}_idx", "memory_entities",
            ["tenant", column, "memory_id", "entity_id"], schema=schema,
        )


def downgrade() -> None:
    schema = current_settings().schema
    for column in SCOPE_IDS:
        op.drop_index(f"memory_entities_{column.removesuffix('_id')}_idx", schema=schema)
        op.drop_column("memory_entities", column, schema=schema)
