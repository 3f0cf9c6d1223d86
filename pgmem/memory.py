"""The ``Memory`` facade: validates input, runs the models, and hands the database one
statement per call. The pipeline's steps live in :mod:`pgmem.pipeline`; SQL in ``sql/``."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgmem import pipeline, scoring, validate
from pgmem.connection import DEFAULT_CONNECT_TIMEOUT, Connector, ServerCapabilities
from pgmem.embedding import SentenceTransformerEmbedder, checked_embeddings
from pgmem.errors import ConfigurationError, InvalidInputError, NotFoundError, SchemaError
from pgmem.filters import compile_filters
from pgmem.migrate import DEFAULT_SCHEMA, check_schema_name
from pgmem.nlp import TextAnalyzer
from pgmem.rerank import Reranker
from pgmem.results import AddResult, HistoryEvent, MemoryRecord, Page, SearchHit
from pgmem.store import Conn, Store

logger = logging.getLogger(__name__)



class Memory:
    """Agent memory in PostgreSQL: ``add`` texts to a scope, ``search`` them back.

    The lifecycle: ``add`` / ``add_many``, ``update``, ``delete`` / ``delete_all``, ``get``,
    ``get_all`` (cursor paging) and ``history``. Model work runs before a write's transaction
    opens, so no lock is held while texts are embedded.

    ``db`` is a DSN (libpq URL or key=value; None uses ``PGMEM_DSN``, then libpq's ``PG*``
    variables), or a psycopg ``Connection`` or ``ConnectionPool`` owned by the caller. Nothing
    connects or loads a model until the first call. The schema must exist (:func:`pgmem.migrate`).

    ``embedder``: any object with ``embed(texts)``; default all-MiniLM-L6-v2.
    ``nlp``: a :class:`~pgmem.nlp.TextAnalyzer` or a spaCy model name.
    ``reranker``: any object with ``rerank(query, hits, limit)``, used when ``rerank=True``.
    ``keyword_score``: ``"bm25"`` (default) or ``"ts_rank_cd"``.
    ``max_text_length``: the longest text or query accepted, in characters.
    ``connect_timeout``: seconds pgmem's own pool may take to connect before a call raises
    :class:`~pgmem.errors.ConnectionLostError` naming the reason.
    """

    def __init__(
        self,
        db: str | psycopg.Connection | ConnectionPool | None = None,
        *,
        embedder: Any = None,
        nlp: TextAnalyzer | str | None = None,
        reranker: Reranker | None = None,
        schema: str = DEFAULT_SCHEMA,
        tenant: str = "default",
        keyword_score: str = "bm25",
        max_text_length: int = validate.MAX_TEXT_LENGTH,
        pool_max_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if keyword_score not in scoring.KEYWORD_SCORES:
            raise ConfigurationError(
                f"keyword_score must be one of {scoring.KEYWORD_SCORES}, got {keyword_score!r}"
            )
        if db is None:
            db = os.environ.get("PGMEM_DSN", "")
        self.schema = check_schema_name(schema)
        self.tenant = tenant
        validate.scope(tenant, "-", None, None)  # checks the tenant
        self.keyword_score = keyword_score
        self.max_text_length = validate.max_text_length(max_text_length)
        self.embedder = embedder if embedder is not None else SentenceTransformerEmbedder()
        self.analyzer = nlp if isinstance(nlp, TextAnalyzer) else TextAnalyzer(nlp)
        self.reranker = reranker
        self._connector = Connector(db, max_size=pool_max_size, connect_timeout=connect_timeout)
        self._store = Store(schema)
        self._dim: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close pgmem's own connection pool. A connection or pool passed in stays open."""
        self._connector.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ----------------------------------------------------------------------------

    def add(
        self,
        text: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        dedupe: bool = True,
    ) -> AddResult:
        """Store ``text`` in the scope, with its embedding, lemmas and entities.

        Returns an :class:`AddResult`, the stored :class:`MemoryRecord`. With ``dedupe`` (the
        default) a text the scope already holds -- same content hash and the same user_id,
        agent_id and run_id, None matching None -- is not stored again: the existing memory is
        returned with ``duplicate=True``, its metadata unchanged. Everything is written in one
        transaction; concurrent adds of one text to one scope store it once.

        Raises:
            ScopeError, InvalidInputError: bad arguments (nothing is written).
            EmbeddingError: the embedder's vectors are unusable.
            SchemaError: the schema is missing or has another dimension.
            DatabaseError: the database failed.
        """
        item = validate.new_memory(
            self.tenant, text, metadata, user_id, agent_id, run_id,
            max_length=self.max_text_length,
        )
        return self._add_batch([item], dedupe=dedupe)[0]

    def add_many(
        self,
        items: Iterable[str | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        dedupe: bool = True,
        batch_size: int = 64,
        on_progress: Callable[[int, int], object] | None = None,
    ) -> list[AddResult]:
        """Store many texts, as :meth:`add` does each, in batches -- several times faster.

        An item is a text or a dict ``{"text": ..., "metadata": ..., "user_id": ...,
        "agent_id": ..., "run_id": ...}``; a scope key present in the dict replaces the call's
        value for that item. Every item is checked before anything is written. Each batch of
        ``batch_size`` items is lemmatized together, embedded in one call (texts and entity
        names) and written by one statement, in a transaction of its own; then
        ``on_progress(done, total)`` is called. When a batch fails, the batches before it stay
        written (``on_progress`` has said how many); inside a transaction of the caller's
        connection, every batch commits or rolls back with it. ``dedupe`` works as in
        :meth:`add`, also between items of the call.

        Returns one :class:`AddResult` per item, in item order.

        Raises:
            ScopeError, InvalidInputError: a bad argument or item, named by its index (nothing
                is written).
            EmbeddingError, SchemaError, DatabaseError: as :meth:`add`.
        """
        checked = validate.items(
            items, tenant=self.tenant, user_id=user_id, agent_id=agent_id, run_id=run_id,
            max_length=self.max_text_length,
        )
        size = validate.batch_size(batch_size)
        results: list[AddResult] = []
        for start in range(0, len(checked), size):
            results.extend(self._add_batch(checked[start : start + size], dedupe=dedupe))
            if on_progress is not None:
                on_progress(len(results), len(checked))
        return results

    def update(
        self,
        memory_id: uuid.UUID | str,
        *,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryRecord:
        """Change a memory's text, its metadata (replaced as a whole), or both.

        A new text is re-embedded and re-lemmatized and its entities re-linked; entities that no
        memory links to any more are deleted. ``updated_at`` moves; an UPDATE event keeps the old
        and new text. One transaction. Duplicates are not checked.

        Returns the updated :class:`MemoryRecord`.

        Raises:
            InvalidInputError: a malformed id, a bad text or metadata, or neither given.
            NotFoundError: this tenant has no memory with the id.
            EmbeddingError, SchemaError, DatabaseError: as :meth:`add`.
        """
        checked_id = validate.memory_id(memory_id)
        if text is None and metadata is None:
            raise InvalidInputError("update needs a new text, new metadata or both")
        meta = None if metadata is None else validate.metadata(metadata)
        if text is None:
            params = pipeline.update_params(self.tenant, checked_id, metadata=meta)
        else:
            new_text = validate.text(text, max_length=self.max_text_length)
            analysis = self.analyzer.analyze(new_text)
            vectors = checked_embeddings(
                self.embedder, pipeline.embedding_inputs(new_text, analysis.entities),
                self._dimension(),
            )
            params = pipeline.update_params(
                self.tenant, checked_id, text=new_text, analysis=analysis, vectors=vectors,
                metadata=meta,
            )
        with self._connector.transaction() as (conn, _):
            if not self._store.lock_memory(conn, params):
                raise self._not_found(checked_id)
            self._store.lock_linked_entities(conn, params)
            row = self._store.update_memory(conn, params)
        if row is None:  # not after lock_memory found it; kept for the type checker
            raise self._not_found(checked_id)
        return pipeline.record(self.tenant, row)

    def delete(self, memory_id: uuid.UUID | str) -> None:
        """Delete a memory, its entity links, and the entities no memory links to any more.

        Writes a DELETE event: :meth:`history` still answers for the id. One transaction.

        Raises:
            InvalidInputError: a malformed id.
            NotFoundError: this tenant has no memory with the id.
            DatabaseError: the database failed.
        """
        checked_id = validate.memory_id(memory_id)
        params = pipeline.memory_params(self.tenant, checked_id)
        with self._connector.transaction() as (conn, _):
            if not self._store.lock_memory(conn, params):
                raise self._not_found(checked_id)
            self._store.lock_linked_entities(conn, params)
            self._store.delete_memories(conn, params)

    def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> int:
        """Delete every memory of the scope as :meth:`delete` does, in one transaction.

        Returns how many memories were deleted.

        Raises:
            ScopeError: none of user_id, agent_id and run_id given.
            InvalidInputError: a bad scope id.
            DatabaseError: the database failed.
        """
        scope = validate.scope(self.tenant, user_id, agent_id, run_id)
        with self._connector.transaction() as (conn, _):
            ids = self._store.lock_scope_memories(conn, scope.params())
            if not ids:
                return 0
            params = pipeline.delete_params(self.tenant, ids)
            self._store.lock_linked_entities(conn, params)
            return len(self._store.delete_memories(conn, params))

    # -- reads -----------------------------------------------------------------------------

    def get(self, memory_id: uuid.UUID | str) -> MemoryRecord:
        """The memory with this id.

        Raises:
            InvalidInputError: a malformed id.
            NotFoundError: this tenant has no memory with the id.
            DatabaseError: the database failed.
        """
        checked_id = validate.memory_id(memory_id)
        with self._connector.transaction() as (conn, _):
            row = self._store.get_memory(conn, pipeline.memory_params(self.tenant, checked_id))
        if row is None:
            raise self._not_found(checked_id)
        return pipeline.record(self.tenant, row)

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """One page of the scope's memories that match ``filters`` (see :mod:`pgmem.filters`),
        oldest first (ties by id).

        Pass the page's ``next_cursor`` back as ``cursor`` for the next page; it is None on the
        last. Paging is by position, not offset: a memory added or deleted meanwhile never
        makes another appear twice or go missing.

        Returns a :class:`Page` of at most ``limit`` (1 to 1000) records.

        Raises:
            ScopeError, FilterError, InvalidInputError: bad arguments, or a cursor that
                get_all did not return.
            DatabaseError: the database failed.
        """
        scope = validate.scope(self.tenant, user_id, agent_id, run_id)
        checked_limit = validate.limit(limit)
        condition, filter_params = compile_filters(filters)
        after = None if cursor is None else pipeline.decode_cursor(cursor)
        params = pipeline.list_params(scope, filter_params, limit=checked_limit, after=after)
        with self._connector.transaction() as (conn, _):
            rows = self._store.list_memories(conn, params, condition)
        return pipeline.page(self.tenant, rows, checked_limit)

    def history(self, memory_id: uuid.UUID | str) -> list[HistoryEvent]:
        """The ADD, UPDATE and DELETE events of a memory, oldest first -- also once deleted.

        Raises:
            InvalidInputError: a malformed id.
            NotFoundError: this tenant never had a memory with the id.
            DatabaseError: the database failed.
        """
        checked_id = validate.memory_id(memory_id)
        with self._connector.transaction() as (conn, _):
            rows = self._store.memory_history(
                conn, pipeline.memory_params(self.tenant, checked_id)
            )
        if not rows:
            raise self._not_found(checked_id)
        return pipeline.history_events(rows)

    # -- lifecycle internals ---------------------------------------------------------------

    def _add_batch(self, items: Sequence[validate.NewMemory], *, dedupe: bool) -> list[AddResult]:
        analyses = self.analyzer.analyze_many([item.text for item in items], batch_size=len(items))
        entities = pipeline.batch_entities(analyses)
        vectors = checked_embeddings(
            self.embedder, pipeline.add_embedding_inputs(items, entities), self._dimension()
        )
        params = pipeline.insert_params(
            self.tenant, items, analyses, entities, vectors, dedupe=dedupe
        )
        # Pipeline mode: the locks and the insert travel in one round trip.
        with self._connector.transaction() as (conn, _), conn.pipeline():
            if dedupe:
                self._store.lock_contents(conn, params)
            rows = self._store.insert_memories(conn, params)
        return pipeline.add_results(self.tenant, rows)

    def _dimension(self) -> int:
        """The schema's embedding dimension; models run outside write transactions."""
        if self._dim is None:
            with self._connector.transaction() as (conn, _):
                return self._schema_dim(conn)
        return self._dim

    def _not_found(self, memory_id: uuid.UUID) -> NotFoundError:
        return NotFoundError(f"no memory {memory_id} in tenant {self.tenant!r}")

    # -- search ----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 20,
        threshold: float = 0.1,
        filters: Mapping[str, Any] | None = None,
        rerank: bool = False,
        mode: str = "hybrid",
        legs: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        """The memories of the scope most relevant to ``query``, best first.

        Fuses semantic similarity, keyword match and entity links (see :mod:`pgmem.scoring`);
        each hit's ``explain`` gives the breakdown. ``threshold`` drops memories whose semantic
        similarity is lower. ``filters`` constrain metadata (see :mod:`pgmem.filters`).
        ``mode`` names the signals scored: ``"hybrid"`` (default: all three), or ``"semantic"``,
        ``"keyword"``, ``"entity"`` joined by ``+`` (``"semantic+keyword"``); the legs of those
        signals supply candidates unless ``legs`` narrows them (for measurements).

        Raises:
            ScopeError, InvalidInputError, FilterError: bad arguments.
            ConfigurationError: ``rerank=True`` without a reranker.
            DatabaseError: the database failed.
        """
        request = self._search_request(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=threshold, filters=filters, mode=mode, legs=legs,
        )
        if rerank and self.reranker is None:
            raise ConfigurationError("rerank=True needs Memory(..., reranker=...)")
        with self._connector.transaction() as (conn, capabilities):
            plan = self._search_plan(conn, capabilities, request)
            rows = self._store.search(conn, plan.params, request.condition)
        fetch = scoring.internal_limit(request.limit) if rerank else request.limit
        hits = pipeline.fuse_rows(plan, rows, threshold=request.threshold, limit=fetch)
        return self._rerank(request.query, hits, request.limit) if rerank else hits

    def search_sql(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 20,
        filters: Mapping[str, Any] | None = None,
        mode: str = "hybrid",
        legs: Sequence[str] | None = None,
    ) -> str:
        """The statement :meth:`search` would send, with its parameters inlined (for EXPLAIN).

        On pgvector >= 0.8, search runs it after ``SET LOCAL hnsw.iterative_scan =
        relaxed_order`` and ``SET LOCAL hnsw.ef_search = <the over-fetch>``; set those too to
        see the plan a search gets.
        """
        request = self._search_request(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=0.0, filters=filters, mode=mode, legs=legs,
        )
        with self._connector.transaction() as (conn, capabilities):
            plan = self._search_plan(conn, capabilities, request)
            return self._store.search_sql(conn, plan.params, request.condition)

    # -- internals -------------------------------------------------------------------------

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
    ) -> pipeline.SearchRequest:
        signals = pipeline.signals_of_mode(mode)
        legs = tuple(legs) if legs is not None else signals
        if not legs or not set(legs) <= set(pipeline.LEGS):
            raise InvalidInputError(f"legs must be among {pipeline.LEGS}, got {legs!r}")
        condition, filter_params = compile_filters(filters)
        return pipeline.SearchRequest(
            scope=validate.scope(self.tenant, user_id, agent_id, run_id),
            query=validate.text(query, what="query", max_length=self.max_text_length),
            limit=validate.limit(limit),
            threshold=validate.threshold(threshold),
            condition=condition,
            filter_params=filter_params,
            signals=signals,
            legs=legs,
        )

    def _search_plan(
        self, conn: Conn, capabilities: ServerCapabilities, request: pipeline.SearchRequest
    ) -> pipeline.SearchPlan:
        analysis = self.analyzer.analyze(request.query)
        vectors = self._embed(
            conn, pipeline.embedding_inputs(request.query, pipeline.query_entities(analysis))
        )
        if capabilities.iterative_scan:
            # ef_search bounds what one HNSW scan returns: at least the over-fetch.
            self._store.set_search_options(conn, ef_search=scoring.internal_limit(request.limit))
        return pipeline.search_plan(
            request, analysis, vectors,
            keyword_score=self.keyword_score,
            exact_scan=not capabilities.iterative_scan,
            entities_available=self.analyzer.entities_available,
        )

    def _embed(self, conn: Conn, texts: Sequence[str]) -> pipeline.Vectors:
        return checked_embeddings(self.embedder, texts, self._schema_dim(conn))

    def _schema_dim(self, conn: Conn) -> int:
        if self._dim is None:
            dim = self._store.schema_dimension(conn, self.schema)
            if dim is None:
                raise SchemaError(
                    f"pgmem's schema {self.schema!r} is not in this database: "
                    "run pgmem.migrate(dsn) or `pgmem migrate` first"
                )
            self._dim = dim
        return self._dim

    def _rerank(self, query: str, hits: list[SearchHit], limit: int) -> list[SearchHit]:
        assert self.reranker is not None
        try:
            return list(self.reranker.rerank(query, hits, limit))[:limit]
        except Exception:
            logger.warning("the reranker failed; returning the fused order", exc_info=True)
            return hits[:limit]
