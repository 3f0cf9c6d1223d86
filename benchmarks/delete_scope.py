"""Delete one large scope while other scopes keep writing: nothing lost, no writer's error.

    python -m benchmarks.delete_scope [--memories 100000] [--entities 20000] [--writers 2]
                                      [--seconds 10] [--dsn DSN]

A scratch database holds a scope (user ``big``) of ``--memories`` memories linking
``--entities`` entities (each memory links 8, made with SQL inserts, not model adds), and the
server's lock table size is printed beside it. ``--writers`` threads add to scopes of their own
(texts with two entities each; a hash embedder, so that the figures are the database's, not the
model's) for ``--seconds`` alone -- the baseline -- and then while ``delete_all(user_id="big")``
runs, and for ``--seconds`` after it. Printed: the delete's time, the writers' add latency
(median and max) in each phase and its ratio to the baseline, errors, and the check that every
writer's memory is still there and the scope and its entities are gone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Sequence

import psycopg

import pgmem
from benchmarks.attacks.tenants import HashEmbedder
from benchmarks.database import scratch_database, server_dsn

BULK = """
WITH m AS (
    SELECT g, gen_random_uuid() AS id FROM generate_series(1, %(memories)s) g
), e AS (
    SELECT g, gen_random_uuid() AS id FROM generate_series(1, %(entities)s) g
), memories AS (
    INSERT INTO pgmem.memories (id, user_id, text, content_hash, embedding, lexemes,
                                lexeme_count)
    SELECT m.id, 'big', 'big memory ' || m.g, md5(m.g::text),
           ARRAY(SELECT random() + m.g * 0 FROM generate_series(1, 384))::real[]::vector,
           to_tsvector('english', 'big memory'), 2
      FROM m
), entities AS (
    INSERT INTO pgmem.entities (id, name, label, embedding)
    SELECT e.id, 'entity ' || e.g, 'PERSON',
           ARRAY(SELECT 0.5::real FROM generate_series(1, 384))::vector
      FROM e
)
INSERT INTO pgmem.memory_entities (memory_id, entity_id, user_id)
SELECT m.id, e.id, 'big'
  FROM m CROSS JOIN generate_series(0, 7) k
  JOIN e ON e.g = 1 + ((m.g * 8 + k) %% %(entities)s)
ON CONFLICT DO NOTHING
"""


def build(dsn: str, memories: int, entities: int) -> int:
    """The big scope, with the HNSW index rebuilt after the bulk insert; the lock table size."""
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP INDEX pgmem.memories_embedding_idx")
        conn.execute(BULK, {"memories": memories, "entities": entities})
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("CREATE INDEX memories_embedding_idx ON pgmem.memories"
                     " USING hnsw (embedding vector_cosine_ops)")
        row = conn.execute(
            "SELECT current_setting('max_locks_per_transaction')::int"
            " * (current_setting('max_connections')::int"
            "    + current_setting('max_prepared_transactions')::int)").fetchone()
    return int(row[0]) if row else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.delete_scope", description=__doc__)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--dsn")
    args = parser.parse_args(argv)
    with scratch_database(server_dsn(args.dsn), f"pgmem_bench_{uuid.uuid4().hex[:8]}") as dsn:
        pgmem.migrate(dsn)
        started = time.monotonic()
        table = build(dsn, args.memories, args.entities)
        print(f"built {args.memories:,} memories linking {args.entities:,} entities in "
              f"{time.monotonic() - started:.0f} s; the server's lock table holds {table:,}")
        analyzer = pgmem.TextAnalyzer()
        with pgmem.Memory(dsn, embedder=HashEmbedder(), nlp=analyzer,
                          pool_max_size=args.writers + 1) as memory:
            memory.add("Warm up with Ada in Paris.", user_id="warm")
            phase = ["baseline"]
            latencies: dict[str, list[float]] = {"baseline": [], "during": [], "after": []}
            errors: list[str] = []
            added = [0]
            stop = threading.Event()

            def writer(n: int) -> None:
                k = 0
                while not stop.is_set():
                    k += 1
                    at, began = phase[0], time.monotonic()
                    try:
                        memory.add(f"Writer {n} call {k}: Ada met Grace in Lisbon.",
                                   user_id=f"writer{n}")
                        added[0] += 1
                    except pgmem.PgmemError as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    latencies[at].append(time.monotonic() - began)

            threads = [threading.Thread(target=writer, args=(n,)) for n in range(args.writers)]
            for thread in threads:
                thread.start()
            time.sleep(args.seconds)
            phase[0] = "during"
            began = time.monotonic()
            deleted = memory.delete_all(user_id="big")
            took = time.monotonic() - began
            phase[0] = "after"
            time.sleep(args.seconds)
            stop.set()
            for thread in threads:
                thread.join()
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM pgmem.memories WHERE user_id = 'big'),"
                "       (SELECT count(*) FROM pgmem.entities WHERE name LIKE 'entity %'),"
                "       (SELECT count(*) FROM pgmem.memories WHERE user_id LIKE 'writer%')"
            ).fetchone()
    assert row is not None
    print(f"delete_all: {deleted:,} memories in {took:.1f} s")
    base = statistics.median(latencies["baseline"])
    for name, values in latencies.items():
        if values:
            median = statistics.median(values)
            print(f"  writers' adds {name:>8}: {len(values):5} calls, median {median * 1000:7.1f}"
                  f" ms ({median / base:5.2f}x baseline), max {max(values) * 1000:8.1f} ms")
    print(f"errors: {len(errors)} {errors[:3]}")
    lost = added[0] - row[2]
    print(f"left: big scope {row[0]}, its entities {row[1]}, writers' memories {row[2]:,} of "
          f"{added[0]:,} added ({'none lost' if lost == 0 else f'{lost} LOST'})")
    return 0 if not errors and lost == 0 and row[0] == 0 and row[1] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
