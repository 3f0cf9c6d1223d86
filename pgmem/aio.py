"""``AsyncMemory``: :class:`pgmem.Memory` for asyncio, with the same methods and arguments.

Both facades run the same calls, :class:`pgmem.operations.Operations`; this one awaits the
database (psycopg's ``AsyncConnection`` / ``AsyncConnectionPool``) and runs the CPU-bound model
work -- lemmatizing, embedding, reranking -- in worker threads (``asyncio.to_thread``), so the
event loop keeps serving while texts are embedded. An embedder with an async client
(:func:`pgmem.embedding.awaits`: a remote one) is awaited instead, its network wait holding no
thread; spaCy's analysis still runs in a worker thread meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pgmem import default_database, effects, operations, tracing
from pgmem.connection import (
    AsyncConnector,
    AsyncSource,
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
from pgmem.store import execute_async, send_async, stream_async

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack

T = TypeVar("T")


async def run_async(
    connector: AsyncConnector,
    operation: effects.Operation[T],
    *,
    reads: ReadRoute[AsyncConnector] | None = None,
    trace: tracing.CallTrace | None = None,
) -> T:
    """The twin of :func:`pgmem.memory.run`: model work in a worker thread, each transaction's
    or batch's statements awaited on a connection of ``connector`` (or of the replica, as
    ``reads`` says); the call's result."""
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
                result = await (
                    effect.arun() if effect.arun is not None else asyncio.to_thread(effect.run)
                )
                if trace is not None:
                    trace.leg("model", started)
                continue
            if isinstance(effect, effects.Stream):
                await _run_stream(connector, effect)
                result = None
                if trace is not None:
                    trace.leg("primary", started)
                continue
            replica = None if reads is None else reads.reader(effect.replica)
            if replica is not None and reads is not None:
                try:
                    result = await _run_statements(replica, effect)
                except PgmemError as exc:
                    if not replica_failure(exc):
                        raise
                    await replica.close()  # the next read there connects afresh
                    reads.failed(exc)
                    if trace is not None:
                        trace.fallback = True
                else:
                    if trace is not None:
                        trace.leg("replica", started)
                    continue
            result = await _run_retrying(connector, effect)
            if trace is not None:
                trace.leg("primary", started)


async def _run_retrying(
    connector: AsyncConnector, effect: effects.Transaction[T] | effects.Batch[T]
) -> T:
    """The effect's statements on ``connector``, again after a retryable failure."""
    for attempt in itertools.count():
        try:
            return await _run_statements(connector, effect)
        except ConnectionLostError as exc:
            if attempt >= connector.retries or not retryable(exc):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _run_stream(connector: AsyncConnector, effect: effects.Stream) -> None:
    """The twin of :func:`pgmem.memory._run_stream`; ``start`` and ``take`` run in a worker
    thread (they encode and write)."""
    async with connector.snapshot() as conn:
        head = await execute_async(conn, effect.head)
        await asyncio.to_thread(effect.start, head)
        for statement in effect.rows:
            async for rows in stream_async(conn, statement, effect.itersize):
                await asyncio.to_thread(effect.take, rows)


async def _run_statements(
    connector: AsyncConnector, effect: effects.Transaction[T] | effects.Batch[T]
) -> T:
    if isinstance(effect, effects.Batch):
        async with connector.batch() as (conn, capabilities):
            statements, read = effect.statements(capabilities)
            pending = [await send_async(conn, statement) for statement in statements]
        with wrap_db_errors():
            return read([await p.result_async() for p in pending])
    async with connector.transaction(pipeline=effect.pipeline) as (conn, capabilities):
        steps = effect.steps(capabilities)
        with contextlib.closing(steps):
            result: Any = None
            while True:
                try:
                    statement = steps.send(result)
                except StopIteration as done:
                    value: T = done.value
                    return value
                result = await execute_async(conn, statement)


class AsyncMemory(operations.Configured):
    """Agent memory in PostgreSQL, for asyncio: every method of :class:`pgmem.Memory`, with the
    same arguments and results, as a coroutine.

    ``db`` is a DSN (None: as for :class:`~pgmem.Memory`, the embedded default when nothing is
    configured), or a psycopg
    ``AsyncConnection`` or ``AsyncConnectionPool`` owned by the caller and never closed. As with
    ``Memory``, writes on a connection inside the caller's transaction (or outside autocommit)
    commit or roll back with it. The other arguments are ``Memory``'s. Nothing connects or
    loads a model until the first call.
    """

    def __init__(
        self,
        db: AsyncSource = None,
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
        self._connector = AsyncConnector(
            default_database.source(db, settings), **connector_options(settings)
        )
        read_dsn = checked_read_dsn(settings.read_dsn)
        self._reads = ReadRoute(
            None if read_dsn is None else AsyncConnector(read_dsn, **connector_options(settings)),
            host=self._connector.host, read_your_writes=settings.read_your_writes,
            fallback=settings.replica_fallback, retry_after=settings.replica_retry,
        )

    async def _call(
        self,
        name: str,
        operation: effects.Operation[T],
        *,
        writes: bool = False,
        scope: tuple[object, object, object] = (None, None, None),
    ) -> T:
        """As :meth:`pgmem.Memory._call`."""
        with tracing.call(
            name, tenant=self.tenant, enabled=self._ops.settings.tracing, scope=scope
        ) as trace:
            if writes:
                self._reads.wrote()
            try:
                result = await run_async(
                    self._connector, operation, reads=self._reads, trace=trace
                )
            finally:
                if writes:
                    self._reads.wrote()
            if trace is not None:
                trace.result(result)
            return result

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        """Close pgmem's own connection pool, shut down the thread a query embeds in beside its
        analysis, close the async client an embedder made (``OpenAIEmbedder``'s), and stop the
        spaCy process of an analyzer pgmem made (see :mod:`pgmem.nlp_process`). What was passed
        in as ``db`` or ``nlp`` stays open. As :meth:`pgmem.Memory.close`, a later call opens
        them again."""
        await self._connector.close()
        if self._reads.replica is not None:
            await self._reads.replica.close()
        await asyncio.to_thread(self._ops.models.close)
        await self._ops.models.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- writes ----------------------------------------------------------------------------

    async def add(
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
        """As :meth:`pgmem.Memory.add`."""
        return await self._call("add", self._ops.add(
            text, user_id=user_id, agent_id=agent_id, run_id=run_id, metadata=metadata,
            dedupe=dedupe, ts_config=ts_config,
        ), writes=True, scope=(user_id, agent_id, run_id))

    async def add_many(
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
        """As :meth:`pgmem.Memory.add_many`; ``on_progress`` is a plain function, called in the
        event loop."""
        return await self._call("add_many", self._ops.add_many(
            items, user_id=user_id, agent_id=agent_id, run_id=run_id, dedupe=dedupe,
            batch_size=batch_size, on_progress=on_progress, ts_config=ts_config,
        ), writes=True, scope=(user_id, agent_id, run_id))

    async def update(
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
        """As :meth:`pgmem.Memory.update`."""
        return await self._call("update", self._ops.update(
            memory_id, text=text, metadata=metadata, ts_config=ts_config,
            user_id=user_id, agent_id=agent_id, run_id=run_id,
        ), writes=True, scope=(user_id, agent_id, run_id))

    async def delete(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """As :meth:`pgmem.Memory.delete`."""
        await self._call("delete", self._ops.delete(
            memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id
        ), writes=True, scope=(user_id, agent_id, run_id))

    async def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> int:
        """As :meth:`pgmem.Memory.delete_all`."""
        return await self._call(
            "delete_all", self._ops.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id),
            writes=True, scope=(user_id, agent_id, run_id),
        )

    # -- reads -----------------------------------------------------------------------------

    async def get(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        primary: bool = False,
    ) -> MemoryRecord:
        """As :meth:`pgmem.Memory.get`."""
        return await self._call("get", self._ops.get(
            memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    async def get_all(
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
        """As :meth:`pgmem.Memory.get_all`."""
        return await self._call("get_all", self._ops.get_all(
            user_id=user_id, agent_id=agent_id, run_id=run_id, filters=filters, limit=limit,
            cursor=cursor, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    async def history(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        primary: bool = False,
    ) -> list[HistoryEvent]:
        """As :meth:`pgmem.Memory.history`."""
        return await self._call("history", self._ops.history(
            memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    # -- search ----------------------------------------------------------------------------

    async def export(
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
        """As :meth:`pgmem.Memory.export`; the lines are encoded and written, and
        ``on_progress`` called, in a worker thread."""
        return await self._call("export", self._ops.export(
            out, user_id=user_id, agent_id=agent_id, run_id=run_id,
            whole_tenant=whole_tenant, vectors=vectors, history=history, itersize=itersize,
            on_progress=on_progress,
        ), scope=(user_id, agent_id, run_id))

    async def search(
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
        """As :meth:`pgmem.Memory.search`."""
        return await self._call("search", self._ops.search(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            threshold=threshold, filters=filters, rerank=rerank, mode=mode, legs=legs,
            ts_config=ts_config, primary=primary,
        ), scope=(user_id, agent_id, run_id))

    async def search_sql(
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
        """As :meth:`pgmem.Memory.search_sql`."""
        return await self._call("search_sql", self._ops.search_sql(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            filters=filters, mode=mode, legs=legs, ts_config=ts_config,
        ), scope=(user_id, agent_id, run_id))

    async def explain_search(
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
        """As :meth:`pgmem.Memory.explain_search`."""
        return await self._call("explain_search", self._ops.explain_search(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
            filters=filters, mode=mode, legs=legs, analyze=analyze, ts_config=ts_config,
        ), scope=(user_id, agent_id, run_id))
