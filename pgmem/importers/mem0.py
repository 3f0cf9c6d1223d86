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

Each imported memory records where it came from in the ``origin`` column, which no call of
pgmem's API writes (not in its metadata, which callers write): ``{"importer": "mem0",
"source": <the database>, "collection": "<schema>.<table>", "version": <a hash of the row>,
"updated_at": <Mem0's updated_at>}``. The source is the database's cluster system identifier and
name (``"<system_identifier>/<dbname>"``), or the ``source_id`` the caller names.

Re-running is safe: a row whose id the tenant already has is skipped and counted. With
``sync=True`` the collection is compared with the tenant instead: rows Mem0 changed since they
were imported (their hash differs) update the memory, memories imported from this source and
collection that Mem0 no longer has are deleted, and nothing else is touched (memories pgmem's
users wrote, memories imported from another database or collection, store items, and edits
made in pgmem to a row Mem0 left alone, stay). Every row is checked, and compared with the
tenant, before anything is written; a bad row is named by its id and nothing is imported.
``dry_run=True`` stops there and reports what would be added, updated and deleted. Nothing here
imports mem0.
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
from psycopg.types.json import Jsonb

from pgmem import validate
from pgmem.effects import Steps, result_of, transaction
from pgmem.embedding import embed_kind
from pgmem.errors import (
    ConfigurationError,
    DimensionMismatchError,
    InvalidInputError,
    NotFoundError,
    server_message,
    translate,
)
from pgmem.memory import Memory, run
from pgmem.queries import SCOPE_IDS, sql_blocks
from pgmem.store import Statement

__all__ = ["IMPORTER", "ImportReport", "import_collection", "memory_item"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: ``origin ->> 'importer'`` of the memories this importer wrote.
IMPORTER = "mem0"
#: Payload keys that are Mem0's own bookkeeping, not the memory's metadata.
MEM0_KEYS = ("data", "text", "hash", "created_at", "updated_at", "text_lemmatized", "id")
#: How many stored vectors are compared with the embedder's before reusing them.
PROBE_ROWS = 8
#: The cosine similarity each probed vector must reach to count as the embedder's.
SAME_MODEL_SIMILARITY = 0.99


@dataclass(frozen=True)
class ImportReport:
    """What :func:`import_collection` did (or, with ``dry_run``, would do): rows ``read``;
    memories ``imported`` (added); rows ``skipped`` because the tenant already had their id
    (with ``sync``: unchanged since they were imported); memories ``updated`` and ``deleted``
    (``sync`` only); whether the stored vectors were ``reused`` for the added ones (else their
    texts were embedded again) and why (``vectors``); the ``source`` database as recorded in
    each memory's origin. With ``dry_run``, the ids behind each count: ``added_ids``,
    ``updated_ids``, ``deleted_ids``."""

    collection: str
    read: int
    imported: int
    skipped: int
    reused: bool
    vectors: str
    updated: int = 0
    deleted: int = 0
    sync: bool = False
    source: str = ""
    dry_run: bool = False
    added_ids: tuple[str, ...] = ()
    updated_ids: tuple[str, ...] = ()
    deleted_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Change:
    """A sync's write to a memory the tenant has: its new text (None: the same) and metadata
    (None: the same), under the guard of its scope, then its origin and Mem0's updated_at;
    ``counted`` when its text or metadata changes."""

    id: uuid.UUID
    text: str | None
    metadata: dict[str, Any] | None
    scope: dict[str, str | None]
    origin: dict[str, Any]
    updated_at: datetime | None

    @property
    def counted(self) -> bool:
        return self.text is not None or self.metadata is not None


@dataclass
class _Plan:
    """What an import will write, decided before it writes anything."""

    new: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    changes: list[_Change] = field(default_factory=list)
    gone: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0


def import_collection(
    memory: Memory,
    collection: str,
    *,
    source: str | psycopg.Connection[Any],
    source_schema: str = "public",
    source_id: str | None = None,
    reuse_vectors: bool | None = None,
    batch_size: int = 256,
    on_progress: Callable[[int, int], object] | None = None,
    sync: bool = False,
    dry_run: bool = False,
) -> ImportReport:
    """Import Mem0's pgvector collection ``collection`` (a table in ``source_schema`` of the
    database ``source``, a DSN or a psycopg connection, which is only read) into ``memory``'s
    schema and tenant.

    ``source_id`` names that database in the memories' origin (default: its cluster's system
    identifier and its name); give the same one to every import of it -- after a dump and
    restore to another server, the default would see another database. ``sync``: also bring
    what changed in Mem0 since the last import -- update the memories whose row changed (their
    ``updated_at`` becomes Mem0's), delete those imported from this source and collection that
    it no longer has (see the module docstring). ``dry_run``: decide everything, write nothing,
    and report it with the ids. ``reuse_vectors``: None (the default) keeps the stored vectors
    when they have the embedder's dimension and the embedder gives the same vectors for the
    first :data:`PROBE_ROWS` texts (cosine >= 0.99), else embeds every text again; True keeps
    them (they must have the schema's dimension); False always embeds again (an updated text is
    always embedded again). New rows go through :meth:`pgmem.Memory.add_many` in batches of
    ``batch_size``, each in a transaction of its own, and ``on_progress(done, total)`` after
    each.

    Returns an :class:`ImportReport`.

    Raises:
        NotFoundError: no such table, or it is not a Mem0 collection.
        InvalidInputError: a row that cannot be a pgmem memory, or whose id the tenant holds in
            another scope, from another source or collection, or not from an import (named by
            its id); nothing was written.
        ConfigurationError: the source database's identity cannot be read (give source_id).
        DimensionMismatchError: ``reuse_vectors=True`` with vectors of another dimension.
        DatabaseError: the database failed (batches before the failing one stay written;
            running the import again skips them).
    """
    size = validate.batch_size(batch_size)
    if reuse_vectors not in (None, True, False):
        raise InvalidInputError(f"reuse_vectors must be None, True or False, got {reuse_vectors!r}")
    if not isinstance(collection, str) or not collection:
        raise InvalidInputError("collection must be a table name")
    if source_id is not None and (not isinstance(source_id, str) or not source_id.strip()):
        raise InvalidInputError("source_id must be a non-empty name for the source database")
    conn = psycopg.connect(source, autocommit=True) if isinstance(source, str) else source
    try:
        register_vector(conn)
        reader = _Reader(conn, source_schema, collection)
        total, dim = reader.describe()
        reader.source = source_id.strip() if source_id is not None else reader.identity()
        plan = _plan(memory, reader, sync=sync)
        if dry_run:
            return _report(reader, total, plan, sync=sync, dry_run=True, imported=len(plan.new),
                           reused=False, why="dry run: nothing embedded, nothing written")
        reused, why = _reuse_decision(memory, reader, dim, reuse_vectors)
        logger.info("importing %d rows of %s: %s", total, collection, why)
        done, goal = plan.unchanged, total + len(plan.gone)
        imported = skipped = 0
        for rows in reader.pages(size, vectors=reused):
            items = [memory_item(row, keep_vector=reused) for row in rows if row["id"] in plan.new]
            if not items:
                continue
            # add_many still skips an id written meanwhile (a concurrent import): a duplicate.
            results = memory.add_many(items, dedupe=False, batch_size=size)
            added = [r.id for r in results if not r.duplicate]
            _set_origins(memory, [(i, plan.new[i], None) for i in added])
            imported += len(added)
            skipped += len(results) - len(added)
            done += len(results)
            if on_progress is not None:
                on_progress(done, goal)
        for change in plan.changes:
            if change.counted:
                memory.update(change.id, text=change.text, metadata=change.metadata,
                              **change.scope)
            _set_origins(memory, [(change.id, change.origin, change.updated_at)])
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
    return _report(reader, total, plan, sync=sync, dry_run=False, imported=imported,
                   skipped=skipped, reused=reused, why=why)


def _report(
    reader: _Reader, total: int, plan: _Plan, *, sync: bool, dry_run: bool, imported: int,
    reused: bool, why: str, skipped: int = 0,
) -> ImportReport:
    updated = [change for change in plan.changes if change.counted]
    return ImportReport(
        reader.collection, total, imported, skipped + plan.unchanged + len(plan.changes)
        - len(updated), reused, why, updated=len(updated), deleted=len(plan.gone), sync=sync,
        source=reader.source, dry_run=dry_run,
        added_ids=tuple(str(i) for i in sorted(plan.new)) if dry_run else (),
        updated_ids=tuple(str(c.id) for c in updated) if dry_run else (),
        deleted_ids=tuple(str(g["id"]) for g in plan.gone) if dry_run else (),
    )


def _plan(memory: Memory, reader: _Reader, *, sync: bool) -> _Plan:
    """Check every row as pgmem would and compare it with the tenant's memory of its id (if
    any), before anything is written."""
    plan = _Plan()
    seen: set[uuid.UUID] = set()
    for rows in reader.pages(1000, vectors=False):
        items = {row["id"]: (reader.checked(memory, row), row) for row in rows}
        there = _existing(memory, list(items))
        for memory_id, (item, row) in items.items():
            seen.add(memory_id)
            origin = reader.origin(item, row)
            stored = there.get(memory_id)
            if stored is None:
                plan.new[memory_id] = origin
                continue
            change = _compared(reader, item, origin, stored, sync=sync)
            if change is None:
                plan.unchanged += 1
            else:
                plan.changes.append(change)
    if sync:
        plan.gone = [row for row in _imported(memory, reader) if row["id"] not in seen]
    return plan


def _compared(
    reader: _Reader, item: dict[str, Any], origin: dict[str, Any], stored: Mapping[str, Any],
    *, sync: bool,
) -> _Change | None:
    """The write that makes the tenant's memory ``stored`` what the row ``item`` says (and
    records ``origin``), or None when there is nothing to write: without ``sync`` (a plain
    import skips the ids the tenant has), or when Mem0 has not touched the row since it was
    imported.

    Raises:
        InvalidInputError: (``sync``) the id is a store item's, a memory's in another scope, one
            that came from another source or collection, or one no import recorded that
            differs from the row.
    """
    if not sync:
        return None  # a plain import skips every id the tenant has
    where = f"{reader.name}, row {item['id']}"
    if stored["item"]:
        raise InvalidInputError(f"{where}: pgmem holds a store item with this id; nothing was "
                                "imported")
    scope = {key: stored[key] for key in SCOPE_IDS}
    if scope != {key: item[key] for key in SCOPE_IDS}:
        raise InvalidInputError(f"{where}: pgmem holds a memory with this id in another scope; "
                                "nothing was imported")
    mark = stored["origin"] if isinstance(stored["origin"], Mapping) else None
    same_content = stored["text"] == item["text"] and stored["metadata"] == item["metadata"]
    if mark is None:
        if same_content:
            # A memory whose origin was never recorded (an import cut short, or one older than
            # origins) that is exactly the row: adopted.
            return _Change(item["id"], None, None, scope, origin, None)
        raise InvalidInputError(
            f"{where}: pgmem holds a memory with this id that no import recorded, and it differs "
            "from the row (written through pgmem?); nothing was imported"
        )
    if mark.get("importer") != IMPORTER or mark.get("collection") != reader.name or mark.get(
        "source", reader.source
    ) not in (None, reader.source):
        raise InvalidInputError(
            f"{where}: pgmem's memory with this id came from collection "
            f"{mark.get('collection')} of source {mark.get('source')}, not from source "
            f"{reader.source}; nothing was imported (give the source_id of its first import?)"
        )
    claimed = mark.get("source") == reader.source
    if mark.get("version") == origin["version"]:
        if claimed and mark.get("updated_at") in (None, origin["updated_at"]):
            return None  # Mem0 left it alone: keep it as it is in pgmem, edits included
        # Touched in Mem0 without a change of content (or first seen from this source): take
        # Mem0's updated_at if pgmem's memory is the row, and record the row.
        when = item["updated_at"] if same_content and mark.get("updated_at") is not None else None
        return _Change(item["id"], None, None, scope, origin, when)
    return _Change(
        item["id"], None if stored["text"] == item["text"] else item["text"],
        None if stored["metadata"] == item["metadata"] else item["metadata"], scope, origin,
        item["updated_at"],
    )


def _existing(memory: Memory, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """The memories (and store items) of ``ids`` that ``memory``'s tenant already has, by id."""
    return _read(memory, "existing_memories", {"ids": ids},
                 lambda rows: {r["id"]: r for r in rows})


def _imported(memory: Memory, reader: _Reader) -> list[dict[str, Any]]:
    """The tenant's memories imported from ``reader``'s source and collection (id and scope)."""
    return _read(memory, "imported_ids", {"source": reader.source, "collection": reader.name},
                 list)


def _set_origins(
    memory: Memory, origins: list[tuple[uuid.UUID, dict[str, Any], datetime | None]]
) -> None:
    """Record each memory's origin (and Mem0's updated_at, where given)."""
    if origins:
        _read(memory, "set_origins", {
            "ids": [i for i, _, _ in origins], "origins": [Jsonb(o) for _, o, _ in origins],
            "updated": [u for _, _, u in origins],
        }, list)


def _read(memory: Memory, name: str, params: dict[str, Any], read: Callable[[Any], T]) -> T:
    """One statement of ``sql/mem0.sql`` on the facade's own connection, in its tenant."""
    statement = Statement(
        name, sql.SQL(sql_blocks("mem0.sql")[name]).format(schema=sql.Identifier(memory.schema)),
        {"tenant": memory.tenant, **params}, "all", read,
    )

    def steps(_: object) -> Steps[T]:
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
        **{key: _scope_id(payload.get(key)) for key in SCOPE_IDS},
        "metadata": {k: v for k, v in payload.items() if k not in MEM0_KEYS + SCOPE_IDS},
        "created_at": _timestamp(payload.get("created_at"), row["id"]),
        "updated_at": _timestamp(payload.get("updated_at"), row["id"]),
    }
    if keep_vector:
        vector = row.get("vector")
        item["embedding"] = None if vector is None else _unit(_array(vector))
    return item


def _version(item: Mapping[str, Any]) -> str:
    """A hash of what a row says about its memory: text, scope and metadata."""
    said = [item["text"], *(item[key] for key in SCOPE_IDS), item["metadata"]]
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
        ours = np.asarray(embed_kind(memory.embedder, texts), dtype=np.float32)
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
        self.collection = collection
        self.name = f"{schema}.{collection}"
        self.source = ""
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

    def identity(self) -> str:
        """The source database as ``"<system_identifier>/<dbname>"``.

        Raises:
            ConfigurationError: the role may not read the system identifier.
        """
        try:
            with self.conn.cursor(row_factory=dict_row) as cur:
                row = cur.execute(sql.SQL(sql_blocks("mem0.sql")["mem0_source"])).fetchone()
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigurationError(
                f"cannot read the Mem0 database's system identifier ({server_message(exc)}): "
                "name the database with source_id= (pgmem import --mem0-source-id NAME)"
            ) from exc
        assert row is not None
        return f"{row['system']}/{row['dbname']}"

    def origin(self, item: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
        """What a memory made from ``row`` records as its origin."""
        payload = row["payload"]
        return {
            "importer": IMPORTER, "source": self.source, "collection": self.name,
            "version": _version(item), "updated_at": payload.get("updated_at"),
        }

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
        """The row's memory item, checked as pgmem would check it.

        Raises:
            InvalidInputError: naming the row; nothing was imported.
        """
        try:
            item = memory_item(row, keep_vector=False)
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
