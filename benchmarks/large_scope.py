"""A search of one scope too large to read row by row, beside its floor, in one run.

    python -m benchmarks.large_scope [--memories 12000] [--questions 40] [--rounds 3]
                                     [--data PATH] [--dsn DSN] [--compare PATH]
                                     [--sizes N,N,..]

A scratch database holds one user's scope of ``--memories`` memories (LoCoMo's dialogue turns
and observations of the chosen conversations, repeated with a counter appended once they run
out) and 300 memories of another user, then ``VACUUM ANALYZE`` (as autovacuum leaves a table).
A scope over 5,000 memories (``builders.SCOPE_SCAN_ROWS``) is searched through the HNSW and GIN
indexes. Taking turns question by question (``limit=10``), over ``--rounds`` timed passes after
one to warm up:

- pgmem's search, end to end (``Memory.search``);
- the floor: the query's embedding (``embed_kind`` of the same embedder), and the bare top-10
  of the scope through the HNSW index, prepared, after the settings a search sends;
- pgmem's search statement alone (``search``, prepared, after those settings), and with
  ``--compare PATH`` another revision's (its ``sql/queries.sql``, e.g. from
  ``git show REV:sql/queries.sql``), with the same parameters, after checking that it returns
  the same rows. Both run on this revision's schema.

Prints p50 and p95 of each, the search over its floor (embedding + bare top-10) and each
statement over the bare top-10.

With ``--sizes N,N,..``, where the two ways of reading a scope cross: for each N, a scope of
the first N texts, stored under a user of its own; each question searched (end to end) with
every scope taken for small (``builders.SCOPE_SCAN_ROWS`` above N: read row by row) and for
large (0: through the indexes), taking turns; p50, p95 and their ratios, and how many of the
questions got the same top-10 both ways.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

import pgmem
from benchmarks import dialogues
from benchmarks.database import scratch_database, server_dsn
from benchmarks.latency import BARE, comparable, other_params, other_statement
from benchmarks.report import p50, p95, table
from benchmarks.search_legs import statements
from pgmem import builders
from pgmem.embedding import QUERY, embed_kind
from pgmem.steps import ef_search
from pgmem.store import execute

LIMIT = 10


def texts_of(args: argparse.Namespace, count: int) -> list[str]:
    """``count`` distinct texts: the chosen conversations' turns and observations, then the
    same again with a counter appended."""
    raw = dialogues.load_conversations(args.data, args.conversations)
    pool = list(dict.fromkeys(
        m.text for task in dialogues.TASKS
        for c in dialogues.task_conversations(raw, task) for m in c.memories
    ))
    return [pool[i % len(pool)] + (f" ({i // len(pool)})" if i >= len(pool) else "")
            for i in range(count)]


def questions_of(args: argparse.Namespace) -> list[str]:
    """The chosen conversations' dialogue-turn questions, every seventh, ``--questions`` of
    them."""
    raw = dialogues.load_conversations(args.data, args.conversations)
    asked = [q.text for c in dialogues.task_conversations(raw, "turns") for q in c.questions]
    return asked[::7][: args.questions]


def taking_turns(
    timed: dict[str, Callable[[int], object]], n: int, rounds: int
) -> dict[str, list[float]]:
    """Seconds of each of ``timed`` called with 0..n-1, taking turns call by call (the order
    rotating), over ``rounds`` timed passes after one to warm up."""
    times: dict[str, list[float]] = {name: [] for name in timed}
    names = list(timed)
    for round_ in range(rounds + 1):
        for i in range(n):
            shift = (i + round_) % len(names)
            for name in names[shift:] + names[:shift]:
                began = time.perf_counter()
                timed[name](i)
                if round_:
                    times[name].append(time.perf_counter() - began)
    return times


def same_rows(conn: psycopg.Connection[Any], one: tuple[str, Any], other: tuple[str, Any]) -> bool:
    """Whether two (statement, parameters) return the same candidates with the same signals."""
    return comparable(conn.execute(*one, binary=True).fetchall()) == comparable(
        conn.execute(*other, binary=True).fetchall())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.large_scope",
                                     description=__doc__.split("\n\n")[0])
    dialogues.data_arguments(parser)
    dialogues.timing_arguments(parser, questions=40)
    parser.add_argument("--memories", type=int, default=12_000, metavar="N",
                        help="memories in the large scope (default: 12000)")
    parser.add_argument("--compare", type=Path, metavar="PATH",
                        help="another revision's sql/queries.sql, its statement timed beside")
    parser.add_argument("--sizes", type=dialogues.numbers, metavar="N,N,..",
                        help="also time both ways of reading a scope of each size")
    args = parser.parse_args(argv)
    asked = questions_of(args)
    texts = texts_of(args, args.memories)
    with scratch_database(server_dsn(args.dsn), f"pgmem_bench_large_{os.getpid()}") as dsn:
        pgmem.migrate(dsn)
        with pgmem.Memory(dsn) as memory:
            memory.add_many(texts, user_id="large")
            memory.add_many(texts[:300], user_id="other")
            for size in args.sizes or []:
                memory.add_many(texts[:size], user_id=f"size-{size}")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            made = statements(memory, [(q, "large") for q in asked], limit=LIMIT, small=False)
            settings = memory._ops.store.search_settings(ef_search(LIMIT))
            embedder = memory._ops.models.embedder
            with psycopg.connect(dsn, row_factory=dict_row) as conn:
                register_vector(conn)
                for setting in settings:  # one transaction, to which they are local
                    execute(conn, setting)
                calls: dict[str, list[tuple[str, Any]]] = {
                    "bare top-10 (HNSW)": [(BARE, {**params, "k": LIMIT}) for _, params in made],
                    "pgmem's statement": [(q.as_string(conn), params) for q, params in made],
                }
                if args.compare:
                    text = other_statement(conn, args.compare)
                    calls[f"statement of {args.compare.name}"] = [
                        (text, other_params(text, p)) for _, p in made]
                    differ = sum(not same_rows(conn, a, b) for a, b in zip(
                        calls["pgmem's statement"], calls[f"statement of {args.compare.name}"]))
                    print(f"rows differ from pgmem's statement's on {differ} of {len(made)}")

                def statement(name: str) -> Callable[[int], object]:
                    return lambda i: conn.execute(
                        calls[name][i][0], calls[name][i][1], prepare=True, binary=True
                    ).fetchall()

                timed: dict[str, Callable[[int], object]] = {
                    "Memory.search": lambda i: memory.search(asked[i], user_id="large",
                                                             limit=LIMIT),
                    "query embedding": lambda i: embed_kind(embedder, [asked[i]], QUERY),
                    **{name: statement(name) for name in calls},
                }
                times = taking_turns(timed, len(asked), args.rounds)
            crossing = {size: both_ways(memory, dsn, asked, f"size-{size}", args.rounds)
                        for size in args.sizes or []}
    floor50 = p50(times["query embedding"]) + p50(times["bare top-10 (HNSW)"])
    floor95 = p95(times["query embedding"]) + p95(times["bare top-10 (HNSW)"])
    bare = p50(times["bare top-10 (HNSW)"])
    print(f"{len(asked)} questions x {args.rounds} rounds; a scope of {args.memories:,} "
          "memories beside one of 300\n")
    print(table(["call", "p50 ms", "p95 ms", "p50 / bare top-10"], [
        (name, f"{p50(v) * 1000:.2f}", f"{p95(v) * 1000:.2f}",
         f"{p50(v) / bare:.1f}x" if name not in ("Memory.search", "query embedding") else "")
        for name, v in times.items()
    ]))
    search = times["Memory.search"]
    print(f"\nsearch / floor (query embedding + bare top-10): p50 {p50(search) / floor50:.2f}x, "
          f"p95 {p95(search) / floor95:.2f}x")
    if crossing:
        print()
        print(table(
            ["scope size", "row by row p50 ms", "indexes p50 ms", "indexes / row by row p50",
             "p95", "same top-10"],
            [(f"{size:,}", f"{p50(rows) * 1000:.2f}", f"{p50(indexes) * 1000:.2f}",
              f"{p50(indexes) / p50(rows):.2f}", f"{p95(indexes) / p95(rows):.2f}",
              f"{same}/{len(asked)}")
             for size, (rows, indexes, same) in crossing.items()],
        ))
    return 0


def both_ways(
    loaded: pgmem.Memory, dsn: str, asked: Sequence[str], user: str, rounds: int
) -> tuple[list[float], list[float], int]:
    """Seconds of each search of ``user``'s scope read row by row and through the indexes,
    taking turns, and for how many questions both gave the same top-10."""
    kept = builders.SCOPE_SCAN_ROWS
    memories = {"rows": pgmem.Memory(dsn, embedder=loaded._ops.models.embedder),
                "indexes": pgmem.Memory(dsn, embedder=loaded._ops.models.embedder)}
    found: dict[str, list[list[Any]]] = {"rows": [], "indexes": []}

    def way(name: str, scan_rows: int) -> Callable[[int], object]:
        def call(i: int) -> object:
            builders.SCOPE_SCAN_ROWS = scan_rows
            hits = memories[name].search(asked[i], user_id=user, limit=LIMIT)
            found[name].append([h.id for h in hits])
            return hits
        return call

    try:
        times = taking_turns({"rows": way("rows", 1_000_000), "indexes": way("indexes", 0)},
                             len(asked), rounds)
    finally:
        builders.SCOPE_SCAN_ROWS = kept
        for m in memories.values():
            m.close()
    same = sum(a == b for a, b in zip(found["rows"][-len(asked):],
                                      found["indexes"][-len(asked):]))
    return times["rows"], times["indexes"], same


if __name__ == "__main__":
    raise SystemExit(main())
