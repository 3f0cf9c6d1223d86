"""The ``Memory`` facade: validates input, runs the models, and hands the database one
statement per call. The pipeline's steps live in :mod:`pgmem.pipeline`; SQL in ``sql/``."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgmem import pipeline, scoring, validate
from pgmem.connection import Connector, ServerCapabilities
from pgmem.embedding import SentenceTransformerEmbedder, checked_embeddings
from pgmem.errors import ConfigurationError, InvalidInputError, SchemaError
from pgmem.filters import compile_filters
from pgmem.migrate import DEFAULT_SCHEMA, check_schema_name
from pgmem.nlp import TextAnalyzer
from pgmem.rerank import Reranker
from pgmem.results import MemoryRecord, SearchHit
from pgmem.store import Conn, Store

logger = logging.getLogger(__name__)

MODES: Mapping[str, tuple[str, ...]] = {
    "hybrid": pipeline.LEGS,
    "semantic": ("semantic",),
    "keyword": ("keyword",),
}


class Memory:
    """Agent memory in PostgreSQL: ``add`` texts to a scope, ``search`` them back.

    ``db`` is a DSN (libpq URL or key=value; None uses ``PGMEM_DSN``, then libpq's ``PG*``
    variables), or a psycopg ``Connection`` or ``ConnectionPool`` owned by the caller. Nothing
    connects or loads a model until the first call. The schema must exist (:func:`pgmem.migrate`).

    ``embedder``: any object with ``embed(texts)``; default all-MiniLM-L6-v2.
    ``nlp``: a :class:`~pgmem.nlp.TextAnalyzer` or a spaCy model name.
    ``reranker``: any object with ``rerank(query, hits, limit)``, used when ``rerank=True``.
    ``keyword_score``: ``"bm25"`` (default) or ``"ts_rank_cd"``.
    """

    def __init__(
        self,
        db: str | psycopg.Connection | ConnectionPool | None = None,  # type: ignore[type-arg]
        *,
        embedder: Any = None,
        nlp: TextAnalyzer | str | None = None,
        reranker: Reranker | None = None,
        schema: str = DEFAULT_SCHEMA,
        tenant: str = "default",
        keyword_score: str = "bm25",
        max_text_length: int = validate.MAX_TEXT_LENGTH,
        pool_max_size: int = 10,
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
        self.max_text_length = max_text_length
        self.embedder = embedder if embedder is not None else SentenceTransformerEmbedder()
        self.analyzer = nlp if isinstance(nlp, TextAnalyzer) else TextAnalyzer(nlp)
        self.reranker = reranker
        self._connector = Connector(db, max_size=pool_max_size)
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
    ) -> MemoryRecord:
        """Store ``text`` in the scope, with its embedding, lemmas and entities.

        Returns the stored :class:`MemoryRecord`. Everything is written in one transaction.

        Raises:
            ScopeError, InvalidInputError: bad arguments (nothing is written).
            EmbeddingError: the embedder's vectors are unusable.
            SchemaError: the schema is missing or has another dimension.
            DatabaseError: the database failed.
        """
        scope = validate.scope(self.tenant, user_id, agent_id, run_id)
        text = validate.text(text, max_length=self.max_text_length)
        meta = validate.metadata(metadata)
        analysis = self.analyzer.analyze(text)
        with self._connector.transaction() as (conn, _):
            vectors = self._embed(conn, pipeline.embedding_inputs(text, analysis.entities))
            row = self._store.insert_memory(
                conn, pipeline.add_params(scope, text, meta, analysis, vectors)
            )
        return pipeline.record(scope, text, meta, row)

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
        ``mode`` is ``"hybrid"`` (default), ``"semantic"`` or ``"keyword"`` (one signal alone);
        ``legs`` narrows which legs supply candidates (for measurements).

        Raises:
            ScopeError, InvalidInputError, FilterError: bad arguments.
            ConfigurationError: ``rerank=True`` without a reranker.
            DatabaseError: the database failed.
        """
        scope = validate.scope(self.tenant, user_id, agent_id, run_id)
        query = validate.text(query, what="query", max_length=self.max_text_length)
        limit = validate.limit(limit)
        threshold = validate.threshold(threshold)
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
        signals = MODES[mode]
        legs = tuple(legs) if legs is not None else signals
        if not set(legs) <= set(pipeline.LEGS):
            raise InvalidInputError(f"legs must be among {pipeline.LEGS}, got {legs!r}")
        condition, filter_params = compile_filters(filters)
        if rerank and self.reranker is None:
            raise ConfigurationError("rerank=True needs Memory(..., reranker=...)")
        fetch = scoring.internal_limit(limit) if rerank else limit

        analysis = self.analyzer.analyze(query)
        with self._connector.transaction() as (conn, capabilities):
            vectors = self._embed(
                conn, pipeline.embedding_inputs(query, pipeline.query_entities(analysis))
            )
            plan = pipeline.search_plan(
                scope, analysis, vectors,
                limit=limit,
                keyword_score=self.keyword_score,
                exact_scan=not capabilities.iterative_scan,
                entities_available=self.analyzer.entities_available,
                legs=legs,
                signals=signals,
            )
            self._set_search_options(conn, capabilities, limit)
            rows = self._store.search(conn, {**plan.params, **filter_params}, condition)
        hits = pipeline.fuse_rows(plan, rows, threshold=threshold, limit=fetch)
        return self._rerank(query, hits, limit) if rerank else hits

    # -- internals -------------------------------------------------------------------------

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

    def _set_search_options(self, conn: Conn, capabilities: ServerCapabilities, limit: int) -> None:
        if capabilities.iterative_scan:
            self._store.set_search_options(conn, ef_search=max(scoring.internal_limit(limit), 40))

    def _rerank(self, query: str, hits: list[SearchHit], limit: int) -> list[SearchHit]:
        assert self.reranker is not None
        try:
            return list(self.reranker.rerank(query, hits, limit))[:limit]
        except Exception:
            logger.warning("the reranker failed; returning the fused order", exc_info=True)
            return hits[:limit]
