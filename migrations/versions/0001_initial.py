"""The initial schema: memories, entities, their links and the history.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import HALFVEC, Vector
from sqlalchemy.dialects import postgresql

from pgmem.migrate import current_settings

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _tenant() -> sa.Column[str]:
    return sa.Column("tenant", sa.Text, nullable=False, server_default=sa.text("'default'"))


def _created_at() -> sa.Column[object]:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
    )


def upgrade() -> None:
    settings = current_settings()
    schema, dim = settings.schema, settings.dim
    # The storage (vector or halfvec) is chosen at creation, like the dimension.
    vector_type = HALFVEC if settings.vector_type == "halfvec" else Vector
    new_uuid = sa.text("gen_random_uuid()")

    op.create_table(
        "memories",
        _tenant(),
        sa.Column("id", postgresql.UUID, nullable=False, server_default=new_uuid),
        sa.Column("user_id", sa.Text),
        sa.Column("agent_id", sa.Text),
        sa.Column("run_id", sa.Text),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("content_hash", sa.Text, nullable=False),
        sa.Column(
            "metadata", postgresql.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")
        ),
        sa.Column("embedding", vector_type(dim), nullable=False),
        sa.Column("lexemes", postgresql.TSVECTOR, nullable=False),
        sa.Column("lexeme_count", sa.Integer, nullable=False),
        _created_at(),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
        ),
        sa.PrimaryKeyConstraint("tenant", "id", name="memories_pkey"),
        sa.CheckConstraint(
            "user_id IS NOT NULL OR agent_id IS NOT NULL OR run_id IS NOT NULL",
            name="memories_scope_check",
        ),
        schema=schema,
    )
    op.create_index(
        "memories_embedding_idx", "memories", ["embedding"], schema=schema,
        postgresql_using="hnsw", postgresql_ops={"embedding": settings.cosine_ops},
    )
    op.create_index(
        "memories_lexemes_idx", "memories", ["lexemes"], schema=schema, postgresql_using="gin"
    )
    for column in ("user_id", "agent_id", "run_id"):
        op.create_index(
            f"memories_{column.removesuffix('_id')}_idx", "memories", ["tenant", column],
            schema=schema,
        )
    op.create_index(
        "memories_content_hash_idx", "memories", ["tenant", "content_hash"], schema=schema
    )

    op.create_table(
        "entities",
        _tenant(),
        sa.Column("id", postgresql.UUID, nullable=False, server_default=new_uuid),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("embedding", vector_type(dim), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("tenant", "id", name="entities_pkey"),
        sa.UniqueConstraint("tenant", "name", name="entities_name_key"),
        schema=schema,
    )
    op.create_index(
        "entities_embedding_idx", "entities", ["embedding"], schema=schema,
        postgresql_using="hnsw", postgresql_ops={"embedding": settings.cosine_ops},
    )

    op.create_table(
        "memory_entities",
        _tenant(),
        sa.Column("memory_id", postgresql.UUID, nullable=False),
        sa.Column("entity_id", postgresql.UUID, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "memory_id", "entity_id", name="memory_entities_pkey"),
        sa.ForeignKeyConstraint(
            ["tenant", "memory_id"], [f"{schema}.memories.tenant", f"{schema}.memories.id"],
            name="memory_entities_memory_fkey", ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant", "entity_id"], [f"{schema}.entities.tenant", f"{schema}.entities.id"],
            name="memory_entities_entity_fkey", ondelete="CASCADE",
        ),
        schema=schema,
    )
    op.create_index(
        "memory_entities_entity_idx", "memory_entities", ["tenant", "entity_id"], schema=schema
    )

    op.create_table(
        "history",
        _tenant(),
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("memory_id", postgresql.UUID, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("old_text", sa.Text),
        sa.Column("new_text", sa.Text),
        _created_at(),
        sa.PrimaryKeyConstraint("tenant", "id", name="history_pkey"),
        sa.CheckConstraint("event IN ('ADD', 'UPDATE', 'DELETE')", name="history_event_check"),
        schema=schema,
    )
    op.create_index(
        "history_memory_idx", "history", ["tenant", "memory_id", "id"], schema=schema
    )


def downgrade() -> None:
    schema = current_settings().schema
    for table in ("history", "memory_entities", "entities", "memories"):
        op.drop_table(table, schema=schema)
