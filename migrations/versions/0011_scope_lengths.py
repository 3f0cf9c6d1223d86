"""Each memory's length in the indexes of a scope id (``memories_user_idx``,
``memories_agent_idx``, ``memories_run_idx``: ``INCLUDE (lexeme_count)``).

A search of a scope too large to read row by row (over 5,000 memories) scores keywords by BM25,
which needs the scope's document count and average length: with the lengths in the index, one
index-only range of the scope id's index gives both, instead of reading every row of the scope
(a 12,000-memory scope: about a fifth of a search's statement).

Upgrade: each index dropped and made again with the column included (the table's writes wait
while it builds). Downgrade: made again without it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgmem.migrate import current_settings

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

SCOPE_IDS = ("user_id", "agent_id", "run_id")


def _rebuild(included: str) -> None:
    schema = current_settings().schema  # a checked plain identifier
    for column in SCOPE_IDS:
        name = f"memories_{column.removesuffix('_id')}_idx"
        op.execute(f'DROP INDEX "{schema}".{name}')
        op.execute(
            f'CREATE INDEX {name} ON "{schema}".memories (tenant, {column}, created_at, id)'
            f"{included}"
        )


def upgrade() -> None:
    _rebuild(" INCLUDE (lexeme_count)")


def downgrade() -> None:
    _rebuild("")
