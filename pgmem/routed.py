"""The writes of a batch, an update and a delete, as Citus runs them on the one worker that holds
the tenant.

pgmem writes each with one statement (``insert_memories``, ``update_memory``,
``delete_memories``): data-modifying CTEs fed by a call's arrays. Citus cannot route those to a
worker: it plans the CTEs on the coordinator, sends their results to both workers and commits
with two-phase commit (18 to 30 commands to the workers for one write). On Citus (a server with
the extension) each is written instead by statements Citus routes as they are -- reads,
multi-row INSERTs, and UPDATEs, DELETEs and INSERT ... SELECTs that read only the tenant's rows
-- in the same transaction, after the same locks, pipelined where one does not need another's
result; each returns what its statement returns. An add: one read (``routed_batch_plan``: which
items repeat one another or a stored memory, the lexemes PostgreSQL makes), then in one round
trip the new memories and entities, the links and the new rows read back; the events travel
with the COMMIT.

Measured against the alternatives with ``python -m benchmarks.citus_writes`` (docs/scaling.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

from pgmem.effects import Steps, result_of
from pgmem.store import MAX_PARAMETERS, Row, Store


def routed_insert_steps(store: Store, params: Row) -> Steps[list[Row]]:
    """Write the batch of ``params`` (those of ``insert_memories``); its rows, one per item in
    item order, as ``insert_memories`` returns them."""
    plan = yield from result_of(store.routed_batch_plan(params))
    fresh = [p for p in plan if p["ord"] == p["first_ord"] and p["id"] is None]
    ids = {p["ord"]: params["ids"][p["ord"] - 1] or uuid.uuid4() for p in fresh}
    stored: dict[uuid.UUID, Row] = {}
    if fresh:
        tenant = params["tenant"]
        for rows in _chunks([_memory_row(params, p, ids[p["ord"]]) for p in fresh]):
            yield store.routed_insert_memories(rows)
        entities, links = _entities(params, ids)
        for rows in _chunks(entities):
            yield store.routed_insert_entities(rows)
        if links:
            yield store.routed_link_memories({
                "tenant": tenant,
                "link_memories": [memory for memory, _ in links],
                "link_names": [name for _, name in links],
            })
        new = {"tenant": tenant, "fresh_ids": list(ids.values())}
        stored = {row["id"]: row for row in (yield from result_of(store.routed_stored(new)))}
        ordered = sorted(stored.values(), key=lambda row: (row["created_at"], row["id"]))
        yield from _events(store, tenant, "ADD", ordered)
    rows = []
    for p in plan:
        first = plan[p["first_ord"] - 1]
        standing = first if first["id"] is not None else stored[ids[first["ord"]]]
        rows.append({
            **{key: standing[key] for key in _RECORD},
            "duplicate": p["ord"] != p["first_ord"] or first["id"] is not None,
            "isolation": p["isolation"],
        })
    return rows


def routed_delete_steps(store: Store, params: Row) -> Steps[list[uuid.UUID]]:
    """``delete_memories`` (``params``: its parameters) as statements Citus routes to the
    tenant's worker: the entities linked, the memories deleted (their links with them), their
    DELETE events, the entities left unlinked; the ids deleted."""
    linked = yield from result_of(store.routed_linked(params))
    deleted = yield from result_of(store.routed_delete_memories(params))
    yield from _events(store, params["tenant"], "DELETE", deleted)
    if linked:
        yield store.routed_delete_orphans({"tenant": params["tenant"], "entity_ids": linked})
    return [row["id"] for row in deleted]


def routed_update_steps(store: Store, params: Row) -> Steps[Row | None]:
    """``update_memory`` (``params``: its parameters) as statements Citus routes to the
    tenant's worker: the memory updated; for a new text its entities upserted, linked, the
    links to entities it no longer names removed and those entities, when unlinked, deleted;
    the UPDATE event. The updated row, or None when there is no such memory."""
    row = yield from result_of(store.routed_update_memory(params))
    if row is None:
        return None
    tenant = params["tenant"]
    if params["relink"]:
        entities = sorted(
            (_entity_row(params, k) for k in range(len(params["entity_names"]))),
            key=lambda entity: entity["name"],
        )
        for rows in _chunks(entities):
            yield store.routed_insert_entities(rows)
        yield store.routed_relink_memory(params)
        unlinked = yield from result_of(store.routed_unlink_memory(params))
        if unlinked:
            yield store.routed_delete_orphans({"tenant": tenant, "entity_ids": unlinked})
    yield from _events(store, tenant, "UPDATE", [row])
    return {key: row[key] for key in _RECORD}


def _events(store: Store, tenant: str, event: str, rows: Sequence[Row]) -> Steps[None]:
    """Write the ``event`` events of the memories of ``rows`` (their id and text; an update's
    rows also their ``old_text``), in order. An ADD event has its memory's time."""
    events = [
        {
            "tenant": tenant,
            "memory_id": row["id"],
            "event": event,
            "old_text": row["text"] if event == "DELETE" else row.get("old_text"),
            "new_text": None if event == "DELETE" else row["text"],
            "created_at": row["created_at"] if event == "ADD" else None,
        }
        for row in rows
    ]
    for chunk in _chunks(events):
        yield store.routed_events(chunk)


#: The columns of a memory's record in insert_memories' rows.
_RECORD = ("id", "user_id", "agent_id", "run_id", "text", "metadata", "created_at", "updated_at")


def _memory_row(params: Row, item: Row, memory_id: uuid.UUID) -> Row:
    """The parameters of ``routed_memory_row`` for the batch's item ``item`` (a plan row)."""
    k = item["ord"] - 1
    namespace = params["namespaces"][k]
    lexemes = params["lexemes"][k]
    return {
        "tenant": params["tenant"],
        "id": memory_id,
        "user_id": params["user_ids"][k],
        "agent_id": params["agent_ids"][k],
        "run_id": params["run_ids"][k],
        "text": params["texts"][k],
        "content_hash": params["content_hashes"][k],
        "metadata": params["metadata"][k],
        "embedding": params["embeddings"][k],
        "lexemes": item["made_lexemes"] if lexemes is None else lexemes,
        "lexeme_count": (
            item["made_lexeme_count"] if lexemes is None else params["lexeme_counts"][k]
        ),
        "ts_config": params["ts_config"],
        "created_at": params["created_ats"][k],
        "updated_at": params["updated_ats"][k],
        "before": k,
        "namespace": None if namespace is None else list(namespace.obj),
        "key": params["keys"][k],
        "ttl_minutes": params["ttl_minutes"][k],
    }


def _entities(
    params: Row, ids: dict[int, uuid.UUID]
) -> tuple[list[Row], list[tuple[uuid.UUID, str]]]:
    """The entity rows to upsert -- each name once, with the variant of its first occurrence in
    a new memory, in name order (lock_contents' locks on the names, taken first, keep writers of
    the same entities apart whatever order they write them in) -- and the links
    (memory, entity name) of the new memories, as ``insert_memories`` makes them."""
    variants: dict[str, Row] = {}
    links = []
    for item, variant in zip(params["occurrence_items"], params["occurrence_entities"]):
        memory = ids.get(item)
        if memory is None:
            continue
        entity = _entity_row(params, variant - 1)
        variants.setdefault(entity["name"], entity)
        links.append((memory, entity["name"]))
    return [variants[name] for name in sorted(variants)], links


def _entity_row(params: Row, k: int) -> Row:
    """The parameters of ``routed_entity_row`` for entity ``k`` (from 0) of ``params``."""
    return {
        "tenant": params["tenant"],
        "name": params["entity_names"][k],
        "label": params["entity_labels"][k],
        "embedding": params["entity_embeddings"][k],
    }


def _chunks(rows: Sequence[Row]) -> Iterator[Sequence[Row]]:
    """``rows`` in runs small enough for one statement's parameters."""
    if rows:
        per = max(1, MAX_PARAMETERS // len(rows[0]))
        for start in range(0, len(rows), per):
            yield rows[start:start + per]

