"""Helpers shared by the reliability tests (tests/test_reliability_*.py, tests/test_properties.py):
deterministic and broken embedders, row counts, and a database that lives for a whole module."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgmem

DIM = 384
TABLES = ("memories", "entities", "memory_entities", "history")


class HashEmbedder:
    """Unit vectors seeded by each text's sha256: the same for a text in any batch, and fast.

    Every component is positive, so any two vectors have a cosine of about 0.75: every memory
    passes the semantic threshold and every entity matches every query entity. That makes the
    candidate sets as large as they can be -- the worst case for scope isolation.

    Its subclasses spoil its vectors in one way each: they are the same model, by ``name``
    (the schema records the model a database's vectors come from).
    """

    name = "reliability-hash-embedder"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).random(DIM, dtype=np.float32) + 0.01
            rows.append(vector / np.linalg.norm(vector))
        return np.stack(rows).astype(np.float32)


class CachedEmbedder:
    """Wraps a real embedder, embedding each distinct text once: tests that repeat a few
    queries many times (per user, per mode) then pay for the model once per query."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cache: dict[str, npt.NDArray[np.float32]] = {}

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, np.asarray(self.inner.embed(missing))))
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)


class BrokenEmbedder(HashEmbedder):
    """Returns vectors spoiled in one way: ``kind`` is one of :attr:`KINDS`."""

    KINDS = ("dimension", "nan", "inf", "rows", "zero", "raises", "ragged", "none")

    def __init__(self, kind: str) -> None:
        assert kind in self.KINDS
        self.kind = kind

    def embed(self, texts: Sequence[str]) -> Any:
        vectors = super().embed(texts)
        if self.kind == "dimension":
            return vectors[:, :3]
        if self.kind == "nan":
            vectors[-1, 7] = np.nan
        elif self.kind == "inf":
            vectors[0, 0] = np.inf
        elif self.kind == "rows":
            return vectors[:-1] if len(vectors) > 1 else np.vstack([vectors, vectors])
        elif self.kind == "zero":
            vectors[-1] = 0.0
        elif self.kind == "raises":
            raise RuntimeError("CUDA out of memory")
        elif self.kind == "ragged":
            return [list(vectors[0]), list(vectors[0][:10])]
        elif self.kind == "none":
            return None
        return vectors


class FailsOnEntities(HashEmbedder):
    """Fails when asked for more vectors than there are memory texts in the call: an add's
    batch is its texts, then its entities' surface forms, so this fails on the entity part."""

    def __init__(self, n_texts: int) -> None:
        self.n_texts = n_texts

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(texts) > self.n_texts:
            raise RuntimeError("entity embedding failed")
        return super().embed(texts)


def database_dsn(server_dsn: str, name: str) -> str:
    return make_conninfo(server_dsn, dbname=name)


@contextmanager
def scratch_database(server_dsn: str, template: str) -> Iterator[str]:
    """A migrated database cloned from the session template, dropped afterwards."""
    name = f"pgmem_rel_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    try:
        yield database_dsn(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def counts(dsn: str) -> dict[str, int]:
    """Rows in each of pgmem's four tables."""
    with psycopg.connect(dsn) as conn:
        return {
            table: conn.execute(
                sql.SQL("SELECT count(*) FROM pgmem.{}").format(sql.Identifier(table))
            ).fetchone()[0]  # type: ignore[index]
            for table in TABLES
        }


def rows(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query.encode(), params).fetchall()


def duplicate_entities(dsn: str) -> list[tuple[Any, ...]]:
    """Entity names stored more than once in a tenant (there must be none)."""
    return rows(
        dsn,
        "SELECT tenant, name, count(*) FROM pgmem.entities"
        " GROUP BY tenant, name HAVING count(*) > 1",
    )


def orphans(dsn: str) -> dict[str, int]:
    """Rows that point at nothing: links without a memory or entity, memories without an ADD
    event, entities no memory links to."""
    (row,) = rows(
        dsn,
        """
        SELECT (SELECT count(*) FROM pgmem.memory_entities me
                 WHERE NOT EXISTS (SELECT FROM pgmem.memories m
                                    WHERE m.tenant = me.tenant AND m.id = me.memory_id)
                    OR NOT EXISTS (SELECT FROM pgmem.entities e
                                    WHERE e.tenant = me.tenant AND e.id = me.entity_id)),
               (SELECT count(*) FROM pgmem.memories m
                 WHERE NOT EXISTS (SELECT FROM pgmem.history h WHERE h.tenant = m.tenant
                                      AND h.memory_id = m.id AND h.event = 'ADD')),
               (SELECT count(*) FROM pgmem.entities e
                 WHERE NOT EXISTS (SELECT FROM pgmem.memory_entities me
                                    WHERE me.tenant = e.tenant AND me.entity_id = e.id))
        """,
    )
    return dict(zip(("links", "memories_without_add", "unlinked_entities"), row))


def assert_in_scope(
    item: pgmem.MemoryRecord | pgmem.SearchHit,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
) -> None:
    """Every scope id the call gave matches the item's."""
    for name, wanted in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)):
        if wanted is not None:
            assert getattr(item, name) == wanted, (name, wanted, item)
