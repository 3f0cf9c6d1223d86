"""The search's time under each query analysis (``PGMEM_QUERY_ANALYSIS``), in one run.

    python -m benchmarks.query_analysis [--data PATH] [--conversations dev] [--questions 200]
                                        [--rounds 3] [--dsn DSN] [--json PATH]

LoCoMo's dialogue turns of the chosen conversations are stored in a scratch database (one user
per conversation, the default models). One ``Memory`` per mode (``full``, ``tagged``,
``lookup``) searches the same questions, each in its conversation's scope (``limit=20``), the
modes taking turns question by question (the order rotating) so that the machine's other load
falls on all alike, after one pass to warm up. Beside them, each question's embedding alone
(``embed_query`` of the same embedder): the part of a search no analysis can remove. Each
row's p50 is also given as a ratio to ``full``'s p50 of the same run. Recall per mode comes from
``PGMEM_QUERY_ANALYSIS=MODE python -m benchmarks.retrieval --task both``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pgmem
from benchmarks import dialogues
from benchmarks.database import scratch_database, server_dsn
from pgmem.embedding import QUERY, embed_kind, make_embedder
from pgmem.settings import QUERY_ANALYSES, Settings


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.query_analysis",
                                     description=__doc__.split("\n\n")[0])
    dialogues.data_arguments(parser)
    dialogues.timing_arguments(parser, questions=200)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)
    conversations, asked = dialogues.timed_questions(args)
    with scratch_database(server_dsn(args.dsn), f"pgmem_bench_query_analysis_{os.getpid()}") as dsn:
        pgmem.migrate(dsn)
        embedder = make_embedder(None, Settings.from_env())  # one model for every Memory
        memories = {mode: pgmem.Memory(dsn, embedder=embedder, query_analysis=mode)
                    for mode in QUERY_ANALYSES}
        try:
            loader = memories["full"]
            for c in conversations:
                loader.add_many([m.text for m in c.memories], user_id=c.id)
            timed: dict[str, Callable[[str, str], object]] = {
                mode: (lambda q, u, m=m: m.search(q, user_id=u, limit=20))
                for mode, m in memories.items()
            }
            timed["the query's embedding alone"] = lambda q, u: embed_kind(embedder, [q], QUERY)
            times: dict[str, list[float]] = {name: [] for name in timed}
            names = list(timed)
            for round_ in range(args.rounds + 1):
                for i, (question, user) in enumerate(asked):
                    shift = (i + round_) % len(names)
                    for name in names[shift:] + names[:shift]:
                        began = time.perf_counter()
                        timed[name](question, user)
                        if round_:  # the first pass warms up
                            times[name].append((time.perf_counter() - began) * 1000)
        finally:
            for m in memories.values():
                m.close()
    full = statistics.median(times["full"])
    rows = []
    print(f"{len(asked)} questions x {args.rounds} rounds, "
          f"{sum(len(c.memories) for c in conversations)} memories in "
          f"{len(conversations)} scopes\n")
    print("| query analysis | p50 ms | p95 ms | p50 / full |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        p50, p95 = statistics.median(values), percentile(values, 0.95)
        rows.append({"name": name, "p50_ms": p50, "p95_ms": p95, "ratio": p50 / full})
        print(f"| {name} | {p50:.2f} | {p95:.2f} | {p50 / full:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
