"""The search page's arithmetic, pure: each hit's score as stacked parts, and the ranking again
with signals switched off -- made by :func:`pgmem.scoring.fuse` from the hits' ``explain``,
the formula the search itself ran."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pgmem import scoring
from pgmem.results import SearchHit

#: The signals a user may switch off, as the page names them.
SIGNALS = ("semantic", "keyword", "entity", "neighbour")


@dataclass(frozen=True)
class Part:
    """One part of a score's bar: its signal, its value before dividing, and its share of the
    largest possible score (the bar's width is ``share`` of the full width)."""

    signal: str
    value: float
    share: float


def parts(hit: SearchHit) -> list[Part]:
    """The stacked parts of ``hit``'s score: semantic, keyword (normalised), entity boost and
    the neighbour step, each over ``max_possible``; their shares add up to the score."""
    ex = hit.explain
    profile = scoring.SCORINGS.get(ex.scoring, scoring.DEFAULT)
    semantic_on = "semantic" in ex.signals
    values = (
        ("semantic", profile.semantic_weight * ex.semantic if semantic_on else 0.0),
        ("keyword", profile.keyword_weight * ex.keyword),
        ("entity", ex.entity),
        ("neighbour", ex.context),
    )
    mp = ex.max_possible or 1.0
    return [Part(signal, value, value / mp) for signal, value in values]


@dataclass(frozen=True)
class Reranked:
    """A candidate's place and score with some signals off, beside its place as searched."""

    id: uuid.UUID
    score: float
    rank: int
    searched_rank: int | None
    dropped: bool = False


def rerank(
    candidates: Sequence[SearchHit],
    *,
    off: Iterable[str],
    threshold: float,
    limit: int,
    neighbours: Mapping[uuid.UUID, tuple[Sequence[uuid.UUID], Sequence[uuid.UUID]]],
    searched: Sequence[uuid.UUID],
) -> list[Reranked]:
    """The ranking of ``candidates`` (the hits of one search, with the same query and scope)
    with the signals ``off`` switched off, by :func:`pgmem.scoring.fuse` with the profile,
    query terms and scope size their ``explain`` records. ``neighbours``: each candidate's
    (before, after) ids in the scope's order, nearest first; ``searched``: the ids as the
    search ranked them. Switching ``semantic`` off also lifts the threshold gate, as
    ``mode`` without it does."""
    if not candidates:
        return []
    off = set(off)
    first = candidates[0].explain
    profile = scoring.SCORINGS.get(first.scoring, scoring.DEFAULT)
    if "neighbour" in off:
        profile = dataclasses.replace(profile, after_weight=0.0, before_weight=0.0)
    signals = set(first.signals)
    keys = {hit.id for hit in candidates}

    def near(ids: Sequence[uuid.UUID]) -> tuple[tuple[object, int], ...]:
        window = profile.neighbour_window
        return tuple((i, d) for d, i in enumerate(ids[:window], start=1) if i in keys)

    rows = [
        scoring.Signals(
            key=hit.id,
            semantic=hit.explain.semantic,
            keyword_raw=hit.explain.keyword_raw,
            entity_hits=tuple((h.similarity, h.spread) for h in hit.explain.entity_hits),
            earlier=near(neighbours.get(hit.id, ((), ()))[0]),
            later=near(neighbours.get(hit.id, ((), ()))[1]),
        )
        for hit in candidates
    ]
    fused = scoring.fuse(
        rows,
        n_terms=first.query_terms,
        keyword_active="keyword" in signals and "keyword" not in off,
        entity_active="entity" in signals and "entity" not in off,
        semantic_active="semantic" in signals and "semantic" not in off,
        threshold=threshold,
        limit=len(rows),
        profile=profile,
        n_docs=first.keyword_docs,
        scope_size=first.scope_size,
    )
    searched_rank = {key: n for n, key in enumerate(searched, start=1)}
    out = [
        Reranked(id=f.key, score=f.score, rank=n, searched_rank=searched_rank.get(f.key),
                 dropped=n > limit)
        for n, f in enumerate(fused, start=1) if isinstance(f.key, uuid.UUID)
    ]
    return out
