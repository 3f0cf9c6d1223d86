"""Every candidate's raw signals for every LoCoMo question, saved once, so that scoring variants
(keyword normalisation, entity floor, fusion weights) can be compared offline in seconds.

    python -m benchmarks.signals --out /tmp/signals.pkl [--task both] [--data PATH] [--dsn DSN]

Each question is searched over its whole scope (a limit larger than any conversation), so the
legs of an ordinary search (``limit=20``: each leg's top ``scoring.internal_limit(20)``) can be
rebuilt from the rows by :mod:`benchmarks.fusion`. The rows are what the search statement
returns, captured before fusion.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pgmem
from benchmarks import corpus, dialogues, retrieval
from benchmarks.database import scratch_database, server_dsn
from pgmem import operations

WHOLE_SCOPE = 1000  # the largest search limit; each leg then fetches 2000, more than a scope holds


@dataclass(frozen=True)
class Candidate:
    """One memory's raw signals for one question."""

    dia_ids: tuple[str, ...]
    semantic: float
    bm25: float | None
    entity_hits: tuple[tuple[float, int], ...]
    text: str


@dataclass(frozen=True)
class QuestionSignals:
    """A question, what its query could use, and every candidate of its scope."""

    conversation: str
    question: dialogues.Question
    n_terms: int
    keyword_active: bool
    entity_active: bool
    n_docs: float | None
    candidates: tuple[Candidate, ...]


@dataclass
class TaskSignals:
    """One task's questions."""

    task: str
    questions: list[QuestionSignals] = field(default_factory=list)


class _Capture:
    """Wraps ``operations.fuse_rows`` to keep the last plan and rows."""

    def __init__(self) -> None:
        self.original = getattr(operations, "fuse_rows")  # noqa: B009
        self.plan: Any = None
        self.rows: list[dict[str, Any]] = []

    def __call__(self, plan: Any, rows: Sequence[dict[str, Any]], **kwargs: Any) -> Any:
        self.plan, self.rows = plan, list(rows)
        return self.original(plan, rows, **kwargs)


def capture_task(
    dsn: str, task: str, raw: Sequence[dialogues.RawConversation], embedder: Any,
    analyzer: pgmem.TextAnalyzer,
) -> TaskSignals:
    """Load ``task`` and capture every question's rows."""
    conversations = dialogues.task_conversations(raw, task)
    schema = f"pgmem_{task}"
    pgmem.migrate(dsn, schema=schema)
    memory = pgmem.Memory(dsn, embedder=embedder, nlp=analyzer, schema=schema)
    capture = _Capture()
    setattr(operations, "fuse_rows", capture)  # noqa: B010 (a measurement hook)
    out = TaskSignals(task)
    try:
        retrieval.load_task(memory, conversations)
        for c in conversations:
            retrieval.progress(f"{task} {c.id}: {len(c.questions)} questions")
            for q in c.questions:
                memory.search(q.text, user_id=c.id, limit=WHOLE_SCOPE, threshold=0.0)
                plan, rows = capture.plan, capture.rows
                out.questions.append(QuestionSignals(
                    conversation=c.id,
                    question=q,
                    n_terms=plan.n_terms,
                    keyword_active=plan.keyword_active,
                    entity_active=plan.entity_active,
                    n_docs=rows[0]["keyword_n_docs"] if rows else None,
                    candidates=tuple(
                        Candidate(
                            dia_ids=tuple(json.loads(r["metadata"])["dia_ids"]),
                            semantic=float(r["semantic"]),
                            bm25=None if r["bm25"] is None else float(r["bm25"]),
                            entity_hits=tuple(
                                (float(s), int(n)) for s, n in zip(
                                    r["entity_similarities"] or (), r["entity_spreads"] or ()
                                )
                            ),
                            text=r["text"],
                        )
                        for r in rows
                    ),
                ))
    finally:
        setattr(operations, "fuse_rows", capture.original)  # noqa: B010
        memory.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Capture the signals of the chosen tasks into ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.signals")
    dialogues.data_arguments(parser)
    parser.add_argument("--dsn")
    parser.add_argument("--task", choices=(*dialogues.TASKS, "both"), default="both")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    raw = dialogues.load_conversations(args.data, args.conversations)
    corpus.limit_torch_threads(1)
    embedder, analyzer = pgmem.SentenceTransformerEmbedder(), pgmem.TextAnalyzer()
    retrieval.warm_up(embedder, analyzer)
    result = {}
    with scratch_database(server_dsn(args.dsn), f"pgmem_signals_{os.getpid()}") as dsn:
        for task in retrieval.tasks(args.task):
            result[task] = capture_task(dsn, task, raw, embedder, analyzer)
    args.out.write_bytes(pickle.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
