"""Searches and adds from N threads sharing one ``Memory`` and its pool, for a fixed time.

    python -m benchmarks.concurrency [--threads 1,4,16] [--seconds 20] [--warm-up 5]
                                     [--rows 100000] [--search-share 0.8] [--dsn DSN]
                                     [--torch-threads 1] [--no-doc]

A scratch database holds ``--rows`` memories of the corpus of :mod:`benchmarks.corpus` (100 per
user). For each N, one ``Memory(dsn, pool_max_size=N)`` with the default models (torch on one
thread) is shared by N threads; each thread, until the time is up, picks a search (probability
``--search-share``: a LoCoMo question in its user's scope, ``limit=20``) or an add (a LoCoMo text
with a unique tag, ``dedupe=True``, into a random user's scope -- so adds and searches meet in
the same scopes and entity rows). The threads run ``--warm-up`` seconds first, not counted: the
pool opens its N connections and each prepares its statements (a search statement is planned
once per connection), a cost a long-running application pays once. Then every call that starts
within ``--seconds`` is timed; any exception is an error. Throughput is calls per second over
that wall time; latencies are per call, including waits for a pooled connection and for the
cores (2 here: the models are CPU-bound, so more threads than cores raise latency rather than
throughput).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import pgmem
from benchmarks import corpus, dialogues, report
from benchmarks.database import scratch_database

LIMIT = 20


@dataclass
class Run:
    """What N threads did."""

    threads: int
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"search": [], "add": []})
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str = ""


def worker(
    memory: pgmem.Memory, thread: int, run: Run, counted: tuple[float, float],
    search_share: float, queries: Sequence[corpus.Query], texts: Sequence[str],
    lock: threading.Lock, seed: int,
) -> None:
    """Calls until ``counted`` (from, until) ends; those begun within it are recorded."""
    rng = np.random.default_rng(seed)
    i = 0
    start, deadline = counted
    while time.perf_counter() < deadline:
        query = queries[int(rng.integers(len(queries)))]
        kind = "search" if rng.random() < search_share else "add"
        began = time.perf_counter()
        try:
            if kind == "search":
                memory.search(query.text, user_id=query.user_id, limit=LIMIT)
            else:
                text = texts[int(rng.integers(len(texts)))]
                memory.add(f"{text} (n{run.threads}-t{thread}-{i})", user_id=query.user_id)
            elapsed = time.perf_counter() - began
            if began >= start:
                with lock:
                    run.latencies[kind].append(elapsed)
        except Exception as exc:  # noqa: BLE001 -- every failure counts; the first is shown
            with lock:
                run.errors[f"{kind}: {type(exc).__name__}"] += 1
                if not run.first_error:
                    run.first_error = traceback.format_exc()
        i += 1


def run_threads(
    dsn: str, n: int, seconds: float, warm_up: float, search_share: float,
    queries: Sequence[corpus.Query], texts: Sequence[str], embedder: Any,
    analyzer: pgmem.TextAnalyzer,
) -> Run:
    """N threads on one Memory for ``warm_up`` and then ``seconds``, counted."""
    run = Run(threads=n)
    lock = threading.Lock()
    with pgmem.Memory(dsn, embedder=embedder, nlp=analyzer, pool_max_size=n) as memory:
        memory.search(queries[0].text, user_id=queries[0].user_id)  # opens the pool
        start = time.perf_counter() + warm_up
        counted = (start, start + seconds)
        threads = [
            threading.Thread(target=worker, args=(
                memory, t, run, counted, search_share, queries, texts, lock, 1000 * n + t))
            for t in range(n)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run.seconds = time.perf_counter() - start
    return run


def result_table(runs: Sequence[Run]) -> str:
    head = ("threads (pool size)", "calls", "calls/s", "vs 1 thread", "searches/s", "adds/s",
            "search p50 ms", "search p95 ms", "add p50 ms", "add p95 ms", "all p95 ms", "errors")
    rows = []
    base = None
    for r in runs:
        s, a = r.latencies["search"], r.latencies["add"]
        rate = (len(s) + len(a)) / r.seconds
        base = base or rate
        rows.append((
            f"{r.threads}", len(s) + len(a), f"{rate:.1f}", report.ratio(rate, base),
            f"{len(s) / r.seconds:.1f}", f"{len(a) / r.seconds:.1f}",
            report.ms(report.p50(s)), report.ms(report.p95(s)),
            report.ms(report.p50(a)), report.ms(report.p95(a)),
            report.ms(report.p95([*s, *a])), sum(r.errors.values()),
        ))
    return report.table(head, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.concurrency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,4,16", help="comma-separated thread counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="run time per thread count")
    parser.add_argument("--warm-up", type=float, default=5.0,
                        help="seconds run first, not counted, per thread count")
    parser.add_argument("--rows", type=int, default=100_000, help="corpus rows in the table")
    parser.add_argument("--search-share", type=float, default=0.8)
    parser.add_argument("--queries", type=int, default=200)
    corpus.run_arguments(parser)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.threads.split(",")]
    server, embedder, analyzer = corpus.start(args)
    raw = dialogues.load_conversations(args.data)
    data = corpus.corpus(raw, args.rows, corpus.Cache(args.data, embedder, analyzer))
    queries = corpus.queries(raw, args.rows // corpus.ROWS_PER_USER, args.queries)
    texts = [item.text for pool in corpus.pools(raw) for item in pool]
    embedder.embed(["warm up"])
    analyzer.analyze("warm up")
    runs = []
    with scratch_database(server, f"pgmem_concurrency_{os.getpid()}") as dsn:
        pgmem.migrate(dsn)
        corpus.progress(f"loading {args.rows:,} rows")
        corpus.load_corpus(dsn, data)
        for n in counts:
            corpus.progress(f"{n} threads for {args.warm_up:.0f} + {args.seconds:.0f} s")
            runs.append(run_threads(dsn, n, args.seconds, args.warm_up, args.search_share,
                                    queries, texts, embedder, analyzer))
            print(result_table(runs[-1:]), flush=True)
            if runs[-1].errors:
                print(dict(runs[-1].errors), runs[-1].first_error, file=sys.stderr)
    table = result_table(runs)
    print("\n" + table)
    errors = sum(sum(r.errors.values()) for r in runs)
    if not args.no_doc:
        report.write_environment(server, analyzer.model_name, args.torch_threads)
        kinds = Counter[str]()
        for r in runs:
            kinds.update(r.errors)
        body = "\n\n".join([
            "## Concurrency",
            report.run_header(report.command_line()),
            __doc__.split("\n\n", 2)[2].strip(),
            table,
            f"Errors: {errors}" + (f" ({dict(kinds)})" if errors else "."),
        ])
        report.write_section("concurrency", body)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
