"""Learn and record the semantic scale of a schema's model: :func:`learn_scale`.

The scale (:mod:`pgmem.semantic_scale`) comes from a sample of the schema's own vectors and
is kept in ``embedding_models`` for the model on record (revision 0010); every ``Memory``
reading the schema stretches that model's similarities with it (:func:`pgmem.scoring.stretch`).
``pgmem reembed`` learns it after a switch to a new model, and ``pgmem reembed --learn-scale``
for the model on record. The default all-MiniLM-L6-v2 keeps no scale: fusion's constants were
tuned on its similarities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgmem import semantic_scale
from pgmem.connection import direct_connection
from pgmem.embedding import HUB_MODEL
from pgmem.errors import ConfigurationError, SchemaError
from pgmem.migrate import DEFAULT_SCHEMA, check_schema_name
from pgmem.queries import sql_blocks


@dataclass(frozen=True)
class ScaleReport:
    """What :func:`learn_scale` did: the model, the scale recorded (None: none, with the
    reason in ``note``), and how many vectors it was learned from."""

    model: str | None
    scale: tuple[float, float] | None
    vectors: int
    note: str


def learn_scale(
    dsn: str = "", *, schema: str = DEFAULT_SCHEMA, sample: int = semantic_scale.SAMPLE
) -> ScaleReport:
    """Learn the semantic scale of the schema's model on record from up to ``sample`` of its
    memories' vectors, and record it. The default model (all-MiniLM-L6-v2) gets none, nor a
    schema with fewer than :data:`pgmem.semantic_scale.MIN_VECTORS` memories.

    Raises:
        ConfigurationError: a bad ``sample`` or DSN, or a re-embedding in progress.
        SchemaError: the schema is missing or older than revision 0010 (run pgmem.migrate).
        DatabaseError: the database failed.
    """
    check_schema_name(schema)
    if (isinstance(sample, bool) or not isinstance(sample, int)
            or sample < semantic_scale.MIN_VECTORS):
        raise ConfigurationError(
            f"sample must be an integer of at least {semantic_scale.MIN_VECTORS}, got {sample!r}"
        )
    with direct_connection(dsn) as conn:
        return _learned(conn, schema, sample)


def _statement(schema: str, name: str) -> sql.Composed:
    return sql.SQL(sql_blocks("scales.sql")[name]).format(schema=sql.Identifier(schema))


def _learned(conn: psycopg.Connection[Any], schema: str, sample: int) -> ScaleReport:
    with conn.cursor(row_factory=dict_row) as cur:
        try:
            cur.execute(_statement(schema, "scale_model"))
        except psycopg.errors.UndefinedTable as exc:
            raise SchemaError(
                f"pgmem's schema {schema!r} does not exist: run pgmem.migrate"
            ) from exc
        row = cur.fetchone()
        if row is None or row["model"] is None:
            return ScaleReport(None, None, 0, "no model on record yet: nothing to learn from")
        model = str(row["model"])
        if row["pending"]:
            raise ConfigurationError(
                "a re-embedding is in progress: learn the scale once it has switched"
            )
        cur.execute(_statement(schema, "scale_sample"), {"limit": sample})
        vectors = [r["embedding"] for r in cur.fetchall()]
        scale: tuple[float, float] | None = None
        if model == HUB_MODEL:
            note = "the default model keeps its similarities as they are"
        elif len(vectors) < semantic_scale.MIN_VECTORS:
            note = (f"{len(vectors)} memories: a scale is learned from "
                    f"{semantic_scale.MIN_VECTORS} at least")
        else:
            try:
                scale = semantic_scale.learn(np.asarray(vectors, dtype=np.float32))
                note = f"learned from {len(vectors)} memories"
            except ValueError as exc:
                note = str(exc)
        try:
            cur.execute(_statement(schema, "record_scale"), {
                "model": model, "lo": None if scale is None else scale[0],
                "hi": None if scale is None else scale[1],
            })
        except psycopg.errors.UndefinedColumn as exc:
            raise SchemaError(
                f"pgmem's schema {schema!r} predates revision 0010 (the semantic scale): run "
                "pgmem.migrate(dsn) or `pgmem migrate`"
            ) from exc
        return ScaleReport(model, scale, len(vectors), note)
