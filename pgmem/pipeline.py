"""The search pipeline and the memory lifecycle as pure steps: statement parameters in, results
out; and every call of :class:`pgmem.Memory` and :class:`pgmem.AsyncMemory`, written once.

Nothing here does I/O. A call is an :class:`Operations` method: a generator that checks its
arguments, then yields *effects* -- :class:`Compute` (model work) and :class:`Transaction`
(statements for one transaction, themselves yielded one by one by a steps generator) -- and
receives their results, until it returns the call's result. The two facades only run effects:
``Memory`` directly, ``AsyncMemory`` with ``await`` and worker threads. So the twins share every
argument check, statement, step and result shape, and cannot drift (psycopg builds its sync and
async protocol code on the same idea, generators driven by a sync or an async waiting loop).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
from psycopg import sql
from psycopg.types.json import Jsonb

from pgmem import scoring, validate
from pgmem.embedding import SentenceTransformerEmbedder, checked_embeddings
from pgmem.errors import (
    ConfigurationError,
    InvalidInputError,
    IsolationError,
    NotFoundError,
    SchemaError,
)
from pgmem.filters import compile_filters
from pgmem.migrate import check_schema_name
from pgmem.nlp import Analysis, Entity, TextAnalyzer, or_tsquery
from pgmem.rerank import Reranker
from pgmem.results import (
    AddResult,
    EntityHit,
    Explain,
    HistoryEvent,
    MemoryRecord,
    Page,
    SearchHit,
)
from pgmem.store import Row, Statement, Store
from pgmem.validate import NewMemory, Scope

if TYPE_CHECKING:
    from pgmem.connection import ServerCapabilities

logger = logging.getLogger(__name__)

T = TypeVar("T")
Vectors = npt.NDArray[np.float32]
LEGS = ("semantic", "keyword", "entity")
MAX_EF_SEARCH = 1000  # pgvector rejects a larger hnsw.ef_search


def content_hash(text: str) -> str:
    """The sha256 of a memory's text, hex: how exact duplicates are recognised."""
    return hashlib.sha256(text.encode()).hexdigest()


def embedding_inputs(text: str, entities: Sequence[Entity]) -> list[str]:
    """The texts embedded in one batch: the text itself, then each entity's surface form."""
    return [text, *(e.surface for e in entities)]


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


def search_plan(
    request: SearchRequest,
    analysis: Analysis,
    vectors: Vectors,
    *,
    keyword_score: str,
    exact_scan: bool,
    entities_available: bool,
) -> SearchPlan:
    """Parameters of the ``search`` statement. ``vectors``: the query, then its entities."""
    signals, legs = request.signals, request.legs
    terms = analysis.query_terms() if "keyword" in signals else ()
    entities = query_entities(analysis) if "entity" in signals else ()
    notes = []
    if "entity" in signals and not entities_available:
        notes.append("no spaCy model with entity recognition: entity signal off")
    if "keyword" in signals and not terms:
        notes.append("the query has no keyword terms after lemmatizing: keyword signal off")
    internal_limit = scoring.internal_limit(request.limit)
    return SearchPlan(
        params={
            **request.scope.params(),
            **request.filter_params,
            "embedding": vectors[0],
            "semantic_limit": internal_limit if "semantic" in legs else 0,
            "keyword_limit": internal_limit if "keyword" in legs else 0,
            "entity_limit": internal_limit if "entity" in legs else 0,
            "exact_scan": exact_scan,
            "tsquery": or_tsquery(terms),
            "lexemes": list(terms),
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


def add_embedding_inputs(items: Sequence[NewMemory], entities: BatchEntities) -> list[str]:
    """The texts embedded in one call for a batch: each item's text, then each surface form."""
    return [*(item.text for item in items), *entities.surfaces]


def insert_params(
    tenant: str,
    items: Sequence[NewMemory],
    analyses: Sequence[Analysis],
    entities: BatchEntities,
    vectors: Vectors,
    *,
    dedupe: bool,
) -> dict[str, Any]:
    """Parameters of ``lock_contents`` and ``insert_memories`` for one batch; ``vectors`` as
    made from :func:`add_embedding_inputs`."""
    n = len(items)
    surface_rows = {surface: n + k for k, surface in enumerate(entities.surfaces)}
    return {
        "tenant": tenant,
        "dedupe": dedupe,
        "user_ids": [item.scope.user_id for item in items],
        "agent_ids": [item.scope.agent_id for item in items],
        "run_ids": [item.scope.run_id for item in items],
        "texts": [item.text for item in items],
        "content_hashes": [content_hash(item.text) for item in items],
        "metadata": [Jsonb(item.metadata) for item in items],
        "embeddings": list(vectors[:n]),
        "lexemes": [analysis.tsvector() for analysis in analyses],
        "lexeme_counts": [len(analysis.lexemes) for analysis in analyses],
        "entity_names": [v.name for v in entities.variants],
        "entity_labels": [v.label for v in entities.variants],
        "entity_embeddings": [vectors[surface_rows[v.surface]] for v in entities.variants],
        "occurrence_items": [item for item, _ in entities.occurrences],
        "occurrence_entities": [variant for _, variant in entities.occurrences],
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
) -> dict[str, Any]:
    """Parameters of ``update_memory``. A new ``text`` comes with its ``analysis`` and
    ``vectors`` (from :func:`embedding_inputs`); None leaves text, or metadata, as stored."""
    params = {
        **memory_params(tenant, memory_id),
        "relink": False,
        "text": None,
        "content_hash": None,
        "embedding": None,
        "lexemes": None,
        "lexeme_count": None,
        "metadata": None if metadata is None else Jsonb(metadata),
        "entity_names": [],
        "entity_labels": [],
        "entity_embeddings": [],
    }
    if text is not None:
        if analysis is None or vectors is None:
            raise ValueError("a new text needs its analysis and vectors")
        entities = analysis.entities
        params.update(
            relink=True,
            text=text,
            content_hash=content_hash(text),
            embedding=vectors[0],
            lexemes=analysis.tsvector(),
            lexeme_count=len(analysis.lexemes),
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


# -- orchestration: effects, the steps of each transaction, and the calls ----------------------

#: The statements of one transaction: yields each :class:`~pgmem.store.Statement`, receives its
#: result, and returns the transaction's result.
Steps = Generator[Statement[Any], Any, T]


@dataclass(frozen=True)
class Compute(Generic[T]):
    """Model work (NLP, embedding, reranking), CPU-bound: ``Memory`` calls ``run`` directly,
    ``AsyncMemory`` in a worker thread. It runs outside any transaction."""

    run: Callable[[], T]


@dataclass(frozen=True)
class Transaction(Generic[T]):
    """Statements for one transaction on one connection: ``steps`` gets what the server can do.
    With ``pipeline`` they are sent in psycopg's pipeline mode (a statement that fetches nothing
    travels with the next one)."""

    steps: Callable[[ServerCapabilities], Steps[T]]
    pipeline: bool = False


Effect = Compute[Any] | Transaction[Any]
#: A call: yields effects, receives their results, and returns the call's result.
Operation = Generator[Effect, Any, T]


def result_of(statement: Statement[T]) -> Steps[T]:
    """Yield ``statement``; its result (``yield from`` it, for the type)."""
    result: T = yield statement
    return result


def transaction(
    steps: Callable[[ServerCapabilities], Steps[T]], *, pipeline: bool = False
) -> Operation[T]:
    """Yield a :class:`Transaction`; its result."""
    result: T = yield Transaction(steps, pipeline)
    return result


def compute(run: Callable[[], T]) -> Operation[T]:
    """Yield a :class:`Compute`; its result."""
    result: T = yield Compute(run)
    return result


def not_found(tenant: str, memory_id: uuid.UUID) -> NotFoundError:
    """The error for a memory id the tenant does not have."""
    return NotFoundError(f"no memory {memory_id} in tenant {tenant!r}")


def dimension_steps(store: Store) -> Steps[int]:
    """The embedding dimension of the store's schema. Raises SchemaError when it is missing."""
    dim = yield from result_of(store.schema_dimension())
    if dim is None:
        raise SchemaError(
            f"pgmem's schema {store.schema!r} is not in this database: "
            "run pgmem.migrate(dsn) or `pgmem migrate` first"
        )
    return int(dim)


def insert_steps(store: Store, tenant: str, params: Row) -> Steps[list[AddResult]]:
    """Add a batch (``params`` from :func:`insert_params`): the duplicate locks, then the insert.

    Raises:
        IsolationError: ``dedupe`` in a REPEATABLE READ transaction, whose snapshot predates the
            locks, so that a concurrent add of the same text would be missed. Raised after the
            insert, whose rows tell the isolation level; the caller's savepoint undoes it.
    """
    yield store.lock_contents(params)  # entity-name locks always, duplicate locks with dedupe
    rows = yield from result_of(store.insert_memories(params))
    if params["dedupe"] and rows and rows[0]["isolation"] == "repeatable read":
        raise IsolationError(
            "dedupe=True cannot detect duplicates in a REPEATABLE READ transaction: its snapshot "
            "predates the duplicate locks. Use READ COMMITTED or SERIALIZABLE, or pass "
            "dedupe=False; nothing was written"
        )
    return add_results(tenant, rows)


def update_steps(store: Store, tenant: str, memory_id: uuid.UUID, params: Row) -> Steps[MemoryRecord]:
    """Update a memory (``params`` from :func:`update_params`) after locking it and its entities."""
    if not (yield from result_of(store.lock_memory(params))):
        raise not_found(tenant, memory_id)
    yield store.lock_linked_entities(params)
    row = yield from result_of(store.update_memory(params))
    if row is None:  # not after lock_memory found it
        raise not_found(tenant, memory_id)
    return record(tenant, row)


def delete_steps(store: Store, tenant: str, memory_id: uuid.UUID) -> Steps[None]:
    """Delete a memory after locking it and its entities."""
    params = memory_params(tenant, memory_id)
    if not (yield from result_of(store.lock_memory(params))):
        raise not_found(tenant, memory_id)
    yield store.lock_linked_entities(params)
    yield store.delete_memories(params)


def delete_all_steps(store: Store, tenant: str, scope: Scope) -> Steps[int]:
    """Delete every memory of ``scope`` after locking them and their entities; how many."""
    ids = yield from result_of(store.lock_scope_memories(scope.params()))
    if not ids:
        return 0
    params = delete_params(tenant, ids)
    yield store.lock_linked_entities(params)
    deleted = yield from result_of(store.delete_memories(params))
    return len(deleted)


def get_steps(store: Store, tenant: str, memory_id: uuid.UUID) -> Steps[MemoryRecord]:
    """The memory ``memory_id``; NotFoundError when the tenant has none."""
    row = yield from result_of(store.get_memory(memory_params(tenant, memory_id)))
    if row is None:
        raise not_found(tenant, memory_id)
    return record(tenant, row)


def list_steps(
    store: Store, tenant: str, params: Row, condition: sql.Composable, limit: int
) -> Steps[Page]:
    """One page of ``get_all`` (``params`` from :func:`list_params`)."""
    rows = yield from result_of(store.list_memories(params, condition))
    return page(tenant, rows, limit)


def history_steps(store: Store, tenant: str, memory_id: uuid.UUID) -> Steps[list[HistoryEvent]]:
    """The events of ``memory_id``; NotFoundError when the tenant never had it."""
    rows = yield from result_of(store.memory_history(memory_params(tenant, memory_id)))
    if not rows:
        raise not_found(tenant, memory_id)
    return history_events(rows)


def search_steps(
    store: Store,
    request: SearchRequest,
    analysis: Analysis,
    vectors: Vectors,
    capabilities: ServerCapabilities,
    *,
    keyword_score: str,
    entities_available: bool,
) -> Steps[tuple[SearchPlan, list[Row]]]:
    """The search statement's plan and rows (steps 2-7), after the HNSW options it needs."""
    plan = search_plan(
        request, analysis, vectors,
        keyword_score=keyword_score,
        exact_scan=not capabilities.iterative_scan,
        entities_available=entities_available,
    )
    if capabilities.iterative_scan:
        # ef_search bounds what one HNSW scan returns: at least the over-fetch -- up to
        # pgvector's maximum, beyond which the iterative scan goes on fetching.
        ef_search = min(scoring.internal_limit(request.limit), MAX_EF_SEARCH)
        yield store.set_search_options(ef_search)
    rows = yield from result_of(store.search(plan.params, request.condition))
    return plan, rows


def search_sql_steps(
    store: Store,
    request: SearchRequest,
    analysis: Analysis,
    vectors: Vectors,
    capabilities: ServerCapabilities,
    *,
    keyword_score: str,
    entities_available: bool,
) -> Steps[str]:
    """The search statement with its parameters inlined (not run)."""
    plan = search_plan(
        request, analysis, vectors,
        keyword_score=keyword_score,
        exact_scan=not capabilities.iterative_scan,
        entities_available=entities_available,
    )
    return (yield from result_of(store.search_sql(plan.params, request.condition)))


def rerank_hits(
    reranker: Reranker, query: str, hits: list[SearchHit], limit: int
) -> list[SearchHit]:
    """The reranker's order of ``hits``, cut to ``limit``; the fused order when it fails."""
    try:
        return list(reranker.rerank(query, hits, limit))[:limit]
    except Exception:
        logger.warning("the reranker failed; returning the fused order", exc_info=True)
        return hits[:limit]


class Operations:
    """Every call of :class:`pgmem.Memory` and :class:`pgmem.AsyncMemory`, written once: each
    method is an :data:`Operation` generator (see the module docstring) taking the call's
    arguments, all of them, by keyword. Holds, and checks on creation, the configuration the
    facades share; nothing connects or loads a model here."""

    def __init__(
        self,
        *,
        embedder: Any,
        nlp: TextAnalyzer | str | None,
        reranker: Reranker | None,
        schema: str,
        tenant: str,
        keyword_score: str,
        max_text_length: int,
    ) -> None:
        if keyword_score not in scoring.KEYWORD_SCORES:
            raise ConfigurationError(
                f"keyword_score must be one of {scoring.KEYWORD_SCORES}, got {keyword_score!r}"
            )
        self.schema = check_schema_name(schema)
        validate.scope(tenant, "-", None, None)  # checks the tenant
        self.tenant = tenant
        self.keyword_score = keyword_score
        self.max_text_length = validate.max_text_length(max_text_length)
        self.embedder = embedder if embedder is not None else SentenceTransformerEmbedder()
        self.analyzer = nlp if isinstance(nlp, TextAnalyzer) else TextAnalyzer(nlp)
        self.reranker = reranker
        self.store = Store(self.schema)
        self._dim: int | None = None

    # -- writes

    def add(
        self,
        text: str,
        *,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        metadata: Mapping[str, Any] | None,
        dedupe: bool,
    ) -> Operation[AddResult]:
        """See :meth:`pgmem.Memory.add`."""
        item = validate.new_memory(
            self.tenant, text, metadata, user_id, agent_id, run_id,
            max_length=self.max_text_length,
        )
        results = yield from self._add_batch([item], dedupe=dedupe)
        return results[0]

    def add_many(
        self,
        items: Iterable[str | Mapping[str, Any]],
        *,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        dedupe: bool,
        batch_size: int,
        on_progress: Callable[[int, int], object] | None,
    ) -> Operation[list[AddResult]]:
        """See :meth:`pgmem.Memory.add_many`."""
        checked = validate.items(
            items, tenant=self.tenant, user_id=user_id, agent_id=agent_id, run_id=run_id,
            max_length=self.max_text_length,
        )
        size = validate.batch_size(batch_size)
        results: list[AddResult] = []
        for start in range(0, len(checked), size):
            results.extend((yield from self._add_batch(checked[start : start + size], dedupe=dedupe)))
            if on_progress is not None:
                on_progress(len(results), len(checked))
        return results

    def update(
        self,
        memory_id: uuid.UUID | str,
        *,
        text: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> Operation[MemoryRecord]:
        """See :meth:`pgmem.Memory.update`."""
        checked_id = validate.memory_id(memory_id)
        if text is None and metadata is None:
            raise InvalidInputError("update needs a new text, new metadata or both")
        meta = None if metadata is None else validate.metadata(metadata)
        if text is None:
            params = update_params(self.tenant, checked_id, metadata=meta)
        else:
            new_text = validate.text(text, max_length=self.max_text_length)
            dim = yield from self._dimension()
            analysis, vectors = yield from compute(functools.partial(self._analyze, new_text, dim))
            params = update_params(
                self.tenant, checked_id, text=new_text, analysis=analysis, vectors=vectors,
                metadata=meta,
            )
        return (
            yield from transaction(lambda _: update_steps(self.store, self.tenant, checked_id, params))
        )

    def delete(self, memory_id: uuid.UUID | str) -> Operation[None]:
        """See :meth:`pgmem.Memory.delete`."""
        checked_id = validate.memory_id(memory_id)
        yield from transaction(lambda _: delete_steps(self.store, self.tenant, checked_id))

    def delete_all(
        self, *, user_id: str | None, agent_id: str | None, run_id: str | None
    ) -> Operation[int]:
        """See :meth:`pgmem.Memory.delete_all`."""
        scope = validate.scope(self.tenant, user_id, agent_id, run_id)
        return (yield from transaction(lambda _: delete_all_steps(self.store, self.tenant, scope)))

    # -- reads

    def get(self, memory_id: uuid.UUID | str) -> Operation[MemoryRecord]:
        """See :meth:`pgmem.Memory.get`."""
        checked_id = validate.memory_id(memory_id)
        return (yield from transaction(lambda _: get_steps(self.store, self.tenant, checked_id)))

    def get_all(
        self,
        *,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        filters: Mapping[str, Any] | None,
        limit: int,
        cursor: str | None,
    ) -> Operation[Page]:
        """See :meth:`pgmem.Memory.get_all`."""
        scope = validate.scope(self.tenant, user_id, agent_id, run_id)
        checked_limit = validate.limit(limit)
        condition, filter_params = compile_filters(filters)
        after = None if cursor is None else decode_cursor(cursor)
        params = list_params(scope, filter_params, limit=checked_limit, after=after)
        return (
            yield from transaction(
                lambda _: list_steps(self.store, self.tenant, params, condition, checked_limit)
            )
        )

    def history(self, memory_id: uuid.UUID | str) -> Operation[list[HistoryEvent]]:
        """See :meth:`pgmem.Memory.history`."""
        checked_id = validate.memory_id(memory_id)
        return (yield from transaction(lambda _: history_steps(self.store, self.tenant, checked_id)))

    # -- search

    def search(
        self,
        query: str,
        *,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        limit: int,
        threshold: float,
        filters: Mapping[str, Any] | None,
        rerank: bool,
        mode: str,
        legs: Sequence[str] | None,
    ) -> Operation[list[SearchHit]]:
        """See :meth:`pgmem.Memory.search`."""
        request = self._search_request(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=threshold, filters=filters, mode=mode, legs=legs,
        )
        reranker = self.reranker
        if rerank and reranker is None:
            raise ConfigurationError("rerank=True needs a reranker: Memory(..., reranker=...)")
        analysis, vectors = yield from self._analyze_query(request.query)
        plan, rows = yield from transaction(
            functools.partial(
                search_steps, self.store, request, analysis, vectors,
                keyword_score=self.keyword_score,
                entities_available=self.analyzer.entities_available,
            )
        )
        fetch = scoring.internal_limit(request.limit) if rerank else request.limit
        hits = fuse_rows(plan, rows, threshold=request.threshold, limit=fetch)
        if reranker is not None and rerank:
            hits = yield from compute(
                functools.partial(rerank_hits, reranker, request.query, hits, request.limit)
            )
        return hits

    def search_sql(
        self,
        query: str,
        *,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        limit: int,
        filters: Mapping[str, Any] | None,
        mode: str,
        legs: Sequence[str] | None,
    ) -> Operation[str]:
        """See :meth:`pgmem.Memory.search_sql`."""
        request = self._search_request(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=0.0, filters=filters, mode=mode, legs=legs,
        )
        analysis, vectors = yield from self._analyze_query(request.query)
        return (
            yield from transaction(
                functools.partial(
                    search_sql_steps, self.store, request, analysis, vectors,
                    keyword_score=self.keyword_score,
                    entities_available=self.analyzer.entities_available,
                )
            )
        )

    # -- internals

    def _add_batch(
        self, items: Sequence[NewMemory], *, dedupe: bool
    ) -> Operation[list[AddResult]]:
        dim = yield from self._dimension()
        params = yield from compute(functools.partial(self._batch_params, items, dim, dedupe))
        # Pipeline mode: the locks and the insert travel in one round trip.
        return (
            yield from transaction(
                lambda _: insert_steps(self.store, self.tenant, params), pipeline=True
            )
        )

    def _batch_params(self, items: Sequence[NewMemory], dim: int, dedupe: bool) -> Row:
        """Lemmatize a batch together and embed it (texts and entity names) in one call."""
        analyses = self.analyzer.analyze_many([item.text for item in items], batch_size=len(items))
        entities = batch_entities(analyses)
        vectors = checked_embeddings(self.embedder, add_embedding_inputs(items, entities), dim)
        return insert_params(self.tenant, items, analyses, entities, vectors, dedupe=dedupe)

    def _analyze(self, text: str, dim: int) -> tuple[Analysis, Vectors]:
        """A text's analysis, and the vectors of the text and its entities."""
        analysis = self.analyzer.analyze(text)
        vectors = checked_embeddings(
            self.embedder, embedding_inputs(text, query_entities(analysis)), dim
        )
        return analysis, vectors

    def _analyze_query(self, query: str) -> Operation[tuple[Analysis, Vectors]]:
        dim = yield from self._dimension()
        return (yield from compute(functools.partial(self._analyze, query, dim)))

    def _dimension(self) -> Operation[int]:
        """The schema's embedding dimension, read once; models run outside transactions."""
        if self._dim is None:
            self._dim = yield from transaction(lambda _: dimension_steps(self.store))
        return self._dim

    def _search_request(
        self,
        query: str,
        *,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        limit: int,
        threshold: float,
        filters: Mapping[str, Any] | None,
        mode: str,
        legs: Sequence[str] | None,
    ) -> SearchRequest:
        signals = signals_of_mode(mode)
        checked_legs = (
            signals if legs is None
            else tuple(legs) if isinstance(legs, (list, tuple)) else ()
        )
        if not checked_legs or not all(isinstance(leg, str) and leg in LEGS for leg in checked_legs):
            raise InvalidInputError(f"legs must be among {LEGS}, got {validate.shown(legs)}")
        condition, filter_params = compile_filters(filters)
        return SearchRequest(
            scope=validate.scope(self.tenant, user_id, agent_id, run_id),
            query=validate.text(query, what="query", max_length=self.max_text_length),
            limit=validate.limit(limit),
            threshold=validate.threshold(threshold),
            condition=condition,
            filter_params=filter_params,
            signals=signals,
            legs=checked_legs,
        )


class Configured:
    """The configuration ``Memory`` and ``AsyncMemory`` expose, read from their operations."""

    _ops: Operations

    @property
    def schema(self) -> str:
        """pgmem's PostgreSQL schema."""
        return self._ops.schema

    @property
    def tenant(self) -> str:
        """The tenant every call reads and writes."""
        return self._ops.tenant

    @property
    def keyword_score(self) -> str:
        """``"bm25"`` or ``"ts_rank_cd"``."""
        return self._ops.keyword_score

    @property
    def max_text_length(self) -> int:
        """The longest text or query accepted, in characters."""
        return self._ops.max_text_length

    @property
    def embedder(self) -> Any:
        """The embedder."""
        return self._ops.embedder

    @property
    def analyzer(self) -> TextAnalyzer:
        """The text analyzer (lemmas and entities)."""
        return self._ops.analyzer

    @property
    def reranker(self) -> Reranker | None:
        """The reranker used when ``rerank=True``, if any."""
        return self._ops.reranker
