"""Export speed and memory: rows/s and peak RSS growth of ``Memory.export`` at two scope sizes.

    python -m benchmarks.export [--small 20000] [--large 100000] [--itersize 1000] [--dsn DSN]

A scratch database holds two scopes (users ``small`` and ``large``) of that many memories, made
with SQL inserts (random 384-dimensional vectors, one ADD event each; no model runs: an export
does no model work). Each measurement runs in a fresh Python process, which first exports a
one-memory scope (so that every module is loaded and the pool is open), takes its peak RSS,
then exports the scope to /dev/null (or reads it with ``get_all`` pages of 1,000, the baseline:
what a program without ``export`` would do; and, for contrast, the same keeping every record)
and reports rows/s, the process's peak RSS and how much it grew. An export that holds one
batch at a time peaks at the same RSS at both sizes: the table prints the ratio of the peaks
(large / small), which stays near 1, where the contrast's grows with the scope.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence

import psycopg

import pgmem
from benchmarks.database import scratch_database, server_dsn

BULK = """
WITH m AS (
    SELECT g, gen_random_uuid() AS id,
           clock_timestamp() - (%(n)s - g) * interval '1 second' AS at
      FROM generate_series(1, %(n)s) g
), memories AS (
    INSERT INTO pgmem.memories (id, user_id, text, content_hash, metadata, embedding, lexemes,
                                lexeme_count, created_at, updated_at)
    SELECT m.id, %(user)s, 'memory number ' || m.g || ' of a long conversation about travel',
           md5(m.g::text), jsonb_build_object('n', m.g, 'topic', 'travel'),
           ARRAY(SELECT random() + m.g * 0 FROM generate_series(1, 384))::real[]::vector,
           to_tsvector('english', 'memory conversation travel'), 4, m.at, m.at
      FROM m
)
INSERT INTO pgmem.history (memory_id, event, new_text, created_at)
SELECT m.id, 'ADD', 'memory number ' || m.g || ' of a long conversation about travel', m.at
  FROM m
"""
MODES = ("export", "export --vectors --history", "get_all pages (baseline)",
         "get_all pages, every record kept (contrast)")


def build(dsn: str, sizes: dict[str, int]) -> None:
    """The scopes, without the HNSW index (an export does not use it), and a one-memory scope
    for the warm-up; vacuumed, so that no measurement is the first read of new rows (which
    writes their hint bits)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX pgmem.memories_embedding_idx")
        for user, n in {**sizes, "warm": 1}.items():
            conn.execute(BULK, {"n": n, "user": user})
        conn.execute("VACUUM ANALYZE pgmem.memories")
        conn.execute("VACUUM ANALYZE pgmem.history")


def peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(dsn: str, mode: str, user: str, itersize: int) -> dict[str, float]:
    """One measurement in this process: rows, seconds, peak RSS growth in kB."""
    with pgmem.Memory(dsn) as memory, open(os.devnull, "w", encoding="utf-8") as sink:
        vectors = history = mode == MODES[1]
        memory.export(sink, user_id="warm", vectors=vectors, history=history)
        memory.get_all(user_id="warm")
        before = peak_kb()
        started = time.perf_counter()
        if mode in MODES[2:]:
            kept: list[object] = []
            rows, cursor = 0, None
            while True:
                page = memory.get_all(user_id=user, limit=1000, cursor=cursor)
                rows += len(page)
                if mode == MODES[3]:
                    kept.extend(page)
                cursor = page.next_cursor
                if cursor is None:
                    break
        else:
            rows = memory.export(sink, user_id=user, vectors=vectors, history=history,
                                 itersize=itersize).memories
        seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "peak_kb": peak_kb(),
            "growth_kb": peak_kb() - before}


def measure(dsn: str, mode: str, user: str, itersize: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.export", "--child", mode, user, dsn,
         "--itersize", str(itersize)],
        check=True, capture_output=True, text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--itersize", type=int, default=1000)
    parser.add_argument("--dsn")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "USER", "DSN"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        mode, user, dsn = args.child
        print(json.dumps(child(dsn, mode, user, args.itersize)))
        return 0
    sizes = {"small": args.small, "large": args.large}
    with scratch_database(server_dsn(args.dsn), f"pgmem_bench_{uuid.uuid4().hex[:8]}") as dsn:
        pgmem.migrate(dsn)
        started = time.monotonic()
        build(dsn, sizes)
        print(f"built {args.small:,} + {args.large:,} memories in "
              f"{time.monotonic() - started:.0f} s; itersize {args.itersize}")
        print(f"| what | rows/s at {args.small:,} | at {args.large:,} "
              f"| peak RSS at {args.small:,} (growth) | at {args.large:,} (growth) "
              "| peak RSS ratio |")
        print("|---|---|---|---|---|---|")
        for mode in MODES:
            small = measure(dsn, mode, "small", args.itersize)
            large = measure(dsn, mode, "large", args.itersize)
            assert small["rows"] == args.small and large["rows"] == args.large, (small, large)
            print(f"| {mode} | {small['rows'] / small['seconds']:,.0f} "
                  f"| {large['rows'] / large['seconds']:,.0f} "
                  f"| {small['peak_kb'] / 1024:.0f} MB (+{small['growth_kb'] / 1024:.1f}) "
                  f"| {large['peak_kb'] / 1024:.0f} MB (+{large['growth_kb'] / 1024:.1f}) "
                  f"| {large['peak_kb'] / small['peak_kb']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
