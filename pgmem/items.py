"""Store items: memories addressed by a namespace and a key, the calls behind
:class:`pgmem.langgraph.PgmemStore`.

An item is a row of ``memories`` with a ``namespace`` (a path of labels) and a ``key`` instead of
user, agent and run ids; its value is the memory's metadata, and its text the part of the value
that is indexed (empty for an item that is not: such an item has a placeholder vector, is never a
search candidate, and is found by listing only). Calls by scope never see items (they compare a
scope id, which items lack), and item calls never see scoped memories (they compare the
namespace, which those lack).

Each call here is an :data:`~pgmem.effects.Operation`, run by ``pgmem.memory.run``. A search
with a query is pgmem's search statement, scoped by namespace prefix (``scope_namespace`` in
``sql/queries.sql``); the other statements are in ``sql/langgraph.sql``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from pgmem import validate
from pgmem.builders import SearchRequest, delete_params
from pgmem.effects import Operation, Steps, result_of, transaction
from pgmem.errors import FilterError, FilterLimitError, InvalidInputError
from pgmem.filters import check_filter_size
from pgmem.operations import Operations
from pgmem.queries import Queries, sql_blocks
from pgmem.results import SearchHit
from pgmem.steps import (
    delete_memories_steps,
    explain_search_steps,
    insert_steps,
    model_check_steps,
)
from pgmem.store import Row, Statement, Store
from pgmem.validate import NewMemory, Scope

if TYPE_CHECKING:
    from pgmem.connection import ServerCapabilities

#: How many expired items one sweep transaction deletes.
SWEEP_BATCH = 500
_OPERATORS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


@functools.cache
def _blocks() -> dict[str, str]:
    return {**sql_blocks(), **sql_blocks("langgraph.sql")}


class ItemStore(Store):
    """pgmem's statements and those of ``sql/langgraph.sql``, for one schema."""

    def __init__(self, schema: str, *, prepares: bool = True) -> None:
        super().__init__(schema, prepares=prepares)
        self.queries = Queries(schema, _blocks())

    def lock_items(self, params: Row, citus: bool = False) -> Statement[None]:
        """Lock each (namespace, key) written, in key order (in pipeline mode, sent with the
        next statement)."""
        return self._statement(
            "lock_items_citus" if citus else "lock_items", params, "nothing", _nothing
        )

    def existing_items(self, params: Row) -> Statement[list[Row]]:
        """The memories of these (namespace, key) pairs, locked: ord, id, created_at."""
        return self._statement("existing_items", params, "all", _rows)

    def get_items(self, params: Row) -> Statement[list[Row]]:
        """The items asked for that exist, by ordinal (refreshing TTLs as asked)."""
        return self._statement("get_items", params, "all", _rows)

    def refresh_items(self, params: Row) -> Statement[None]:
        """Start the time to live of the items of these ids again."""
        return self._statement("refresh_items", params, "nothing", _nothing)

    def list_items(self, params: Row, condition: sql.Composable) -> Statement[list[Row]]:
        """A page of the items of a namespace scope matching ``condition``."""
        return self._statement("list_items", params, "all", _rows, condition)

    def list_namespaces(self, params: Row) -> Statement[list[Row]]:
        """The distinct (truncated) namespaces matching a prefix and a suffix."""
        return self._statement("list_namespaces", params, "all", _rows)

    def lock_expired_items(self, params: Row) -> Statement[list[Any]]:
        """The ids of expired items, locked."""
        return self._statement("lock_expired_items", params, "all", _ids)


def _rows(rows: list[Row]) -> list[Row]:
    return rows


def _nothing(_: object) -> None:
    return None


def _ids(rows: list[Row]) -> list[Any]:
    return [row["id"] for row in rows]


@dataclass(frozen=True)
class ItemWrite:
    """A put (``value`` a dict) or a delete (``value`` None) of the item at (namespace, key).
    ``text`` is what is indexed (None or empty: the item is not indexed); ``ttl_minutes`` its
    time to live."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    text: str | None = None
    ttl_minutes: float | None = None


@dataclass(frozen=True)
class FoundItem:
    """An item read back: where it is, its value, its timestamps; for a search with a query,
    the :class:`~pgmem.results.SearchHit` that found it (its score and ``explain``)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: Any
    updated_at: Any
    hit: SearchHit | None = None


def item_filter(
    filter: Mapping[str, Any] | None, *, omit_expired: bool, indexed_only: bool = False,
    limits: validate.Limits = validate.DEFAULT_LIMITS,
) -> tuple[sql.Composable, dict[str, Any]]:
    """A LangGraph store filter as a SQL condition on the item's value (``m.metadata``) and its
    parameters (named ``if0``, ``if1``...), as LangGraph's InMemoryStore compares: a value
    equals (JSON equality; ``None`` also matches a missing key), a dict without operators
    matches an object member by member, ``$eq``/``$ne`` compare for equality, ``$gt``,
    ``$gte``, ``$lt``, ``$lte`` compare numbers. With ``omit_expired``, expired items do not
    match; with ``indexed_only``, items that are not indexed do not.

    Raises:
        FilterError: the filter is not a dict with string keys, or names an unknown operator
            or a non-numeric bound.
        FilterLimitError: the filter is larger than ``limits`` allow (as a Memory's filters:
            bytes as JSON, conditions, bound values), checked as it compiles.
    """
    params: dict[str, Any] = {}
    parts: list[sql.Composable] = []
    if filter is not None:
        check_filter_size(filter, limits)

    def param(value: Any) -> sql.Composable:
        if len(params) >= limits.max_filter_parameters:
            most = limits.max_filter_parameters
            raise FilterLimitError(
                f"filters bind more than {most} values; the limit is {most} "
                "(Limits.max_filter_parameters)"
            )
        name = f"if{len(params)}"
        params[name] = value
        return sql.Placeholder(name)

    def condition(part: sql.Composable) -> None:
        if len(parts) >= limits.max_filter_conditions:
            most = limits.max_filter_conditions
            raise FilterLimitError(
                f"filters hold more than {most} conditions; the limit is {most} "
                "(Limits.max_filter_conditions)"
            )
        parts.append(part)

    def at(path: list[str]) -> sql.Composable:
        return sql.SQL("(m.metadata #> {}::text[])").format(param(path))

    def equal(path: list[str], value: Any) -> sql.Composable:
        if value is None:
            return sql.SQL("({0} IS NULL OR {0} = 'null'::jsonb)").format(at(path))
        return sql.SQL("{} = {}::jsonb").format(at(path), param(Jsonb(value)))

    def walk(path: list[str], wanted: Any, depth: int) -> None:
        if depth > 32:
            raise FilterError("the filter nests deeper than 32 levels")
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            for operator, bound in wanted.items():
                condition(_operator(path, operator, bound, at, equal, param))
        elif isinstance(wanted, Mapping):
            condition(sql.SQL("jsonb_typeof({}) = 'object'").format(at(path)))
            for name, inner in wanted.items():
                walk([*path, _filter_key(name)], inner, depth + 1)
        else:
            condition(equal(path, list(wanted) if isinstance(wanted, tuple) else wanted))

    if filter is not None:
        if not isinstance(filter, Mapping):
            raise FilterError(f"filter must be a dict, got {type(filter).__name__}")
        for name, wanted in filter.items():
            walk([_filter_key(name)], wanted, 1)
    if omit_expired:
        parts.append(sql.SQL("(m.expires_at IS NULL OR m.expires_at > now())"))
    if indexed_only:
        parts.append(sql.SQL("m.text <> ''"))
    if not parts:
        return sql.SQL("TRUE"), params
    return sql.SQL("({})").format(sql.SQL(" AND ").join(parts)), params


def _filter_key(name: object) -> str:
    if not isinstance(name, str) or validate.unstorable(name):
        raise FilterError(f"a filter key must be a string PostgreSQL can store, got {name!r}")
    return name


def _operator(
    path: list[str], operator: object, bound: Any, at: Any, equal: Any, param: Any
) -> sql.Composable:
    if operator == "$eq":
        return equal(path, bound)  # type: ignore[no-any-return]
    if operator == "$ne":
        return sql.SQL("({}) IS NOT TRUE").format(equal(path, bound))
    if operator in _OPERATORS:
        try:
            number = float(bound)
        except (TypeError, ValueError):
            raise FilterError(f"{operator} needs a number, got {bound!r}") from None
        if not math.isfinite(number):
            raise FilterError(f"{operator} needs a finite number, got {bound!r}")
        return sql.SQL(
            "CASE WHEN jsonb_typeof({0}) = 'number' THEN ({1})::float8 {2} {3}::float8"
            " ELSE FALSE END"
        ).format(
            at(path), sql.SQL("m.metadata #>> {}::text[]").format(param(path)),
            sql.SQL(_OPERATORS[str(operator)]), param(number),
        )
    raise FilterError(
        f"unsupported filter operator {operator!r}: use $eq, $ne, $gt, $gte, $lt or $lte"
    )


def _namespaces_param(namespaces: Sequence[tuple[str, ...]]) -> list[Jsonb]:
    return [Jsonb(list(namespace)) for namespace in namespaces]


def _prefix_range(labels: Sequence[str]) -> tuple[list[str] | None, list[str] | None]:
    """The namespace range of a prefix of fixed labels (see ``scope_namespace``)."""
    if not labels:
        return None, None
    *parents, last = labels
    return list(labels), [*parents, last + "\x01"]


class Items:
    """The item calls of one :class:`~pgmem.operations.Operations` (a ``Memory``'s).
    ``omit_expired``: reads skip items whose time to live has passed before a sweep deletes
    them."""

    def __init__(self, ops: Operations, *, omit_expired: bool = False) -> None:
        self.ops = ops
        self.tenant = ops.tenant
        self.store = ItemStore(ops.schema, prepares=ops.store.prepares)
        self.omit_expired = omit_expired

    # -- reads

    def get(
        self, wanted: Sequence[tuple[tuple[str, ...], str, bool]]
    ) -> Operation[list[FoundItem | None]]:
        """The items at (namespace, key), None where there is none; each asked with ``True``
        starts its time to live again."""
        params = {
            "tenant": self.tenant,
            "namespaces": _namespaces_param([namespace for namespace, _, _ in wanted]),
            "keys": [key for _, key, _ in wanted],
            "refresh": [refresh for _, _, refresh in wanted],
            "omit_expired": self.omit_expired,
        }
        rows = yield from transaction(lambda _: result_of(self.store.get_items(params)))
        found: list[FoundItem | None] = [None] * len(wanted)
        for row in rows:
            found[row["ord"] - 1] = _found(row)
        return found

    def listing(
        self,
        prefix: tuple[str, ...],
        *,
        filter: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        refresh: bool,
    ) -> Operation[list[FoundItem]]:
        """A page of the items under ``prefix`` matching ``filter``, most recently updated
        first."""
        condition, filter_params = item_filter(
            filter, omit_expired=self.omit_expired, limits=self.ops.limits
        )
        params = {
            **Scope(self.tenant, namespace=prefix).params(), **filter_params,
            "limit": limit, "offset": offset, "refresh": refresh,
        }
        rows = yield from transaction(
            lambda _: result_of(self.store.list_items(params, condition))
        )
        return [_found(row) for row in rows]

    def search(
        self,
        prefix: tuple[str, ...],
        query: str,
        *,
        filter: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        refresh: bool,
        threshold: float = 0.0,
    ) -> Operation[list[FoundItem]]:
        """The indexed items under ``prefix`` matching ``filter`` most relevant to ``query``,
        best first, by pgmem's hybrid search (semantic, keyword and entity signals): the
        ``offset``-th to the ``offset + limit``-th. Each carries its hit (``score``,
        ``explain``).

        Raises:
            InvalidInputError: ``offset + limit`` above the search's limit (1,000), or a bad
                query.
        """
        request = self._request(prefix, query, filter, offset + limit, threshold)
        hits, rows = yield from self.ops.search_hits(request)
        hits = hits[offset:]
        expiring = [hit.id for hit in hits if rows[hit.id]["ttl_minutes"] is not None]
        if refresh and expiring:
            params = {"tenant": self.tenant, "ids": expiring}
            yield from transaction(lambda _: result_of(self.store.refresh_items(params)))
        return [
            FoundItem(
                namespace=tuple(rows[hit.id]["namespace"]), key=rows[hit.id]["key"],
                value=dict(hit.metadata), created_at=hit.created_at, updated_at=hit.updated_at,
                hit=hit,
            )
            for hit in hits
        ]

    def explain_search(
        self,
        prefix: tuple[str, ...],
        query: str,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        analyze: bool = False,
    ) -> Operation[dict[str, Any]]:
        """The plan of :meth:`search`'s statement (as :meth:`pgmem.Memory.explain_search`)."""
        request = self._request(prefix, query, filter, limit, 0.0)
        inputs = yield from self.ops.search_inputs(request)
        return (yield from transaction(
            functools.partial(explain_search_steps, self.store, inputs, analyze=analyze)
        ))

    def _request(
        self,
        prefix: tuple[str, ...],
        query: str,
        filter: Mapping[str, Any] | None,
        limit: int,
        threshold: float,
    ) -> SearchRequest:
        """A checked search of the indexed items under ``prefix``."""
        condition, filter_params = item_filter(
            filter, omit_expired=self.omit_expired, indexed_only=True, limits=self.ops.limits
        )
        if limit > validate.MAX_LIMIT:
            raise InvalidInputError(
                f"a search with a query reaches at most {validate.MAX_LIMIT} items "
                f"(offset + limit), got {limit}"
            )
        return SearchRequest(
            scope=Scope(self.tenant, namespace=prefix),
            query=validate.text(query, what="query", max_length=self.ops.max_text_length),
            limit=limit,
            threshold=validate.threshold(threshold),
            condition=condition,
            filter_params=filter_params,
            profile=self.ops.scoring,
        )

    def namespaces(
        self,
        *,
        prefix: Sequence[str] | None,
        suffix: Sequence[str] | None,
        max_depth: int | None,
        limit: int,
        offset: int,
    ) -> Operation[list[tuple[str, ...]]]:
        """The distinct namespaces of the items (cut to ``max_depth`` labels) starting with
        ``prefix`` and ending with ``suffix`` (``"*"`` matching any label), sorted, one page."""
        fixed: list[str] = []
        for label in prefix or ():
            if label == "*":
                break
            fixed.append(label)
        fixed_from, fixed_end = _prefix_range(fixed)

        def pattern(path: Sequence[str] | None) -> list[str | None] | None:
            return [None if label == "*" else label for label in path] if path else None

        params = {
            "tenant": self.tenant, "max_depth": max_depth, "prefix": pattern(prefix),
            "suffix": pattern(suffix), "fixed_from": fixed_from, "fixed_end": fixed_end,
            "omit_expired": self.omit_expired, "limit": limit, "offset": offset,
        }
        rows = yield from transaction(lambda _: result_of(self.store.list_namespaces(params)))
        return [tuple(row["namespace"]) for row in rows]

    # -- writes

    def write(self, writes: Sequence[ItemWrite]) -> Operation[None]:
        """Apply puts and deletes (at most one per (namespace, key)) in one transaction: a put
        replaces the item, keeping its ``created_at``; an indexed put is embedded, lemmatized
        and its entities linked as a memory is."""
        if not writes:
            return
        puts = [write for write in writes if write.value is not None]
        params: Row | None = None
        vectors_of = None
        if puts:
            space = yield from self.ops._checked_space()
            vectors_of = (space, self.ops.embedder_name)
            text_search = yield from self.ops._text_search(None)
            placeholder = np.zeros(space.dim, dtype=np.float32)
            placeholder[0] = 1.0  # a unit vector: the cosine of an item that is not indexed
            items = [
                NewMemory(
                    scope=Scope(self.tenant), text=put.text or "", metadata=dict(put.value or {}),
                    embedding=None if put.text else placeholder, namespace=put.namespace,
                    key=put.key, ttl_minutes=put.ttl_minutes,
                )
                for put in puts
            ]
            params = yield from self.ops._model_work(
                self.ops._batch_params, self.ops._abatch_params, items, space.dim, False,
                text_search,
            )
        keys = {
            "tenant": self.tenant,
            "namespaces": _namespaces_param([write.namespace for write in writes]),
            "keys": [write.key for write in writes],
        }
        put_rows = {id(put): n for n, put in enumerate(puts)}
        ords = [put_rows.get(id(write)) for write in writes]

        def steps(capabilities: ServerCapabilities) -> Steps[None]:
            if vectors_of is not None:
                yield from model_check_steps(self.store, vectors_of)
            yield from result_of(self.store.lock_items(keys, capabilities.citus))
            existing = yield from result_of(self.store.existing_items(keys))
            ids = [row["id"] for row in existing]
            names = [] if params is None else params["entity_names"]
            yield from result_of(self.store.lock_linked_entities(
                {"tenant": self.tenant, "ids": ids, "entity_names": names}, capabilities.citus
            ))
            if ids:
                yield from delete_memories_steps(
                    self.store, delete_params(self.tenant, ids), routed=capabilities.citus
                )
            if params is None:
                return
            insert = dict(params)
            created = list(insert["created_ats"])
            updated = list(insert["updated_ats"])
            for row in existing:  # a replaced item keeps when it was created
                n = ords[row["ord"] - 1]
                if n is not None:
                    created[n], updated[n] = row["created_at"], row["now"]
            insert["created_ats"], insert["updated_ats"] = created, updated
            yield from insert_steps(self.store, self.tenant, insert, routed=capabilities.citus)

        # Pipeline mode: the item locks travel with the read of the items they replace, the
        # insert's locks with the insert.
        yield from transaction(steps, pipeline=True)

    def sweep(self) -> Operation[int]:
        """Delete the items whose time to live has passed (with their links, and entities no
        memory links any more); how many."""
        total = 0
        while True:

            def steps(capabilities: ServerCapabilities) -> Steps[int]:
                params = {"tenant": self.tenant, "limit": SWEEP_BATCH}
                ids = yield from result_of(self.store.lock_expired_items(params))
                if not ids:
                    return 0
                deleted = delete_params(self.tenant, ids)
                yield from result_of(
                    self.store.lock_linked_entities(deleted, capabilities.citus)
                )
                return len((yield from delete_memories_steps(
                    self.store, deleted, routed=capabilities.citus
                )))

            count = yield from transaction(steps)
            total += count
            if count < SWEEP_BATCH:
                return total


def _found(row: Row) -> FoundItem:
    return FoundItem(
        namespace=tuple(row["namespace"]), key=row["key"], value=row["value"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )
