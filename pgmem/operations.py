"""The calls of ``Memory`` and ``AsyncMemory``, written once.

Each call of :class:`Operations` is a generator: it checks its arguments, then yields the work
to do — :class:`Compute` (model work, run directly by ``Memory`` and in a worker thread by
``AsyncMemory``, which awaits its async twin instead when the embedder has an async client)
and :class:`Transaction` (the statements of one transaction, built by the ``*_steps``
functions from :class:`~pgmem.store.Store`) — and returns the call's result. The facades only
run what is yielded, so the two cannot drift. The pure builders the calls use live in
:mod:`pgmem.builders`; the model work a :class:`Compute` runs, in
:class:`pgmem.model_work.ModelWork`; the configuration, in :class:`pgmem.settings.Settings`.
"""


from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from pgmem import exporting, scoring, validate
from pgmem.builders import (
    LEGS,
    SearchInputs,
    SearchRequest,
    add_results,
    decode_cursor,
    duplicate_params,
    fuse_rows,
    insert_params,
    list_params,
    signals_of_mode,
    update_params,
)
from pgmem.effects import (
    Operation,
    Steps,
    batch,
    compute,
    on_replica,
    result_of,
    transaction,
)
from pgmem.embedding_space import (
    RECHECK_SECONDS,
    EmbeddingSpace,
    matches,
    mismatch,
)
from pgmem.errors import (
    ConfigurationError,
    DimensionMismatchError,
    InvalidInputError,
)
from pgmem.exporting import Writable
from pgmem.filters import compile_filters
from pgmem.languages import TextSearch, check_name
from pgmem.migrate import check_schema_name
from pgmem.model_work import ModelWork
from pgmem.next_model import NextVectors
from pgmem.nlp import TextAnalyzer
from pgmem.rerank import Reranker
from pgmem.results import (
    AddResult,
    Exported,
    HistoryEvent,
    MemoryRecord,
    Page,
    SearchHit,
)
from pgmem.scope_sizes import LargeScopes
from pgmem.settings import QUERY_ANALYSES, Settings
from pgmem.steps import (
    VectorsOf,
    delete_all_steps,
    delete_steps,
    explain_search_steps,
    get_steps,
    history_steps,
    insert_steps,
    list_steps,
    restore_deleted_steps,
    search_batch,
    search_sql_steps,
    space_steps,
    update_steps,
)
from pgmem.store import Row, Store
from pgmem.validate import NewMemory, ScopeId

T = TypeVar("T")
P = ParamSpec("P")


def _scope_key(request: SearchRequest) -> Hashable:
    """What makes two searches' scopes the same set of memories: the scope ids and the
    metadata filter."""
    return request.scope, repr(request.condition), repr(sorted(request.filter_params.items()))


class Operations:
    """Every call of :class:`pgmem.Memory` and :class:`pgmem.AsyncMemory`, written once: each
    method is an :data:`Operation` generator (see the module docstring) taking the call's
    arguments, all of them, by keyword. Checks on creation the configuration the facades share
    (``settings``); the model work runs in ``models``. Nothing connects or loads a model
    here."""

    def __init__(self, settings: Settings, models: ModelWork) -> None:
        keyword_score, scoring_name = settings.keyword_score, settings.scoring
        if keyword_score not in scoring.KEYWORD_SCORES:
            raise ConfigurationError(
                f"keyword_score must be one of {scoring.KEYWORD_SCORES}, got {keyword_score!r}"
            )
        if scoring_name not in scoring.SCORINGS:
            raise ConfigurationError(
                f"scoring must be one of ('default', 'mem0'), got {scoring_name!r}"
            )
        if settings.query_analysis not in QUERY_ANALYSES:
            raise ConfigurationError(
                f"query_analysis must be one of {QUERY_ANALYSES}, got {settings.query_analysis!r}"
            )
        self.scoring = scoring.SCORINGS[scoring_name]
        self.schema = check_schema_name(settings.schema)
        validate.scope(settings.tenant, "-", None, None)  # checks the tenant
        self.tenant = settings.tenant
        self.keyword_score = keyword_score
        self.limits = validate.limits(settings.limits, settings.max_text_length)
        self.max_text_length = self.limits.max_text_length
        self.settings = settings
        self.models = models
        self.store = Store(self.schema, prepares=settings.prepares)
        self._space: EmbeddingSpace | None = None
        self._space_read = 0.0
        self._large_scopes = LargeScopes()

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
        ts_config: str | None = None,
    ) -> Operation[AddResult]:
        """See :meth:`pgmem.Memory.add`."""
        item = validate.new_memory(
            self.tenant, text, metadata, user_id, agent_id, run_id,
            limits=self.limits,
        )
        text_search = yield from self._text_search(ts_config)
        results = yield from self._add_batch([item], dedupe=dedupe, text_search=text_search)
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
        ts_config: str | None = None,
    ) -> Operation[list[AddResult]]:
        """See :meth:`pgmem.Memory.add_many`."""
        checked = validate.items(
            items, tenant=self.tenant, user_id=user_id, agent_id=agent_id, run_id=run_id,
            limits=self.limits,
        )
        size = validate.batch_size(batch_size)
        text_search = yield from self._text_search(ts_config)
        results: list[AddResult] = []
        for start in range(0, len(checked), size):
            results.extend((yield from self._add_new(
                checked[start : start + size], dedupe=dedupe, text_search=text_search,
                first=start,
            )))
            if on_progress is not None:
                on_progress(len(results), len(checked))
        return results

    def update(
        self,
        memory_id: uuid.UUID | str,
        *,
        text: str | None,
        metadata: Mapping[str, Any] | None,
        ts_config: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Operation[MemoryRecord]:
        """See :meth:`pgmem.Memory.update`."""
        checked_id = validate.memory_id(memory_id)
        guard = validate.scope_ids(user_id, agent_id, run_id)
        if text is None and metadata is None:
            raise InvalidInputError("update needs a new text, new metadata or both")
        meta = None if metadata is None else validate.metadata(metadata, self.limits)
        vectors_of: VectorsOf | None = None
        nexts: NextVectors | None = None
        new_text = None if text is None else validate.text(text, max_length=self.max_text_length)
        if new_text is None:
            params = update_params(self.tenant, checked_id, metadata=meta)
        else:
            # A missing memory (or one outside the guard's scope) is said before the new text's
            # model work; update_steps checks again under the memory's lock.
            yield from transaction(
                lambda _: get_steps(self.store, self.tenant, checked_id, guard)
            )
            text_search = yield from self._text_search(ts_config)
            space = yield from self._checked_space()
            vectors_of = (space, self.embedder_name)
            analysis, vectors = yield from self._model_work(
                self.models.analyze, self.models.aanalyze, new_text, space.dim, text_search
            )
            params = update_params(
                self.tenant, checked_id, text=new_text, analysis=analysis, vectors=vectors,
                metadata=meta, text_search=text_search,
            )
            nexts = yield from self._next_vectors(space, [new_text], params["entity_names"])
        return (
            yield from transaction(
                lambda capabilities: update_steps(
                    self.store, self.tenant, checked_id, params, vectors_of, guard,
                    routed=capabilities.citus, nexts=nexts,
                )
            )
        )

    def delete(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Operation[None]:
        """See :meth:`pgmem.Memory.delete`."""
        checked_id = validate.memory_id(memory_id)
        guard = validate.scope_ids(user_id, agent_id, run_id)
        yield from transaction(lambda capabilities: delete_steps(
            self.store, self.tenant, checked_id, guard, routed=capabilities.citus
        ))

    def delete_all(
        self, *, user_id: ScopeId | None, agent_id: ScopeId | None, run_id: ScopeId | None
    ) -> Operation[int]:
        """See :meth:`pgmem.Memory.delete_all`."""
        scope = validate.scope(self.tenant, user_id, agent_id, run_id, wildcard=True)
        return (yield from transaction(lambda capabilities: delete_all_steps(
            self.store, self.tenant, scope, routed=capabilities.citus
        )))

    # -- reads

    def get(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        primary: bool = False,
    ) -> Operation[MemoryRecord]:
        """See :meth:`pgmem.Memory.get`."""
        checked_id = validate.memory_id(memory_id)
        guard = validate.scope_ids(user_id, agent_id, run_id)
        return (yield from on_replica(
            transaction(lambda _: get_steps(self.store, self.tenant, checked_id, guard)),
            allowed=not primary,
        ))

    def get_all(
        self,
        *,
        user_id: ScopeId | None,
        agent_id: ScopeId | None,
        run_id: ScopeId | None,
        filters: Mapping[str, Any] | None,
        limit: int,
        cursor: str | None,
        primary: bool = False,
    ) -> Operation[Page]:
        """See :meth:`pgmem.Memory.get_all`."""
        scope = validate.scope(self.tenant, user_id, agent_id, run_id, wildcard=True)
        checked_limit = validate.limit(limit)
        condition, filter_params = compile_filters(filters, limits=self.limits)
        after = None if cursor is None else decode_cursor(cursor)
        params = list_params(scope, filter_params, limit=checked_limit, after=after)
        return (yield from on_replica(
            transaction(
                lambda _: list_steps(self.store, self.tenant, params, condition, checked_limit)
            ),
            allowed=not primary,
        ))

    def history(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        primary: bool = False,
    ) -> Operation[list[HistoryEvent]]:
        """See :meth:`pgmem.Memory.history`."""
        checked_id = validate.memory_id(memory_id)
        guard = validate.scope_ids(user_id, agent_id, run_id)
        return (yield from on_replica(
            transaction(lambda _: history_steps(self.store, self.tenant, checked_id, guard)),
            allowed=not primary,
        ))

    def export(
        self,
        out: Writable,
        *,
        user_id: ScopeId | None,
        agent_id: ScopeId | None,
        run_id: ScopeId | None,
        whole_tenant: bool,
        vectors: bool,
        history: bool,
        itersize: int,
        on_progress: Callable[[int, int], object] | None,
    ) -> Operation[Exported]:
        """See :meth:`pgmem.Memory.export` (:func:`pgmem.exporting.export`)."""
        return (yield from exporting.export(
            self.schema, self.tenant, out, user_id=user_id, agent_id=agent_id, run_id=run_id,
            whole_tenant=whole_tenant, vectors=vectors, history=history, itersize=itersize,
            on_progress=on_progress,
        ))

    def restore_deleted(
        self, histories: Sequence[Mapping[str, Any]], *, what: str = "histories"
    ) -> Operation[int]:
        """Write the history of memories deleted before an export (the file's ``{"id",
        "deleted": true, "history"}`` lines, :mod:`pgmem.exporting`) in one transaction, for
        the ids this tenant has never had (see ``restore_deleted_history``); how many
        memories' histories were written. ``what`` names the list in errors.

        Raises:
            InvalidInputError: a bad id or event (nothing is written).
        """
        checked: list[tuple[uuid.UUID, tuple[validate.PastEvent, ...]]] = []
        for index, entry in enumerate(histories):
            try:
                past = validate.history(entry.get("history"), self.limits)
                if not past:
                    raise InvalidInputError("a deleted memory's line needs its history")
                checked.append((validate.memory_id(entry.get("id")), past))
            except InvalidInputError as exc:
                raise type(exc)(f"{what}[{index}]: {exc}") from None
        if not checked:
            return 0
        return (yield from transaction(
            lambda _: restore_deleted_steps(self.store, self.tenant, checked)
        ))

    # -- search

    def search(
        self,
        query: str,
        *,
        user_id: ScopeId | None,
        agent_id: ScopeId | None,
        run_id: ScopeId | None,
        limit: int,
        threshold: float,
        filters: Mapping[str, Any] | None,
        rerank: bool,
        mode: str,
        legs: Sequence[str] | None,
        ts_config: str | None = None,
        primary: bool = False,
    ) -> Operation[list[SearchHit]]:
        """See :meth:`pgmem.Memory.search`."""
        request = self._search_request(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=threshold, filters=filters, mode=mode, legs=legs,
        )
        return (yield from on_replica(
            self.run_search(request, rerank=rerank, ts_config=ts_config), allowed=not primary
        ))

    def run_search(
        self, request: SearchRequest, *, rerank: bool = False, ts_config: str | None = None
    ) -> Operation[list[SearchHit]]:
        """The hits of a checked search (:meth:`search` after its checks)."""
        hits, _ = yield from self.search_hits(request, rerank=rerank, ts_config=ts_config)
        return hits

    def search_hits(
        self, request: SearchRequest, *, rerank: bool = False, ts_config: str | None = None
    ) -> Operation[tuple[list[SearchHit], dict[uuid.UUID, Row]]]:
        """The hits of a checked search, and the statement's row of each candidate by id (a
        store item's namespace and key: :mod:`pgmem.items`, whose searches have a namespace
        scope)."""
        reranker = self.models.reranker
        if rerank and reranker is None:
            raise ConfigurationError("rerank=True needs a reranker: Memory(..., reranker=...)")
        inputs = yield from self.search_inputs(request, ts_config)
        statement = functools.partial(search_batch, self.store, inputs)
        # A scope not known to be large is searched as a small one first: for a larger scope
        # that statement returns only the scope's size (pgmem.scope_sizes). Either statement
        # answers with one row at least, whose scope_size is the scope's (counted up to
        # scan_rows + 1) and whose id is NULL when there is no candidate.
        scope = _scope_key(request)
        large = scope in self._large_scopes
        plan, rows = yield from batch(functools.partial(statement, small=not large))
        size = rows[0]["scope_size"]
        if not large and size > plan.params.scan_rows:
            plan, rows = yield from batch(functools.partial(statement, small=False))
        self._large_scopes.note(scope, size, plan.params.scan_rows)
        rows = [row for row in rows if row["id"] is not None]
        fetch = scoring.internal_limit(request.limit) if rerank else request.limit
        hits = fuse_rows(
            plan, rows, threshold=request.threshold, limit=fetch,
            semantic_scale=self.semantic_scale,
        )
        if reranker is not None and rerank:
            hits = yield from compute(
                functools.partial(
                    self.models.rerank, reranker, request.query, hits, request.limit
                )
            )
        return hits, {row["id"]: row for row in rows}

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
        ts_config: str | None = None,
    ) -> Operation[str]:
        """See :meth:`pgmem.Memory.search_sql`."""
        return (yield from self._search_statement(
            search_sql_steps, query, user_id=user_id, agent_id=agent_id, run_id=run_id,
            limit=limit, filters=filters, mode=mode, legs=legs, ts_config=ts_config,
        ))

    def explain_search(
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
        analyze: bool,
        ts_config: str | None = None,
    ) -> Operation[dict[str, Any]]:
        """See :meth:`pgmem.Memory.explain_search`."""
        return (yield from self._search_statement(
            functools.partial(explain_search_steps, analyze=analyze), query, user_id=user_id,
            agent_id=agent_id, run_id=run_id, limit=limit, filters=filters, mode=mode, legs=legs,
            ts_config=ts_config,
        ))

    # -- internals

    def _search_statement(
        self,
        steps: Callable[..., Steps[T]],
        query: str,
        *,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        limit: int,
        filters: Mapping[str, Any] | None,
        mode: str,
        legs: Sequence[str] | None,
        ts_config: str | None,
    ) -> Operation[T]:
        """``steps`` (search_sql_steps, explain_search_steps) on the search statement of these
        arguments, built as :meth:`search` builds it."""
        request = self._search_request(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=0.0, filters=filters, mode=mode, legs=legs,
        )
        inputs = yield from self.search_inputs(request, ts_config)
        return (yield from transaction(functools.partial(steps, self.store, inputs)))

    def _add_new(
        self, items: Sequence[NewMemory], *, dedupe: bool, text_search: TextSearch,
        first: int = 0,
    ) -> Operation[list[AddResult]]:
        """:meth:`_add_batch`, unless ``dedupe`` and every item's scope already holds its text
        (and no item brings an id of its own): then the batch's duplicates, found before any
        model work -- a batch already stored (an import run again) loads no model."""
        if dedupe and items and all(item.id is None for item in items):
            params = duplicate_params(self.tenant, items)
            rows = yield from transaction(
                lambda _: result_of(self.store.stored_duplicates(params))
            )
            if len(rows) == len(items):
                return add_results(self.tenant, rows)
        return (yield from self._add_batch(
            items, dedupe=dedupe, text_search=text_search, first=first
        ))

    def _add_batch(
        self, items: Sequence[NewMemory], *, dedupe: bool, text_search: TextSearch,
        first: int = 0,
    ) -> Operation[list[AddResult]]:
        space = yield from self._checked_space()
        vectors_of = (space, self.embedder_name)
        params = yield from self._model_work(
            self._batch_params, self._abatch_params, items, space.dim, dedupe, text_search
        )
        nexts = yield from self._next_vectors(space, params["texts"], params["entity_names"])
        # Pipeline mode: the locks and the insert travel in one round trip.
        return (
            yield from transaction(
                lambda capabilities: insert_steps(
                    self.store, self.tenant, params, vectors_of, first, routed=capabilities.citus,
                    items=items if any(_restores(item) for item in items) else (),
                    nexts=nexts,
                ),
                pipeline=True,
            )
        )

    def _next_vectors(
        self, space: EmbeddingSpace, texts: Sequence[str], names: Sequence[str]
    ) -> Operation[NextVectors | None]:
        """A write's vectors of the model a re-embedding moves the schema to, when one is
        pending (as last read: see :meth:`_checked_space`) and this process can embed with
        it (:mod:`pgmem.next_model`); else None."""
        if space.next is None:
            return None
        return (yield from compute(
            functools.partial(self.models.next_vectors, space.next, texts, names)
        ))

    def _model_work(
        self, run: Callable[P, T], arun: Callable[P, Awaitable[T]], *args: P.args,
        **kwargs: P.kwargs,
    ) -> Operation[T]:
        """Yield the model work ``run(*args, **kwargs)`` as a :class:`Compute`, with
        ``arun``, its async twin, when the embedder awaits (:attr:`ModelWork.awaits`); its
        result."""
        return (yield from compute(
            functools.partial(run, *args, **kwargs),
            functools.partial(arun, *args, **kwargs) if self.models.awaits else None,
        ))

    def _batch_params(
        self, items: Sequence[NewMemory], dim: int, dedupe: bool, text_search: TextSearch
    ) -> Row:
        """A batch's insert: its analyses and vectors (:meth:`ModelWork.analyze_batch`; the
        items that bring their embedding are not embedded again)."""
        texts, to_embed = _batch_texts(items, dim)
        analyses, entities, vectors = self.models.analyze_batch(texts, to_embed, dim, text_search)
        return insert_params(
            self.tenant, items, analyses, entities, vectors, dedupe=dedupe,
            text_search=text_search,
        )

    async def _abatch_params(
        self, items: Sequence[NewMemory], dim: int, dedupe: bool, text_search: TextSearch
    ) -> Row:
        """:meth:`_batch_params`, awaiting the embedder (:meth:`ModelWork.aanalyze_batch`)."""
        texts, to_embed = _batch_texts(items, dim)
        analyses, entities, vectors = await self.models.aanalyze_batch(
            texts, to_embed, dim, text_search
        )
        return insert_params(
            self.tenant, items, analyses, entities, vectors, dedupe=dedupe,
            text_search=text_search,
        )

    def search_inputs(
        self, request: SearchRequest, ts_config: str | None = None
    ) -> Operation[SearchInputs]:
        """What the search statement of ``request`` is built from: the query's analysis and
        vectors (model work), in the text search configuration ``ts_config`` (None: the
        Memory's)."""
        text_search = yield from self._text_search(ts_config)
        dim = yield from self._dimension()
        analysis, vectors = yield from self._model_work(
            self.models.query_vectors, self.models.aquery_vectors, request.query, dim,
            text_search,
        )
        return SearchInputs(
            request, analysis, vectors, self.keyword_score, text_search, self.semantic_scale
        )

    def _text_search(self, ts_config: object) -> Operation[TextSearch]:
        """How a call's lexemes are made: in ``ts_config`` (None: the Memory's configuration),
        which the database must have -- its list is read once, and again for a name not on it.

        Raises:
            InvalidInputError: a call's ``ts_config`` the database does not have.
            ConfigurationError: the same for the Memory's configuration.
        """
        languages = self.models.languages
        name = languages.default if ts_config is None else check_name(ts_config)
        if not languages.known(name):
            available = yield from transaction(
                lambda _: result_of(self.store.text_search_configs()))
            languages.remember(available)
        return languages.get(languages.check(name))

    def _dimension(self) -> Operation[int]:
        """The schema's embedding dimension (see :meth:`_checked_space`)."""
        space = yield from self._checked_space()
        return space.dim

    @property
    def embedder_name(self) -> str:
        """The name the embedder's vectors are recorded under."""
        return self.models.embedder_name

    @property
    def semantic_scale(self) -> scoring.SemanticScale | None:
        """The semantic scale of the model (:func:`pgmem.scoring.stretch`): the one learned for
        it and kept in ``embedding_models`` (``pgmem reembed --learn-scale``), else the
        embedder's own ``semantic_scale``, else None (the similarity as it is)."""
        space = self._space
        if space is not None and space.scale is not None:
            return space.scale
        return self.models.semantic_scale

    def _checked_space(self) -> Operation[EmbeddingSpace]:
        """The model, dimension and storage of the schema's vectors, read on the first call and
        again when RECHECK_SECONDS have passed (a re-embedding may switch them), outside any
        transaction: models run outside transactions.

        Raises:
            ModelMismatchError: the schema holds another model's vectors than the embedder's.
            SchemaError: the schema is missing or too old.
        """
        if self._space is None or time.monotonic() - self._space_read > RECHECK_SECONDS:
            space = yield from transaction(lambda _: space_steps(self.store))
            if not matches(space, self.embedder_name):
                dim = yield from compute(self.models.embedder_dimension)
                raise mismatch(self.schema, space, self.embedder_name, dim)
            self._space, self._space_read = space, time.monotonic()
        return self._space

    def _checked_query(self, query: object) -> str:
        longest, setting = validate.query_limit(self.limits)
        return validate.text(query, what="query", max_length=longest, setting=setting)

    def _search_request(
        self,
        query: str,
        *,
        user_id: ScopeId | None,
        agent_id: ScopeId | None,
        run_id: ScopeId | None,
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
        if not checked_legs or not all(
            isinstance(leg, str) and leg in LEGS for leg in checked_legs
        ):
            raise InvalidInputError(f"legs must be among {LEGS}, got {validate.shown(legs)}")
        condition, filter_params = compile_filters(filters, limits=self.limits)
        return SearchRequest(
            scope=validate.scope(self.tenant, user_id, agent_id, run_id, wildcard=True),
            query=self._checked_query(query),
            limit=validate.limit(limit),
            threshold=validate.threshold(threshold),
            condition=condition,
            filter_params=filter_params,
            profile=self.scoring,
            signals=signals,
            legs=checked_legs,
        )


def _restores(item: NewMemory) -> bool:
    """Whether an item brings what an export restores after the insert (pgmem.exporting)."""
    return item.expires_at is not None or item.origin is not None or item.history is not None


class Configured:
    """The configuration ``Memory`` and ``AsyncMemory`` expose, read from their operations."""

    _ops: Operations

    @property
    def settings(self) -> Settings:
        """The settings this object was made with (keyword arguments applied)."""
        return self._ops.settings

    @property
    def schema(self) -> str:
        """pgmem's PostgreSQL schema."""
        return self._ops.schema

    @property
    def tenant(self) -> str:
        """The tenant every call reads and writes."""
        return self._ops.tenant

    @property
    def ts_config(self) -> str:
        """The text search configuration of the calls that name none (:mod:`pgmem.languages`)."""
        return self._ops.models.languages.default

    @property
    def keyword_score(self) -> str:
        """``"bm25"`` or ``"ts_rank_cd"``."""
        return self._ops.keyword_score

    @property
    def scoring(self) -> str:
        """The name of the scoring profile: ``"default"`` or ``"mem0"``."""
        return self._ops.scoring.name

    @property
    def max_text_length(self) -> int:
        """The longest text accepted, in characters."""
        return self._ops.max_text_length

    @property
    def limits(self) -> validate.Limits:
        """The largest inputs accepted (see :class:`pgmem.Limits`)."""
        return self._ops.limits

    @property
    def embedder(self) -> Any:
        """The embedder."""
        return self._ops.models.embedder

    @property
    def analyzer(self) -> TextAnalyzer:
        """The text analyzer (lemmas and entities)."""
        return self._ops.models.analyzer

    @property
    def reranker(self) -> Reranker | None:
        """The reranker used when ``rerank=True``, if any."""
        return self._ops.models.reranker


def _batch_texts(items: Sequence[NewMemory], dim: int) -> tuple[list[str], list[str]]:
    """A batch's texts, and those to embed (the items that bring no embedding).

    Raises:
        DimensionMismatchError: an item brings an embedding of another dimension than ``dim``.
    """
    for item in items:
        if item.embedding is not None and item.embedding.shape[0] != dim:
            raise DimensionMismatchError(
                f"an item brings a {item.embedding.shape[0]}-dimensional embedding but the "
                f"schema stores {dim}-dimensional ones"
            )
    return [item.text for item in items], [item.text for item in items if item.embedding is None]
