"""Search time by query analysis (``Settings.query_analysis``): one conversation's turns stored
once, its questions searched by a ``Memory`` per mode, the modes interleaved question by
question so that a busy machine slows each alike. Prints p50 / p95 ms per mode and each
mode's ratio to ``full``.

    python -m benchmarks.query_analysis --data ../shared/data/locomo_dev.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pgmem
from benchmarks import dialogues
from benchmarks.database import scratch_database, server_dsn
from pgmem.settings import QUERY_ANALYSES, Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo or the dev file")
    parser.add_argument("--dsn", help="a server where databases may be created")
    parser.add_argument("--questions", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2, help="times each question is asked")
    args = parser.parse_args()
    conversation = dialogues.task_conversations(
        dialogues.load_conversations(args.data), "turns")[0]
    questions = [q.text for q in conversation.questions][: args.questions]
    embedder = pgmem.SentenceTransformerEmbedder()
    with scratch_database(server_dsn(args.dsn), "pgmem_bench_query_analysis") as dsn:
        pgmem.migrate(dsn)
        memories = {
            mode: pgmem.Memory(dsn, embedder=embedder,
                               settings=Settings.from_env(query_analysis=mode))
            for mode in QUERY_ANALYSES
        }
        try:
            memories["full"].add_many([{"text": m.text} for m in conversation.memories],
                                      user_id="u", dedupe=False)
            times: dict[str, list[float]] = {mode: [] for mode in QUERY_ANALYSES}
            for memory in memories.values():  # models and connections warm
                memory.search(questions[0], user_id="u", limit=20)
            for _ in range(args.rounds):
                for question in questions:
                    for mode, memory in memories.items():
                        began = time.perf_counter()
                        memory.search(question, user_id="u", limit=20)
                        times[mode].append((time.perf_counter() - began) * 1000)
        finally:
            for memory in memories.values():
                memory.close()
    full = statistics.median(times["full"])
    full95 = statistics.quantiles(times["full"], n=20)[-1]
    print(f"{len(conversation.memories)} memories, {len(questions)} questions x {args.rounds}")
    print("| query analysis | p50 ms | p95 ms | p50 / full | p95 / full |")
    print("|---|---:|---:|---:|---:|")
    for mode in ("full", "tagged", "lookup"):
        p50 = statistics.median(times[mode])
        p95 = statistics.quantiles(times[mode], n=20)[-1]
        print(f"| {mode} | {p50:.1f} | {p95:.1f} | {p50 / full:.2f} | {p95 / full95:.2f} |")


if __name__ == "__main__":
    main()
