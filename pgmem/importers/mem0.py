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

Each imported memory records where it came from in its metadata (:data:`IMPORT_KEY`: the
collection and a hash of the row), which :mod:`pgmem.compat.mem0` does not show.

Re-running is safe: a row whose id the tenant already has is skipped and counted. With
``sync=True`` the collection is compared with the tenant instead: rows Mem0 changed since they
were imported (their hash differs) update the memory, memories imported from this collection
that Mem0 no longer has are deleted, and nothing else is touched (memories pgmem's users wrote,
and edits made in pgmem to a row Mem0 left alone, stay). Every row is checked, and compared
with the tenant, before anything is written; a bad row is named by its id and nothing is
imported. Nothing here imports mem0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.rows import dict_row

from pgmem import validate
from pgmem.effects import Steps, result_of, transaction
from pgmem.errors import (
    DimensionMismatchError,
    InvalidInputError,
    NotFoundError,
    server_message,
    translate,
)
from pgmem.memory import Memory, run
from pgmem.queries import sql_blocks
from pgmem.store import Statement

__all__ = ["IMPORT_KEY", "ImportReport", "import_collection", "memory_item"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: The metadata key where an imported memory records where it came from:
#: ``{"collection": "<schema>.<table>", "version": "<hash of the Mem0 row it was made from>"}``.
#: ``import --sync`` deletes only memories carrying it; :mod:`pgmem.compat.mem0` never shows it.
IMPORT_KEY = "_mem0_import"
SCOPE_KEYS = ("user_id", "agent_id", "run_id")
#: Payload keys that are Mem0's own bookkeeping, not the memory's metadata.
MEM0_KEYS = ("data", "text", "hash", "created_at", "updated_at", "text_lemmatized", "id")
#: How many stored vectors are compared with the embedder's before reusing them.
PROBE_ROWS = 8
#: The cosine similarity each probed vector must reach to count as the embedder's.
SAME_MODEL_SIMILARITY = 0.99


@dataclass(frozen=True)
class ImportReport:
    """What :func:`import_collection` did: rows ``read``; memories ``imported`` (added);
    rows ``skipped`` because the tenant already had their id (with ``sync``: unchanged since
    they were imported); memories ``updated`` and ``deleted`` (``sync`` only); whether the
    stored vectors were ``reused`` for the added ones (else their texts were embedded again)
    and why (``vectors``)."""

    collection: str
    read: int
    imported: int
    skipped: int
    reused: bool
    vectors: str
    updated: int = 0
    deleted: int = 0
    sync: bool = False


@dataclass(frozen=True)
class _Change:
    """A sync's write to a memory the tenant has: its new text (None: the same) and metadata,
    under the guard of its scope; ``counted`` unless only the import record changes."""

    id: uuid.UUID
    text: str | None
    metadata: dict[str, Any]
    scope: dict[str, str | None]
    counted: bool


@dataclass
class _Plan:
    """What an import will write, decided before it writes anything."""

    new: set[uuid.UUID] = field(default_factory=set)
    changes: list[_Change] = field(default_factory=list)
    gone: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0


def import_collection(
    memory: Memory,
    collection: str,
    *,
    source: str | psycopg.Connection[Any],
    source_schema: str = "public",
    reuse_vectors: bool | None = None,
    batch_size: int = 256,
    on_progress: Callable[[int, int], object] | None = None,
    sync: bool = False,
) -> ImportReport:
    """Import Mem0's pgvector collection ``collection`` (a table in ``source_schema`` of the
    database ``source``, a DSN or a psycopg connection, which is only read) into ``memory``'s
    schema and tenant.

    ``sync``: also bring what changed in Mem0 since the last import -- update the memories
    whose row changed, delete those imported from this collection that it no longer has (see
    the module docstring). ``reuse_vectors``: None (the default) keeps the stored vectors when
    they have the embedder's dimension and the embedder gives the same vectors for the first
    :data:`PROBE_ROWS` texts (cosine >= 0.99), else embeds every text again; True keeps them
    (they must have the schema's dimension); False always embeds again (an updated text is
    always embedded again). New rows go through :meth:`pgmem.Memory.add_many` in batches of
    ``batch_size``, each in a transaction of its own, and ``on_progress(done, total)`` after
    each.

    Returns an :class:`ImportReport`.

    Raises:
        NotFoundError: no such table, or it is not a Mem0 collection.
        InvalidInputError: a row that cannot be a pgmem memory, or whose id the tenant holds in
            another scope or from another collection (named by its id); nothing was written.
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
        plan = _plan(memory, reader, sync=sync)
        reused, why = _reuse_decision(memory, reader, dim, reuse_vectors)
        logger.info("importing %d rows of %s: %s", total, collection, why)
        done, goal = plan.unchanged, total + len(plan.gone)
        imported = skipped = 0
        for rows in reader.pages(size, vectors=reused):
            items = [memory_item(row, keep_vector=reused, origin=reader.name)
                     for row in rows if row["id"] in plan.new]
            if not items:
                continue
            # add_many still skips an id written meanwhile (a concurrent import): a duplicate.
            results = memory.add_many(items, dedupe=False, batch_size=size)
            duplicates = sum(r.duplicate for r in results)
            imported += len(results) - duplicates
            skipped += duplicates
            done += len(results)
            if on_progress is not None:
                on_progress(done, goal)
        for change in plan.changes:
            memory.update(change.id, text=change.text, metadata=change.metadata, **change.scope)
        for gone in plan.gone:
            memory.delete(gone["id"], user_id=gone["user_id"], agent_id=gone["agent_id"],
                          run_id=gone["run_id"])
        if on_progress is not None and (plan.changes or plan.gone or not plan.new):
            on_progress(goal, goal)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    finally:
        if isinstance(source, str):
            conn.close()
    updated = sum(change.counted for change in plan.changes)
    return ImportReport(
        collection, total, imported, skipped + plan.unchanged + len(plan.changes) - updated,
        reused, why, updated=updated, deleted=len(plan.gone), sync=sync,
    )


def _plan(memory: Memory, reader: _Reader, *, sync: bool) -> _Plan:
    """Check every row as pgmem would and compare it with the tenant's memory of its id (if
    any), before anything is written."""
    plan = _Plan()
    seen: set[uuid.UUID] = set()
    for rows in reader.pages(1000, vectors=False):
        items = {row["id"]: reader.checked(memory, row) for row in rows}
        there = _existing(memory, list(items))
        for memory_id, item in items.items():
            seen.add(memory_id)
            stored = there.get(memory_id)
            if stored is None:
                plan.new.add(memory_id)
            elif not sync:
                plan.unchanged += 1
            else:
                change = _compared(reader.name, item, stored)
                if change is None:
                    plan.unchanged += 1
                else:
                    plan.changes.append(change)
    if sync:
        plan.gone = [row for row in _imported(memory, reader.name) if row["id"] not in seen]
    return plan


def _compared(origin: str, item: dict[str, Any], stored: Mapping[str, Any]) -> _Change | None:
    """The write that makes the tenant's memory ``stored`` what the row ``item`` says, or None
    when the row has not changed since it was imported.

    Raises:
        InvalidInputError: the memory is in another scope, or came from another collection.
    """
    where = f"{origin}, row {item['id']}"
    scope = {key: stored[key] for key in SCOPE_KEYS}
    if scope != {key: item[key] for key in SCOPE_KEYS}:
        raise InvalidInputError(f"{where}: pgmem holds a memory with this id in another scope; "
                                "nothing was imported")
    mark = stored["metadata"].get(IMPORT_KEY)
    mark = mark if isinstance(mark, Mapping) else {}
    if mark.get("collection", origin) != origin:
        raise InvalidInputError(f"{where}: pgmem's memory with this id came from Mem0 "
                                f"collection {mark['collection']}; nothing was imported")
    if mark.get("version") == item["metadata"][IMPORT_KEY]["version"]:
        return None  # Mem0 left it alone: keep it as it is in pgmem, edits included
    own = {k: v for k, v in stored["metadata"].items() if k != IMPORT_KEY}
    theirs = {k: v for k, v in item["metadata"].items() if k != IMPORT_KEY}
    same_text = stored["text"] == item["text"]
    return _Change(item["id"], None if same_text else item["text"], item["metadata"], scope,
                   counted=not (same_text and own == theirs))


def _existing(memory: Memory, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """The memories of ``ids`` that ``memory``'s tenant already has, by id."""
    return _read(memory, "existing_memories", {"ids": ids},
                 lambda rows: {r["id"]: r for r in rows})


def _imported(memory: Memory, origin: str) -> list[dict[str, Any]]:
    """The tenant's memories imported from the collection ``origin`` (id and scope)."""
    return _read(memory, "imported_ids", {"source": origin}, list)


def _read(memory: Memory, name: str, params: dict[str, Any], read: Callable[[Any], T]) -> T:
    """One statement of ``sql/mem0.sql`` on the facade's own connection, in its tenant."""
    statement = Statement(
        name, sql.SQL(sql_blocks("mem0.sql")[name]).format(schema=sql.Identifier(memory.schema)),
        {"tenant": memory.tenant, **params}, "all", read,
    )

    def steps(_: object) -> Steps[T]:
        return (yield from result_of(statement))

    return run(memory._connector, transaction(steps))


def memory_item(
    row: Mapping[str, Any], *, keep_vector: bool, origin: str | None = None
) -> dict[str, Any]:
    """The :meth:`pgmem.Memory.add_many` item for a row of a Mem0 collection (``id``,
    ``payload`` and, with ``keep_vector``, ``vector``); with ``origin`` (the collection, as
    ``schema.table``), its metadata records it (:data:`IMPORT_KEY`).

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
    if origin is not None:
        item["metadata"][IMPORT_KEY] = {"collection": origin, "version": _version(item)}
    if keep_vector:
        vector = row.get("vector")
        item["embedding"] = None if vector is None else _unit(_array(vector))
    return item


def _version(item: Mapping[str, Any]) -> str:
    """A hash of what a row says about its memory: text, scope and metadata."""
    said = [item["text"], *(item[key] for key in SCOPE_KEYS), item["metadata"]]
    text = json.dumps(said, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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
        return sql.SQL(sql_blocks("mem0.sql")[name]).format(collection=self.table)

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

    def checked(self, memory: Memory, row: Mapping[str, Any]) -> dict[str, Any]:
        """The row's memory item (with its import record), checked as pgmem would check it.

        Raises:
            InvalidInputError: naming the row; nothing was imported.
        """
        try:
            item = memory_item(row, keep_vector=False, origin=self.name)
            validate.items([item], tenant=memory.tenant, limits=memory.limits)
        except InvalidInputError as exc:
            message = str(exc).removeprefix("items[0]: ").removeprefix(f"row {row['id']}: ")
            raise type(exc)(f"{self.name}, row {row['id']}: {message}; nothing "
                            "was imported") from None
        return item

    def sample(self, limit: int) -> list[tuple[str, np.ndarray[Any, Any]]]:
        """Up to ``limit`` (text, stored vector) pairs."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(self._query("mem0_sample"), {"limit": limit}).fetchall()
        return [(row["text"], _array(row["vector"])) for row in rows]
