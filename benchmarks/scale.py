"""How the search statement's time grows with the table, leg by leg, against bare pgvector.

    python -m benchmarks.scale [--sizes 10000,100000,1000000] [--queries 100] [--dsn DSN]
                               [--torch-threads 1] [--no-doc]

For each size, a scratch database holds the corpus of :mod:`benchmarks.corpus` (100 memories per
user); sizes beyond the cached real corpus (100,000) repeat it under new users with noise on the
vectors (``corpus.synthetic_rows``). Each query (LoCoMo questions, ``limit=20``) is planned once
as ``Memory.search`` plans it; after a warm-up pass, each of these statements runs over all
the queries in a pass of its own (so that it always follows a statement on another scope), the
passes in one order and then in the reverse order, each statement in a transaction after the
search's ``SET LOCAL`` (its generic plan, no JIT, iterative HNSW scans, ``ef_search`` = 40),
prepared as
the search is:

- the bare pgvector top-20 of the scope (the baseline);
- no leg: the search statement's CTEs followed by ``SELECT 1`` -- what every search pays
  before any leg runs: psycopg converting a statement too long for its query cache (4 KB),
  and the server starting and ending the prepared plan;
- each leg alone: the search statement's CTEs followed by ``SELECT count(*) FROM semantic``
  (resp. ``keyword``, ``entity``) instead of its final SELECT -- CTEs nobody references are not
  run, so this is the leg and what it depends on;
- the whole search statement.

With ``--compare PATH``, the same statements made from another revision's search statement run
beside them, unprepared and planned for their values, as older revisions ran.

Times are p50 over the queries, as ratios to the bare query's p50 at the same size.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pgmem
from benchmarks import corpus, dialogues, report
from benchmarks.database import scratch_database
from benchmarks.latency import (
    BARE,
    LIMIT,
    Searcher,
    leg_statement,
    other_params,
    other_settings,
    other_statement,
)

LEGS = ("semantic", "keyword", "entity")


def measure(dsn: str, queries: Sequence[corpus.Query], embedder: Any,
            analyzer: pgmem.TextAnalyzer, compare: Path | None) -> dict[str, list[float]]:
    """Seconds per statement per query (measured passes only). With ``compare``, the same
    statements made from that search statement too, named ``<its file's stem> <name>``."""
    searcher = Searcher(dsn, embedder, analyzer)
    try:
        searcher.memory.search("warm up", user_id=queries[0].user_id)  # reads the server
        other = other_statement(searcher.conn, compare) if compare else None
        runs = []
        for q in queries:
            searched = searcher.search(q)
            text, params = searched.statement.text, searched.statement.params
            bare = {"tenant": corpus.TENANT, "user_id": q.user_id,
                    "embedding": params["embedding"], "k": LIMIT}
            statements = {"bare": (BARE, bare, True)}
            for prefix, search, ours in (("", text, True),
                                         (f"{compare and compare.stem} ", other, False)):
                if search is None:
                    continue
                these = other_params(search, params)
                statements[prefix + "fixed"] = (leg_statement(search, "SELECT 1"), these, ours)
                for leg in LEGS:
                    statements[prefix + leg] = (
                        leg_statement(search, f"SELECT count(*) FROM {leg}"), these, ours)
                statements[prefix + "search"] = (search, these, ours)
            runs.append((searched.settings, statements))
        names = list(runs[0][1])
        def run(settings: Sequence[str], statement: tuple[str, Any, bool]) -> float:
            text, params, ours = statement
            if not ours:
                settings = other_settings(settings)
            return searcher.timed(settings, text, params, prepare=ours)[0]

        for settings, statements in runs:  # warm-up
            for name in names:
                run(settings, statements[name])
        # One pass over the queries per statement, so that every statement follows a statement
        # on another scope (right after one on the same scope, it would run up to 1.5x
        # faster); the passes in one order, then in the reverse order.
        times: dict[str, list[float]] = {name: [] for name in names}
        for order in (names, names[::-1]):
            for name in order:
                for settings, statements in runs:
                    times[name].append(run(settings, statements[name]))
        return times
    finally:
        searcher.close()


def result_table(results: Sequence[tuple[int, float, dict[str, list[float]]]]) -> str:
    """One row per size (and statement): the bare query's p50, and each statement's p50 as a
    ratio to it."""
    head = ("memories", "statement", "load s", "bare top-20 p50 ms", "no leg (fixed cost)",
            "semantic leg", "keyword leg", "entity leg", "whole statement", "whole p50 ms")
    rows = []
    for n, load_seconds, times in results:
        bare = report.p50(times["bare"])
        prefixes = {name[: -len("search")] for name in times if name.endswith("search")}
        for prefix in sorted(prefixes, key=lambda p: (p != "", p)):
            rows.append((
                f"{n:,}", prefix.strip() or "pgmem", f"{load_seconds:.0f}", report.ms(bare),
                *(report.ratio(report.p50(times[prefix + s]), bare)
                  for s in ("fixed", *LEGS, "search")),
                report.ms(report.p50(times[prefix + "search"])),
            ))
    return report.table(head, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=dialogues.numbers, default="10000,100000,1000000",
                        help="comma-separated corpus sizes (default: %(default)s)")
    parser.add_argument("--queries", type=int, default=100, help="queries per size")
    parser.add_argument("--real-rows", type=int, default=100_000,
                        help="rows of real (cached) corpus; larger sizes are synthetic")
    corpus.run_arguments(parser)
    parser.add_argument("--compare", type=Path, metavar="PATH",
                        help="also time another search statement (a queries.sql of another "
                        "revision, e.g. from `git show d8ae5ca:sql/queries.sql`), leg by leg")
    args = parser.parse_args(argv)
    sizes = args.sizes
    server, embedder, analyzer = corpus.start(args)
    raw = dialogues.load_conversations(args.data, args.conversations)
    cache = corpus.Cache(args.data, embedder, analyzer, raw)
    data = corpus.corpus(raw, min(max(sizes), args.real_rows), cache)
    results = []
    for n in sizes:
        queries = corpus.queries(raw, n // corpus.ROWS_PER_USER, args.queries)
        with scratch_database(server, f"pgmem_scale_{os.getpid()}_{n}") as dsn:
            pgmem.migrate(dsn)
            corpus.progress(f"{n:,} rows: loading")
            began = time.perf_counter()
            if n <= len(data):
                load = corpus.load_corpus(dsn, data.head(n))
            else:
                rows = corpus.synthetic_rows(data.rows, data.vectors, data.analyses, n)
                load = corpus.load(dsn, rows, data.surfaces, maintenance_work_mem="4GB")
            corpus.progress(f"  loaded in {time.perf_counter() - began:.0f} s "
                            f"(COPY {load.copy_seconds:.0f} s, indexes {load.index_seconds:.0f} s);"
                            " measuring")
            results.append((n, load.total, measure(dsn, queries, embedder, analyzer, args.compare)))
        print(result_table(results[-1:]), flush=True)
    table = result_table(results)
    print("\n" + table)
    if not args.no_doc:
        report.write_environment(server, analyzer.model_name, args.torch_threads)
        synthetic = [n for n in sizes if n > len(data)]
        body = "\n\n".join([
            "## Scale curve: SQL time per leg",
            report.run_header(report.command_line()),
            __doc__.split("\n\n", 2)[2].strip(),
            table,
            (f"Sizes {', '.join(f'{n:,}' for n in synthetic)}: synthetic (the real corpus "
             "repeated under new users, noise sigma 0.02 on the vectors)."
             if synthetic else ""),
        ])
        report.write_section("scale", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
