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
once per connection), a cost a long-running application pays once. Then the calls that end
within the next ``--seconds`` are counted (calls per second: that count over those seconds,
which counts no thread's start-up or drain against it -- with 16 threads a call takes ~0.3 s);
any exception is an error. Latencies are per call, including waits for a pooled connection and
for the cores (2 here: the models are CPU-bound, so more threads than cores raise latency rather
than throughput).
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


class Calls:
    """One sequence of calls (kind, query, text), the same for every thread count, which the
    threads take from in turn: whatever N, the calls made are the same mix of searches and
    adds (per-thread sequences drew a mix that differed with N by a few points of adds)."""

    def __init__(self, search_share: float, queries: Sequence[corpus.Query],
                 texts: Sequence[str]) -> None:
        self._rng = np.random.default_rng(0)
        self._lock = threading.Lock()
        self._search_share, self._queries, self._texts = search_share, queries, texts
        self._taken = 0

    def next(self) -> tuple[str, corpus.Query, str, int]:
        """The next call: its kind, query, text (for an add) and number."""
        with self._lock:
            query = self._queries[int(self._rng.integers(len(self._queries)))]
            kind = "search" if self._rng.random() < self._search_share else "add"
            text = self._texts[int(self._rng.integers(len(self._texts)))]
            self._taken += 1
            return kind, query, text, self._taken


def worker(
    memory: pgmem.Memory, run: Run, counted: tuple[float, float], calls: Calls,
    lock: threading.Lock,
) -> None:
    """Calls until ``counted`` (from, until) ends; those ended within it are recorded."""
    start, deadline = counted
    while time.perf_counter() < deadline:
        kind, query, text, number = calls.next()
        began = time.perf_counter()
        try:
            if kind == "search":
                memory.search(query.text, user_id=query.user_id, limit=LIMIT)
            else:
                memory.add(f"{text} (n{run.threads}-{number})", user_id=query.user_id)
            ended = time.perf_counter()
            if start <= ended <= deadline:
                with lock:
                    run.latencies[kind].append(ended - began)
        except Exception as exc:  # noqa: BLE001 -- every failure counts; the first is shown
            with lock:
                run.errors[f"{kind}: {type(exc).__name__}"] += 1
                if not run.first_error:
                    run.first_error = traceback.format_exc()


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
        calls = Calls(search_share, queries, texts)
        threads = [
            threading.Thread(target=worker, args=(memory, run, counted, calls, lock))
            for _ in range(n)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run.seconds = seconds
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
    parser.add_argument("--threads", type=dialogues.numbers, default="1,4,16",
                        help="comma-separated thread counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="run time per thread count")
    parser.add_argument("--warm-up", type=float, default=5.0,
                        help="seconds run first, not counted, per thread count")
    parser.add_argument("--rows", type=int, default=100_000, help="corpus rows in the table")
    parser.add_argument("--search-share", type=float, default=0.8)
    parser.add_argument("--queries", type=int, default=200)
    corpus.run_arguments(parser)
    args = parser.parse_args(argv)
    counts = args.threads
    server, embedder, analyzer = corpus.start(args)
    raw = dialogues.load_conversations(args.data, args.conversations)
    data = corpus.corpus(raw, args.rows, corpus.Cache(args.data, embedder, analyzer, raw))
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
