"""Export: a tenant's or a scope's memories as JSON lines, in one snapshot, with constant memory.

:func:`export` is the call :meth:`pgmem.Memory.export` and :meth:`pgmem.AsyncMemory.export` run
(through :meth:`pgmem.operations.Operations.export`): it checks its arguments and yields one
:class:`~pgmem.effects.Stream` -- the statements of
``sql/export.sql`` read in a read-only REPEATABLE READ transaction, the memories through a
server-side cursor ``itersize`` rows at a time -- whose batches it writes as they come.

The file is what ``pgmem import`` reads (:func:`pgmem.cli.importing.read_rows`): a first line
that describes it (:func:`header`), then one memory a line (:func:`memory_line`) -- the keys of
an item of :meth:`pgmem.Memory.add_many`, which keeps its id, timestamps, vector, expiry,
origin and history. Store items (:mod:`pgmem.langgraph`) are not exported.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from pgmem import validate
from pgmem.effects import Operation, stream
from pgmem.errors import InvalidInputError, ScopeError
from pgmem.queries import Queries, sql_blocks
from pgmem.results import Exported
from pgmem.store import Row, Statement, Store

#: The version of the file's format, in its first line (``"pgmem_export"``).
FORMAT = 1
#: The key of the first line; an import recognises an export by it.
HEADER_KEY = "pgmem_export"
MAX_ITERSIZE = 100_000


class Writable(Protocol):
    """Where an export writes: a text file or anything with ``write(str)``."""

    def write(self, text: str, /) -> object: ...


@functools.cache
def _blocks() -> dict[str, str]:
    return {**sql_blocks(), **sql_blocks("export.sql")}


class ExportStore(Store):
    """pgmem's statements and those of ``sql/export.sql``, for one schema."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self.queries = Queries(schema, _blocks())

    def export_head(self, params: Row) -> Statement[Row]:
        """How many memories the export holds; the model, dimension and storage of vectors."""
        return self._statement("export_head", params, "one", _row)

    def export_memories(self, params: Row, *, whole_tenant: bool) -> Statement[None]:
        """The memories, with their vectors and history as ``params`` asks: a scope's in the
        order stored, a whole tenant's by id. Read through a cursor, never fetched here."""
        name = "export_tenant" if whole_tenant else "export_scope"
        return self._statement(name, params, "all", _none)

    def export_deleted_history(self, tenant: str) -> Statement[None]:
        """The events of the tenant's memories deleted before the export, one row a memory."""
        return self._statement("export_deleted_history", {"tenant": tenant}, "all", _none)


@functools.cache
def _store(schema: str) -> ExportStore:
    """One store per schema: its statements are composed once."""
    return ExportStore(schema)


def _row(row: Row | None) -> Row:
    assert row is not None, "export_head returns one row"
    return row


def _none(_: object) -> None:
    return None


def export(
    schema: str,
    tenant: str,
    out: Writable,
    *,
    user_id: validate.ScopeId | None,
    agent_id: validate.ScopeId | None,
    run_id: validate.ScopeId | None,
    whole_tenant: bool,
    vectors: bool,
    history: bool,
    itersize: int,
    on_progress: Callable[[int, int], object] | None,
) -> Operation[Exported]:
    """The call :meth:`pgmem.operations.Operations.export` runs (see
    :meth:`pgmem.Memory.export`): of ``tenant``'s memories in pgmem's ``schema``."""
    if not callable(getattr(out, "write", None)):
        raise InvalidInputError(
            f"export writes to a text file (anything with write(str)), got {type(out).__name__}"
        )
    for name, value in (("whole_tenant", whole_tenant), ("vectors", vectors),
                        ("history", history)):
        if not isinstance(value, bool):
            raise InvalidInputError(f"{name} must be True or False, got {validate.shown(value)}")
    scope_given = any(value is not None for value in (user_id, agent_id, run_id))
    if whole_tenant and scope_given:
        raise ScopeError(
            "export either a scope (user_id, agent_id, run_id) or the whole tenant "
            "(whole_tenant=True), not both"
        )
    if not whole_tenant and not scope_given:
        raise ScopeError(
            "export needs a scope (user_id, agent_id and/or run_id), or whole_tenant=True to "
            f"export every memory of tenant {tenant!r}"
        )
    size = validate.itersize(itersize, MAX_ITERSIZE)
    params: Row = {"tenant": tenant, "vectors": vectors, "history": history}
    scope_ids: dict[str, object] = {}
    if scope_given:
        scope = validate.scope(tenant, user_id, agent_id, run_id, wildcard=True)
        scope_ids = {
            name: value for name, value in (
                ("user_id", scope.user_id), ("agent_id", scope.agent_id),
                ("run_id", scope.run_id),
            ) if value is not None
        }
        params.update(scope_ids)
    store = _store(schema)
    writer = _Writer(
        out, on_progress, tenant=tenant, scope=None if whole_tenant else scope_ids,
        vectors=vectors, history=history,
    )
    statements = [store.export_memories(params, whole_tenant=whole_tenant)]
    if whole_tenant and history:
        statements.append(store.export_deleted_history(tenant))
    yield from stream(store.export_head(params), writer.start, statements, writer.take, size)
    return writer.exported()


class _Writer:
    """Writes the lines of one export as its batches come (see :class:`~pgmem.effects.Stream`)."""

    def __init__(
        self,
        out: Writable,
        on_progress: Callable[[int, int], object] | None,
        *,
        tenant: str,
        scope: Mapping[str, object] | None,
        vectors: bool,
        history: bool,
    ) -> None:
        self.out = out
        self.on_progress = on_progress
        self.tenant = tenant
        self.scope = scope
        self.vectors = vectors
        self.history = history
        self.head: Row = {}
        self.done = 0
        self.deleted = 0

    def start(self, head: Row) -> None:
        self.head = head
        self.out.write(_dumps(header(
            head, tenant=self.tenant, scope=self.scope, vectors=self.vectors,
            history=self.history,
        )))
        if self.on_progress is not None:
            self.on_progress(0, head["memories"])

    def take(self, rows: list[Row]) -> None:
        if rows and "text" not in rows[0]:  # export_deleted_history's
            self.out.write("".join(_dumps(deleted_line(row)) for row in rows))
            self.deleted += len(rows)
            return
        self.out.write("".join(
            encoded_line(row, vectors=self.vectors, history=self.history) for row in rows
        ))
        self.done += len(rows)
        if self.on_progress is not None:
            # a memory added since the count is not in the snapshot: done never passes total
            self.on_progress(self.done, max(self.done, self.head["memories"]))

    def exported(self) -> Exported:
        return Exported(
            memories=self.done, model=self.head.get("model"), dim=self.head.get("dim", 0),
            storage=self.head.get("storage", ""), deleted=self.deleted,
        )


def header(
    head: Mapping[str, Any],
    *,
    tenant: str,
    scope: Mapping[str, object] | None,
    vectors: bool,
    history: bool,
) -> dict[str, Any]:
    """The file's first line: the format's version (under :data:`HEADER_KEY`), the tenant and
    scope exported (None: the whole tenant), how many memories
    follow, whether they carry vectors and history, and the model, dimension and storage of
    the schema's vectors."""
    return {
        HEADER_KEY: FORMAT,
        "tenant": tenant,
        "scope": None if scope is None else {
            name: str(value) for name, value in scope.items()
        },
        "memories": head["memories"],
        "vectors": vectors,
        "history": history,
        "embedding_model": {
            "model": head["model"], "dim": head["dim"], "storage": head["storage"],
        },
    }


def encoded_line(row: Mapping[str, Any], *, vectors: bool, history: bool) -> str:
    """:func:`memory_line` as a line of JSON; with ``vectors``, the row's ``embedding`` (the
    vector's text, a JSON array that reads back to the same float32 values) written in as it
    is, last."""
    text = _dumps(memory_line(row, history=history))
    if not vectors:
        return text
    return f'{text[:-2]}, "embedding": {row["embedding"]}}}\n'


def memory_line(row: Mapping[str, Any], *, history: bool) -> dict[str, Any]:
    """A memory as an item of :meth:`pgmem.Memory.add_many` keeps it: id, text, scope ids
    (None included: a line never takes an import's default scope), metadata, ``created_at``
    and ``updated_at`` (ISO 8601), its text search configuration (``ts_config``), expiry and
    origin when set; with ``history`` its events, oldest first (the vector is added by
    :func:`encoded_line`)."""
    line: dict[str, Any] = {
        "id": str(row["id"]),
        "text": row["text"],
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "run_id": row["run_id"],
        "metadata": row["metadata"],
        "created_at": _time(row["created_at"]),
        "updated_at": _time(row["updated_at"]),
        "ts_config": row["ts_config"],
    }
    if row["expires_at"] is not None:
        line["expires_at"] = _time(row["expires_at"])
    if row["origin"] is not None:
        line["origin"] = row["origin"]
    if history:
        line["history"] = _events(row)
    return line


def deleted_line(row: Mapping[str, Any]) -> dict[str, Any]:
    """A memory deleted before the export, as its history keeps it: ``{"id", "deleted":
    true, "history": [...]}`` (a whole tenant's export with its history, after the memories)."""
    return {"id": str(row["id"]), "deleted": True, "history": _events(row)}


def _events(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"event": event, "old_text": old, "new_text": new, "created_at": _time(at)}
        for event, old, new, at in zip(
            row["events"] or (), row["old_texts"] or (), row["new_texts"] or (),
            row["event_times"] or (), strict=True,
        )
    ]


def _time(value: datetime) -> str:
    return value.isoformat()


def _dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False) + "\n"


# -- reading an export back (pgmem import)

Rows = list[tuple[int, dict[str, Any]]]


def checked_rows(rows: Rows, source: str, embedder: Callable[[], str]) -> Rows:
    """The items of a file's ``rows`` (line number, item): without an export's first line,
    which is checked. When the lines bring vectors, the model the first line names must be
    ``embedder()`` (the importing Memory's): another model's vectors would be stored as if they
    were its own.

    Raises:
        InvalidInputError: a first line of a newer format, a line like it after the first, or
            vectors of another model (naming both, and how to import the texts alone).
    """
    first = rows[0][1] if rows else {}
    for number, item in rows[1:]:
        if HEADER_KEY in item:
            raise InvalidInputError(
                f"{source}, line {number}: an export's first line in the middle of the file"
            )
    if HEADER_KEY not in first:
        return rows
    version = first[HEADER_KEY]
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT:
        raise InvalidInputError(
            f"{source}: an export of format {validate.shown(version)}; this pgmem reads format "
            f"{FORMAT} and older: upgrade pgmem"
        )
    items = rows[1:]
    model = (first.get("embedding_model") or {}).get("model")
    if model is not None and any(item.get("embedding") is not None for _, item in items):
        ours = embedder()
        if model != ours:
            raise InvalidInputError(
                f"{source} holds vectors of model {model!r}, but this database's embedder is "
                f"{ours!r}: import with that model, or export without --vectors (the texts "
                "are then embedded again); nothing was written"
            )
    return items


DELETED_KEYS = frozenset({"id", "deleted", "history"})


def deleted_rows(rows: Rows, source: str) -> tuple[Rows, Rows]:
    """``rows`` split into memories and the lines of memories deleted before the export
    (``"deleted": true``: an id and a history, nothing else).

    Raises:
        InvalidInputError: a ``deleted`` line with other keys, or not ``true``.
    """
    memories, deleted = [], []
    for number, item in rows:
        if "deleted" not in item:
            memories.append((number, item))
        elif item["deleted"] is True and set(item) == DELETED_KEYS:
            deleted.append((number, item))
        else:
            raise InvalidInputError(
                f"{source}, line {number}: a deleted memory's line has exactly "
                '{"id", "deleted": true, "history"}'
            )
    return memories, deleted


def by_ts_config(rows: Rows) -> list[tuple[str | None, Rows]]:
    """``rows`` in runs of consecutive items of one text search configuration (the item's
    ``ts_config``, taken out of it; None: the Memory's), in file order: each run is one
    :meth:`pgmem.Memory.add_many` call."""
    runs: list[tuple[str | None, Rows]] = []
    for number, item in rows:
        config = item.pop("ts_config", None) if isinstance(item, dict) else None
        if runs and runs[-1][0] == config:
            runs[-1][1].append((number, item))
        else:
            runs.append((config, [(number, item)]))
    return runs
