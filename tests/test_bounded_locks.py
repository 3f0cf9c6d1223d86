"""pgmem's advisory locks stay bounded whatever a write covers: ``delete_all`` of a scope, a TTL
sweep and a ``PgmemStore.batch`` of deletes whose memories link several times as many entities
as the server's lock table holds (max_locks_per_transaction x (max_connections +
max_prepared_transactions)) delete everything, while another scope keeps adding without an
error. Before, each took one lock per linked entity in one transaction, and failed with "out of
shared memory" -- and so, for that moment, did every other session's writes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from langgraph.store.base import PutOp

import pgmem
from pgmem.items import SWEEP_BATCH
from pgmem.langgraph import PgmemStore

#: One sweep transaction's worth of memories: each transaction links every entity.
MEMORIES = SWEEP_BATCH
#: The test's scope links this many times as many entities as the lock table holds.
TIMES_THE_LOCK_TABLE = 3

BULK = """
WITH m AS (
    SELECT g, gen_random_uuid() AS id,
           CASE WHEN %(items)s THEN NULL ELSE 'bulk' END AS user_id,
           CASE WHEN %(items)s THEN ARRAY['bulk'] END AS namespace
      FROM generate_series(1, %(memories)s) g
), e AS (
    SELECT g, gen_random_uuid() AS id FROM generate_series(1, %(entities)s) g
), memories AS (
    INSERT INTO pgmem.memories (id, user_id, text, content_hash, embedding, lexemes,
                                lexeme_count, namespace, key, ttl_minutes, expires_at)
    SELECT m.id, m.user_id, 'bulk memory ' || m.g, md5(m.g::text),
           ARRAY(SELECT random() + m.g * 0 FROM generate_series(1, 384))::real[]::vector,
           to_tsvector('english', 'bulk memory'), 2, m.namespace,
           CASE WHEN %(items)s THEN 'k' || m.g END,
           CASE WHEN %(items)s THEN 1 END,
           CASE WHEN %(items)s THEN now() - interval '1 hour' END
      FROM m
), entities AS (
    INSERT INTO pgmem.entities (id, name, label, embedding)
    SELECT e.id, 'entity ' || e.g, 'PERSON',
           ARRAY(SELECT 0.5::real FROM generate_series(1, 384))::vector
      FROM e
)
INSERT INTO pgmem.memory_entities (memory_id, entity_id, user_id, namespace)
SELECT m.id, e.id, m.user_id, m.namespace
  FROM e JOIN m ON m.g = 1 + (e.g %% %(memories)s)
"""


def lock_table_size(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT current_setting('max_locks_per_transaction')::int"
            " * (current_setting('max_connections')::int"
            "    + current_setting('max_prepared_transactions')::int)"
        ).fetchone()
    assert row is not None
    return int(row[0])


def bulk_scope(dsn: str, *, items: bool) -> int:
    """A scope (user 'bulk', or namespace ('bulk',) of expired items) of MEMORIES memories
    linking TIMES_THE_LOCK_TABLE times as many entities as the lock table holds; how many."""
    entities = TIMES_THE_LOCK_TABLE * lock_table_size(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute(BULK, {"items": items, "memories": MEMORIES, "entities": entities})
    return entities


def counts(dsn: str) -> tuple[int, int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pgmem.memories WHERE user_id = 'bulk'"
            "                                            OR namespace = ARRAY['bulk']),"
            "       (SELECT count(*) FROM pgmem.entities WHERE name LIKE 'entity %'),"
            "       (SELECT count(*) FROM pgmem.memories WHERE user_id = 'bystander')"
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def while_others_write(memory: pgmem.Memory, call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()``'s result while a thread keeps adding to another scope (with entities of its
    own) until it returns; and how many adds the thread made, every one of which succeeded."""
    done = threading.Event()
    errors: list[BaseException] = []
    added = [0]

    def bystander() -> None:
        n = 0
        while not done.is_set() or n < 2:
            n += 1
            try:
                memory.add(f"Ada number {n} met Grace in Lisbon.", user_id="bystander")
                added[0] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    thread = threading.Thread(target=bystander)
    thread.start()
    try:
        result = call()
    finally:
        done.set()
        thread.join(120)
    assert not errors, errors
    return result, added[0]


@pytest.mark.parametrize("how", ["delete_all", "sweep", "batch"])
def test_deleting_a_scope_beyond_the_lock_table(
    how: str, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    entities = bulk_scope(db_dsn, items=how != "delete_all")
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as memory, \
            PgmemStore(memory) as store:
        memory.add("Ada met Grace in Lisbon.", user_id="bystander")
        assert counts(db_dsn) == (MEMORIES, entities, 1)
        if how == "delete_all":
            deleted, added = while_others_write(
                memory, lambda: memory.delete_all(user_id="bulk"))
            assert deleted == MEMORIES
        elif how == "sweep":
            deleted, added = while_others_write(memory, store.sweep_ttl)
            assert deleted == MEMORIES
        else:
            ops = [PutOp(("bulk",), f"k{g}", None) for g in range(1, MEMORIES + 1)]
            _, added = while_others_write(memory, lambda: store.batch(ops))
        assert counts(db_dsn) == (0, 0, 1 + added)
        assert memory.search("Grace in Lisbon", user_id="bystander", limit=1)
