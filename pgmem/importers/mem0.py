"""Import a Mem0 pgvector collection into pgmem: :func:`import_collection`.

Mem0's pgvector store keeps a collection as a table (``id uuid``, ``vector vector(n)``,
``payload jsonb``). The payload holds the text (``data``; ``text`` in some older writers), the
scope ids (``user_id``, ``agent_id``, ``run_id``), Mem0's own keys (``hash``, ``created_at``,
``updated_at``, ``text_lemmatized``) and, flattened beside them, the memory's metadata
(``role``, ``actor_id``, ``expiration_date`` and the app's keys). Each row becomes a pgmem memory
with the same id, scope, timestamps and metadata (everything in the payload but the text, the
scope ids and Mem0's own keys); the lemmas, entities and content hash are pgmem's own. Mem0's
history (a SQLite file) is not read: each imported memory starts with one ADD event at its
``created_at``.

Re-running is safe: a row whose id the tenant already has is skipped and counted. Every row is
checked before anything is written; a bad row is named by its id and nothing is imported.
Nothing here imports mem0.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.resources import files
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.rows import dict_row

from pgmem import validate
from pgmem.errors import (
    DimensionMismatchError,
    InvalidInputError,
    NotFoundError,
    server_message,
    translate,
)
from pgmem.memory import Memory, run
from pgmem.operations import Steps, result_of, transaction
from pgmem.queries import named_blocks
from pgmem.store import Statement

__all__ = ["ImportReport", "import_collection", "memory_item"]

logger = logging.getLogger(__name__)

SCOPE_KEYS = ("user_id", "agent_id", "run_id")
#: Payload keys that are Mem0's own bookkeeping, not the memory's metadata.
MEM0_KEYS = ("data", "text", "hash", "created_at", "updated_at", "text_lemmatized", "id")
#: How many stored vectors are compared with the embedder's before reusing them.
PROBE_ROWS = 8
#: The cosine similarity each probed vector must reach to count as the embedder's.
SAME_MODEL_SIMILARITY = 0.99


@functools.cache
def mem0_queries() -> dict[str, str]:
    """The named blocks of ``sql/mem0.sql`` (the ``mem0_*`` ones are this module's)."""
    return named_blocks(files("pgmem.sql").joinpath("mem0.sql").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class ImportReport:
    """What :func:`import_collection` did: rows ``read``; memories ``imported``; rows
    ``skipped`` because the tenant already had their id; whether the stored vectors were
    ``reused`` (else every text was embedded again) and why (``vectors``)."""

    collection: str
    read: int
    imported: int
    skipped: int
    reused: bool
    vectors: str


def import_collection(
    memory: Memory,
    collection: str,
    *,
    source: str | psycopg.Connection[Any],
    source_schema: str = "public",
    reuse_vectors: bool | None = None,
    batch_size: int = 256,
    on_progress: Callable[[int, int], object] | None = None,
) -> ImportReport:
    """Import Mem0's pgvector collection ``collection`` (a table in ``source_schema`` of the
    database ``source``, a DSN or a psycopg connection, which is only read) into ``memory``'s
    schema and tenant.

    ``reuse_vectors``: None (the default) keeps the stored vectors when they have the
    embedder's dimension and the embedder gives the same vectors for the first
    :data:`PROBE_ROWS` texts (cosine >= 0.99), else embeds every text again; True keeps them
    (they must have the schema's dimension); False always embeds again. Rows go through
    :meth:`pgmem.Memory.add_many` in batches of ``batch_size``, each in a transaction of its
    own, and ``on_progress(done, total)`` after each.

    Returns an :class:`ImportReport`.

    Raises:
        NotFoundError: no such table, or it is not a Mem0 collection.
        InvalidInputError: a row that cannot be a pgmem memory (named by its id); nothing was
            written.
        DimensionMismatchError: ``reuse_vectors=True`` with vectors of another dimension.
        DatabaseError: the database failed (batches before the failing one stay written;
            running the import again skips them).
    """
    size = validate.batch_size(batch_size)
    if reuse_vectors not in (None, True, False):
        raise InvalidInputError(f"reuse_vectors must be None, True or False, got {reuse_vectors!r}")
    if not isinstance(collection, str) or not collection:
        raise InvalidInputError("collection must be a table name")
    conn = psycopg.connect(source, autocommit=True) if isinstance(source, str) else source
    try:
        register_vector(conn)
        reader = _Reader(conn, source_schema, collection)
        total, dim = reader.describe()
        reader.check_rows(memory, total)
        reused, why = _reuse_decision(memory, reader, dim, reuse_vectors)
        logger.info("importing %d rows of %s: %s", total, collection, why)
        imported = skipped = 0
        for rows in reader.pages(size, vectors=reused):
            there = _existing_ids(memory, [row["id"] for row in rows])
            items = [memory_item(row, keep_vector=reused) for row in rows
                     if row["id"] not in there]
            # add_many still skips an id written meanwhile (a concurrent import): a duplicate.
            results = memory.add_many(items, dedupe=False, batch_size=size) if items else []
            duplicates = sum(r.duplicate for r in results)
            imported += len(results) - duplicates
            skipped += duplicates + len(rows) - len(items)
            if on_progress is not None:
                on_progress(imported + skipped, total)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    finally:
        if isinstance(source, str):
            conn.close()
    return ImportReport(collection, imported + skipped, imported, skipped, reused, why)


def _existing_ids(memory: Memory, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """The ids of ``ids`` that ``memory``'s tenant already has (one statement, on the
    facade's own connection)."""
    statement = Statement(
        "existing_ids",
        sql.SQL(mem0_queries()["existing_ids"]).format(schema=sql.Identifier(memory.schema)),
        {"tenant": memory.tenant, "ids": ids}, "all", lambda rows: {r["id"] for r in rows},
    )

    def steps(_: object) -> Steps[set[uuid.UUID]]:
        return (yield from result_of(statement))

    return run(memory._connector, transaction(steps))


def memory_item(row: Mapping[str, Any], *, keep_vector: bool) -> dict[str, Any]:
    """The :meth:`pgmem.Memory.add_many` item for a row of a Mem0 collection (``id``,
    ``payload`` and, with ``keep_vector``, ``vector``).

    Raises:
        InvalidInputError: the payload has no text, or a timestamp is not ISO 8601.
    """
    payload = row["payload"]
    if not isinstance(payload, Mapping):
        raise InvalidInputError(f"row {row['id']}: the payload is not a JSON object")
    text = payload.get("data", payload.get("text"))
    if not isinstance(text, str):
        raise InvalidInputError(f"row {row['id']}: the payload has no text ('data')")
    item: dict[str, Any] = {
        "id": row["id"],
        "text": text,
        **{key: _scope_id(payload.get(key)) for key in SCOPE_KEYS},
        "metadata": {k: v for k, v in payload.items() if k not in MEM0_KEYS + SCOPE_KEYS},
        "created_at": _timestamp(payload.get("created_at"), row["id"]),
        "updated_at": _timestamp(payload.get("updated_at"), row["id"]),
    }
    if keep_vector:
        vector = row.get("vector")
        item["embedding"] = None if vector is None else _unit(_array(vector))
    return item


def _scope_id(value: object) -> str | None:
    # Mem0 stores scope ids as text, except ids an app passed as numbers to an older Mem0.
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


def _timestamp(value: object, row_id: object) -> datetime | None:
    """Mem0's ISO 8601 text (naive times are UTC, as Mem0 writes them), or None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"row {row_id}: timestamp {value!r} is not ISO 8601 text")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(f"row {row_id}: timestamp {value!r} is not ISO 8601") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _array(vector: Any) -> np.ndarray[Any, Any]:
    """A stored vector (pgvector's ``Vector``, or an array) as float32."""
    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, np.float32)


def _unit(vector: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def _reuse_decision(
    memory: Memory, reader: _Reader, dim: int | None, reuse: bool | None
) -> tuple[bool, str]:
    """Whether to keep the stored vectors, and why (for the report)."""
    if reuse is False:
        return False, "re-embedded (reuse_vectors=False)"
    if dim is None:
        if reuse:
            raise DimensionMismatchError("the collection's vector column has no dimension")
        return False, "re-embedded (the collection's vectors have no fixed dimension)"
    if reuse:
        return True, f"stored {dim}-dimensional vectors kept (reuse_vectors=True)"
    sample = reader.sample(PROBE_ROWS)
    if not sample:
        return False, "re-embedded (no stored vector to compare)"
    texts = [text for text, _ in sample]
    try:
        ours = np.asarray(memory.embedder.embed(texts), dtype=np.float32)
    except Exception as exc:  # noqa: BLE001 - any embedder failure: embed again at import
        logger.warning("could not probe the embedder: %s", exc)
        return False, "re-embedded (the embedder could not be probed)"
    if ours.ndim != 2 or ours.shape[1] != dim:
        return False, (f"re-embedded (the collection has {dim}-dimensional vectors, the "
                       f"embedder makes {ours.shape[-1]}-dimensional ones)")
    stored = np.stack([_unit(vector) for _, vector in sample])
    similarity = float(np.min(np.sum(stored * np.stack([_unit(v) for v in ours]), axis=1)))
    if similarity < SAME_MODEL_SIMILARITY:
        return False, (f"re-embedded (the stored vectors come from another model: cosine "
                       f"{similarity:.3f} with the embedder's on {len(sample)} texts)")
    return True, (f"stored {dim}-dimensional vectors kept (the embedder's: cosine >= "
                  f"{similarity:.3f} on {len(sample)} texts)")


class _Reader:
    """Reads one Mem0 collection (the statements of ``sql/mem0.sql``)."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str, collection: str) -> None:
        self.conn = conn
        self.name = f"{schema}.{collection}"
        self.table = sql.Identifier(schema, collection)
        self.regclass = f'"{schema.replace(chr(34), chr(34) * 2)}".' \
                        f'"{collection.replace(chr(34), chr(34) * 2)}"'

    def _query(self, name: str) -> sql.Composed:
        return sql.SQL(mem0_queries()[name]).format(collection=self.table)

    def describe(self) -> tuple[int, int | None]:
        """The row count and the vector column's dimension (None: not fixed)."""
        try:
            with self.conn.cursor(row_factory=dict_row) as cur:
                row = cur.execute(self._query("mem0_collection"), {"table": self.regclass}
                                  ).fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
            raise NotFoundError(
                f"no Mem0 collection {self.name}: {server_message(exc)}"
            ) from exc
        except psycopg.errors.UndefinedObject as exc:  # no vector type in that database
            raise NotFoundError(
                f"{self.name} is not a Mem0 pgvector collection: {server_message(exc)}"
            ) from exc
        assert row is not None
        dim = row["dim"]
        return int(row["count"]), (int(dim) if dim is not None and dim > 0 else None)

    def pages(self, size: int, *, vectors: bool) -> Iterator[list[dict[str, Any]]]:
        """The rows in id order, ``size`` at a time."""
        after = None
        while True:
            with self.conn.cursor(row_factory=dict_row) as cur:
                try:
                    rows = cur.execute(
                        self._query("mem0_page"),
                        {"after": after, "limit": size, "vectors": vectors},
                    ).fetchall()
                except psycopg.errors.UndefinedColumn as exc:
                    raise NotFoundError(
                        f"{self.name} is not a Mem0 collection (id, vector, payload): "
                        f"{server_message(exc)}"
                    ) from exc
            if not rows:
                return
            yield rows
            after = rows[-1]["id"]

    def check_rows(self, memory: Memory, total: int) -> None:
        """Check every row as pgmem would, before anything is written."""
        for rows in self.pages(1000, vectors=False):
            for row in rows:
                item = memory_item(row, keep_vector=False)
                try:
                    validate.items([item], tenant=memory.tenant, limits=memory.limits)
                except InvalidInputError as exc:
                    message = str(exc).removeprefix("items[0]: ")
                    raise type(exc)(f"{self.name}, row {row['id']}: {message}; nothing "
                                    "was imported") from None

    def sample(self, limit: int) -> list[tuple[str, np.ndarray[Any, Any]]]:
        """Up to ``limit`` (text, stored vector) pairs."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(self._query("mem0_sample"), {"limit": limit}).fetchall()
        return [(row["text"], _array(row["vector"])) for row in rows]
