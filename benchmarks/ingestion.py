"""Ingestion rate of ``Memory.add`` and ``Memory.add_many``, and the database's share of it.

    python -m benchmarks.ingestion [--base-rows 0,100000] [--limit N] [--batch-size 64]
                                   [--data PATH] [--dsn DSN] [--torch-threads 1] [--no-doc]

The memories are LoCoMo's dialogue turns (``benchmarks.ingest.turn_items``: ``"{speaker}:
{text}"``, the conversation as the scope, ``{"dia_id": ...}`` as metadata), stored with the
default models (all-MiniLM-L6-v2 on one torch thread, spaCy) and the defaults of ``add`` and
``add_many`` (``dedupe=True``, batches of 64), into a scratch database that already holds
``--base-rows`` memories of the benchmark corpus (:mod:`benchmarks.corpus`): first one ``add``
per turn (scopes ``add-<conversation>``), then one ``add_many`` call (scopes
``many-<conversation>``). The models are loaded and one memory added before the clocks start.

The wall time of each method splits into:

- embedding: time inside the embedder's ``embed`` (texts and entity names), timed by a wrapper;
- NLP: time inside the analyzer's ``analyze_many`` (where spaCy runs in a process of its own,
  from sending the texts until their analyses are in), timed by a wrapper;
- models: the time during which either of the two ran -- they overlap (texts embed while spaCy
  analyses them), so embedding and NLP add up to more than it;
- database: time inside the write transactions, from BEGIN to COMMIT (``add`` and ``add_many``
  run no model inside them), timed by the pool's connection class -- the locks, the insert
  statement with its entities, links and events, and the commit;
- the rest (wall - models - database): pgmem's Python between them (validation, parameters,
  results).

Target: the database's share of ``add_many``'s wall time at most 25%.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from psycopg_pool import ConnectionPool

import pgmem
from benchmarks import corpus, dialogues, report
from benchmarks.database import scratch_database
from benchmarks.ingest import turn_items
from benchmarks.instruments import CLOCK, TimedAnalyzer, TimedConnection, TimedEmbedder

PARTS = ("embedding", "nlp", "models", "transaction")


def run_method(
    memory: pgmem.Memory, method: str, items: Sequence[dict[str, Any]], batch_size: int
) -> tuple[float, dict[str, float], int]:
    """Store ``items`` with ``method``; wall seconds, seconds per part, memories stored."""
    scoped = [{**item, "user_id": f"{method}-{item['user_id']}"} for item in items]
    CLOCK.reset()
    began = time.perf_counter()
    if method == "add":
        results = [
            memory.add(item["text"], user_id=item["user_id"], metadata=item["metadata"])
            for item in scoped
        ]
    else:
        results = memory.add_many(scoped, batch_size=batch_size)
    wall = time.perf_counter() - began
    return wall, {p: CLOCK.get(p) for p in PARTS}, sum(not r.duplicate for r in results)


def run_base(
    server: str, base_rows: int, data: corpus.Corpus | None, items: Sequence[dict[str, Any]],
    embedder: Any, analyzer: pgmem.TextAnalyzer, batch_size: int,
) -> list[tuple[str, float, dict[str, float], int]]:
    """Both methods on a database that holds ``base_rows`` corpus memories first."""
    out = []
    with scratch_database(server, f"pgmem_ingestion_{os.getpid()}_{base_rows}") as dsn:
        pgmem.migrate(dsn)
        if base_rows and data is not None:
            corpus.progress(f"loading {base_rows:,} corpus rows")
            corpus.load_corpus(dsn, data.head(base_rows))
        pool = ConnectionPool(dsn, min_size=1, max_size=2, open=True, name="ingestion",
                              connection_class=TimedConnection, kwargs={"autocommit": True})
        try:
            memory = pgmem.Memory(pool, embedder=TimedEmbedder(embedder),
                                  nlp=TimedAnalyzer(analyzer))
            memory.add("Warm up: Caroline went to Paris.", user_id="warm-up")
            for method in ("add", "add_many"):
                corpus.progress(f"base {base_rows:,}: {method} of {len(items)} turns")
                wall, parts, stored = run_method(memory, method, items, batch_size)
                out.append((method, wall, parts, stored))
        finally:
            pool.close()
    return out


def result_table(results: Sequence[tuple[int, list[tuple[str, float, dict[str, float], int]]]]
                 ) -> str:
    head = ("table before", "method", "memories", "wall s", "memories/s", "vs add",
            "embedding", "NLP", "models (either running)", "database (BEGIN..COMMIT)",
            "rest (pgmem's Python)")
    rows = []
    for base, methods in results:
        add_rate = next(stored / wall for m, wall, _, stored in methods if m == "add")
        for method, wall, parts, stored in methods:
            rest = wall - parts["models"] - parts["transaction"]
            rows.append((
                f"{base:,} rows", method, stored, f"{wall:.1f}", f"{stored / wall:.1f}",
                report.ratio(stored / wall, add_rate),
                *(f"{parts[p] / wall:.1%}" for p in PARTS), f"{rest / wall:.1%}",
            ))
    return report.table(head, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ingestion", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-rows", default="0,100000",
                        help="comma-separated sizes of the table before (default: %(default)s)")
    parser.add_argument("--limit", type=int, help="only the first N turns")
    parser.add_argument("--batch-size", type=int, default=64, help="add_many's batch size")
    corpus.run_arguments(parser)
    args = parser.parse_args(argv)
    bases = [int(b) for b in args.base_rows.split(",")]
    server, embedder, analyzer = corpus.start(args)
    items = turn_items(args.data, args.limit, args.conversations)
    data = None
    if max(bases) > 0:
        raw = dialogues.load_conversations(args.data, args.conversations)
        data = corpus.corpus(raw, max(bases), corpus.Cache(args.data, embedder, analyzer, raw))
    embedder.embed(["warm up"])
    analyzer.analyze("warm up")
    results = []
    for base in bases:
        results.append((base, run_base(server, base, data, items, embedder, analyzer,
                                       args.batch_size)))
        print(result_table(results[-1:]), flush=True)
    table = result_table(results)
    print("\n" + table)
    if not args.no_doc:
        report.write_environment(server, analyzer.model_name, args.torch_threads)
        body = "\n\n".join([
            "## Ingestion",
            report.run_header(report.command_line()),
            __doc__.split("\n\n", 2)[2].strip(),
            table,
        ])
        report.write_section("ingestion", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
