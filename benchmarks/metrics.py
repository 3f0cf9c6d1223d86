"""Retrieval metrics for evidence-labelled questions. Pure functions over plain data.

A question has a set of *evidence ids* (LoCoMo dialogue ids such as ``"D1:3"``). A memory carries
the dialogue ids it was made from (one for a turn, one or more for an observation) and is
*relevant* when any of them is evidence. A ranking is the list of the retrieved memories' id sets,
best first.

- recall@k: distinct evidence ids covered by the top k memories / distinct evidence ids. A memory
  covers each of its ids that is evidence; an id covered twice counts once.
- nDCG@k: DCG of the top k with binary gains (1 for a relevant memory) and discount
  ``1 / log2(rank + 1)``, divided by the DCG of ``min(n_relevant, k)`` relevant memories in front,
  where ``n_relevant`` is how many memories of the corpus are relevant; 0 when none is.
- reciprocal rank: 1 / the rank of the first relevant memory within the top ``depth``, else 0.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, fields

RECALL_KS = (1, 5, 10, 20)
NDCG_K = 10
MRR_DEPTH = 20

Ranking = Sequence[Collection[str]]


def is_relevant(dia_ids: Collection[str], evidence: AbstractSet[str]) -> bool:
    """Whether a memory made from ``dia_ids`` supports a question with ``evidence``."""
    return any(dia_id in evidence for dia_id in dia_ids)


def recall_at_k(ranking: Ranking, evidence: AbstractSet[str], k: int) -> float:
    """The fraction of the distinct ``evidence`` ids covered by the top ``k`` memories."""
    if not evidence:
        raise ValueError("recall is undefined for a question without evidence")
    covered = {dia_id for dia_ids in ranking[:k] for dia_id in dia_ids if dia_id in evidence}
    return len(covered) / len(evidence)


def dcg(gains: Sequence[float]) -> float:
    """Discounted cumulative gain: ``sum(gain_i / log2(i + 1))`` over ranks i = 1, 2, ..."""
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def ndcg_at_k(ranking: Ranking, evidence: AbstractSet[str], n_relevant: int, k: int) -> float:
    """nDCG of the top ``k`` with binary relevance; ``n_relevant`` relevant memories exist."""
    ideal = dcg([1.0] * min(n_relevant, k))
    if ideal == 0:
        return 0.0
    gains = [1.0 if is_relevant(dia_ids, evidence) else 0.0 for dia_ids in ranking[:k]]
    return dcg(gains) / ideal


def reciprocal_rank(ranking: Ranking, evidence: AbstractSet[str], depth: int = MRR_DEPTH) -> float:
    """1 / the rank of the first relevant memory in the top ``depth``, or 0 if there is none."""
    for rank, dia_ids in enumerate(ranking[:depth], start=1):
        if is_relevant(dia_ids, evidence):
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True)
class Scores:
    """The metrics of one question, or their means over many."""

    recall_1: float
    recall_5: float
    recall_10: float
    recall_20: float
    ndcg_10: float
    mrr: float

    def as_dict(self) -> dict[str, float]:
        """The metrics by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def score_question(ranking: Ranking, evidence: AbstractSet[str], n_relevant: int) -> Scores:
    """Every metric of one question's ranking."""
    r1, r5, r10, r20 = (recall_at_k(ranking, evidence, k) for k in RECALL_KS)
    return Scores(
        recall_1=r1,
        recall_5=r5,
        recall_10=r10,
        recall_20=r20,
        ndcg_10=ndcg_at_k(ranking, evidence, n_relevant, NDCG_K),
        mrr=reciprocal_rank(ranking, evidence, MRR_DEPTH),
    )


def mean_scores(scores: Sequence[Scores]) -> Scores:
    """The mean of each metric over questions."""
    if not scores:
        raise ValueError("no questions to average")
    names = [f.name for f in fields(Scores)]
    return Scores(**{name: sum(getattr(s, name) for s in scores) / len(scores) for name in names})
