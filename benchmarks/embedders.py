"""The embedder's backends side by side: torch (sentence-transformers), ONNX Runtime, and ONNX
Runtime with int8 weights, all running all-MiniLM-L6-v2 from the same local weights.

    python -m benchmarks.embedders [--queries 300] [--documents 1000] [--threads 1,0]
                                   [--data PATH] [--no-doc]

Queries are LoCoMo dev questions, one ``embed`` call each, the backends taking turns query by
query so that the machine's other load falls on all alike; documents are LoCoMo dev turns, one
``embed`` call of ``--documents`` texts (the embedder's batches by length: at most 64
texts and 256 token positions each). ``--threads`` sets torch's intra-op threads and ONNX
Runtime's alike, one table per value (0: each library's default). The agreement columns compare
each backend's vectors of the documents with torch's: the smallest cosine, and the share of
queries whose top 10 documents (by cosine) are the same as torch's, in the same order. Recall on
both dev tasks comes from ``python -m benchmarks.retrieval --embedder NAME``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from benchmarks import corpus, dialogues, report
from pgmem.embedding import OnnxEmbedder, SentenceTransformerEmbedder, default_model

DEFAULT_TORCH_THREADS = torch.get_num_threads()


def backends(threads: int) -> dict[str, Any]:
    """The three embedders, loaded (the ONNX ones exported first if needed)."""
    onnx_threads = threads or None
    made = {
        "torch": SentenceTransformerEmbedder(default_model()),
        "onnx": OnnxEmbedder(threads=onnx_threads),
        "onnx-int8": OnnxEmbedder(quantized=True, threads=onnx_threads),
    }
    for embedder in made.values():
        embedder.embed(["warm up"])
    return made


def measure(threads: int, queries: Sequence[str], documents: Sequence[str]) -> str:
    """One table: the backends on ``threads`` intra-op threads (0: their defaults)."""
    torch.set_num_threads(threads or DEFAULT_TORCH_THREADS)
    made = backends(threads)
    query_seconds: dict[str, list[float]] = {name: [] for name in made}
    query_vectors: dict[str, list[Any]] = {name: [] for name in made}
    for query in queries:
        for name, embedder in made.items():
            began = time.perf_counter()
            query_vectors[name].append(embedder.embed([query])[0])
            query_seconds[name].append(time.perf_counter() - began)
    document_seconds, document_vectors = {}, {}
    for name, embedder in made.items():
        began = time.perf_counter()
        document_vectors[name] = np.asarray(embedder.embed(documents))
        document_seconds[name] = time.perf_counter() - began
    reference = document_vectors["torch"]
    top_reference = np.argsort(-(np.asarray(query_vectors["torch"]) @ reference.T), axis=1)[:, :10]
    rows = []
    for name in made:
        vectors = document_vectors[name]
        top = np.argsort(-(np.asarray(query_vectors[name]) @ vectors.T), axis=1)[:, :10]
        same = float(np.mean([(a == b).all() for a, b in zip(top, top_reference)]))
        rows.append((
            name,
            report.ms(report.p50(query_seconds[name])),
            report.ms(report.p95(query_seconds[name])),
            f"{document_seconds[name] / len(documents) * 1000 * 1000:.0f}",
            report.ratio(report.p50(query_seconds["torch"]), report.p50(query_seconds[name])),
            report.ratio(document_seconds["torch"], document_seconds[name]),
            f"{float((vectors * reference).sum(axis=1).min()):.6f}",
            f"{same:.3f}",
        ))
    label = f"{threads} intra-op thread(s)" if threads else "each library's default threads"
    return f"{label}:\n\n" + report.table(
        ("backend", "query p50 ms", "query p95 ms", "ms per 1,000 documents",
         "query speed-up", "documents speed-up", "min cosine vs torch", "same top 10"), rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Time and compare the backends; print the tables and write the ``onnx`` section."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedders",
                                     description=(__doc__ or "").split("\n\n")[0])
    corpus.run_arguments(parser)
    parser.add_argument("--threads", type=dialogues.numbers, default="1,0", metavar="N,N",
                        help="intra-op threads of torch and ONNX Runtime, a table for each "
                        "(0: their defaults)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--documents", type=int, default=1000)
    args = parser.parse_args(argv)
    raw = dialogues.load_conversations(args.data, args.conversations)
    conversations = dialogues.task_conversations(raw, "turns")
    documents = [m.text for c in conversations for m in c.memories][: args.documents]
    queries = [q.text for c in conversations for q in c.questions][: args.queries]
    tables = []
    for threads in args.threads:
        tables.append(measure(threads, queries, documents))
        print(tables[-1] + "\n", flush=True)
    body = f"{len(queries)} queries, {len(documents)} documents.\n\n" + "\n\n".join(tables)
    if not args.no_doc:
        report.write_section("onnx", "## Embedder backends: torch and ONNX Runtime\n\n"
                             + report.run_header(report.command_line()) + "\n\n" + body + "\n\n"
                             + (__doc__ or "").split("\n\n", 2)[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
