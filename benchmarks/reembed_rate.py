"""How fast ``pgmem.reembed`` embeds, against its embedder alone on the same texts.

    python -m benchmarks.reembed_rate [--memories 2000] [--batch-sizes 64,256]
                                      [--backend onnx] [--dsn DSN]

A scratch database gets ``--memories`` memories (``add_many`` with MiniLM on ``--backend`` and
spaCy's entities). Then, once per batch size, it is re-embedded, alone (no writer), to MiniLM
through a fixed rotation (a model of its own name, at MiniLM's cost), and the same texts (its
memories' and entities' names) are embedded by that embedder alone, in batches of the same
size, one call each. Printed per batch size: the re-embedding's seconds and rows per second, the
embedder's rows per second, and their ratio (1.00: the database costs nothing beside the model).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import psycopg

import pgmem
from benchmarks import report
from benchmarks.database import scratch_database, server_dsn
from pgmem.embedding import make_embedder

PEOPLE = ("Alice Martin", "Bob Chen", "Carla Diaz", "Dmitri Volkov", "Emma Stone", "Farid Khan")
PLACES = ("Paris", "Berlin", "Lisbon", "Osaka", "Toronto", "Nairobi", "Lima", "Oslo")


class Rotated:
    """``base`` followed by a fixed random rotation: another model's vectors, at its cost."""

    def __init__(self, base: object, name: str, seed: int) -> None:
        self.base, self.name = base, name
        matrix, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(384, 384)))
        self.matrix = matrix.astype(np.float32)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors = np.asarray(self.base.embed(texts), dtype=np.float32)  # type: ignore[attr-defined]
        return vectors @ self.matrix


def texts(n: int) -> list[str]:
    rng = np.random.default_rng(7)
    return [f"Note {k}: {PEOPLE[rng.integers(6)]} met {PEOPLE[rng.integers(6)]} in "
            f"{PLACES[rng.integers(8)]} about project {rng.integers(1000)} and its budget"
            for k in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--batch-sizes", default="64,256")
    parser.add_argument("--backend", default="onnx", choices=pgmem.embedding.BACKENDS)
    parser.add_argument("--dsn")
    args = parser.parse_args()
    base = make_embedder(args.backend)
    name = f"pgmem_bench_reembed_{uuid.uuid4().hex[:8]}"
    rows = []
    with scratch_database(server_dsn(args.dsn), name) as dsn:
        pgmem.migrate(dsn)
        with pgmem.Memory(dsn, embedder=base) as memory:
            memory.add_many(texts(args.memories), user_id="u", batch_size=256)
        with psycopg.connect(dsn) as conn:
            stored = [r[0] for r in conn.execute("SELECT text FROM pgmem.memories")]
            stored += [r[0] for r in conn.execute("SELECT name FROM pgmem.entities")]
        for k, size in enumerate(int(s) for s in args.batch_sizes.split(",")):
            target = Rotated(base, f"minilm-rotated-{k}", seed=k)
            started = time.perf_counter()
            done = pgmem.reembed(dsn, target, batch_size=size)
            seconds = time.perf_counter() - started
            embedded = done.memories + done.entities
            started = time.perf_counter()
            for first in range(0, len(stored), size):
                target.embed(stored[first : first + size])
            alone = time.perf_counter() - started
            rows.append([size, embedded, f"{seconds:.1f}", f"{embedded / seconds:.0f}",
                         f"{len(stored) / alone:.0f}",
                         f"{(embedded / seconds) / (len(stored) / alone):.2f}",
                         f"{done.switch_seconds * 1000:.0f}"])
    print(f"reembed of {args.memories} memories, MiniLM on {args.backend}, no writers\n")
    print(report.table(["batch", "rows", "seconds", "rows/s", "embedder alone rows/s",
                        "ratio", "switch ms"], rows))


if __name__ == "__main__":
    main()
