"""How long an ``add`` and a ``search`` of one long text take, with the default models.

    python -m benchmarks.long_texts [--lengths 1000,10000,100000] [--repeats 3] [--dsn DSN]

For each length (characters; at most ``pgmem.validate.MAX_TEXT_LENGTH_CEILING``), a scratch
database gets ``--repeats`` texts of that length (English sentences, each text distinct) through
``Memory(max_text_length=length)``, and each is searched for by a phrase from it. Reports the
median seconds of the adds and of the searches.
"""

from __future__ import annotations

import argparse
import statistics
import time

import pgmem
from benchmarks import report
from benchmarks.database import scratch_database, server_dsn

SENTENCE = ("Grace Hopper met Alan Turing in London to talk about compilers, tea and the weather "
            "of {n}. ")


def long_text(length: int, seed: int) -> str:
    parts, n = [f"Text {seed}: "], 0
    while sum(map(len, parts)) < length:
        parts.append(SENTENCE.format(n=f"day {seed}-{n}"))
        n += 1
    return "".join(parts)[:length]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dsn")
    args = parser.parse_args(argv)
    rows = []
    with scratch_database(server_dsn(args.dsn), "pgmem_long_texts") as dsn:
        pgmem.migrate(dsn)
        embedder = pgmem.SentenceTransformerEmbedder()
        for length in (int(n) for n in args.lengths.split(",")):
            with pgmem.Memory(dsn, embedder=embedder, max_text_length=length) as mem:
                mem.search("warm up", user_id="warm")
                adds, searches = [], []
                for seed in range(args.repeats):
                    text = long_text(length, seed)
                    t0 = time.perf_counter()
                    added = mem.add(text, user_id=f"u{length}")
                    t1 = time.perf_counter()
                    hits = mem.search(f"Text {seed} Grace Hopper compilers", user_id=f"u{length}")
                    t2 = time.perf_counter()
                    assert added.id in [h.id for h in hits]
                    adds.append(t1 - t0)
                    searches.append(t2 - t1)
                rows.append([f"{length:,}", report.ms(statistics.median(adds)),
                             report.ms(statistics.median(searches))])
    print(report.table(["characters", "add (ms, median)", "search (ms, median)"], rows))


if __name__ == "__main__":
    main()
