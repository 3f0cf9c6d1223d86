"""Scoring variants compared offline on the signals :mod:`benchmarks.signals` saved.

    python -m benchmarks.signals --out /tmp/signals.pkl          # once: loads and searches
    python -m benchmarks.fusion /tmp/signals.pkl [--fit conv-26,conv-30,conv-41]

For each question the legs of an ordinary search (``limit=20``: each leg's best
``scoring.internal_limit(20)`` candidates) are rebuilt from the saved rows of the whole scope,
joined, for profiles with neighbour weights, by the neighbours (up to the profile's window) the
search statement's neighbour step would add (storage order: the dev file's, ``--data``), fused with
each
:class:`pgmem.scoring.Scoring` variant by :func:`pgmem.scoring.fuse` itself, and scored as
:mod:`benchmarks.retrieval` scores them. Variants are chosen on the ``--fit``
conversations and reported on the others too (``check``), so that a choice fitted to some
conversations shows whether it holds on the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import pickle
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import dialogues
from benchmarks.metrics import Scores, mean_scores, score_question
from benchmarks.signals import Candidate, QuestionSignals, TaskSignals
from pgmem import scoring
from pgmem.scoring import Scoring

LIMIT = 20
THRESHOLD = 0.1
DEFAULT_FIT = ("conv-26", "conv-30", "conv-41")


# Each memory's place in its scope's storage order, by (conversation, text, dialogue ids): the
# order the dev file gives them, in which benchmarks.retrieval and benchmarks.signals store them.
Positions = dict[tuple[str, str, tuple[str, ...]], int]


def positions(raw: Sequence[dialogues.RawConversation], task: str) -> Positions:
    """Where each memory of ``task`` stands in its conversation's storage order."""
    return {
        (conversation["id"], item.text, item.dia_ids): i
        for conversation in raw
        for i, item in enumerate(dialogues.task_memories(conversation, task))
    }


def ranked_legs(q: QuestionSignals, profile: Scoring) -> list[list[Candidate]]:
    """Each leg's candidates, best first, as the search statement takes them."""
    n = scoring.internal_limit(LIMIT)
    cands = q.candidates
    semantic = sorted(cands, key=lambda c: -c.semantic)[:n]
    keyword = sorted((c for c in cands if c.bm25 is not None), key=lambda c: -(c.bm25 or 0))[:n]

    def entity_rank(c: Candidate) -> float:
        return max(
            (s / (1 + scoring.SPREAD_DECAY * (k - 1) ** 2)
             for s, k in c.entity_hits if s >= profile.entity_min_similarity),
            default=-1.0,
        )

    entity = [c for c in sorted(cands, key=lambda c: -entity_rank(c)) if entity_rank(c) >= 0][:n]
    return [semantic, keyword, entity]


def union(ranked: list[list[Candidate]]) -> list[Candidate]:
    """The candidates an ordinary search would fuse: the union of the three legs."""
    seen: dict[int, Candidate] = {}
    for c in itertools.chain(*ranked):
        seen.setdefault(id(c), c)
    return list(seen.values())


def neighbour_pairs(
    q: QuestionSignals, profile: Scoring, ranked: list[list[Candidate]], where: Positions
) -> set[tuple[int, int, int]]:
    """The search statement's neighbour step: (earlier, later, distance) storage positions of
    the memories stored up to ``profile.neighbour_window`` places before and after each leg's
    best ``scoring.neighbour_limit(LIMIT)``."""
    stored = {where[(q.conversation, c.text, c.dia_ids)] for c in q.candidates}
    pairs = set()
    for leg in ranked:
        for c in leg[: scoring.neighbour_limit(LIMIT)]:
            p = where[(q.conversation, c.text, c.dia_ids)]
            for d in range(1, profile.neighbour_window + 1):
                if profile.before_weight > 0 and p - d in stored:
                    pairs.add((p - d, p, d))
                if profile.after_weight > 0 and p + d in stored:
                    pairs.add((p, p + d, d))
    return pairs


def ranking(
    q: QuestionSignals, profile: Scoring, where: Positions | None = None
) -> list[tuple[str, ...]]:
    """The dialogue ids of the fused top ``LIMIT``; given the storage order ``where``, after the
    neighbour step (candidates keyed by storage position)."""
    ranked = ranked_legs(q, profile)
    cands = union(ranked)
    pairs: set[tuple[int, int, int]] = set()
    keys: list[int] = list(range(len(cands)))
    if where is not None:
        def place(c: Candidate) -> int:
            return where[(q.conversation, c.text, c.dia_ids)]

        at = {place(c): c for c in q.candidates}
        pairs = neighbour_pairs(q, profile, ranked, where)
        joining = {p for pair in pairs for p in pair[:2]} - {place(c) for c in cands}
        cands += [at[p] for p in sorted(joining)]
        keys = [place(c) for c in cands]
    earlier: dict[int, list[tuple[object, int]]] = {}
    later: dict[int, list[tuple[object, int]]] = {}
    for a, b, d in sorted(pairs, key=lambda pair: pair[2]):
        earlier.setdefault(b, []).append((a, d))
        later.setdefault(a, []).append((b, d))
    signals = [
        scoring.Signals(
            key=k, semantic=c.semantic, keyword_raw=c.bm25,
            entity_hits=tuple((s, n) for s, n in c.entity_hits
                              if s >= profile.entity_min_similarity),
            earlier=tuple(earlier.get(k, ())), later=tuple(later.get(k, ())),
        )
        for k, c in zip(keys, cands)
    ]
    fused = scoring.fuse(
        signals, n_terms=q.n_terms, keyword_active=q.keyword_active,
        entity_active=q.entity_active, threshold=THRESHOLD, limit=LIMIT, profile=profile,
        n_docs=q.n_docs, scope_size=q.n_docs,
    )
    by_key = dict(zip(keys, cands))
    return [by_key[f.key].dia_ids for f in fused]


def score_all(
    questions: Sequence[QuestionSignals], profile: Scoring, where: Positions | None = None
) -> list[tuple[QuestionSignals, Scores]]:
    """Each question with its scores under ``profile`` (and the neighbour step, given
    ``where``)."""
    return [
        (q, score_question(ranking(q, profile, where), q.question.evidence,
                           q.question.n_relevant))
        for q in questions
    ]


def summarize(results: Sequence[tuple[QuestionSignals, Scores]]) -> dict[str, float]:
    """Mean scores and recall@10 per category."""
    out = mean_scores([s for _, s in results]).as_dict()
    by_category: dict[int, list[float]] = {}
    for q, s in results:
        by_category.setdefault(q.question.category, []).append(s.recall_10)
    for category, values in sorted(by_category.items()):
        out[f"cat{category}_r10"] = sum(values) / len(values)
    return out


def split(task: TaskSignals, fit: Iterable[str]) -> dict[str, list[QuestionSignals]]:
    """The task's questions: all, those of the ``fit`` conversations, and the others."""
    fit = set(fit)
    return {
        "all": task.questions,
        "fit": [q for q in task.questions if q.conversation in fit],
        "check": [q for q in task.questions if q.conversation not in fit],
    }


VARIANTS: dict[str, Callable[[], list[Scoring]]] = {}


def variants(name: str) -> Callable[[Callable[[], list[Scoring]]], Callable[[], list[Scoring]]]:
    """Register a family of variants under ``name``."""
    def register(f: Callable[[], list[Scoring]]) -> Callable[[], list[Scoring]]:
        VARIANTS[name] = f
        return f
    return register


@variants("base")
def _base() -> list[Scoring]:
    return [scoring.MEM0, scoring.DEFAULT]


@variants("keyword")
def _keyword() -> list[Scoring]:
    return [scoring.MEM0, *(
        Scoring(f"log-n {n:g}", keyword="log-n", reference_docs=n)
        for n in (300, 1000, 3000, 10000)
    )]


@variants("entity")
def _entity() -> list[Scoring]:
    base = dataclasses.replace(scoring.DEFAULT, entity_sharpness=0.0)
    return [
        dataclasses.replace(base, name=f"floor {floor} sharpness {sharp}",
                            entity_min_similarity=floor, entity_sharpness=sharp)
        for floor in (0.5, 0.6, 0.7, 0.8) for sharp in (0.0, 1.0, 2.0)
    ]


def _weight_grid(base: Scoring) -> list[Scoring]:
    return [
        dataclasses.replace(base, name=f"{base.name} kw {k} ent {e}", keyword_weight=k,
                            entity_weight=e)
        for k, e in itertools.product((0.5, 0.75, 1.0, 1.5, 2.0), (0.25, 0.5, 0.75))
    ]


@variants("neighbours")
def _neighbours() -> list[Scoring]:
    return [scoring.MEM0, *(
        dataclasses.replace(scoring.DEFAULT, name=f"after {a} before {b} floor {f}",
                            after_weight=a, before_weight=b, context_min_semantic=f)
        for a, b, f in itertools.chain(
            itertools.product((0.0, 0.6, 0.7, 0.75, 0.8, 0.9), (0.0,), (0.1,)),
            itertools.product((0.75,), (0.4, 0.5, 0.6), (0.1,)),
            itertools.product((0.75,), (0.5,), (0.15, 0.2, 0.25, 0.3)),
            itertools.product((0.7, 0.8, 0.9), (0.4, 0.6), (0.25,)),
        )
    )]


@variants("window")
def _window() -> list[Scoring]:
    return [
        dataclasses.replace(scoring.DEFAULT, name=f"window {w} decay {g}", neighbour_window=w,
                            neighbour_decay=g)
        for w, g in itertools.chain(
            [(1, 1.0)], itertools.product((2,), (0.6, 0.7, 0.8, 0.9, 1.0))
        )
    ]


@dataclasses.dataclass(frozen=True)
class _SpreadForm(Scoring):
    """A profile whose entity weight is ``form(spread, scope size)`` (the other forms of the
    ``spread`` family; the chosen one is :attr:`Scoring.entity_common_share`)."""

    form: Callable[[int, float], float] = lambda n, size: 1.0

    def spread_weight(self, spread: int, scope_size: float | None) -> float:
        return self.form(spread, scope_size or spread)


def _idf_ratio(n: int, size: float) -> float:
    """BM25's IDF of the entity's spread over that of an entity one memory holds."""
    return scoring.bm25_idf(size, n) / scoring.bm25_idf(size, 1) if size > 1 else 1.0


def _log_ratio(n: int, size: float) -> float:
    """``log(N / n) / log(N)``: 1 for one memory, 0 for all."""
    return math.log(size / n) / math.log(size) if size > 1 and n <= size else 1.0


def _times_decay(form: Callable[[int, float], float]) -> Callable[[int, float], float]:
    return lambda n, size: scoring.spread_attenuation(n) * form(n, size)


def _unshared_power(p: float) -> Callable[[int, float], float]:
    """``(1 - share) ** p``, the share as :func:`pgmem.scoring.share_attenuation` counts it."""
    return lambda n, size: scoring.share_attenuation(n, size, 0.0) ** p


def _share_power(p: float) -> Callable[[int, float], float]:
    """``1 - share ** p``."""
    return lambda n, size: 1 - (1 - scoring.share_attenuation(n, size, 0.0)) ** p


@variants("spread")
def _spread() -> list[Scoring]:
    base = scoring.DEFAULT
    forms: list[tuple[str, Callable[[int, float], float]]] = [
        ("idf ratio x decay", _times_decay(_idf_ratio)),
        ("idf ratio alone", _idf_ratio),
        ("log ratio x decay", _times_decay(_log_ratio)),
        ("log ratio alone", _log_ratio),
        *((f"(1 - share) ^ {p} x decay", _times_decay(_unshared_power(p))) for p in (0.5, 2, 3)),
        *((f"1 - share ^ {p} x decay", _times_decay(_share_power(p))) for p in (2, 3)),
    ]
    return [
        dataclasses.replace(base, name="decay alone (before)", entity_common_share=None),
        *(dataclasses.replace(base, name=f"share over {t} x decay", entity_common_share=t)
          for t in (0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9)),
        *(_SpreadForm(**{**_fields(base), "name": name, "form": form}) for name, form in forms),
    ]


def _fields(profile: Scoring) -> dict[str, Any]:
    return {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)}


@variants("weights")
def _weights() -> list[Scoring]:
    return _weight_grid(scoring.DEFAULT)


@variants("weights-mem0")
def _weights_mem0() -> list[Scoring]:
    return _weight_grid(scoring.MEM0)


class _Unpickler(pickle.Unpickler):
    """Finds the classes :mod:`benchmarks.signals` pickled while running as ``__main__``."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__":
            module = "benchmarks.signals"
        return super().find_class(module, name)


def load(path: Path) -> dict[str, TaskSignals]:
    """The signals :mod:`benchmarks.signals` saved, by task."""
    with path.open("rb") as f:
        data: dict[str, TaskSignals] = _Unpickler(f).load()
    return data


COLUMNS = ("recall_1", "recall_5", "recall_10", "ndcg_10", "cat1_r10", "cat2_r10", "cat3_r10",
           "cat4_r10")


def main(argv: Sequence[str] | None = None) -> int:
    """Print, per task and variant, the scores on the fit and check conversations."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fusion")
    parser.add_argument("signals", type=Path)
    parser.add_argument("--fit", default=",".join(DEFAULT_FIT),
                        help="conversations to choose on (default: %(default)s)")
    parser.add_argument("--variants", default="base", help=", ".join(VARIANTS))
    # the data the signals came from: its order is the storage order the neighbour step follows
    dialogues.data_arguments(parser)
    args = parser.parse_args(argv)
    data: dict[str, TaskSignals] = load(args.signals)
    raw = dialogues.load_conversations(args.data, args.conversations)
    fit = [c for c in args.fit.split(",") if c]
    profiles = [p for family in args.variants.split(",") for p in VARIANTS[family]()]
    for task, signals in data.items():
        parts = split(signals, fit)
        print(f"## {task} (fit: {', '.join(fit)}: {len(parts['fit'])} questions; "
              f"check: {len(parts['check'])})")
        print("| variant | part | " + " | ".join(COLUMNS) + " |")
        fit_set = set(fit)
        where = positions(raw, task)
        for profile in profiles:
            results = score_all(signals.questions, profile, where)
            for part in ("fit", "check", "all"):
                chosen = [
                    (q, sc) for q, sc in results
                    if part == "all" or (q.conversation in fit_set) == (part == "fit")
                ]
                values = summarize(chosen)
                print(f"| {profile.name} | {part} | "
                      + " | ".join(f"{values.get(c, 0.0):.3f}" for c in COLUMNS) + " |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
