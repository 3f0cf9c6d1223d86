"""The store: one method per named statement of ``sql/queries.sql``. No SQL is written here.

A store method runs nothing: it builds a :class:`Statement` -- the SQL, its parameters, what to
fetch and how to read what comes back. Two tiny executors run statements, :func:`execute` on a
psycopg ``Connection`` and :func:`execute_async` on an ``AsyncConnection``, so the call code of
each statement exists once for :class:`~pgmem.Memory` and :class:`~pgmem.AsyncMemory`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Generic, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgmem.errors import StatementRefusedError
from pgmem.queries import NAMESPACE_SCOPES, NO_FILTER, SCOPE_IDS, Queries, sql_blocks
from pgmem.validate import ANY, Scope

Row = dict[str, Any]
T = TypeVar("T")

#: What an executor does with a statement: send it and read "nothing" (in pipeline mode it then
#: travels with the next statement), fetch "one" row or "all" rows, not run it at all and
#: return its "text" with the parameters inlined, or return the EXPLAIN of its generic "plan"
#: (run, with "analyze").
Fetch = Literal["nothing", "one", "all", "text", "plan", "analyze"]
_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]|%%")


@dataclass(frozen=True)
class Statement(Generic[T]):
    """A named statement ready to run. ``read`` turns what was fetched (None, a row or None, a
    list of rows, or the text) into the statement's result."""

    name: str
    query: sql.Composed
    params: Mapping[str, Any] | None
    fetch: Fetch
    read: Callable[[Any], T]
    prepare: bool | None = None
    binary: bool = False  # rows in binary: no text formatting of timestamps and floats


def execute(conn: psycopg.Connection, statement: Statement[T]) -> T:
    """Run ``statement`` on ``conn``; its result."""
    query, params, prepare = statement.query, statement.params, statement.prepare
    if statement.fetch == "text":
        return statement.read(psycopg.ClientCursor(conn).mogrify(query, params))
    if statement.fetch in ("plan", "analyze") and statement.prepare is False:
        row = conn.execute(explain_inline(psycopg.ClientCursor(conn), statement)).fetchone()
        return statement.read(row[0] if row else None)
    if statement.fetch in ("plan", "analyze"):
        prepare_it, explain, deallocate = explain_statements(psycopg.ClientCursor(conn), statement)
        conn.execute(prepare_it)
        row = conn.execute(explain).fetchone()
        conn.execute(deallocate)
        return statement.read(row[0] if row else None)
    if statement.fetch == "nothing":
        conn.execute(query, params, prepare=prepare)
        return statement.read(None)
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params, prepare=prepare, binary=statement.binary)
        return statement.read(cur.fetchone() if statement.fetch == "one" else cur.fetchall())


#: The name of the server-side cursor a stream reads through (one at a time per connection).
STREAM_CURSOR = "pgmem_stream"


def stream(
    conn: psycopg.Connection, statement: Statement[Any], itersize: int
) -> Iterator[list[Row]]:
    """The rows of ``statement`` (dict rows, in binary), fetched through a server-side cursor
    ``itersize`` at a time: only one batch is held. ``conn`` must be in a transaction."""
    with conn.cursor(name=STREAM_CURSOR, row_factory=dict_row) as cur:
        cur.itersize = itersize
        cur.execute(statement.query, statement.params, binary=True)
        while rows := cur.fetchmany(itersize):
            yield rows


async def stream_async(
    conn: psycopg.AsyncConnection, statement: Statement[Any], itersize: int
) -> AsyncIterator[list[Row]]:
    """The twin of :func:`stream`."""
    async with conn.cursor(name=STREAM_CURSOR, row_factory=dict_row) as cur:
        cur.itersize = itersize
        await cur.execute(statement.query, statement.params, binary=True)
        while rows := await cur.fetchmany(itersize):
            yield rows


class Pending(Generic[T]):
    """A statement sent in pipeline mode (:func:`send`), its result read once the pipeline has
    been synced (:meth:`result`)."""

    def __init__(self, statement: Statement[T], cursor: Any) -> None:
        self.statement = statement
        self.cursor = cursor

    def result(self) -> T:
        """The statement's result (call after the pipeline block ended)."""
        fetch = self.statement.fetch
        if fetch == "nothing":
            return self.statement.read(None)
        rows = self.cursor.fetchone() if fetch == "one" else self.cursor.fetchall()
        return self.statement.read(rows)

    async def result_async(self) -> T:
        """:meth:`result` on an async cursor."""
        fetch = self.statement.fetch
        if fetch == "nothing":
            return self.statement.read(None)
        cur = self.cursor
        rows = await cur.fetchone() if fetch == "one" else await cur.fetchall()
        return self.statement.read(rows)


def send(conn: psycopg.Connection, statement: Statement[T]) -> Pending[T]:
    """Queue ``statement`` on ``conn``, which is in pipeline mode: it is sent when the
    pipeline block ends, and its result read then from what this returns."""
    if statement.fetch not in ("nothing", "one", "all"):
        raise ValueError(f"a {statement.fetch!r} statement cannot be pipelined")
    cur = conn.cursor(row_factory=dict_row)
    cur.execute(statement.query, statement.params, prepare=statement.prepare,
                binary=statement.binary)
    return Pending(statement, cur)


async def send_async(conn: psycopg.AsyncConnection, statement: Statement[T]) -> Pending[T]:
    """The twin of :func:`send`."""
    if statement.fetch not in ("nothing", "one", "all"):
        raise ValueError(f"a {statement.fetch!r} statement cannot be pipelined")
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(statement.query, statement.params, prepare=statement.prepare,
                      binary=statement.binary)
    return Pending(statement, cur)


async def execute_async(conn: psycopg.AsyncConnection, statement: Statement[T]) -> T:
    """Run ``statement`` on ``conn``; its result. The twin of :func:`execute`."""
    query, params, prepare = statement.query, statement.params, statement.prepare
    if statement.fetch == "text":
        return statement.read(psycopg.AsyncClientCursor(conn).mogrify(query, params))
    if statement.fetch in ("plan", "analyze") and statement.prepare is False:
        explain = explain_inline(psycopg.AsyncClientCursor(conn), statement)
        row = await (await conn.execute(explain)).fetchone()
        return statement.read(row[0] if row else None)
    if statement.fetch in ("plan", "analyze"):
        cursor = psycopg.AsyncClientCursor(conn)
        prepare_it, explain, deallocate = explain_statements(cursor, statement)
        await conn.execute(prepare_it)
        row = await (await conn.execute(explain)).fetchone()
        await conn.execute(deallocate)
        return statement.read(row[0] if row else None)
    if statement.fetch == "nothing":
        await conn.execute(query, params, prepare=prepare)
        return statement.read(None)
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params, prepare=prepare, binary=statement.binary)
        fetched = await cur.fetchone() if statement.fetch == "one" else await cur.fetchall()
        return statement.read(fetched)


def explain_inline(
    cursor: psycopg.ClientCursor[Any] | psycopg.AsyncClientCursor[Any], statement: Statement[Any]
) -> sql.Composed:
    """EXPLAIN of ``statement`` with its values inlined: the custom plan, for a server whose
    searches run with custom plans (Citus, whose EXPLAIN ANALYZE EXECUTE returns the worker's
    plan as text inside its JSON)."""
    text = cursor.mogrify(statement.query, statement.params)
    return sql.SQL(sql_blocks()["explain_inline"]).format(
        analyze=sql.SQL("true" if statement.fetch == "analyze" else "false"),
        statement=sql.SQL(text),
    )


def explain_statements(
    cursor: psycopg.ClientCursor[Any] | psycopg.AsyncClientCursor[Any], statement: Statement[Any]
) -> tuple[sql.Composed, sql.Composed, sql.Composed]:
    """The ``explain_*`` statements of ``statement``: PREPARE it with its parameters numbered,
    EXPLAIN EXECUTE it with their values inlined, DEALLOCATE it. The name is new each time: a
    failed EXPLAIN leaves its prepared statement behind (not a transaction's work, it is not
    rolled back), which must not block the next one."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) is None:  # %%
            return "%"
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = _PLACEHOLDER.sub(number, statement.query.as_string(cursor))
    params = statement.params or {}
    values = cursor.mogrify(", ".join(["%s"] * len(names)), [params[n] for n in names])
    queries = sql_blocks()
    name = sql.Identifier(f"pgmem_explained_{uuid.uuid4().hex}")
    return (
        sql.SQL(queries["explain_prepare"]).format(name=name, statement=sql.SQL(text)),
        sql.SQL(queries["explain_execute"]).format(
            name=name,
            analyze=sql.SQL("true" if statement.fetch == "analyze" else "false"),
            values=sql.SQL(values),
        ),
        sql.SQL(queries["explain_deallocate"]).format(name=name),
    )


@dataclass(frozen=True)
class SearchParams:
    """The parameters of the search statement (``search`` in ``sql/queries.sql``, whose
    comments say what each does), besides the scope's and the metadata filter's.
    :func:`pgmem.builders.search_plan` makes them."""

    scope: Scope
    #: The compiled metadata filter's parameters (:func:`pgmem.filters.compile_filters`).
    filter_params: Mapping[str, Any]
    #: Whether the call has a metadata filter (a large scope's entity links are then checked
    #: against the memories it keeps; without one, their own scope ids suffice).
    filtered: bool
    embedding: npt.NDArray[np.float32]
    semantic_limit: int
    keyword_limit: int
    entity_limit: int
    exact_scan: bool
    scan_rows: int
    tsquery: str | None
    #: None: the statement makes them, from ``keyword_text`` (pgmem.languages).
    lexemes: Sequence[str] | None
    keyword_text: str | None
    ts_config: str
    keyword_score: str
    bm25_k1: float
    bm25_b: float
    entity_embeddings: Sequence[npt.NDArray[np.float32]]
    #: The query's candidate entity names, matched exactly (pgmem.query_analysis).
    entity_names: Sequence[str]
    entity_neighbours: int
    entity_min_similarity: float
    #: The model's semantic scale (pgmem.scoring.stretch), None: none. Entity names' similarities
    #: are stretched by it before the minimum applies.
    scale_lo: float | None
    scale_hi: float | None
    spread_decay: float
    next: bool
    previous: bool
    neighbour_limit: int
    neighbour_window: int

    def row(self) -> Row:
        """The parameters as the driver takes them, by name."""
        named = {f.name: getattr(self, f.name) for f in fields(self)
                 if f.name not in ("scope", "filter_params")}
        if self.lexemes is not None:
            named["lexemes"] = list(self.lexemes)
        named["entity_embeddings"] = list(self.entity_embeddings)
        named["entity_names"] = list(self.entity_names)
        return {**self.scope.params(), **self.filter_params, **named}


#: The most parameters a statement can carry (the protocol counts them in 16 bits).
MAX_PARAMETERS = 65_535


class Store:
    """pgmem's statements for one schema. Without ``prepares`` (behind a transaction-mode
    pooler), every statement is sent unprepared (``prepare=False``), on the caller's
    connection too, whatever its ``prepare_threshold``."""

    def __init__(self, schema: str, *, prepares: bool = True) -> None:
        self.schema = schema
        self.queries = Queries(schema)
        self.prepares = prepares

    # -- lifecycle: each change runs its lock statements, then the change, in one transaction

    def lock_contents(self, params: Row, citus: bool = False) -> Statement[None]:
        """Take the duplicate-detection locks of a batch (held until the transaction ends).
        Fetches nothing, so that in pipeline mode it travels with ``insert_memories``."""
        name = "lock_contents_citus" if citus else "lock_contents"
        return self._statement(name, params, "nothing", _nothing)

    def insert_memories(self, params: Row) -> Statement[list[Row]]:
        """Insert a batch with its entities, links and ADD events; one row per item, in order:
        the memory standing for it, whether it was a ``duplicate``, and the transaction's
        ``isolation`` level."""
        return self._statement("insert_memories", params, "all", _rows)

    def restore_memories(self, params: Row) -> Statement[None]:
        """Give the memories an import has just made the expiry, origin and history their
        items brought (``params`` from :func:`pgmem.builders.restore_params`)."""
        return self._statement("restore_memories", params, "nothing", _nothing)

    def known_ids(self, params: Row) -> Statement[list[uuid.UUID]]:
        """Which of ``ids`` the tenant has as a memory or in its history."""
        return self._statement("known_ids", params, "all", _ids)

    def restore_deleted_history(self, params: Row) -> Statement[list[uuid.UUID]]:
        """Write the events of memories deleted before an export (for ids
        :meth:`known_ids` did not name); the memory id of each event written."""
        return self._statement("restore_deleted_history", params, "all", _memory_ids)

    # -- the writes as Citus routes them to the tenant's worker (pgmem.routed)

    def routed_batch_plan(self, params: Row) -> Statement[list[Row]]:
        """Per item of a batch, in order: the item it repeats, the memory standing for it, the
        lexemes PostgreSQL makes for it, the isolation level."""
        return self._statement("routed_batch_plan", params, "all", _rows)

    def routed_insert_memories(self, rows: Sequence[Row]) -> Statement[None]:
        """Insert new memories, a row each (the parameters of ``routed_memory_row``)."""
        return self._rows("routed_insert_memories", "routed_memory_row", rows)

    def routed_insert_entities(self, rows: Sequence[Row]) -> Statement[None]:
        """Upsert entities, a row each (the parameters of ``routed_entity_row``)."""
        return self._rows("routed_insert_entities", "routed_entity_row", rows)

    def routed_link_memories(self, params: Row) -> Statement[None]:
        """Link new memories to their entities by name."""
        return self._statement("routed_link_memories", params, "nothing", _nothing)

    def routed_events(self, rows: Sequence[Row]) -> Statement[None]:
        """Write history events, a row each (the parameters of ``routed_event_row``)."""
        return self._rows("routed_events", "routed_event_row", rows)

    def routed_linked(self, params: Row) -> Statement[list[uuid.UUID]]:
        """The entities memories ``ids`` link to."""
        return self._statement("routed_linked", params, "all", _entity_ids)

    def routed_delete_memories(self, params: Row) -> Statement[list[Row]]:
        """Delete memories ``ids``; the id and text of each deleted."""
        return self._statement("routed_delete_memories", params, "all", _rows)

    def routed_delete_orphans(self, params: Row) -> Statement[None]:
        """Delete the entities of ``entity_ids`` no memory links to."""
        return self._statement("routed_delete_orphans", params, "nothing", _nothing)

    def routed_update_memory(self, params: Row) -> Statement[Row | None]:
        """Update memory ``id`` (the parameters of ``update_memory``); its row with
        ``old_text``, or None when there is no such memory."""
        return self._statement("routed_update_memory", params, "one", _row)

    def routed_relink_memory(self, params: Row) -> Statement[None]:
        """Link memory ``id`` to the entities named ``entity_names``."""
        return self._statement("routed_relink_memory", params, "nothing", _nothing)

    def routed_unlink_memory(self, params: Row) -> Statement[list[uuid.UUID]]:
        """Unlink memory ``id`` from the entities not named ``entity_names``; those entities."""
        return self._statement("routed_unlink_memory", params, "all", _entity_ids)

    def routed_stored(self, params: Row) -> Statement[list[Row]]:
        """The rows of new memories."""
        return self._statement("routed_stored", params, "all", _rows)

    def _rows(self, name: str, row: str, rows: Sequence[Row]) -> Statement[None]:
        """Statement ``name`` writing ``rows``, each as a copy of block ``row``
        (:meth:`Queries.with_rows`); pgmem.routed cuts its batches to fit."""
        params = {
            f"{key}_{k}": value for k, values in enumerate(rows) for key, value in values.items()
        }
        _check_parameter_count(name, params, "write fewer rows at once")
        query = self.queries.with_rows(name, row, len(rows))
        return Statement(name, query, params, "nothing", _nothing, prepare=False)

    def taken_ids(self, params: Row) -> Statement[list[int]]:
        """The items (1-based) whose given id the tenant has in another scope, or had for a
        memory since deleted."""
        return self._statement("taken_ids", params, "all", _ords)

    def stored_duplicates(self, params: Row) -> Statement[list[Row]]:
        """For each item of a batch (``ord``, 1-based) whose scope already holds its text, the
        oldest such memory, marked ``duplicate``."""
        return self._statement("stored_duplicates", params, "all", _rows)

    def get_memory(self, params: Row) -> Statement[Row | None]:
        """The memory ``id`` of the tenant, or None."""
        return self._statement("get_memory", params, "one", _row)

    def list_memories(self, params: Row, filters: sql.Composable) -> Statement[list[Row]]:
        """Up to ``limit`` memories of the scope after the cursor position, oldest first."""
        return self._statement("list_memories", params, "all", _rows, filters)

    def memory_history(self, params: Row) -> Statement[list[Row]]:
        """The events of memory ``id``, oldest first."""
        return self._statement("memory_history", params, "all", _rows)

    def lock_memory(self, params: Row) -> Statement[bool]:
        """Lock memory ``id`` for this transaction; False when the tenant has no such memory."""
        return self._statement("lock_memory", params, "one", _found)

    def lock_update_content(self, params: Row, citus: bool = False) -> Statement[None]:
        """Take the duplicate lock of an update's new text in its memory's scope."""
        name = "lock_update_content_citus" if citus else "lock_update_content"
        return self._statement(name, params, "all", _nothing)

    def update_duplicate(self, params: Row) -> Statement[uuid.UUID | None]:
        """Another memory of the scope holding the update's new text, or None."""
        return self._statement("update_duplicate", params, "one", _id)

    def lock_scope_memories(self, params: Row) -> Statement[list[uuid.UUID]]:
        """Lock every memory of the scope for this transaction; their ids."""
        return self._statement("lock_scope_memories", params, "all", _ids)

    def lock_linked_entities(self, params: Row, citus: bool = False) -> Statement[None]:
        """Lock the entities linked to memories ``ids`` for this transaction."""
        name = "lock_linked_entities_citus" if citus else "lock_linked_entities"
        return self._statement(name, params, "all", _nothing)

    def update_memory(self, params: Row) -> Statement[Row | None]:
        """Update memory ``id`` (re-linking its entities for a new text) and write its UPDATE
        event; the updated row, or None when there is no such memory."""
        return self._statement("update_memory", params, "one", _row)

    def delete_memories(self, params: Row) -> Statement[list[uuid.UUID]]:
        """Delete memories ``ids``, their links and the entities left unlinked, and write their
        DELETE events; the ids deleted."""
        return self._statement("delete_memories", params, "all", _ids)

    # -- search

    def search(
        self, params: SearchParams, filters: sql.Composable, *, small: bool = False
    ) -> Statement[list[Row]]:
        """Every candidate of the three legs with its raw signals. Server-prepared, to run after
        :meth:`search_settings`: parsed and planned once per connection and scope shape. With
        ``small``, the statement for a scope read row by row, which for a larger one returns
        only its size. One row at least: without candidates, a row whose id is NULL (see
        :mod:`pgmem.scope_sizes`)."""
        name = "search_small" if small else "search"
        return self._statement(
            name, params.row(), "all", _rows, filters, prepare=True, binary=True
        )

    def explain_search(
        self, params: SearchParams, filters: sql.Composable, *, analyze: bool,
        generic_plan: bool = True,
    ) -> Statement[dict[str, Any]]:
        """EXPLAIN (FORMAT JSON) of the search statement's generic plan (run, with
        ``analyze``), to run after :meth:`search_settings`; without ``generic_plan`` (Citus),
        of its custom plan, the statement sent with its values inlined."""
        fetch: Fetch = "analyze" if analyze else "plan"
        return self._statement("search", params.row(), fetch, _plan, filters,
                               prepare=None if generic_plan else False)

    def search_sql(self, params: SearchParams, filters: sql.Composable) -> Statement[str]:
        """The search statement with its parameters inlined, for humans (EXPLAIN, --sql)."""
        return self._statement("search", params.row(), "text", str, filters)

    def search_settings(
        self, ef_search: int | None, *, citus: bool = False, small: bool = False
    ) -> list[Statement[None]]:
        """The search's settings (see ``search_settings`` in ``sql/queries.sql``), local to the
        transaction: its generic plan without JIT, for the ``small`` statement without nested
        loops where another join exists, and (``ef_search`` given, pgvector >= 0.8) iterative
        HNSW scans fetching ``ef_search`` rows at first; sent in the same round trip as the
        search statement, before it. With ``citus``, ``search_settings_citus``: custom plans
        (Citus routes only those), as ``SET LOCAL`` commands that reach the worker."""
        if citus:
            name = "search_settings_citus" + ("" if ef_search is not None else "_exact")
            return [
                Statement(name, command, None, "nothing", _nothing, prepare=False)
                for command in self.queries.commands(name, ef_search=ef_search)
            ]
        params: Row = {"plan_cache_mode": "force_generic_plan",
                       "enable_nestloop": "off" if small else None}
        if ef_search is None:
            return [self._statement("search_settings_exact", params, "nothing", _nothing)]
        params["ef_search"] = ef_search
        return [self._statement("search_settings", params, "nothing", _nothing)]

    def text_search_configs(self) -> Statement[list[str]]:
        """The names of the database's text search configurations (``pg_ts_config``)."""
        return self._statement("text_search_configs", {}, "all", _names)

    def schema_tables(self) -> Statement[Row | None]:
        """Whether the schema's ``memories`` and ``embedding_models`` tables exist."""
        params = {
            "memories_table": f'"{self.schema}".memories',
            "models_table": f'"{self.schema}".embedding_models',
        }
        return self._statement("schema_tables", params, "one", _row)

    def embedding_models(self) -> Statement[list[Row]]:
        """The rows of ``embedding_models``: the current model, and the next during a
        re-embedding."""
        return self._statement("embedding_models", {}, "all", _rows)

    def claim_embedding_model(self, model: str) -> Statement[None]:
        """Record ``model`` as the schema's if none is recorded."""
        return self._statement("claim_embedding_model", {"model": model}, "nothing", _nothing)

    def write_next_memories(self, params: Row) -> Statement[None]:
        """A write's vectors of a re-embedding's pending model (``tenant``, ``ids``,
        ``content_hashes``, ``embeddings``)."""
        return self._statement("write_next_memories", params, "nothing", _nothing, prepare=False)

    def write_next_entities(self, params: Row) -> Statement[None]:
        """The same for entities (``tenant``, ``names``, ``embeddings``)."""
        return self._statement("write_next_entities", params, "nothing", _nothing, prepare=False)

    def _statement(
        self,
        name: str,
        params: Row,
        fetch: Fetch,
        read: Callable[[Any], T],
        filters: sql.Composable | None = None,
        *,
        prepare: bool | None = None,
        binary: bool = False,
    ) -> Statement[T]:
        _check_parameter_count(name, params, "lower the filter limits of pgmem.Limits")
        scope_ids = [
            column for column in (*SCOPE_IDS, *NAMESPACE_SCOPES) if params.get(column) is not None
        ]
        if any(params[column] is ANY for column in scope_ids):  # compared by its own block
            scope_ids = [f"{c}_any" if params[c] is ANY else c for c in scope_ids]
            params = {k: None if v is ANY else v for k, v in params.items()}
        query = self.queries.get(name, NO_FILTER if filters is None else filters, scope_ids)
        if not self.prepares and fetch not in ("plan", "analyze"):
            prepare = False
        return Statement(name, query, params, fetch, read, prepare, binary)


def _check_parameter_count(name: str, params: Row, advice: str) -> None:
    """Refuse a statement carrying more parameters than PostgreSQL's protocol allows (libpq
    would refuse it client-side), with ``advice`` on what to do instead."""
    if len(params) > MAX_PARAMETERS:
        raise StatementRefusedError(
            f"the {name} statement would carry {len(params)} parameters, more than the "
            f"{MAX_PARAMETERS} PostgreSQL's protocol allows: nothing was sent ({advice})"
        )


# How statements read their rows.


def _nothing(_: object) -> None:
    return None


def _rows(rows: list[Row]) -> list[Row]:
    return rows


def _row(row: Row | None) -> Row | None:
    return row


def _found(row: Row | None) -> bool:
    return row is not None


def _id(row: Row | None) -> uuid.UUID | None:
    return None if row is None else row["id"]


def _memory_ids(rows: list[Row]) -> list[uuid.UUID]:
    return [row["memory_id"] for row in rows]


def _ids(rows: list[Row]) -> list[uuid.UUID]:
    return [row["id"] for row in rows]


def _entity_ids(rows: list[Row]) -> list[uuid.UUID]:
    return [row["entity_id"] for row in rows]


def _ords(rows: list[Row]) -> list[int]:
    return [row["ord"] for row in rows]


def _names(rows: list[Row]) -> list[str]:
    return [row["name"] for row in rows]


def _plan(explained: list[dict[str, Any]]) -> dict[str, Any]:
    return explained[0]
