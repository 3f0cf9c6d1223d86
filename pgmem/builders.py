"""The search pipeline and the memory lifecycle as pure builders: statement parameters in, results
out (the search plan, the fusion of its rows, the insert and update parameters, cursors).

Nothing here does I/O; the calls of :mod:`pgmem.operations` use these builders between the
model work and the statements they yield.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from psycopg import sql
from psycopg.types.json import Jsonb

from pgmem import scoring, validate
from pgmem.errors import (
    InvalidInputError,
)
from pgmem.languages import TextSearch
from pgmem.nlp import Analysis, Entity, or_tsquery
from pgmem.queries import NO_FILTER
from pgmem.results import (
    AddResult,
    EntityHit,
    Explain,
    HistoryEvent,
    MemoryRecord,
    Page,
    SearchHit,
)
from pgmem.store import SearchParams
from pgmem.validate import NewMemory, Scope

logger = logging.getLogger(__name__)

T = TypeVar("T")
Vectors = npt.NDArray[np.float32]
LEGS = ("semantic", "keyword", "entity")
MAX_EF_SEARCH = 1000  # pgvector rejects a larger hnsw.ef_search
MIN_EF_SEARCH = 40  # pgvector's default hnsw.ef_search
# The search statement reads a scope of at most this many memories row by row (exact cosine,
# each memory matched against the keywords) and searches a larger one through the HNSW and GIN
# indexes. Row by row costs microseconds a memory; a filtered HNSW walk over a scope that is a
# small share of the table visits many memories per hit, and stops at pgvector's
# max_scan_tuples.
SCOPE_SCAN_ROWS = 5000
NO_KEYWORD_TERMS = "the query has no keyword terms after lemmatizing: keyword signal off"


def content_hash(text: str) -> str:
    """The sha256 of a memory's text, hex: how exact duplicates are recognised."""
    return hashlib.sha256(text.encode()).hexdigest()


def query_entities(analysis: Analysis) -> tuple[Entity, ...]:
    """The query's entities the entity leg uses (at most MAX_QUERY_ENTITIES)."""
    return analysis.entities[: scoring.MAX_QUERY_ENTITIES]


@dataclass(frozen=True)
class SearchPlan:
    """What one search asks of the database, and what the fusion needs to know about it.
    ``n_terms`` is None while the statement makes the query's lexemes (PostgreSQL's text search
    configuration, see :mod:`pgmem.languages`): its rows say how many (:func:`fuse_rows`)."""

    params: SearchParams
    profile: scoring.Scoring
    n_terms: int | None
    semantic_active: bool
    keyword_active: bool
    entity_active: bool
    notes: tuple[str, ...]

    @property
    def signals(self) -> tuple[str, ...]:
        """The signals this query can use."""
        active = (self.semantic_active, self.keyword_active, self.entity_active)
        return tuple(signal for signal, on in zip(LEGS, active) if on)


def signals_of_mode(mode: object) -> tuple[str, ...]:
    """The signals a search ``mode`` scores: "hybrid" is all three; otherwise signal names
    joined by "+" ("semantic+keyword"). Raises InvalidInputError for anything else."""
    if mode == "hybrid":
        return LEGS
    names = mode.split("+") if isinstance(mode, str) else []
    if not names or not set(names) <= set(LEGS) or len(set(names)) != len(names):
        raise InvalidInputError(
            f"mode must be 'hybrid' or signals of {LEGS} joined by '+', got {validate.shown(mode)}"
        )
    return tuple(s for s in LEGS if s in names)


@dataclass(frozen=True)
class SearchRequest:
    """A checked search call. ``legs`` supply candidates, ``signals`` are scored; both are all
    three by default and narrowed only to measure one part alone."""

    scope: Scope
    query: str
    limit: int
    threshold: float
    condition: sql.Composable
    filter_params: dict[str, Any]
    signals: tuple[str, ...] = LEGS
    legs: tuple[str, ...] = LEGS
    profile: scoring.Scoring = scoring.DEFAULT


@dataclass(frozen=True)
class SearchInputs:
    """What a search statement is built from (:func:`search_plan`): the checked call, the
    query's analysis and vectors (the query's, then its entities'), and the keyword score and
    text search configuration it runs with."""

    request: SearchRequest
    analysis: Analysis
    vectors: Vectors
    keyword_score: str
    text_search: TextSearch
    #: The model's semantic scale (:func:`pgmem.scoring.stretch`; None: none).
    semantic_scale: scoring.SemanticScale | None = None


def search_plan(inputs: SearchInputs, *, exact_scan: bool) -> SearchPlan:
    """Parameters of the ``search`` statement; ``exact_scan`` where the server's pgvector has
    no iterative scan."""
    request, analysis, vectors = inputs.request, inputs.analysis, inputs.vectors
    text_search = inputs.text_search
    signals, legs = request.signals, request.legs
    terms = analysis.query_terms() if "keyword" in signals else ()
    entities = query_entities(analysis) if "entity" in signals else ()
    names = analysis.names if "entity" in signals else ()
    by_postgres = text_search.by_postgres and "keyword" in signals
    notes = []
    # (a lookup's names are those of stored entities: whether the query found any, its rows say)
    if "entity" in signals and not names and not text_search.entities_available:
        notes.append(text_search.entity_note)
    if "keyword" in signals and not terms and not by_postgres:
        notes.append(NO_KEYWORD_TERMS)
    internal_limit = scoring.internal_limit(request.limit)
    profile = request.profile
    hybrid = signals == LEGS and legs == LEGS
    return SearchPlan(
        params=SearchParams(
            scope=request.scope,
            filter_params=request.filter_params,
            filtered=request.condition is not NO_FILTER,
            embedding=vectors[0],
            semantic_limit=internal_limit if "semantic" in legs else 0,
            keyword_limit=internal_limit if "keyword" in legs else 0,
            entity_limit=internal_limit if "entity" in legs else 0,
            exact_scan=exact_scan,
            scan_rows=SCOPE_SCAN_ROWS,
            tsquery=or_tsquery(terms),
            # None: the statement makes them, from keyword_text (pgmem.languages)
            lexemes=None if by_postgres else tuple(terms),
            keyword_text=request.query if by_postgres else None,
            ts_config=text_search.config,
            keyword_score=inputs.keyword_score,
            bm25_k1=scoring.BM25_K1,
            bm25_b=scoring.BM25_B,
            entity_embeddings=tuple(vectors[1 : 1 + len(entities)]),
            entity_names=tuple(names),
            entity_neighbours=scoring.ENTITY_NEIGHBOURS,
            entity_min_similarity=profile.entity_min_similarity,
            scale_lo=None if inputs.semantic_scale is None else inputs.semantic_scale[0],
            scale_hi=None if inputs.semantic_scale is None else inputs.semantic_scale[1],
            spread_decay=scoring.SPREAD_DECAY,
            # The neighbour step (scoring.Scoring.after_weight): hybrid searches only, so that a
            # search of one signal finds what that signal alone finds.
            next=profile.after_weight > 0 and hybrid,
            previous=profile.before_weight > 0 and hybrid,
            neighbour_limit=scoring.neighbour_limit(request.limit),
            neighbour_window=profile.neighbour_window,
        ),
        profile=profile,
        n_terms=None if by_postgres else len(terms),
        semantic_active="semantic" in signals,
        keyword_active=by_postgres or bool(terms),
        entity_active=bool(entities),
        notes=tuple(notes),
    )


def fuse_rows(
    plan: SearchPlan, rows: Sequence[dict[str, Any]], *, threshold: float, limit: int,
    semantic_scale: scoring.SemanticScale | None = None,
) -> list[SearchHit]:
    """Score the statement's rows (step 8) and turn the best ``limit`` into hits. With a
    ``semantic_scale`` (the model's, :func:`pgmem.scoring.stretch`) the semantic signal --
    the threshold's, the fusion's and the hits' ``explain.semantic`` -- is the stretched
    similarity."""
    plan = with_entity_matches(with_query_terms(plan, rows), rows)
    keyword_score = plan.params.keyword_score
    # Candidates are keyed by their ids' integers (quicker to hash and sort than UUIDs) and
    # ordered by them so that ties break the same way on every run; only the hits returned are
    # decoded further (entity hits, metadata).
    by_key = {row["id"].int: row for row in rows}
    candidates = [
        scoring.Signals(
            key=key,
            semantic=scoring.stretch(float(row["semantic"]), semantic_scale),
            keyword_raw=scoring.keyword_raw(row["bm25"], row["rank_cd"], keyword_score),
            entity_hits=tuple(zip(row["entity_similarities"], row["entity_spreads"]))
            if row["entity_names"] else (),
            earlier=_neighbours(row["before_1"], row["before_2"]),
            later=_neighbours(row["after_1"], row["after_2"]),
        )
        for key, row in sorted(by_key.items())
    ]
    # Every row carries the scope's size, on which the BM25 scale and the entity weight depend.
    n_docs = rows[0]["keyword_n_docs"] if rows and keyword_score == "bm25" else None
    size = scope_size(rows)
    fused = scoring.fuse(
        candidates,
        n_terms=plan.n_terms or 0,
        semantic_active=plan.semantic_active,
        keyword_active=plan.keyword_active,
        entity_active=plan.entity_active,
        threshold=threshold,
        limit=limit,
        profile=plan.profile,
        n_docs=n_docs,
        scope_size=size,
    )
    return [
        _hit(
            by_key[f.key],
            Explain(
                semantic=f.semantic,
                keyword_raw=f.keyword_raw,
                keyword=f.keyword,
                entity=f.entity,
                context=f.context,
                context_from=None if f.context_from is None else by_key[f.context_from]["id"],
                max_possible=f.max_possible,
                score=f.score,
                keyword_score=keyword_score,
                scoring=plan.profile.name,
                scope_size=size,
                query_terms=plan.n_terms or 0,
                keyword_docs=n_docs,
                entity_hits=_entity_hits(by_key[f.key], plan.profile, size),
                legs=_legs(by_key[f.key]),
                signals=plan.signals,
                notes=plan.notes,
            ),
        )
        for f in fused
    ]


def _neighbours(
    one: uuid.UUID | None, two: uuid.UUID | None
) -> tuple[tuple[object, int], ...]:
    """A candidate's neighbours on one side as the statement gives them (one place away, two
    places away; NULL where none came), keyed as candidates are, with how many places away
    (written out: a search makes hundreds)."""
    if one is None:
        return () if two is None else ((two.int, 2),)
    return ((one.int, 1),) if two is None else ((one.int, 1), (two.int, 2))


def with_entity_matches(plan: SearchPlan, rows: Sequence[dict[str, Any]]) -> SearchPlan:
    """``plan`` with the entity signal on when a candidate has entity hits: a query whose only
    entities are names looked up in the statement (:attr:`Analysis.names`) has it when the
    scope links one of them."""
    if plan.entity_active or not any(row["entity_names"] for row in rows):
        return plan
    return replace(plan, entity_active=True)


def with_query_terms(plan: SearchPlan, rows: Sequence[dict[str, Any]]) -> SearchPlan:
    """``plan`` with the number of query terms the statement made (when it made them: every row
    says how many, as ``query_terms``)."""
    if plan.n_terms is not None:
        return plan
    n_terms = int(rows[0]["query_terms"]) if rows else 0
    notes = plan.notes if n_terms else (*plan.notes, NO_KEYWORD_TERMS)
    return replace(plan, n_terms=n_terms, keyword_active=n_terms > 0, notes=notes)


def _legs(row: dict[str, Any]) -> tuple[str, ...]:
    """The legs that returned a candidate, by name."""
    return tuple(leg for leg in sorted(LEGS) if row[f"{leg}_leg"])


def scope_size(rows: Sequence[dict[str, Any]]) -> int | None:
    """The searched scope's size from the statement's rows (each carries it): exact up to
    ``SCOPE_SCAN_ROWS`` memories, where the statement stops counting; beyond, the keyword leg's
    count when the query has keyword terms, else ``SCOPE_SCAN_ROWS + 1``: a lower bound, which
    weighs only an entity reaching more than half of it, whose spread already leaves it less
    than a 5,000th of its weight (pgmem.scoring.share_attenuation). None without rows."""
    if not rows:
        return None
    return max(int(rows[0]["scope_size"]), int(rows[0]["keyword_n_docs"] or 0))


def _entity_hits(
    row: dict[str, Any], profile: scoring.Scoring, size: int | None
) -> tuple[EntityHit, ...]:
    """A candidate's entity hits: the statement's three parallel arrays (NULL without hits),
    each with the weight ``profile`` gives its spread in a scope of ``size``."""
    if not row["entity_names"]:
        return ()
    hits = (
        EntityHit(name=name, similarity=float(similarity), spread=int(spread),
                  weight=profile.spread_weight(int(spread), size))
        for name, similarity, spread in zip(
            row["entity_names"], row["entity_similarities"], row["entity_spreads"], strict=True
        )
    )
    return tuple(sorted(hits, key=lambda h: (-h.similarity, h.name)))


def _hit(row: dict[str, Any], explain: Explain) -> SearchHit:
    return SearchHit(
        id=row["id"],
        text=row["text"],
        user_id=row["user_id"],
        agent_id=row["agent_id"],
        run_id=row["run_id"],
        metadata=json.loads(row["metadata"]),  # sent as text: decoded for hits only
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        score=explain.score,
        explain=explain,
    )

# -- the memory lifecycle: add, update, delete, get, get_all, history -----------------------


@dataclass(frozen=True)
class BatchEntities:
    """The entities of a batch of texts as ``insert_memories`` takes them.

    ``variants`` are the distinct entities (name, label and surface form); ``occurrences`` pair
    each text (1-based, in batch order) with the variants it mentions (1-based); ``surfaces`` are
    the distinct surface forms, embedded once each.
    """

    variants: tuple[Entity, ...]
    occurrences: tuple[tuple[int, int], ...]
    surfaces: tuple[str, ...]


def batch_entities(analyses: Sequence[Analysis]) -> BatchEntities:
    """The entities of ``analyses`` (one per text), deduplicated for the batch."""
    variants: dict[Entity, int] = {}
    occurrences = []
    for item, analysis in enumerate(analyses, start=1):
        for entity in analysis.entities:
            occurrences.append((item, variants.setdefault(entity, len(variants) + 1)))
    surfaces = tuple(dict.fromkeys(entity.surface for entity in variants))
    return BatchEntities(tuple(variants), tuple(occurrences), surfaces)


def insert_params(
    tenant: str,
    items: Sequence[NewMemory],
    analyses: Sequence[Analysis],
    entities: BatchEntities,
    vectors: Vectors,
    *,
    dedupe: bool,
    text_search: TextSearch,
) -> dict[str, Any]:
    """Parameters of ``lock_contents`` and ``insert_memories`` for one batch; ``vectors`` as
    the texts of the items that bring no embedding, then
    ``entities.surfaces`` (as :func:`pgmem.embedding.cached_embeddings` returns them). Where
    PostgreSQL makes the lexemes of
    ``text_search``, the statement makes them (the items' ``lexemes`` are None)."""
    n = sum(item.embedding is None for item in items)
    postgres = text_search.by_postgres
    surface_rows = {surface: n + k for k, surface in enumerate(entities.surfaces)}
    computed = iter(vectors[:n])
    embeddings = [next(computed) if item.embedding is None else item.embedding for item in items]
    return {
        "tenant": tenant,
        "dedupe": dedupe,
        "user_ids": [item.scope.user_id for item in items],
        "agent_ids": [item.scope.agent_id for item in items],
        "run_ids": [item.scope.run_id for item in items],
        "texts": [item.text for item in items],
        "content_hashes": [content_hash(item.text) for item in items],
        "metadata": [Jsonb(item.metadata) for item in items],
        "embeddings": embeddings,
        "ids": [item.id for item in items],
        "created_ats": [item.created_at for item in items],
        "updated_ats": [item.updated_at for item in items],
        "namespaces": [None if item.namespace is None else Jsonb(list(item.namespace))
                       for item in items],
        "keys": [item.key for item in items],
        "ttl_minutes": [item.ttl_minutes for item in items],
        "lexemes": [None if postgres else analysis.tsvector() for analysis in analyses],
        "lexeme_counts": [None if postgres else len(analysis.lexemes) for analysis in analyses],
        "ts_config": text_search.config,
        "entity_names": [v.name for v in entities.variants],
        "entity_labels": [v.label for v in entities.variants],
        "entity_embeddings": [vectors[surface_rows[v.surface]] for v in entities.variants],
        "occurrence_items": [item for item, _ in entities.occurrences],
        "occurrence_entities": [variant for _, variant in entities.occurrences],
    }


def restore_params(
    tenant: str, items: Sequence[NewMemory], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Parameters of ``restore_memories`` for a batch whose items brought an expiry, an origin
    or a history (an export's), given ``insert_memories``' rows (one per item, in order): for
    the memories the insert made, never a duplicate. None when there is nothing to restore."""
    made = [
        (item, row["id"]) for item, row in zip(items, rows, strict=True)
        if not row["duplicate"]
        and (item.expires_at is not None or item.origin is not None or item.history is not None)
    ]
    if not made:
        return None
    events = [(memory_id, event) for item, memory_id in made for event in item.history or ()]
    return {
        "tenant": tenant,
        "ids": [memory_id for _, memory_id in made],
        "expires_ats": [item.expires_at for item, _ in made],
        "origins": [None if item.origin is None else Jsonb(item.origin) for item, _ in made],
        "replaced_ids": [memory_id for item, memory_id in made if item.history is not None],
        "event_ids": [memory_id for memory_id, _ in events],
        "events": [event.event for _, event in events],
        "old_texts": [event.old_text for _, event in events],
        "new_texts": [event.new_text for _, event in events],
        "event_times": [event.created_at for _, event in events],
    }


def deleted_history_params(
    tenant: str, histories: Sequence[tuple[uuid.UUID, Sequence[validate.PastEvent]]]
) -> dict[str, Any]:
    """Parameters of ``restore_deleted_history``: each deleted memory's id and events."""
    events = [(memory_id, event) for memory_id, past in histories for event in past]
    return {
        "tenant": tenant,
        "event_ids": [memory_id for memory_id, _ in events],
        "events": [event.event for _, event in events],
        "old_texts": [event.old_text for _, event in events],
        "new_texts": [event.new_text for _, event in events],
        "event_times": [event.created_at for _, event in events],
    }


def duplicate_params(tenant: str, items: Sequence[NewMemory]) -> dict[str, Any]:
    """Parameters of ``stored_duplicates`` for ``items``."""
    return {
        "tenant": tenant,
        "user_ids": [item.scope.user_id for item in items],
        "agent_ids": [item.scope.agent_id for item in items],
        "run_ids": [item.scope.run_id for item in items],
        "content_hashes": [content_hash(item.text) for item in items],
    }


def memory_params(tenant: str, memory_id: uuid.UUID) -> dict[str, Any]:
    """Parameters of the statements about one memory (``get_memory``, ``lock_memory``,
    ``lock_linked_entities``, ``delete_memories``, ``memory_history``)."""
    return {"tenant": tenant, "id": memory_id, "ids": [memory_id], "entity_names": []}


def delete_params(tenant: str, memory_ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    """Parameters of ``lock_linked_entities`` and ``delete_memories``."""
    return {"tenant": tenant, "ids": list(memory_ids), "entity_names": []}


def update_params(
    tenant: str,
    memory_id: uuid.UUID,
    *,
    text: str | None = None,
    analysis: Analysis | None = None,
    vectors: Vectors | None = None,
    metadata: dict[str, Any] | None = None,
    text_search: TextSearch | None = None,
) -> dict[str, Any]:
    """Parameters of ``update_memory``. A new ``text`` comes with its ``analysis``, ``vectors``
    (the text's, then those of each of the analysis's entities' surface forms) and the
    ``text_search`` it was analysed in; None leaves text, or metadata, as stored."""
    params = {
        **memory_params(tenant, memory_id),
        "relink": False,
        "text": None,
        "content_hash": None,
        "embedding": None,
        "lexemes": None,
        "lexeme_count": None,
        "ts_config": None,
        "postgres_text": None,
        "metadata": None if metadata is None else Jsonb(metadata),
        "entity_names": [],
        "entity_labels": [],
        "entity_embeddings": [],
    }
    if text is not None:
        if analysis is None or vectors is None or text_search is None:
            raise ValueError("a new text needs its analysis, vectors and text search")
        entities = analysis.entities
        postgres = text_search.by_postgres
        params.update(
            relink=True,
            text=text,
            content_hash=content_hash(text),
            embedding=vectors[0],
            lexemes=None if postgres else analysis.tsvector(),
            lexeme_count=None if postgres else len(analysis.lexemes),
            ts_config=text_search.config,
            postgres_text=text if postgres else None,
            entity_names=[e.name for e in entities],
            entity_labels=[e.label for e in entities],
            entity_embeddings=list(vectors[1 : 1 + len(entities)]),
        )
    return params


def list_params(
    scope: Scope,
    filter_params: dict[str, Any],
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
) -> dict[str, Any]:
    """Parameters of ``list_memories``: one row more than ``limit``, after the cursor's position."""
    return {
        **scope.params(),
        **filter_params,
        "limit": limit + 1,
        "after_created_at": after[0] if after else None,
        "after_id": after[1] if after else None,
    }


def encode_cursor(created_at: datetime, memory_id: uuid.UUID) -> str:
    """The opaque cursor of the position just after the memory (``created_at``, ``memory_id``)."""
    raw = json.dumps([created_at.isoformat(), str(memory_id)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> tuple[datetime, uuid.UUID]:
    """The position a cursor of :func:`encode_cursor` stands for.

    Raises:
        InvalidInputError: ``cursor`` is not a cursor ``get_all`` returned.
    """
    problem = InvalidInputError(
        f"cursor {validate.shown(cursor)} is not a cursor that get_all returned"
    )
    if not isinstance(cursor, str) or not cursor.isascii():
        raise problem
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, memory_id = json.loads(raw)
        if not isinstance(created_at, str) or not isinstance(memory_id, str):
            raise problem
        position = datetime.fromisoformat(created_at), uuid.UUID(memory_id)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise problem from exc
    if position[0].tzinfo is None:
        raise problem
    return position


def record(tenant: str, row: dict[str, Any]) -> MemoryRecord:
    """The record of a stored memory, from a row of the memories table."""
    return MemoryRecord(**_record_fields(tenant, row))


def add_results(tenant: str, rows: Sequence[dict[str, Any]]) -> list[AddResult]:
    """The results of ``insert_memories``, one per item, in item order."""
    return [AddResult(**_record_fields(tenant, row), duplicate=row["duplicate"]) for row in rows]


def page(tenant: str, rows: Sequence[dict[str, Any]], limit: int) -> Page:
    """The page of ``list_memories`` rows (fetched with ``limit + 1``)."""
    items = tuple(record(tenant, row) for row in rows[:limit])
    more = len(rows) > limit
    return Page(
        items=items,
        next_cursor=encode_cursor(items[-1].created_at, items[-1].id) if more else None,
    )


def history_events(rows: Sequence[dict[str, Any]]) -> list[HistoryEvent]:
    """The rows of ``memory_history`` as events, oldest first."""
    return [
        HistoryEvent(
            event=row["event"],
            old_text=row["old_text"],
            new_text=row["new_text"],
            created_at=row["created_at"],
        )
        for row in rows
    ]


def _record_fields(tenant: str, row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "text": row["text"],
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "run_id": row["run_id"],
        "metadata": row["metadata"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "tenant": tenant,
    }
