"""pgmem's tables as SQLAlchemy Core ``Table`` objects, so an application can join its own tables
to memories in its queries::

    from sqlalchemy import select
    from pgmem.tables import memories

    query = (
        select(tickets.c.title, memories.c.text)
        .join(memories, (memories.c.tenant == "default") & (memories.c.id == tickets.c.memory_id))
        .where(memories.c.user_id == "alice")
    )

``metadata`` and the tables describe the default schema, ``pgmem``, with 384-dimensional
embeddings; :func:`tables` builds them for another schema name, dimension or storage
(``halfvec`` above 2,000 dimensions). ``embedding_models`` records which model made the vectors.
They describe the
columns and keys; the migrations (:func:`pgmem.migrate`) own the DDL, so never ``create_all``
them, and write through :class:`pgmem.Memory`, which keeps entities, links and history in step.
Every key starts with ``tenant``: join on it too.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import sqlalchemy as sa
from pgvector.sqlalchemy import HALFVEC, Vector
from sqlalchemy.dialects import postgresql

from pgmem.migrate import DEFAULT_DIM, DEFAULT_SCHEMA, check_schema_name, check_storage

__all__ = [
    "Tables",
    "embedding_models",
    "entities",
    "history",
    "memories",
    "memory_entities",
    "metadata",
    "tables",
    "tenant_secrets",
]


class Tables(NamedTuple):
    """pgmem's tables in one schema, with the ``MetaData`` that holds them."""

    metadata: sa.MetaData
    memories: sa.Table
    entities: sa.Table
    memory_entities: sa.Table
    history: sa.Table
    embedding_models: sa.Table
    tenant_secrets: sa.Table


def _tenant() -> sa.Column[str]:
    return sa.Column("tenant", sa.Text, nullable=False, server_default=sa.text("'default'"))


def _timestamp(name: str) -> sa.Column[object]:
    return sa.Column(
        name, sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
    )


def _uuid_id() -> sa.Column[object]:
    return sa.Column(
        "id", postgresql.UUID(as_uuid=True), nullable=False,
        server_default=sa.text("gen_random_uuid()"),
    )


@functools.cache
def tables(
    schema: str = DEFAULT_SCHEMA, dim: int = DEFAULT_DIM, storage: str | None = None
) -> Tables:
    """pgmem's tables in ``schema`` (as created by ``pgmem.migrate(dsn, schema=..., dim=...,
    storage=...)``), in a ``MetaData`` of their own. The same arguments return the same objects.

    Raises:
        ConfigurationError: ``schema`` is not a plain lower-case identifier, or ``dim`` and
            ``storage`` are not a valid pair.
    """
    check_schema_name(schema)
    _, storage = check_storage(dim, storage)
    vector_type = HALFVEC if storage == "halfvec" else Vector
    metadata = sa.MetaData(schema=schema)
    memories = sa.Table(
        "memories",
        metadata,
        _tenant(),
        _uuid_id(),
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
        _timestamp("created_at"),
        _timestamp("updated_at"),
        # The text search configuration the lexemes were made in (pgmem.languages).
        sa.Column("ts_config", sa.Text, nullable=False, server_default=sa.text("'english'")),
        # A store item (pgmem.langgraph) has a namespace and a key instead of scope ids, and may
        # expire; labels compare byte by byte.
        sa.Column("namespace", postgresql.ARRAY(sa.Text(collation="C"))),
        sa.Column("key", sa.Text),
        sa.Column("ttl_minutes", sa.Double),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        # Where an imported memory came from (pgmem.importers); NULL for every other memory.
        sa.Column("origin", postgresql.JSONB),
        sa.PrimaryKeyConstraint("tenant", "id", name="memories_pkey"),
        sa.CheckConstraint(
            "user_id IS NOT NULL OR agent_id IS NOT NULL OR run_id IS NOT NULL"
            " OR namespace IS NOT NULL",
            name="memories_scope_check",
        ),
        sa.CheckConstraint("(namespace IS NULL) = (key IS NULL)", name="memories_item_check"),
    )
    entities = sa.Table(
        "entities",
        metadata,
        _tenant(),
        _uuid_id(),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("embedding", vector_type(dim), nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("tenant", "id", name="entities_pkey"),
        sa.UniqueConstraint("tenant", "name", name="entities_name_key"),
    )
    memory_entities = sa.Table(
        "memory_entities",
        metadata,
        _tenant(),
        sa.Column("memory_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("entity_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("user_id", sa.Text),  # the memory's scope ids, copied
        sa.Column("agent_id", sa.Text),
        sa.Column("run_id", sa.Text),
        sa.Column("namespace", postgresql.ARRAY(sa.Text(collation="C"))),  # the item's, copied
        sa.PrimaryKeyConstraint("tenant", "memory_id", "entity_id", name="memory_entities_pkey"),
        sa.ForeignKeyConstraint(
            ["tenant", "memory_id"], [memories.c.tenant, memories.c.id],
            name="memory_entities_memory_fkey", ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant", "entity_id"], [entities.c.tenant, entities.c.id],
            name="memory_entities_entity_fkey", ondelete="CASCADE",
        ),
    )
    history = sa.Table(
        "history",
        metadata,
        _tenant(),
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        # No foreign key: the history of a deleted memory stays.
        sa.Column("memory_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("old_text", sa.Text),
        sa.Column("new_text", sa.Text),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("tenant", "id", name="history_pkey"),
        sa.CheckConstraint("event IN ('ADD', 'UPDATE', 'DELETE')", name="history_event_check"),
    )
    embedding_models = sa.Table(
        "embedding_models",
        metadata,
        sa.Column("role", sa.Text, nullable=False),  # 'current', or 'next' during a re-embed
        sa.Column("model", sa.Text),
        sa.Column("dim", sa.Integer, nullable=False),
        sa.Column("storage", sa.Text, nullable=False),
        _timestamp("updated_at"),
        # the semantic scale learned for the model ``scale_model`` (pgmem.semantic_scale)
        sa.Column("scale_model", sa.Text),
        sa.Column("scale_lo", sa.Double),
        sa.Column("scale_hi", sa.Double),
        sa.PrimaryKeyConstraint("role", name="embedding_models_pkey"),
        sa.CheckConstraint("role IN ('current', 'next')", name="embedding_models_role_check"),
        sa.CheckConstraint(
            "storage IN ('vector', 'halfvec')", name="embedding_models_storage_check"
        ),
        sa.CheckConstraint(
            "scale_model IS NULL OR (scale_lo IS NOT NULL AND scale_hi IS NOT NULL"
            " AND scale_lo < scale_hi)",
            name="embedding_models_scale_check",
        ),
    )
    # A random salt per tenant for pgmem's lock keys (docs/security.md).
    tenant_secrets = sa.Table(
        "tenant_secrets",
        metadata,
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column(
            "lock_salt", sa.Text, nullable=False,
            server_default=sa.text("gen_random_uuid()::text || gen_random_uuid()::text"),
        ),
        sa.PrimaryKeyConstraint("tenant", name="tenant_secrets_pkey"),
    )
    return Tables(
        metadata, memories, entities, memory_entities, history, embedding_models, tenant_secrets
    )


(
    metadata, memories, entities, memory_entities, history, embedding_models, tenant_secrets
) = tables()
