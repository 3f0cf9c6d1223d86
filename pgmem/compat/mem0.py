"""Mem0 OSS's ``Memory`` and ``AsyncMemory`` over pgmem: switch an app with an import change.

::

    # from mem0 import Memory
    from pgmem.compat.mem0 import Memory

    m = Memory.from_config(config)          # the same config dict; its pgvector store's database
    m.add("I moved to Lyon", user_id="alice", metadata={"topic": "home"})
    m.search("where does she live?", filters={"user_id": "alice", "topic": "home"}, top_k=5)

    # from mem0 import AsyncMemory
    from pgmem.compat.mem0 import AsyncMemory

    m = AsyncMemory.from_config(config)
    await m.search("where does she live?", filters={"user_id": "alice"})

The methods, arguments and return shapes are those of mem0ai 2.2.1's ``Memory`` and
``AsyncMemory`` on their LLM-free path (``infer=False``): ``add``, ``search``, ``get``,
``get_all``, ``update``, ``delete``, ``delete_all``, ``history``, ``reset`` (coroutines in
``AsyncMemory``). Results are plain dicts shaped as Mem0's (``{"results": [{"id", "memory",
"hash", "metadata", "score", "created_at", "updated_at", "user_id", ...}]}``), with pgmem's
hybrid score in ``score``. Both classes run the same calls (``pgmem/compat/mem0_calls.py``).
Nothing here imports mem0.

Meaning as in Mem0 2.2.1 (where pgmem's own API differs; docs/mem0.md):

- A config's ``collection_name`` (default ``mem0``) is the pgmem **tenant**: two collections on
  one database are kept apart, and ``reset()`` empties only its own.
- A scope id ``"*"`` in ``filters`` matches any value of that id, but one: ``{"user_id":
  "alice", "run_id": "*"}`` is Alice's memories that have a run. A scope id given as a keyword
  (``add``, ``delete_all``, and pgmem's keyword form of ``search`` / ``get_all``) is a literal
  name: ``user_id="*"`` is the user named ``*``.
- ``contains`` / ``icontains`` match the value's text, JSON text for a list or a number
  (Mem0's ``LIKE`` on ``payload->>key``); a dotted key is the metadata key of that name.
- A metadata condition on a key a memory lacks leaves it out, under ``ne``, ``nin`` and
  ``NOT`` too (Mem0's SQL NULL); ``"*"`` is "has the key".
- ``threshold`` gates the semantic similarity clamped at 0, so ``threshold=0.0`` drops nothing;
  ``explain=True`` gives ``score_details`` with Mem0's keys (``semantic_score``,
  ``bm25_score``, ``entity_boost``, ``raw_score``, ``max_possible_score``, ``final_score``,
  ``threshold``).
- :meth:`Memory.from_config` fills what a pgvector config leaves out as Mem0 does (database
  ``postgres``).

Where it differs from Mem0, on purpose:

- ``infer`` defaults to False and ``infer=True`` raises :class:`InferenceNotSupportedError`:
  pgmem stores text as given and never calls an LLM -- unless the app passes its own
  ``extractor`` (messages -> list of fact strings), whose facts are then stored.
- ``search`` and ``get_all`` also accept ``user_id`` / ``agent_id`` / ``run_id`` as keywords
  (Mem0 1.x's form; 2.2.1 takes them only inside ``filters``), and ``limit`` for ``top_k``.
- Filters compare values with their JSON type (``{"rating": 4}`` does not match ``"4"``; Mem0's
  pgvector store compares text), and ``user_id`` / ``agent_id`` / ``run_id`` may appear only at
  the top level of ``filters``.
- Scores are pgmem's (semantic, keyword and entity signals fused as docs/retrieval.md says),
  not Mem0's numbers.
- ``update`` merges new metadata into the stored metadata (as Mem0 does) in two steps, a read
  and a write: concurrent metadata updates of one memory may lose one another's keys.
- History lives in PostgreSQL with the memories (``history_db_path`` is ignored); after a delete,
  ``history`` no longer knows the memory's ``role`` and ``actor_id``.
- A memory's ``role`` and ``actor_id`` (from ``add``'s messages) and ``expiration_date`` are kept
  in pgmem's metadata and shown as top-level keys, as Mem0 shows them.

Mem0's exceptions map onto pgmem's (all :class:`~pgmem.errors.PgmemError`):

============================  =============================================================
Mem0                          pgmem
============================  =============================================================
``MemoryError``               :class:`Mem0Error` (not a ``ValueError``, as Mem0's is not)
``ValidationError``           :class:`ValidationError` (a :class:`Mem0Error`: ``add`` with no
                              scope id, ``messages`` of another type, a bad ``memory_type``)
``ValueError``                :class:`~pgmem.errors.InvalidInputError` (a ``ValueError``);
                              a missing scope in ``filters`` is
                              :class:`~pgmem.errors.ScopeError`, a bad filter
                              :class:`~pgmem.errors.FilterError` (one nested too deep
                              :class:`~pgmem.errors.FilterLimitError`)
``ValueError("Memory with id  :class:`MemoryNotFoundError` (a
<id> not found")``            :class:`~pgmem.errors.NotFoundError` and a ``ValueError``),
                              with Mem0's message
``LLMError``                  :class:`InferenceNotSupportedError` (no LLM is ever called)
``ConfigurationError``        :class:`~pgmem.errors.ConfigurationError`
``EmbeddingError``            :class:`~pgmem.errors.EmbeddingError`
``VectorStoreError``,         :class:`~pgmem.errors.DatabaseError`
``DatabaseError``
============================  =============================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from pgmem.aio import AsyncMemory as PgAsyncMemory
from pgmem.aio import run_async
from pgmem.compat.mem0_calls import (
    Call,
    Extractor,
    InferenceNotSupportedError,
    Mem0Calls,
    Mem0Error,
    MemoryNotFoundError,
    ValidationError,
    config_options,
    result_item,
)
from pgmem.compat.mem0_filters import mem0_filters
from pgmem.errors import ConfigurationError, PgmemError
from pgmem.memory import Memory as PgMemory
from pgmem.memory import run
from pgmem.migrate import DEFAULT_DIM, migrate

if TYPE_CHECKING:
    from typing_extensions import Self

    from pgmem.connection import AsyncConnector, Connector

__all__ = [
    "AsyncMemory",
    "InferenceNotSupportedError",
    "Mem0Error",
    "Memory",
    "MemoryNotFoundError",
    "ValidationError",
    "mem0_filters",
    "result_item",
]

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M", PgMemory, PgAsyncMemory)


def _resume(call: Call[R], result: Any, error: PgmemError | None) -> tuple[bool, Any]:
    """Send ``call`` the last operation's result (or throw its error in): ``(True, what the
    call returned)`` once it is done, else ``(False, the next operation)``."""
    try:
        return False, call.send(result) if error is None else call.throw(error)
    except StopIteration as done:
        return True, done.value


def _drive(connector: Connector, call: Call[R]) -> R:
    """Run a Mem0 call: each pgmem operation it yields with :func:`pgmem.memory.run`."""
    result: Any = None
    error: PgmemError | None = None
    with contextlib.closing(call):
        while True:
            finished, value = _resume(call, result, error)
            if finished:
                return value  # type: ignore[no-any-return]
            try:
                result, error = run(connector, value), None
            except PgmemError as exc:
                result, error = None, exc


async def _drive_async(connector: AsyncConnector, call: Call[R]) -> R:
    """:func:`_drive` over ``await`` (:func:`pgmem.aio.run_async`)."""
    result: Any = None
    error: PgmemError | None = None
    with contextlib.closing(call):
        while True:
            finished, value = _resume(call, result, error)
            if finished:
                return value  # type: ignore[no-any-return]
            try:
                result, error = await run_async(connector, value), None
            except PgmemError as exc:
                result, error = None, exc


def _blocking(
    method: Callable[Concatenate[Mem0Calls, P], Call[R]],
) -> Callable[Concatenate[Memory, P], R]:
    """``method`` of :class:`Mem0Calls` as a method of :class:`Memory`."""

    def blocking(self: Memory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return _drive(self._memory._connector, method(self._calls, *args, **kwargs))

    functools.update_wrapper(blocking, method)
    return blocking


def _awaiting(
    method: Callable[Concatenate[Mem0Calls, P], Call[R]],
) -> Callable[Concatenate[AsyncMemory, P], Coroutine[Any, Any, R]]:
    """``method`` of :class:`Mem0Calls` as a coroutine method of :class:`AsyncMemory`."""

    async def awaiting(self: AsyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await _drive_async(self._memory._connector, method(self._calls, *args, **kwargs))

    functools.update_wrapper(awaiting, method)
    return awaiting


class _Door(Generic[M]):
    """What :class:`Memory` and :class:`AsyncMemory` share: the pgmem facade underneath (made
    from ``db`` and ``options``, or given as ``memory``), the extractor, ``from_config``."""

    _facade: type[M]

    def __init__(
        self,
        db: Any = None,
        *,
        memory: M | None = None,
        extractor: Extractor | None = None,
        **options: Any,
    ) -> None:
        if memory is not None and (db is not None or options):
            raise ConfigurationError("give either memory= or a database and its options, not both")
        if extractor is not None and not callable(extractor):
            raise ConfigurationError("extractor must be callable: messages -> list of facts")
        self._memory: M = memory if memory is not None else self._facade(db, **options)
        self._owns = memory is None
        self._calls = Mem0Calls(self._memory, extractor)

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> Self:
        """An instance from Mem0's config dict, on the database of its ``pgvector`` vector
        store.

        Read: ``vector_store.config`` (``connection_string``, or ``dbname`` -- default
        ``postgres`` -- / ``user`` / ``password`` / ``host`` / ``port`` / ``sslmode``, or
        ``connection_pool``; ``collection_name`` -- default ``mem0`` --, which is the pgmem
        tenant; and ``embedding_model_dims``), a ``huggingface`` embedder's local ``model``, and
        an optional ``"pgmem"`` section of :class:`pgmem.Memory` options (``schema``, ...). The
        LLM, reranker and ``history_db_path`` are not used. The schema is migrated (created
        when missing) unless ``"pgmem": {"migrate": False}`` -- a plain call, as in Mem0.

        Raises:
            ConfigurationError: the vector store is not ``pgvector``, the config is malformed,
                or it names a collection and another ``pgmem`` tenant.
        """
        db, options, dims, auto_migrate = config_options(config_dict)
        if isinstance(db, str) and auto_migrate:
            migrate(db, dim=int(dims or DEFAULT_DIM),
                    **({"schema": options["schema"]} if "schema" in options else {}))
        return cls(db, **options)

    @property
    def memory(self) -> M:
        """The :class:`pgmem.Memory` (or :class:`pgmem.AsyncMemory`) underneath, for pgmem's
        own API."""
        return self._memory

    @property
    def extractor(self) -> Extractor | None:
        """The app's fact extractor for ``add(..., infer=True)``, or None."""
        return self._calls.extractor


class Memory(_Door[PgMemory]):
    """Mem0 OSS's ``Memory`` (mem0ai 2.2.1), its LLM-free path, over a :class:`pgmem.Memory`.

    ``Memory(db, **options)`` builds a :class:`pgmem.Memory` on ``db`` (a DSN, a psycopg pool or
    connection, a SQLAlchemy Engine or Session; see :class:`pgmem.Memory` for ``options``) and
    closes it in :meth:`close`; ``Memory(memory=m)`` wraps one the caller owns.
    :meth:`from_config` takes Mem0's config dict. ``extractor`` (optional) turns a conversation
    into facts for ``add(..., infer=True)``. The schema must exist (:func:`pgmem.migrate`);
    :meth:`from_config` migrates, as Mem0 creates its collection.
    """

    _facade = PgMemory

    def close(self) -> None:
        """Close the pgmem Memory if this object made it."""
        if self._owns:
            self._memory.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    add = _blocking(Mem0Calls.add)
    update = _blocking(Mem0Calls.update)
    delete = _blocking(Mem0Calls.delete)
    delete_all = _blocking(Mem0Calls.delete_all)
    reset = _blocking(Mem0Calls.reset)
    get = _blocking(Mem0Calls.get)
    get_all = _blocking(Mem0Calls.get_all)
    search = _blocking(Mem0Calls.search)
    history = _blocking(Mem0Calls.history)


class AsyncMemory(_Door[PgAsyncMemory]):
    """Mem0 OSS's ``AsyncMemory`` (mem0ai 2.2.1), its LLM-free path, over a
    :class:`pgmem.AsyncMemory`: :class:`Memory`'s methods as coroutines.

    ``AsyncMemory(db, **options)`` builds a :class:`pgmem.AsyncMemory` on ``db`` (a DSN, or a
    psycopg ``AsyncConnection`` or ``AsyncConnectionPool``); ``AsyncMemory(memory=m)`` wraps one
    the caller owns. :meth:`from_config` takes Mem0's config dict (a ``connection_pool`` in it
    must be an ``AsyncConnectionPool``) and migrates, before any event loop is needed.
    """

    _facade = PgAsyncMemory

    def close(self) -> Awaitable[None]:
        """Close the pgmem AsyncMemory if this object made it. A plain call, as Mem0's, starts
        closing on the running loop (or closes at once outside one); ``await`` it to wait."""
        closing = self.aclose()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(closing)
            return _Done()
        return loop.create_task(closing)

    async def aclose(self) -> None:
        """Close the pgmem AsyncMemory if this object made it, and wait for it."""
        if self._owns:
            await self._memory.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    add = _awaiting(Mem0Calls.add)
    update = _awaiting(Mem0Calls.update)
    delete = _awaiting(Mem0Calls.delete)
    delete_all = _awaiting(Mem0Calls.delete_all)
    reset = _awaiting(Mem0Calls.reset)
    get = _awaiting(Mem0Calls.get)
    get_all = _awaiting(Mem0Calls.get_all)
    search = _awaiting(Mem0Calls.search)
    history = _awaiting(Mem0Calls.history)


class _Done:
    """An awaitable that is already done."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield
