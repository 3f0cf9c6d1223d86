"""The statements of each call's transactions, built from :class:`~pgmem.store.Store`: each
``*_steps`` function is a :data:`~pgmem.effects.Steps` generator the calls of
:mod:`pgmem.operations` yield inside a :class:`~pgmem.effects.Transaction` (the search's go
together in one :class:`~pgmem.effects.Batch`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from psycopg import sql

from pgmem import scoring
from pgmem.builders import (
    MAX_EF_SEARCH,
    MIN_EF_SEARCH,
    SearchInputs,
    SearchPlan,
    SearchRequest,
    add_results,
    delete_params,
    deleted_history_params,
    history_events,
    memory_params,
    page,
    record,
    restore_params,
    search_plan,
)
from pgmem.effects import Steps, result_of
from pgmem.embedding_space import EmbeddingSpace, matches, mismatch, space_of_rows
from pgmem.errors import (
    DuplicateError,
    IdTakenError,
    IsolationError,
    NotFoundError,
    SchemaError,
)
from pgmem.next_model import NextVectors
from pgmem.results import AddResult, HistoryEvent, MemoryRecord, Page
from pgmem.routed import routed_delete_steps, routed_insert_steps, routed_update_steps
from pgmem.store import Row, Statement, Store
from pgmem.validate import Guard, NewMemory, PastEvent, Scope

if TYPE_CHECKING:
    from pgmem.connection import ServerCapabilities

def not_found(tenant: str, memory_id: uuid.UUID) -> NotFoundError:
    """The error for a memory id the tenant does not have."""
    return NotFoundError(f"no memory {memory_id} in tenant {tenant!r}")


def space_steps(store: Store) -> Steps[EmbeddingSpace]:
    """The model, dimension and storage of the schema's vectors.

    Raises:
        SchemaError: the schema is missing, or older than revision 0004.
    """
    tables = yield from result_of(store.schema_tables())
    if tables is None or not tables["memories"]:
        raise SchemaError(
            f"pgmem's schema {store.schema!r} is not in this database: "
            "run pgmem.migrate(dsn) or `pgmem migrate` first"
        )
    space = None
    if tables["embedding_models"]:
        space = space_of_rows((yield from result_of(store.embedding_models())))
    if space is None:
        raise SchemaError(
            f"pgmem's schema {store.schema!r} has no embedding model on record (it predates "
            "revision 0004): run pgmem.migrate(dsn) or `pgmem migrate`"
        )
    return space


#: What a write that stores vectors checks first: the space its vectors were made for, and the
#: name of the embedder that made them.
VectorsOf = tuple[EmbeddingSpace, str]


def model_check_steps(store: Store, vectors_of: VectorsOf) -> Steps[EmbeddingSpace]:
    """Check, in a write's transaction and before it writes, that the schema still holds the
    model its vectors were made with -- a re-embedding may have switched it since the Memory
    read it -- and record the embedder's name if no model is on record. Returns the space read
    (its ``next``: the re-embedding pending now).

    Raises:
        ModelMismatchError: the schema holds another model's vectors now.
    """
    expected, name = vectors_of
    # Reading embedding_models takes its ACCESS SHARE lock until the transaction ends: a
    # re-embedding's switch (which locks the table exclusively) waits for this write, or this
    # read waits for the switch and sees the model it recorded. (No advisory lock: any role
    # could take one, and hold every tenant's writes.)
    space = space_of_rows((yield from result_of(store.embedding_models())))
    if expected.model is None and space is not None and space.model is None:
        # Only then: the claim is an UPDATE, which on Citus writes the reference table on every
        # node, with two-phase commit.
        yield store.claim_embedding_model(name)
        space = space_of_rows((yield from result_of(store.embedding_models())))
    # The model may still be unrecorded: another write's claim is under way.
    if space is None or not matches(space, name) or (space.dim, space.storage) != (
        expected.dim, expected.storage
    ):
        shown = space if space is not None else expected
        raise mismatch(store.schema, shown, name, expected.dim)
    return space


def next_vectors_steps(
    store: Store, tenant: str, space: EmbeddingSpace | None, nexts: NextVectors | None,
    ids: list[uuid.UUID], hashes: list[str],
) -> Steps[None]:
    """Store a write's vectors of a re-embedding's pending model (``nexts``: one per memory of
    ``ids`` with its text's ``hashes``, and its entity names'), when ``space`` -- read in the
    write's transaction, whose lock on ``embedding_models`` keeps the re-embedding from
    switching or being undone until it commits -- still has that re-embedding pending. A
    re-embedding begun since the Memory last read the model gets nothing here: its copy embeds
    those rows."""
    if (
        nexts is None or space is None or space.next is None
        or not space.next.same_vectors(nexts.space)
    ):
        return
    if ids:
        yield store.write_next_memories({
            "tenant": tenant, "ids": ids, "content_hashes": hashes,
            "embeddings": list(nexts.texts),
        })
    if nexts.names:
        yield store.write_next_entities({
            "tenant": tenant, "names": list(nexts.names),
            "embeddings": list(nexts.name_vectors),
        })


def insert_steps(
    store: Store, tenant: str, params: Row, vectors_of: VectorsOf | None = None, first: int = 0,
    *, routed: bool = False, items: Sequence[NewMemory] = (), nexts: NextVectors | None = None,
) -> Steps[list[AddResult]]:
    """Add a batch (``params`` from :func:`insert_params`): the duplicate locks, then the insert
    (after :func:`model_check_steps` with ``vectors_of``). ``first``: the index of the batch's
    first item in the call, for errors. ``routed``: on Citus, the insert as statements Citus
    routes to the tenant's worker (:mod:`pgmem.routed`). ``items``: the batch's items, when
    some bring an expiry, origin or history to restore (an export's, :mod:`pgmem.exporting`),
    written after the insert to the memories it made (:func:`pgmem.builders.restore_params`).
    ``nexts``: the items' vectors of a re-embedding's pending model, stored for the memories
    the batch added (not on Citus).

    Raises:
        IdTakenError: an item's id is another scope's (see :func:`taken_ids_steps`).
        IsolationError: ``dedupe`` in a REPEATABLE READ transaction, whose snapshot predates the
            locks, so that a concurrent add of the same text would be missed. Raised after the
            insert, whose rows tell the isolation level; the caller's savepoint undoes it.
    """
    space = None if vectors_of is None else (yield from model_check_steps(store, vectors_of))
    # entity-name locks always, duplicate locks with dedupe
    yield store.lock_contents(params, routed)
    yield from taken_ids_steps(store, tenant, params, first)
    rows = yield from (
        routed_insert_steps(store, params) if routed
        else result_of(store.insert_memories(params))
    )
    if params["dedupe"] and rows and rows[0]["isolation"] == "repeatable read":
        raise IsolationError(
            "dedupe=True cannot detect duplicates in a REPEATABLE READ transaction: its snapshot "
            "predates the duplicate locks. Use READ COMMITTED or SERIALIZABLE, or pass "
            "dedupe=False; nothing was written"
        )
    restore = restore_params(tenant, items, rows) if items else None
    if restore is not None:
        yield store.restore_memories(restore)
    if nexts is not None and not routed:
        fresh = [k for k, row in enumerate(rows) if not row["duplicate"]]
        yield from next_vectors_steps(
            store, tenant, space,
            replace(nexts, texts=nexts.texts[fresh]),
            [rows[k]["id"] for k in fresh], [params["content_hashes"][k] for k in fresh],
        )
    return add_results(tenant, rows)


def restore_deleted_steps(
    store: Store, tenant: str, histories: Sequence[tuple[uuid.UUID, Sequence[PastEvent]]],
) -> Steps[int]:
    """Write the history of memories deleted before an export, for the ids this tenant has
    neither as a memory nor in its history (the others are left out: a file never adds to what
    the tenant holds); how many memories' histories were written."""
    known = set((yield from result_of(store.known_ids(
        {"tenant": tenant, "ids": [memory_id for memory_id, _ in histories]}
    ))))
    fresh = [(memory_id, past) for memory_id, past in histories if memory_id not in known]
    if not fresh:
        return 0
    written = yield from result_of(
        store.restore_deleted_history(deleted_history_params(tenant, fresh))
    )
    return len(set(written))


def taken_ids_steps(store: Store, tenant: str, params: Row, first: int) -> Steps[None]:
    """Refuse a batch whose items bring ids (an import's) that the tenant has in another scope:
    a call must never learn about, nor take over, a memory outside its scope. The error names
    the item and its id, nothing of the memory.

    Raises:
        IdTakenError: such an item (the first), before anything of the batch is written.
    """
    if not any(given is not None for given in params["ids"]):
        return
    taken = yield from result_of(store.taken_ids(params))
    if taken:
        index = first + taken[0] - 1
        raise IdTakenError(
            f"items[{index}]: id {params['ids'][taken[0] - 1]} is taken in tenant {tenant!r} "
            "by a memory of another scope: give the item another id, or none; nothing of its "
            "batch was written"
        )


def update_steps(
    store: Store, tenant: str, memory_id: uuid.UUID, params: Row,
    vectors_of: VectorsOf | None = None, guard: Guard | None = None, *, routed: bool = False,
    nexts: NextVectors | None = None,
) -> Steps[MemoryRecord]:
    """Update a memory (``params`` from :func:`update_params`) after locking it and its entities
    (and, for new vectors, :func:`model_check_steps` with ``vectors_of``); with ``guard``,
    only a memory of the guard's scope (see :func:`get_steps`). ``routed``: on Citus, the update
    as statements Citus routes to the tenant's worker (:mod:`pgmem.routed`). ``nexts``: the new
    text's vectors of a re-embedding's pending model (not stored on Citus)."""
    space = None if vectors_of is None else (yield from model_check_steps(store, vectors_of))
    if not (yield from result_of(store.lock_memory(params))):
        raise not_found(tenant, memory_id)
    if guard:
        yield from get_steps(store, tenant, memory_id, guard)
    if params["content_hash"] is not None:  # a new text: add's duplicate rule, under its lock
        yield store.lock_update_content(params, routed)
        duplicate = yield from result_of(store.update_duplicate(params))
        if duplicate is not None:
            raise DuplicateError(
                f"memory {duplicate} of this scope already has this text: the update of "
                f"{memory_id} is refused, nothing was written"
            )
    yield store.lock_linked_entities(params, routed)
    row = yield from (
        routed_update_steps(store, params) if routed
        else result_of(store.update_memory(params))
    )
    if row is None:  # not after lock_memory found it
        raise not_found(tenant, memory_id)
    if nexts is not None and not routed:
        yield from next_vectors_steps(
            store, tenant, space, nexts, [memory_id], [params["content_hash"]]
        )
    return record(tenant, row)


def delete_steps(
    store: Store, tenant: str, memory_id: uuid.UUID, guard: Guard | None = None, *,
    routed: bool = False,
) -> Steps[None]:
    """Delete a memory after locking it and its entities; with ``guard``, only a memory of
    the guard's scope (see :func:`get_steps`). ``routed``: see :func:`delete_memories_steps`."""
    params = memory_params(tenant, memory_id)
    if not (yield from result_of(store.lock_memory(params))):
        raise not_found(tenant, memory_id)
    if guard:
        yield from get_steps(store, tenant, memory_id, guard)
    yield store.lock_linked_entities(params, routed)
    if routed:
        yield from routed_delete_steps(store, params)
    else:
        yield store.delete_memories(params)  # nothing to read: it travels with the COMMIT


def delete_all_steps(
    store: Store, tenant: str, scope: Scope, *, routed: bool = False
) -> Steps[int]:
    """Delete every memory of ``scope`` after locking them and their entities; how many.
    ``routed``: see :func:`delete_memories_steps`."""
    ids = yield from result_of(store.lock_scope_memories(scope.params()))
    if not ids:
        return 0
    params = delete_params(tenant, ids)
    yield store.lock_linked_entities(params, routed)
    return len((yield from delete_memories_steps(store, params, routed=routed)))


def delete_memories_steps(
    store: Store, params: Row, *, routed: bool = False
) -> Steps[list[uuid.UUID]]:
    """Delete memories ``params["ids"]`` (locked), their links, their entities left unlinked;
    the ids deleted. ``routed``: on Citus, as statements Citus routes to the tenant's worker
    (:mod:`pgmem.routed`)."""
    if routed:
        return (yield from routed_delete_steps(store, params))
    return (yield from result_of(store.delete_memories(params)))


def get_steps(
    store: Store, tenant: str, memory_id: uuid.UUID, guard: Guard | None = None
) -> Steps[MemoryRecord]:
    """The memory ``memory_id``; NotFoundError when the tenant has none, or when it does not
    carry the scope ids of the ``guard``."""
    row = yield from result_of(store.get_memory(memory_params(tenant, memory_id)))
    if row is None:
        raise not_found(tenant, memory_id)
    found = record(tenant, row)
    if guard and any(getattr(found, name) != value for name, value in guard.items()):
        shown = ", ".join(f"{name}={value!r}" for name, value in guard.items())
        raise NotFoundError(f"no memory {memory_id} in scope {shown} of tenant {tenant!r}")
    return found


def list_steps(
    store: Store, tenant: str, params: Row, condition: sql.Composable, limit: int
) -> Steps[Page]:
    """One page of ``get_all`` (``params`` from :func:`list_params`)."""
    rows = yield from result_of(store.list_memories(params, condition))
    return page(tenant, rows, limit)


def history_steps(
    store: Store, tenant: str, memory_id: uuid.UUID, guard: Guard | None = None
) -> Steps[list[HistoryEvent]]:
    """The events of ``memory_id``; NotFoundError when the tenant never had it. With
    ``guard``, only those of a memory that is still there, in the guard's scope (see
    :func:`get_steps`), since its latest DELETE: a deleted memory's events carry no scope to
    check, and its id may have been imported again into another scope."""
    if guard:
        yield from get_steps(store, tenant, memory_id, guard)
    rows = yield from result_of(store.memory_history(memory_params(tenant, memory_id)))
    if not rows:
        raise not_found(tenant, memory_id)
    if guard:
        deletes = [n for n, row in enumerate(rows) if row["event"] == "DELETE"]
        rows = rows[deletes[-1] + 1 :] if deletes else rows
    return history_events(rows)


def search_batch(
    store: Store, inputs: SearchInputs, capabilities: ServerCapabilities, *, small: bool = False
) -> tuple[list[Statement[Any]], Callable[[list[Any]], tuple[SearchPlan, list[Row]]]]:
    """The search's settings and statement (steps 2-7), sent in one round trip; the plan and
    the statement's rows from their results. ``small``: the statement for a scope read row by
    row (:mod:`pgmem.scope_sizes`)."""
    plan = _plan(inputs, capabilities)
    settings = search_settings(store, inputs.request, capabilities, small=small)
    statements: list[Statement[Any]] = [
        *settings, store.search(plan.params, inputs.request.condition, small=small)
    ]

    def read(results: list[Any]) -> tuple[SearchPlan, list[Row]]:
        return plan, results[len(settings)]

    return statements, read


def search_settings(
    store: Store, request: SearchRequest, capabilities: ServerCapabilities, *,
    small: bool = False,
) -> list[Statement[None]]:
    """The statements setting what the search statement (``small``: the small-scope one) runs
    with (on Citus, where the worker runs it, ``SET LOCAL`` commands Citus copies there:
    set_config's values stay on the coordinator, and the worker would search without iterative
    scans, with ef_search 40)."""
    return store.search_settings(
        ef_search(request.limit) if capabilities.iterative_scan else None,
        citus=capabilities.citus, small=small,
    )


def ef_search(limit: int) -> int:
    """The ``hnsw.ef_search`` of a search of ``limit``: what one HNSW scan returns at first."""
    # At least the over-fetch -- up to pgvector's maximum, beyond which the iterative scan goes
    # on fetching -- and never below pgvector's default, MIN_EF_SEARCH: with 20 (a limit of 10)
    # a walk through a graph of near-duplicate clusters ended in the wrong cluster about one
    # search in six (tests/test_halfvec.py).
    return min(max(scoring.internal_limit(limit), MIN_EF_SEARCH), MAX_EF_SEARCH)


def explain_search_steps(
    store: Store, inputs: SearchInputs, capabilities: ServerCapabilities, *, analyze: bool
) -> Steps[dict[str, Any]]:
    """EXPLAIN of the search statement's plan, after the settings it runs with."""
    plan = _plan(inputs, capabilities)
    # Not `yield from` the list: the runner sends each statement's result back in.
    for setting in search_settings(store, inputs.request, capabilities):  # noqa: UP028
        yield setting
    return (
        yield from result_of(store.explain_search(
            plan.params, inputs.request.condition, analyze=analyze,
            generic_plan=not capabilities.citus,
        ))
    )


def search_sql_steps(
    store: Store, inputs: SearchInputs, capabilities: ServerCapabilities
) -> Steps[str]:
    """The search statement with its parameters inlined (not run)."""
    plan = _plan(inputs, capabilities)
    return (yield from result_of(store.search_sql(plan.params, inputs.request.condition)))


def _plan(inputs: SearchInputs, capabilities: ServerCapabilities) -> SearchPlan:
    """The search statement's parameters on this server: an exact scan where its pgvector
    cannot scan the HNSW index iteratively."""
    return search_plan(inputs, exact_scan=not capabilities.iterative_scan)
