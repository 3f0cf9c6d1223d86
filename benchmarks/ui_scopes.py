"""The inspector's reads on a large tenant: 1,000,000 memories in 100,000 user scopes, written
by SQL into a scratch database of the server of ``$PGMEM_TEST_DSN`` (no embedding or keyword
index: the reads use neither), then the median of 7 runs of each read, in milliseconds.

    python -m benchmarks.ui_scopes
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

import pgmem
from pgmem.ui.data import Reads

MEMORIES, SCOPES = 1_000_000, 100_000


class _NoModel:
    name = "none"

    def embed(self, texts: Any) -> Any:
        raise AssertionError("the inspector's reads embed nothing")


def median_ms(read: Callable[[], object], runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    server = os.environ["PGMEM_TEST_DSN"]
    dsn = server.rsplit("/", 1)[0] + "/pgmem_ui_scale"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS pgmem_ui_scale")
        conn.execute("CREATE DATABASE pgmem_ui_scale")
    try:
        pgmem.migrate(dsn)
        with psycopg.connect(dsn) as conn:
            conn.execute("DROP INDEX pgmem.memories_embedding_idx")
            conn.execute("DROP INDEX pgmem.memories_lexemes_idx")
            conn.execute(
                "INSERT INTO pgmem.memories (user_id, text, content_hash, embedding, lexemes,"
                " lexeme_count, created_at)"
                " SELECT 'u' || lpad((i %% %(scopes)s)::text, 6, '0'), 'm' || i, md5(i::text),"
                "  array_fill(0.05::real, ARRAY[384])::vector, ''::tsvector, 1,"
                "  now() - i * interval '1 second' FROM generate_series(1, %(n)s) AS i",
                {"scopes": SCOPES, "n": MEMORIES})
            conn.execute("ANALYZE pgmem.memories")
        with pgmem.Memory(dsn, embedder=_NoModel(), nlp=None) as memory:
            reads = Reads(memory)
            for label, read in (
                ("tenant totals (capped)", reads.summary),
                ("first page of 50 scopes", lambda: reads.scopes("user", page=51)),
                ("page after u050000", lambda: reads.scopes("user", after="u050000", page=51)),
                ("page before u050000", lambda: reads.scopes("user", before="u050000", page=51)),
                ("last page", lambda: reads.scopes("user", last=True, page=51)),
                ("a scope's page of 50 memories",
                 lambda: memory.get_all(user_id="u050000", limit=50)),
                ("a scope's timeline", lambda: reads.timeline("user", "u050000")),
            ):
                print(f"{label:32} {median_ms(read):8.1f} ms")
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS pgmem_ui_scale")


if __name__ == "__main__":
    main()
