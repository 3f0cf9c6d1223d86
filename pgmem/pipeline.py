"""The search and add pipelines as pure steps: statement parameters in, results out.

Shared by :class:`pgmem.Memory` (and its async twin) so both build the same statements. Nothing
here does I/O: models and the database are the facade's business.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg.types.json import Jsonb

from pgmem import scoring
from pgmem.nlp import Analysis, Entity, or_tsquery, quote_lexeme
from pgmem.results import EntityHit, Explain, MemoryRecord, SearchHit
from pgmem.validate import Scope

Vectors = npt.NDArray[np.float32]
LEGS = ("semantic", "keyword", "entity")


def content_hash(text: str) -> str:
    """The sha256 of a memory's text, hex: how exact duplicates are recognised."""
    return hashlib.sha256(text.encode()).hexdigest()


def embedding_inputs(text: str, entities: Sequence[Entity]) -> list[str]:
    """The texts embedded in one batch: the text itself, then each entity's surface form."""
    return [text, *(e.surface for e in entities)]


def add_params(
    scope: Scope, text: str, metadata: dict[str, Any], analysis: Analysis, vectors: Vectors
) -> dict[str, Any]:
    """Parameters of ``insert_memory``; ``vectors`` as made from :func:`embedding_inputs`."""
    entities = analysis.entities
    return {
        **scope.params(),
        "text": text,
        "content_hash": content_hash(text),
        "metadata": Jsonb(metadata),
        "embedding": vectors[0],
        "lexemes": analysis.tsvector(),
        "lexeme_count": len(analysis.lexemes),
        "entity_names": [e.name for e in entities],
        "entity_labels": [e.label for e in entities],
        "entity_embeddings": list(vectors[1 : 1 + len(entities)]),
    }


def query_entities(analysis: Analysis) -> tuple[Entity, ...]:
    """The query's entities the entity leg uses (at most MAX_QUERY_ENTITIES)."""
    return analysis.entities[: scoring.MAX_QUERY_ENTITIES]


@dataclass(frozen=True)
class SearchPlan:
    """What one search asks of the database, and what the fusion needs to know about it."""

    params: dict[str, Any]
    n_terms: int
    semantic_active: bool
    keyword_active: bool
    entity_active: bool
    notes: tuple[str, ...]

    @property
    def signals(self) -> tuple[str, ...]:
        """The signals this query can use."""
        active = (self.semantic_active, self.keyword_active, self.entity_active)
        return tuple(signal for signal, on in zip(LEGS, active) if on)


def search_plan(
    scope: Scope,
    analysis: Analysis,
    vectors: Vectors,
    *,
    limit: int,
    keyword_score: str,
    exact_scan: bool,
    entities_available: bool,
    legs: Sequence[str] = LEGS,
    signals: Sequence[str] = LEGS,
) -> SearchPlan:
    """Parameters of the ``search`` statement. ``vectors``: the query, then its entities.

    ``legs`` are the legs that supply candidates, ``signals`` the signals that are scored; both
    default to all three and are narrowed only to measure one part alone.
    """
    terms = analysis.query_terms() if "keyword" in signals else ()
    entities = query_entities(analysis) if "entity" in signals else ()
    notes = []
    if "entity" in signals and not entities_available:
        notes.append("no spaCy model with entity recognition: entity signal off")
    if "keyword" in signals and not terms:
        notes.append("the query has no keyword terms after lemmatizing: keyword signal off")
    internal_limit = scoring.internal_limit(limit)
    return SearchPlan(
        params={
            **scope.params(),
            "embedding": vectors[0],
            "semantic_limit": internal_limit if "semantic" in legs else 0,
            "keyword_limit": internal_limit if "keyword" in legs else 0,
            "entity_limit": internal_limit if "entity" in legs else 0,
            "exact_scan": exact_scan,
            "tsquery": or_tsquery(terms),
            "lexemes": list(terms),
            "lexeme_queries": [quote_lexeme(t) for t in terms],
            "keyword_score": keyword_score,
            "bm25_k1": scoring.BM25_K1,
            "bm25_b": scoring.BM25_B,
            "entity_embeddings": list(vectors[1 : 1 + len(entities)]),
            "entity_neighbours": scoring.ENTITY_NEIGHBOURS,
            "entity_min_similarity": scoring.ENTITY_MIN_SIMILARITY,
            "spread_decay": scoring.SPREAD_DECAY,
        },
        n_terms=len(terms),
        semantic_active="semantic" in signals,
        keyword_active=bool(terms),
        entity_active=bool(entities),
        notes=tuple(notes),
    )


def fuse_rows(
    plan: SearchPlan, rows: Sequence[dict[str, Any]], *, threshold: float, limit: int
) -> list[SearchHit]:
    """Score the statement's rows (step 8) and turn the best ``limit`` into hits."""
    keyword_score = plan.params["keyword_score"]
    by_id = {row["id"]: row for row in rows}
    hits_by_id = {row["id"]: _entity_hits(row["entity_hits"]) for row in rows}
    # Order candidates by id first so that ties break the same way on every run.
    candidates = [
        scoring.Signals(
            key=row["id"],
            semantic=float(row["semantic"]),
            keyword_raw=scoring.keyword_raw(row["bm25"], row["rank_cd"], keyword_score),
            entity_hits=tuple((h.similarity, h.spread) for h in hits_by_id[row["id"]]),
        )
        for row in sorted(rows, key=lambda r: r["id"])
    ]
    fused = scoring.fuse(
        candidates,
        n_terms=plan.n_terms,
        semantic_active=plan.semantic_active,
        keyword_active=plan.keyword_active,
        entity_active=plan.entity_active,
        threshold=threshold,
        limit=limit,
    )
    return [
        _hit(
            by_id[f.key],
            Explain(
                semantic=f.semantic,
                keyword_raw=f.keyword_raw,
                keyword=f.keyword,
                entity=f.entity,
                max_possible=f.max_possible,
                score=f.score,
                keyword_score=keyword_score,
                entity_hits=hits_by_id[f.key],
                legs=tuple(by_id[f.key]["legs"]),
                signals=plan.signals,
                notes=plan.notes,
            ),
        )
        for f in fused
    ]


def _entity_hits(raw: Any) -> tuple[EntityHit, ...]:
    if not raw:
        return ()
    items = json.loads(raw) if isinstance(raw, str) else raw
    hits = (
        EntityHit(name=h["name"], similarity=float(h["similarity"]), spread=int(h["spread"]))
        for h in items
    )
    return tuple(sorted(hits, key=lambda h: (-h.similarity, h.name)))


def _hit(row: dict[str, Any], explain: Explain) -> SearchHit:
    return SearchHit(
        id=row["id"],
        text=row["text"],
        user_id=row["user_id"],
        agent_id=row["agent_id"],
        run_id=row["run_id"],
        metadata=row["metadata"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        score=explain.score,
        explain=explain,
    )


def record(scope: Scope, text: str, metadata: dict[str, Any], row: dict[str, Any]) -> MemoryRecord:
    """The record of a memory just written."""
    return MemoryRecord(
        id=row["id"],
        text=text,
        user_id=scope.user_id,
        agent_id=scope.agent_id,
        run_id=scope.run_id,
        metadata=metadata,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        tenant=scope.tenant,
    )
