"""Search latency through PgBouncer, against the same server directly, in one run.

    python -m benchmarks.pooler [--memories 2000] [--queries 100] [--rounds 3] [--dsn DSN]
                                [--no-doc]

A scratch database on the server of ``--dsn`` (else ``PGMEM_BENCH_DSN``, else
``PGMEM_TEST_DSN``) holds ``--memories`` short texts, 100 per user, added with the default
models. Two private PgBouncers (Debian's ``pgbouncer``, benchmarks/pgbouncer.py) stand in
front of the same server, one in session mode and one in transaction mode. One thread asks
``--queries`` questions, each in one user's scope (``limit=20``), through four ``Memory``
objects in turn, ``--rounds`` times after one pass to warm up:

- **direct**: the server itself, ``pooler="none"``: the search is a server-prepared statement,
  planned once per connection (the baseline);
- **direct, unprepared**: the server itself with ``prepared_statements=False``: what giving up
  prepared statements costs alone, without a pooler;
- **PgBouncer session**: ``pooler="session"``, prepared as direct: the cost of the extra hop;
- **PgBouncer transaction**: ``pooler="transaction"``: the extra hop, and no prepared
  statements (the search statement is parsed and its generic plan made in every call).

The models' work is the same in each (the query's embedding and analysis are made once, in the
warm-up pass, and answered from memory afterwards), so the times are pgmem's Python and its
round trip. The ratios are each row's p50 over the direct p50 of the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import pgmem
from benchmarks import report
from benchmarks.database import scratch_database, server_dsn
from benchmarks.pgbouncer import pgbouncer
from pgmem.embedding_space import embedder_name
from pgmem.nlp import Analysis

PER_USER = 100
NAMES = ("Alice", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun")
PLACES = ("Lisbon", "Oslo", "Nairobi", "Lima", "Kyoto", "Quebec", "Tbilisi", "Perth")
THINGS = ("a bakery", "the choir", "a sailing club", "the library", "a startup", "a clinic")
VERBS = ("works at", "volunteers at", "founded", "visits", "writes about", "sings in")


class MemoEmbedder:
    """An embedder that embeds each text once and answers from memory afterwards."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = embedder_name(inner)
        self._vectors: dict[str, npt.NDArray[np.float32]] = {}

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                self._vectors[text] = np.asarray(vector, dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


class MemoAnalyzer(pgmem.TextAnalyzer):
    """spaCy's analysis of each text made once, then answered from memory."""

    def __init__(self) -> None:
        super().__init__()
        self._analyses: dict[str, Analysis] = {}

    def analyze(self, text: str) -> Analysis:
        if text not in self._analyses:
            self._analyses[text] = super().analyze(text)
        return self._analyses[text]

    def analyze_many(self, texts: Iterable[str], batch_size: int = 64) -> list[Analysis]:
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self._analyses]
        if missing:
            self._analyses.update(zip(missing, super().analyze_many(missing, batch_size)))
        return [self._analyses[t] for t in texts]


def corpus(memories: int, rng: random.Random) -> list[dict[str, Any]]:
    """Short texts of people, places and things, 100 per user."""
    return [
        {
            "text": f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(THINGS)} in "
                    f"{rng.choice(PLACES)} (note {n})",
            "user_id": f"user-{n // PER_USER}",
        }
        for n in range(memories)
    ]


def questions(count: int, users: int, rng: random.Random) -> list[tuple[str, str]]:
    """(question, user) pairs."""
    return [
        (f"Where does {rng.choice(NAMES)} go for {rng.choice(THINGS)}?",
         f"user-{rng.randrange(users)}")
        for _ in range(count)
    ]


@contextlib.contextmanager
def memories(
    dsn: str, embedder: MemoEmbedder, analyzer: MemoAnalyzer
) -> Iterator[dict[str, pgmem.Memory]]:
    """The four Memory objects of the module docstring, by row name."""
    with pgbouncer(dsn, "session", pool_size=5) as session, \
            pgbouncer(dsn, "transaction", pool_size=5) as transaction:
        targets = {
            "direct": (dsn, {"pooler": "none"}),
            "direct, unprepared": (dsn, {"prepared_statements": False}),
            "PgBouncer session": (session.dsn(dsn), {"pooler": "session"}),
            "PgBouncer transaction": (transaction.dsn(dsn), {"pooler": "transaction"}),
        }
        with contextlib.ExitStack() as stack:
            yield {
                name: stack.enter_context(
                    pgmem.Memory(target, embedder=embedder, nlp=analyzer, **options)
                )
                for name, (target, options) in targets.items()
            }


def measure(
    mems: dict[str, pgmem.Memory], asked: Sequence[tuple[str, str]], rounds: int
) -> dict[str, list[float]]:
    """Seconds per search, by row: one pass to warm up, then ``rounds`` passes, each asking
    every question through every Memory in turn."""
    times: dict[str, list[float]] = {name: [] for name in mems}
    for round_ in range(rounds + 1):
        for query, user in asked:
            for name, mem in mems.items():
                began = time.perf_counter()
                mem.search(query, user_id=user, limit=20)
                if round_:
                    times[name].append(time.perf_counter() - began)
    return times


def result_table(times: dict[str, list[float]]) -> str:
    base = report.p50(times["direct"])
    return report.table(
        ("path", "searches", "p50 ms", "p95 ms", "p50 vs direct"),
        [
            (name, len(t), report.ms(report.p50(t)), report.ms(report.p95(t)),
             report.ratio(report.p50(t), base))
            for name, t in times.items()
        ],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", help="a server where databases may be created")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    rng = random.Random(7)
    server = server_dsn(args.dsn)
    embedder = MemoEmbedder(pgmem.SentenceTransformerEmbedder())
    analyzer = MemoAnalyzer()
    with scratch_database(server, f"pgmem_bench_pooler_{uuid.uuid4().hex[:8]}") as dsn:
        pgmem.migrate(dsn)
        with pgmem.Memory(dsn, embedder=embedder, nlp=analyzer) as loader:
            loader.add_many(corpus(args.memories, rng), dedupe=False)
        asked = questions(args.queries, max(1, args.memories // PER_USER), rng)
        with memories(dsn, embedder, analyzer) as mems:
            times = measure(mems, asked, args.rounds)
    table = result_table(times)
    print(table)
    if not args.no_doc:
        report.write_section("pooler", "\n\n".join([
            "## Connection poolers",
            report.run_header(report.command_line()),
            __doc__.split("\n\n", 2)[2].strip(),
            table,
        ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
