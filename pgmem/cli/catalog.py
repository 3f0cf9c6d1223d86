"""The command line's catalogue reads (``stats``, ``doctor``): the named statements of
``sql/catalog.sql``, and the schema's revision and dimension."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgmem.errors import translate
from pgmem.migrate import engine_for, schema_dimension, schema_revision, sqlalchemy_errors
from pgmem.queries import sql_blocks


def catalog(
    dsn: str, name: str, schema: str, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The rows of statement ``name`` in pgmem's ``schema``, on a connection of its own.

    Raises:
        PgmemError: the driver's error, translated (the server is unreachable, ...).
    """
    composed = sql.SQL(sql_blocks("catalog.sql")[name]).format(schema=sql.Identifier(schema))
    try:
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            return conn.execute(composed, params or {}).fetchall()
    except psycopg.Error as exc:
        raise translate(exc) from exc


def relation_sizes(dsn: str, schema: str) -> list[dict[str, Any]]:
    """The schema's tables and indexes with their sizes: on a Citus coordinator, summed over the
    shards."""
    citus = catalog(dsn, "has_citus", schema)[0]["citus"]
    return catalog(dsn, "relations_citus" if citus else "relations", schema, {"schema": schema})


def schema_state(dsn: str, schema: str) -> tuple[str | None, int | None]:
    """The schema's Alembic revision and embedding dimension (None, None when absent)."""
    engine = engine_for(dsn)
    try:
        with sqlalchemy_errors(), engine.connect() as connection:
            return schema_revision(connection, schema), schema_dimension(connection, schema)
    finally:
        engine.dispose()


def schema_dim(dsn: str, schema: str) -> int | None:
    """The schema's embedding dimension, or None when the schema is not there."""
    return schema_state(dsn, schema)[1]
