"""PgmemStore beside LangGraph's PostgresStore, through LangGraph's BaseStore interface alone.

    python -m benchmarks.langgraph [--conversations N] [--one-by-one N] [--data PATH]
                                   [--dsn DSN] [--torch-threads 1] [--no-doc] [--keep]
                                   [--json PATH]

Both stores run on the same server, each in its own scratch database (``PostgresStore`` set up
by its ``setup()``, pgmem's schema by ``pgmem.migrate``), with the same embedder: pgmem's
default (all-MiniLM-L6-v2 on the backend ``pgmem.embedding.make_embedder`` picks: ONNX Runtime
where the ``onnx`` extra is installed). ``PostgresStore`` gets it through ``index={"dims": 384,
"embed": PgmemEmbeddings(embedder), "fields": ["text"]}`` (pgmem's embedder as a LangChain
``Embeddings``), ``PgmemStore`` with ``index={"dims": 384, "fields": ["text"]}`` and every
other setting at its default (its query analysis, spaCy in a process of its own where it
runs so). The items are the LoCoMo dev turns
(:mod:`benchmarks.dialogues`, task ``turns``) as ``{"text": turn}``, one namespace per
conversation (``("locomo", <conversation>)``), keyed by their place in it; the queries are that
task's questions, each a ``search(namespace, query=question, limit=10)``.

Phases, the two stores alternating so that the machine's other load falls on both alike:

1. put: each conversation's items by ``batch`` calls of 64 ``PutOp`` each;
2. search: every question, one store then the other; p50/p95 of the wall time of each call,
   recall@10 and nDCG@10 (:mod:`benchmarks.metrics`) of the returned items;
3. one-by-one put: ``--one-by-one`` turns ``put`` one call each into other namespaces.

The models are loaded and each store has put and searched once before the clocks start.
``PostgresStore`` ranks by cosine similarity alone; ``PgmemStore`` runs pgmem's hybrid search
(semantic, keyword and entity signals, the neighbour step) and also extracts entities on put.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.store.base import BaseStore, PutOp
from langgraph.store.postgres import PostgresStore

import pgmem
import pgmem.embedding
from benchmarks import corpus, dialogues, report
from benchmarks.database import scratch_database, server_dsn
from benchmarks.metrics import Scores, mean_scores, score_question
from pgmem.langgraph import PgmemEmbeddings, PgmemStore

LIMIT = 10
BATCH = 64


@dataclass
class StoreResult:
    """The figures of one store."""

    put_seconds: float = 0.0
    put_items: int = 0
    one_by_one_seconds: list[float] = field(default_factory=list)
    search_seconds: list[float] = field(default_factory=list)
    scores: list[Scores] = field(default_factory=list)

    @property
    def put_rate(self) -> float:
        return self.put_items / self.put_seconds

    @property
    def one_by_one_rate(self) -> float:
        return len(self.one_by_one_seconds) / sum(self.one_by_one_seconds)


def timed(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """Wall seconds of ``call(*args, **kwargs)`` and its result."""
    began = time.perf_counter()
    value = call(*args, **kwargs)
    return time.perf_counter() - began, value


def run(
    stores: dict[str, BaseStore],
    conversations: Sequence[dialogues.Conversation],
    one_by_one: int,
) -> dict[str, StoreResult]:
    """The three phases of the module docstring."""
    results = {name: StoreResult() for name in stores}
    for conversation in conversations:
        namespace = ("locomo", conversation.id)
        corpus.progress(f"put: {conversation.id}, {len(conversation.memories)} items")
        ops = [PutOp(namespace, str(n), {"text": m.text})
               for n, m in enumerate(conversation.memories)]
        for start in range(0, len(ops), BATCH):
            for name, store in stores.items():
                seconds, _ = timed(store.batch, ops[start : start + BATCH])
                results[name].put_seconds += seconds
                results[name].put_items += len(ops[start : start + BATCH])
    questions = [(c, q) for c in conversations for q in c.questions]
    corpus.progress(f"search: {len(questions)} questions")
    for conversation, question in questions:
        for name, store in stores.items():
            seconds, found = timed(
                store.search, ("locomo", conversation.id), query=question.text, limit=LIMIT
            )
            results[name].search_seconds.append(seconds)
            ranking = [conversation.memories[int(item.key)].dia_ids for item in found]
            results[name].scores.append(
                score_question(ranking, question.evidence, question.n_relevant)
            )
    turns = [(c.id, n, m.text) for c in conversations for n, m in enumerate(c.memories)]
    corpus.progress(f"one-by-one put: {min(one_by_one, len(turns))} items")
    for conversation_id, n, text in turns[:one_by_one]:
        for name, store in stores.items():
            seconds, _ = timed(store.put, ("one", conversation_id), str(n), {"text": text})
            results[name].one_by_one_seconds.append(seconds)
    return results


def markdown_table(results: dict[str, StoreResult], n_questions: int, n_items: int) -> str:
    """PgmemStore against PostgresStore."""
    ours, theirs = results["PgmemStore"], results["PostgresStore"]
    a, b = mean_scores(ours.scores), mean_scores(theirs.scores)
    rows = [
        ("recall@10", f"{a.recall_10:.3f}", f"{b.recall_10:.3f}",
         f"{a.recall_10 / b.recall_10:.2f}x"),
        ("nDCG@10", f"{a.ndcg_10:.3f}", f"{b.ndcg_10:.3f}", f"{a.ndcg_10 / b.ndcg_10:.2f}x"),
    ]
    for label, get, faster in (
        ("search p50, ms", lambda r: report.p50(r.search_seconds) * 1000, False),
        ("search p95, ms", lambda r: report.p95(r.search_seconds) * 1000, False),
        (f"put, items/s (batches of {BATCH})", lambda r: r.put_rate, True),
        ("put, items/s (one by one)", lambda r: r.one_by_one_rate, True),
    ):
        x, y = get(ours), get(theirs)
        rows.append((label, f"{x:.1f}", f"{y:.1f}", f"{(x / y if faster else y / x):.2f}x"))
    head = ("", "PgmemStore", "PostgresStore", "PgmemStore's advantage")
    return (f"{n_items} items (LoCoMo dev turns), {n_questions} questions, limit {LIMIT}; "
            "a ratio above 1 favours PgmemStore (for latency: PostgresStore's time / "
            f"PgmemStore's).\n\n{report.table(head, rows)}")


def as_json(results: dict[str, StoreResult], n_questions: int, n_items: int) -> dict[str, Any]:
    """Each store's figures (seconds, items per second), for ``--json`` and the figures of
    ``python -m benchmarks.report --plots``."""
    stores = {}
    for name, r in results.items():
        scores = mean_scores(r.scores)
        stores[name] = {
            "recall_10": scores.recall_10, "ndcg_10": scores.ndcg_10,
            "search_p50": report.p50(r.search_seconds), "search_p95": report.p95(r.search_seconds),
            "batch_rate": r.put_rate, "add_rate": r.one_by_one_rate,
        }
    return {"benchmark": "langgraph", "command": report.command_line(), "items": n_items,
            "questions": n_questions, "limit": LIMIT, "stores": stores}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.langgraph",
        description="PgmemStore beside LangGraph's PostgresStore on LoCoMo dev turns.",
    )
    corpus.run_arguments(parser)
    parser.add_argument("--one-by-one", type=int, default=300, metavar="N",
                        help="items put one call each (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; print its table and write the ``langgraph`` section of the docs."""
    args = parse_args(argv)
    corpus.limit_torch_threads(args.torch_threads)
    dsn, embedder = server_dsn(args.dsn), pgmem.embedding.make_embedder()
    raw = dialogues.load_conversations(args.data, args.conversations)
    conversations = dialogues.task_conversations(raw, "turns")
    pid = os.getpid()
    index = {"dims": 384, "fields": ["text"]}
    with contextlib.ExitStack() as stack:
        ours = stack.enter_context(scratch_database(dsn, f"pgmem_langgraph_{pid}", keep=args.keep))
        theirs = stack.enter_context(
            scratch_database(dsn, f"postgres_store_{pid}", keep=args.keep)
        )
        pgmem.migrate(ours)
        postgres_store = stack.enter_context(PostgresStore.from_conn_string(
            theirs, index={**index, "embed": PgmemEmbeddings(embedder)},  # type: ignore[typeddict-item]
        ))
        postgres_store.setup()
        pgmem_store = stack.enter_context(PgmemStore(
            ours, index=index, embedder=embedder,  # type: ignore[arg-type]
        ))
        stores: dict[str, BaseStore] = {"PgmemStore": pgmem_store, "PostgresStore": postgres_store}
        corpus.progress("warming up")
        for store in stores.values():
            store.put(("warm",), "w", {"text": "Warm up: Caroline went to Paris."})
            store.search(("warm",), query="Where did Caroline go?")
        results = run(stores, conversations, args.one_by_one)
    n_questions = sum(len(c.questions) for c in conversations)
    n_items = sum(len(c.memories) for c in conversations)
    body = markdown_table(results, n_questions, n_items)
    print(body, flush=True)
    if args.json:
        args.json.write_text(json.dumps(as_json(results, n_questions, n_items), indent=2) + "\n")
    if not args.no_doc:
        report.write_section("langgraph", "## LangGraph: PgmemStore beside PostgresStore\n\n"
                             + report.run_header(report.command_line()) + "\n\n" + body
                             + "\n\n" + (__doc__ or "").split("\n\n", 2)[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
