"""The embedding model on record, paging in index order, and no HNSW index on entities.

* ``embedding_models`` records the model name, dimension and storage of the stored vectors
  (row ``current``; row ``next`` while :func:`pgmem.reembed` moves them to another model), so
  that a ``Memory`` with another embedder is refused before it writes. The name is NULL until
  the first write (or ``migrate(model=...)``) records it.
* The scope indexes end with ``(created_at, id)``: ``get_all`` reads a page of a scope in index
  order, from its cursor on, instead of sorting the whole scope. They keep their names and
  still serve every lookup by scope id.
* Embeddings are stored in the row (``STORAGE MAIN``), not out of line: from ~500 dimensions
  (``vector``; ~1,000 as ``halfvec``) a vector passes the 2 kB TOAST threshold, and the planner,
  which does not count reading TOAST, then finds a sequential scan cheaper than the HNSW index
  for tables of tens of thousands of rows. Rows written from now on are stored so.
* ``entities_embedding_idx`` goes: searches compare a query's entities with the entities of
  the scope's links, fetched by key, and no statement orders entities by distance. Each entity
  insert no longer pays for an HNSW insertion.

Rebuilding the three scope indexes locks ``memories`` against writes while they build: on a
large table, migrate in a quiet moment.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgmem.migrate import current_settings

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCOPE_IDS = ("user_id", "agent_id", "run_id")


def _scope_index(column: str) -> str:
    return f"memories_{column.removesuffix('_id')}_idx"


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    op.create_table(
        "embedding_models",
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("model", sa.Text),
        sa.Column("dim", sa.Integer, nullable=False),
        sa.Column("storage", sa.Text, nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
        ),
        sa.PrimaryKeyConstraint("role", name="embedding_models_pkey"),
        sa.CheckConstraint("role IN ('current', 'next')", name="embedding_models_role_check"),
        sa.CheckConstraint(
            "storage IN ('vector', 'halfvec')", name="embedding_models_storage_check"
        ),
        schema=schema,
    )
    # What the memories' column holds, whether it was made by 0001 just now or long ago.
    op.execute(
        f'INSERT INTO "{schema}".embedding_models (role, dim, storage)'
        " SELECT 'current', a.atttypmod, t.typname"
        "   FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
        f"  WHERE a.attrelid = '\"{schema}\".memories'::regclass AND a.attname = 'embedding'"
    )
    for column in SCOPE_IDS:
        op.drop_index(_scope_index(column), table_name="memories", schema=schema)
        op.create_index(
            _scope_index(column), "memories", ["tenant", column, "created_at", "id"],
            schema=schema,
        )
    op.drop_index("entities_embedding_idx", table_name="entities", schema=schema)
    for table in ("memories", "entities"):
        op.execute(f'ALTER TABLE "{schema}".{table} ALTER COLUMN embedding SET STORAGE MAIN')


def downgrade() -> None:
    schema = current_settings().schema
    storage = op.get_bind().execute(
        sa.text(f'SELECT storage FROM "{schema}".embedding_models WHERE role = \'current\'')
    ).scalar_one()
    op.create_index(
        "entities_embedding_idx", "entities", ["embedding"], schema=schema,
        postgresql_using="hnsw", postgresql_ops={"embedding": f"{storage}_cosine_ops"},
    )
    for column in SCOPE_IDS:
        op.drop_index(_scope_index(column), table_name="memories", schema=schema)
        op.create_index(_scope_index(column), "memories", ["tenant", column], schema=schema)
    op.drop_table("embedding_models", schema=schema)
    for table in ("memories", "entities"):  # pgvector's types default to EXTERNAL
        op.execute(f'ALTER TABLE "{schema}".{table} ALTER COLUMN embedding SET STORAGE EXTERNAL')
