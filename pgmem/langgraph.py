"""LangGraph's long-term memory store on pgmem: :class:`PgmemStore`, a
``langgraph.store.base.BaseStore`` (extra ``pgmem[langgraph]``).

Switch a graph from LangGraph's ``PostgresStore`` by changing one line::

    store = PgmemStore.from_conn_string(dsn, index={"fields": ["text"]})  # was PostgresStore
    graph = builder.compile(store=store)

It keeps LangGraph's semantics: items by (namespace, key) with dict values, ``put`` as upsert,
``put(value=None)`` and ``delete`` removing, ``search`` under a namespace prefix of whole labels
with ``filter``/``limit``/``offset``, ``list_namespaces`` with prefix, suffix (``"*"`` any
label), ``max_depth``, ``limit``, ``offset``; ``created_at``/``updated_at``; TTLs. A search with a
``query`` on a store with an ``index`` runs pgmem's hybrid search (semantic, keyword and entity
signals, see docs/retrieval.md) instead of cosine alone; each result is a
:class:`PgmemSearchItem` whose ``score`` is pgmem's fused score and whose ``explain`` is the
breakdown. Items live in pgmem's schema (revision 0006): an ordinary ``Memory`` call never sees
them, nor a store call ordinary memories. See docs/langgraph.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from pgmem import validate
from pgmem.embedding import DOCUMENT, QUERY, embed_kind, is_embedder
from pgmem.errors import ConfigurationError, InvalidInputError
from pgmem.items import FoundItem, Items, ItemWrite
from pgmem.memory import Memory, run
from pgmem.providers.langchain_embeddings import LangChainEmbedder
from pgmem.settings import Settings, current

if TYPE_CHECKING:
    from typing_extensions import Self

    from pgmem.results import Explain

__all__ = ["LangChainEmbedder", "PgmemSearchItem", "PgmemStore"]


class PgmemSearchItem(SearchItem):
    """A search result: LangGraph's ``SearchItem`` with, for a search with a query, pgmem's
    ``explain`` (the signals behind ``score``: semantic, keyword, entity, legs) -- None for a
    listing without a query."""

    __slots__ = ("explain",)

    def __init__(self, *args: Any, explain: Explain | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.explain = explain


class PgmemEmbeddings(Embeddings):
    """pgmem's embedder as a LangChain ``Embeddings`` (for a store or retriever of LangChain's
    that should make the vectors pgmem makes: the benchmark's ``PostgresStore``)."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The texts' vectors."""
        return [list(map(float, row)) for row in embed_kind(self.embedder, texts, DOCUMENT)]

    def embed_query(self, text: str) -> list[float]:
        """The query's vector."""
        return [float(x) for x in embed_kind(self.embedder, [text], QUERY)[0]]


def _embedder_of(embed: Any) -> Any:
    """pgmem's embedder for an index's ``embed``: pgmem's own (an object with ``embed``) as it
    is, else a LangChain ``Embeddings``, a function or a provider string made one."""
    if is_embedder(embed) and not isinstance(embed, Embeddings):
        return embed
    return LangChainEmbedder(ensure_embeddings(embed))


class PgmemStore(BaseStore):
    """A LangGraph ``BaseStore`` over pgmem (see the module docstring).

    ``db``: a pgmem :class:`~pgmem.Memory` (its embedder, analyzer, schema and tenant are used;
    the caller closes it), or what ``Memory`` takes -- a DSN, a psycopg ``Connection`` or
    ``ConnectionPool``, a SQLAlchemy ``Engine`` -- from which the store makes its own Memory
    (``memory_options`` go to it; :meth:`close` closes it). The schema must exist at revision
    0006 or later (:func:`pgmem.migrate`, or :meth:`setup` for a DSN).

    ``index``: as LangGraph's: ``fields`` (JSON paths of the value to index, default ``["$"]``,
    the whole value), ``embed`` (a LangChain ``Embeddings``, a function of a list of texts, or
    pgmem's own embedder; default pgmem's all-MiniLM-L6-v2, or the Memory's), ``dims`` (checked
    against the schema's dimension). Without an index nothing is indexed and a search's
    ``query`` is ignored, as in LangGraph's stores. The texts of an item's fields are indexed
    together, as one memory: one vector, one set of lemmas and entities.

    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
    ``sweep_interval_minutes`` for :meth:`start_ttl_sweeper`, ``omit_expired``).
    ``threshold``: the least semantic similarity of a search result (pgmem's ``threshold``;
    0 by default, so that a search returns ``limit`` items when there are so many).
    """

    supports_ttl = True

    def __init__(
        self,
        db: Any = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        threshold: float = 0.0,
        schema: str | None = None,
        tenant: str | None = None,
        **memory_options: Any,
    ) -> None:
        super().__init__()
        self.index_config: IndexConfig | None = None
        self._fields: list[tuple[str, Any]] = []
        embedder = memory_options.pop("embedder", None)
        if index is not None:
            self.index_config = dict(index)  # type: ignore[assignment]
            fields = index.get("fields") or ["$"]
            self._fields = [(path, _tokenized(path)) for path in fields]
            if index.get("embed") is not None:
                if embedder is not None:
                    raise ConfigurationError("give index['embed'] or embedder=, not both")
                embedder = _embedder_of(index["embed"])
        if isinstance(db, Memory):
            if embedder is not None and embedder is not db.embedder:
                raise ConfigurationError(
                    "index['embed'] and a Memory were both given: the Memory's embedder makes "
                    "the vectors; leave out 'embed' or pass the Memory's embedder"
                )
            self.memory, self._owned = db, False
        else:
            given: Settings | None = memory_options.pop("settings", None)
            settings = current(given).replace(schema=schema, tenant=tenant)
            self.memory = Memory(db, settings=settings, embedder=embedder, **memory_options)
            self._owned = True
        self._db = db
        self.ttl_config = ttl
        self.threshold = threshold
        self._items = Items(self.memory._ops, omit_expired=bool(ttl and ttl.get("omit_expired")))
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        **options: Any,
    ) -> Iterator[PgmemStore]:
        """A store on a DSN, closed when the ``with`` block ends (like ``PostgresStore``'s).
        ``PostgresStore``'s ``pipeline`` is accepted and has no effect (pgmem sends a write's
        statements together itself); its ``pool_config``'s ``max_size`` sizes pgmem's pool."""
        options.pop("pipeline", None)
        pool_config = options.pop("pool_config", None) or {}
        if pool_config.get("max_size") and "pool_max_size" not in options:
            options["pool_max_size"] = pool_config["max_size"]
        store = cls(conn_string, index=index, ttl=ttl, **options)
        try:
            yield store
        finally:
            store.close()

    def setup(self) -> None:
        """Create pgmem's schema or bring it to the newest revision (:func:`pgmem.migrate`),
        for a store made from a DSN.

        Raises:
            ConfigurationError: the store was not made from a DSN (migrate with
                :func:`pgmem.migrate` instead).
        """
        if not isinstance(self._db, str):
            raise ConfigurationError(
                "setup() needs a store made from a DSN; run pgmem.migrate(dsn) instead"
            )
        from pgmem.migrate import migrate

        migrate(self._db, schema=self.memory.schema)

    def close(self) -> None:
        """Stop the TTL sweeper; close the Memory the store made (not one passed in)."""
        self.stop_ttl_sweeper()
        if self._owned:
            self.memory.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- BaseStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``, results in their order. As in LangGraph's stores, the reads (gets,
        searches, namespace listings) see the store as it was before the batch's writes, and
        of several writes of one (namespace, key) the last wins; the writes are one
        transaction.

        Raises:
            InvalidNamespaceError: a bad namespace label (empty, not a string, with a period
                or NUL).
            InvalidInputError, FilterError: a bad limit, offset, filter, key or value.
        """
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        gets: list[tuple[int, GetOp]] = []
        writes: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for n, op in enumerate(ops):
            validate_op_namespace(op)
            if isinstance(op, PutOp) and op.value is not None:
                _check_written(op.namespace)
            if isinstance(op, GetOp):
                gets.append((n, op))
            elif isinstance(op, PutOp):
                writes[(tuple(op.namespace), _key(op.key))] = op
            elif not isinstance(op, (SearchOp, ListNamespacesOp)):
                raise InvalidInputError(f"unknown store operation {type(op).__name__}")
        connector = self.memory._connector
        if gets:
            wanted = [(tuple(op.namespace), _key(op.key), bool(op.refresh_ttl)) for _, op in gets]
            found = run(connector, self._items.get(wanted))
            for (n, _), item in zip(gets, found):
                results[n] = None if item is None else _item(item)
        for n, op in enumerate(ops):
            if isinstance(op, SearchOp):
                results[n] = self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[n] = self._namespaces(op)
        if writes:
            run(connector, self._items.write([self._write(op) for op in writes.values()]))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (as LangGraph's ``PostgresStore`` does): calls
        from many tasks run side by side on the Memory's connection pool."""
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    def explain_search(
        self,
        namespace_prefix: tuple[str, ...],
        query: str,
        *,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        analyze: bool = False,
    ) -> dict[str, Any]:
        """The plan of the statement a search with ``query`` runs: PostgreSQL's ``EXPLAIN
        (FORMAT JSON)`` (run, with ``analyze``), as :meth:`pgmem.Memory.explain_search`."""
        _check_labels(namespace_prefix)
        return run(self.memory._connector, self._items.explain_search(
            tuple(namespace_prefix), query, filter=filter, limit=limit, analyze=analyze,
        ))

    # -- TTL

    def sweep_ttl(self) -> int:
        """Delete the items whose time to live has passed; how many."""
        return run(self.memory._connector, self._items.sweep())

    async def asweep_ttl(self) -> int:
        """:meth:`sweep_ttl` in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(None, self.sweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Thread:
        """Sweep every ``sweep_interval_minutes`` (default: the TTL config's, else 5) in a
        daemon thread until :meth:`stop_ttl_sweeper`; the thread."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        interval = sweep_interval_minutes or (self.ttl_config or {}).get(
            "sweep_interval_minutes"
        ) or 5
        self._sweeper_stop.clear()

        def sweep_loop() -> None:
            while not self._sweeper_stop.wait(float(interval) * 60):
                with contextlib.suppress(Exception):  # the next round tries again
                    self.sweep_ttl()

        self._sweeper = threading.Thread(target=sweep_loop, name="pgmem-ttl", daemon=True)
        self._sweeper.start()
        return self._sweeper

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; whether it has stopped within ``timeout`` seconds."""
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    # -- internals

    def _search(self, op: SearchOp) -> list[SearchItem]:
        limit, offset = _count(op.limit, "limit"), _count(op.offset, "offset")
        if limit == 0:
            return []
        prefix = tuple(op.namespace_prefix)
        if op.query and self.index_config is not None:
            found = run(self.memory._connector, self._items.search(
                prefix, op.query, filter=op.filter, limit=limit, offset=offset,
                refresh=bool(op.refresh_ttl), threshold=self.threshold,
            ))
        else:
            found = run(self.memory._connector, self._items.listing(
                prefix, filter=op.filter, limit=limit, offset=offset,
                refresh=bool(op.refresh_ttl),
            ))
        return [_search_item(item) for item in found]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefix = suffix = None
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                prefix = tuple(condition.path)
            elif condition.match_type == "suffix":
                suffix = tuple(condition.path)
            else:
                raise InvalidInputError(f"unknown namespace match type {condition.match_type!r}")
        max_depth = op.max_depth
        if max_depth is not None:
            max_depth = _count(max_depth, "max_depth")
        return run(self.memory._connector, self._items.namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth,
            limit=_count(op.limit, "limit"), offset=_count(op.offset, "offset"),
        ))

    def _write(self, op: PutOp) -> ItemWrite:
        namespace, key = tuple(op.namespace), _key(op.key)
        if op.value is None:
            return ItemWrite(namespace, key, None)
        value = validate.metadata(op.value)  # a JSON object: the memory's metadata
        ttl = None
        if op.ttl is not None:
            ttl = float(op.ttl)
            if not ttl > 0 or ttl == float("inf"):
                raise InvalidInputError(f"ttl must be a positive number of minutes, got {op.ttl!r}")
        return ItemWrite(namespace, key, value, self._text(value, op.index), ttl)

    def _text(self, value: dict[str, Any], index: Any) -> str | None:
        """What of ``value`` is indexed: the texts at the index's fields (or the put's
        ``index`` paths), one per line; None when nothing is."""
        if self.index_config is None or index is False:
            return None
        fields = self._fields if index is None else [(path, _tokenized(path)) for path in index]
        texts = [text for _, path in fields for text in get_text_at_path(value, path)]
        joined = "\n".join(text for text in texts if text and text.strip())
        return joined.replace("\x00", "") or None


def _check_labels(namespace: tuple[str, ...]) -> None:
    validate_op_namespace(SearchOp(tuple(namespace)))


def _check_written(namespace: tuple[str, ...]) -> None:
    """LangGraph's rules for a namespace written to, also for ops given to ``batch``."""
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if namespace[0] == "langgraph":
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {namespace}'
        )


def _tokenized(path: str) -> Any:
    return path if path == "$" else tokenize_path(path)


def _key(key: object) -> str:
    if not isinstance(key, str) or "\x00" in key:
        raise InvalidInputError(f"an item key must be a string without NUL, got {key!r}")
    return key


#: The largest ``limit``, ``offset`` and ``max_depth`` a store operation takes: its values
#: reach SQL as bigint, and an LLM may choose them (LangMem passes its tool's arguments on).
MOST = {"limit": 10_000, "offset": 1_000_000, "max_depth": 1_000}


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be a non-negative integer, got {value!r}")
    if value > MOST[what]:
        raise InvalidInputError(f"{what} must be at most {MOST[what]:,}, got {value}")
    return value


def _item(found: FoundItem) -> Item:
    return Item(
        value=found.value, key=found.key, namespace=found.namespace,
        created_at=found.created_at, updated_at=found.updated_at,
    )


def _search_item(found: FoundItem) -> PgmemSearchItem:
    hit = found.hit
    return PgmemSearchItem(
        namespace=found.namespace, key=found.key, value=found.value,
        created_at=found.created_at, updated_at=found.updated_at,
        score=None if hit is None else hit.score,
        explain=None if hit is None else hit.explain,
    )
