"""AsyncMemory: the same surface as Memory, and the same behaviour -- each behaviour test runs
once through Memory and once through AsyncMemory (``facade`` fixture) on real PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import pgmem
from pgmem import operations
from pgmem.aio import run_async
from pgmem.connection import AsyncConnector, Connector
from pgmem.memory import run
from pgmem.store import execute, execute_async, send, send_async

TABLES = ("memories", "entities", "memory_entities", "history")


def counts(dsn: str) -> dict[str, int]:
    """Rows per pgmem table, as another session sees them."""
    with psycopg.connect(dsn) as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM pgmem.{t}").fetchone()[0]  # type: ignore[index]
            for t in TABLES
        }


# -- the surfaces ------------------------------------------------------------------------------


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(function).parameters.values()
    ]


def test_memory_and_async_memory_have_the_same_surface() -> None:
    names = public(pgmem.Memory)
    assert names == public(pgmem.AsyncMemory)
    methods = {n for n in names if inspect.isfunction(getattr(pgmem.Memory, n))}
    assert methods == {
        "add", "add_many", "update", "delete", "delete_all", "get", "get_all", "history",
        "search", "search_sql", "explain_search", "export", "close",
    }
    for name in methods:
        sync, coro = getattr(pgmem.Memory, name), getattr(pgmem.AsyncMemory, name)
        assert not inspect.iscoroutinefunction(sync), name
        assert inspect.iscoroutinefunction(coro), name
        assert parameters(sync) == parameters(coro), name
        assert inspect.signature(sync).return_annotation == (
            inspect.signature(coro).return_annotation
        ), name
    for name in names - methods:  # the configuration, shared
        assert getattr(pgmem.Memory, name) is getattr(pgmem.AsyncMemory, name), name
    # __init__: the same arguments; only what ``db`` may be differs.
    sync_init = parameters(pgmem.Memory.__init__)
    async_init = parameters(pgmem.AsyncMemory.__init__)
    assert [p[:3] for p in sync_init] == [p[:3] for p in async_init]
    assert sync_init[2:] == async_init[2:]
    assert inspect.iscoroutinefunction(pgmem.AsyncMemory.__aenter__)
    assert inspect.iscoroutinefunction(pgmem.AsyncMemory.__aexit__)


def test_both_facades_hand_every_argument_to_the_shared_operation() -> None:
    """Each public method is a call of the Operations method of the same name, which takes the
    same arguments (all by keyword but the first): the logic lives there, once."""
    for name in public(pgmem.Memory) & public(operations.Operations):
        facade = [(p[0], p[1]) for p in parameters(getattr(pgmem.Memory, name))]
        shared = [(p[0], p[1]) for p in parameters(getattr(operations.Operations, name))]
        assert facade == shared, name
    for name in public(pgmem.Memory) - {"close"}:
        if inspect.isfunction(getattr(pgmem.Memory, name)):
            assert name in public(operations.Operations), name
            for cls in (pgmem.Memory, pgmem.AsyncMemory):
                source = inspect.getsource(getattr(cls, name))
                assert f"self._ops.{name}(" in source, (cls, name)


def test_connectors_executors_and_runners_are_twins() -> None:
    assert public(Connector) == public(AsyncConnector) == {
        "transaction", "batch", "snapshot", "close", "retries", "host"
    }
    assert parameters(Connector.__init__)[1:] != []
    assert [p[:3] for p in parameters(Connector.__init__)] == [
        p[:3] for p in parameters(AsyncConnector.__init__)
    ]
    for name in ("transaction", "batch", "close"):
        assert parameters(getattr(Connector, name)) == parameters(getattr(AsyncConnector, name))
    assert [p[:3] for p in parameters(execute)] == [p[:3] for p in parameters(execute_async)]
    assert [p[:3] for p in parameters(send)] == [p[:3] for p in parameters(send_async)]
    assert [p[:3] for p in parameters(run)] == [p[:3] for p in parameters(run_async)]
    assert inspect.iscoroutinefunction(execute_async) and inspect.iscoroutinefunction(run_async)
    assert inspect.iscoroutinefunction(send_async)


# -- one behaviour, two facades -----------------------------------------------------------------


class Facade:
    """A Memory or an AsyncMemory, called the same way: an AsyncMemory's coroutines are run to
    completion on the test's event loop."""

    def __init__(self, memory: Any, loop: asyncio.Runner | None) -> None:
        self.memory, self.loop = memory, loop
        self.kind = "sync" if loop is None else "async"

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.memory, name)
        if self.loop is None or not inspect.iscoroutinefunction(method):
            return method
        loop = self.loop
        return lambda *args, **kwargs: loop.run(method(*args, **kwargs))


@pytest.fixture(params=["sync", "async"])
def facade(
    request: pytest.FixtureRequest,
    db_dsn: str,
    embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> Iterator[Facade]:
    """The same Memory configuration, as Memory and as AsyncMemory, on a fresh database."""
    if request.param == "sync":
        with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
            yield Facade(mem, None)
        return
    with asyncio.Runner() as loop:
        amem = pgmem.AsyncMemory(db_dsn, embedder=embedder, nlp=analyzer)
        try:
            yield Facade(amem, loop)
        finally:
            loop.run(amem.close())


def test_add_and_get(facade: Facade, db_dsn: str) -> None:
    rec = facade.add("Caroline moved to Ottawa", user_id="u1", metadata={"k": 1})
    assert isinstance(rec, pgmem.AddResult) and not rec.duplicate
    assert facade.get(rec.id) == pgmem.MemoryRecord(
        id=rec.id, text="Caroline moved to Ottawa", user_id="u1", agent_id=None, run_id=None,
        metadata={"k": 1}, created_at=rec.created_at, updated_at=rec.updated_at,
    )
    again = facade.add("Caroline moved to Ottawa", user_id="u1")
    assert again.duplicate and again.id == rec.id
    assert counts(db_dsn) == {"memories": 1, "entities": 2, "memory_entities": 2, "history": 1}
    with pytest.raises(pgmem.NotFoundError):
        facade.get(uuid.uuid4())
    with pytest.raises(pgmem.ScopeError):
        facade.add("no scope")
    with pytest.raises(pgmem.InvalidInputError, match="empty"):
        facade.add("  ", user_id="u1")


def test_add_many(facade: Facade) -> None:
    progress: list[tuple[int, int]] = []
    results = facade.add_many(
        ["Jon went to Paris", {"text": "for u2", "user_id": "u2"}, "Jon went to Paris",
         {"text": "with a run", "run_id": "r9", "metadata": {"x": [1, 2]}}, "Gina sings"],
        user_id="u1", batch_size=2, on_progress=lambda done, total: progress.append((done, total)),
    )
    assert progress == [(2, 5), (4, 5), (5, 5)]
    assert [(r.user_id, r.run_id, r.duplicate) for r in results] == [
        ("u1", None, False), ("u2", None, False), ("u1", None, True), ("u1", "r9", False),
        ("u1", None, False),
    ]
    assert results[2].id == results[0].id and results[3].metadata == {"x": [1, 2]}
    with pytest.raises(pgmem.InvalidInputError, match=r"items\[1\]"):
        facade.add_many(["fine", 42], user_id="u1")


def rounded(statement: str) -> str:
    """``statement`` with its decimal numbers to 4 digits."""
    return re.sub(r"-?\d+\.\d+(?:e-?\d+)?", lambda m: f"{float(m.group()):.4f}", statement)


def close_to(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` are equal but for float digits past the eighth (search hits,
    their explanations, nested in dataclasses, tuples and dicts)."""
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return type(a) is type(b) and close_to(dataclasses.asdict(a), dataclasses.asdict(b))  # type: ignore[arg-type]
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close_to(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close_to(x, y) for x, y in zip(a, b))
    return a == b


def test_search_is_the_same_through_both_facades(
    facade: Facade, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    facade.add_many(
        ["Caroline moved to Ottawa to work at Shopify", "Melanie paints landscapes on weekends",
         "The office router was rebooted during the outage", "Caroline and Melanie met in Paris",
         "Jon took a pottery class in Boston"],
        user_id="u1", batch_size=2,
    )
    query = "where does Caroline work?"
    hits = facade.search(query, user_id="u1", limit=4)
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as reference:
        expected = reference.search(query, user_id="u1", limit=4)
        expected_sql = reference.search_sql(query, user_id="u1", filters={"k": {"eq": 1}})
    # The same hits and explanations, the same statement; vectors (and so scores) may differ in
    # the last float digits: an entity name's vector comes from the cache of the Memory that
    # added it, embedded in another batch.
    assert close_to(hits, expected) and hits[0].text.startswith("Caroline moved")
    assert not close_to(hits, expected[::-1])
    assert rounded(facade.search_sql(query, user_id="u1", filters={"k": {"eq": 1}})) == rounded(
        expected_sql
    )
    plan = facade.explain_search(query, user_id="u1", analyze=True)
    assert plan["Plan"]["Actual Rows"] == 5  # every memory of the scope is a candidate
    assert "Actual Rows" not in facade.explain_search(query, user_id="u1")["Plan"]
    assert facade.search(query, user_id="u1", filters={"k": {"eq": 1}}) == []
    with pytest.raises(pgmem.ConfigurationError, match="reranker"):
        facade.search(query, user_id="u1", rerank=True)


def test_update_delete_and_history(facade: Facade, db_dsn: str) -> None:
    rec = facade.add("Caroline adopted a puppy named Biscuit in Ottawa", user_id="u1")
    updated = facade.update(rec.id, text="Caroline bought a sailboat in Halifax", metadata={"v": 2})
    assert (updated.id, updated.text, updated.metadata) == (
        rec.id, "Caroline bought a sailboat in Halifax", {"v": 2}
    )
    assert updated.updated_at > rec.updated_at
    assert [h.id for h in facade.search("sailboat Halifax", user_id="u1", mode="keyword")] == [
        rec.id
    ]
    assert facade.search("puppy Biscuit", user_id="u1", mode="keyword") == []
    assert facade.update(rec.id, metadata={}).metadata == {}
    with pytest.raises(pgmem.InvalidInputError, match="text, new metadata"):
        facade.update(rec.id)
    with pytest.raises(pgmem.NotFoundError):
        facade.update(uuid.uuid4(), text="x")

    facade.delete(rec.id)
    with pytest.raises(pgmem.NotFoundError):
        facade.get(rec.id)
    with pytest.raises(pgmem.NotFoundError):
        facade.delete(rec.id)
    assert [(e.event, e.old_text, e.new_text) for e in facade.history(rec.id)] == [
        ("ADD", None, "Caroline adopted a puppy named Biscuit in Ottawa"),
        ("UPDATE", "Caroline adopted a puppy named Biscuit in Ottawa",
         "Caroline bought a sailboat in Halifax"),
        ("UPDATE", "Caroline bought a sailboat in Halifax",
         "Caroline bought a sailboat in Halifax"),
        ("DELETE", "Caroline bought a sailboat in Halifax", None),
    ]
    assert counts(db_dsn) == {"memories": 0, "entities": 0, "memory_entities": 0, "history": 4}
    with pytest.raises(pgmem.NotFoundError):
        facade.history(uuid.uuid4())


def test_get_all_paging_and_delete_all(facade: Facade) -> None:
    added = facade.add_many([f"memory number {i}" for i in range(130)], user_id="u1")
    facade.add_many(["elsewhere", "also elsewhere"], user_id="u2")
    seen: list[uuid.UUID] = []
    cursor = None
    pages = 0
    while True:
        page = facade.get_all(user_id="u1", limit=50, cursor=cursor)
        pages += 1
        seen.extend(m.id for m in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 3 and len(seen) == len(set(seen)) == 130
    assert set(seen) == {r.id for r in added}
    with pytest.raises(pgmem.InvalidInputError, match="cursor"):
        facade.get_all(user_id="u1", cursor="nope")
    assert facade.delete_all(user_id="u1") == 130
    assert facade.get_all(user_id="u1").items == ()
    assert len(facade.get_all(user_id="u2").items) == 2


# -- async host transactions and pools ----------------------------------------------------------


async def _write_some(mem: pgmem.AsyncMemory) -> None:
    rec = await mem.add("Caroline moved to Ottawa", user_id="u1")
    await mem.add_many(["Jon went to Paris", "Gina sings in Berlin"], user_id="u1")
    await mem.update(rec.id, text="Caroline moved to Halifax")
    assert len((await mem.get_all(user_id="u1")).items) == 3


@pytest.mark.parametrize("outcome", ["rollback", "commit"])
def test_async_connection_host_transaction(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    outcome: str,
) -> None:
    """Writes on the caller's AsyncConnection join its transaction (begun by pgmem's first
    statement when it had not begun): pgmem commits nothing; the caller's rollback leaves no
    memory, entity, link or history row, and their commit keeps them all."""

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(db_dsn)
        try:
            mem = pgmem.AsyncMemory(conn, embedder=embedder, nlp=analyzer)
            await _write_some(mem)
            await mem.close()
            assert not conn.closed
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            assert counts(db_dsn) == dict.fromkeys(TABLES, 0)  # nothing committed yet
            await (conn.rollback() if outcome == "rollback" else conn.commit())
        finally:
            await conn.close()

    asyncio.run(main())
    if outcome == "rollback":
        assert counts(db_dsn) == dict.fromkeys(TABLES, 0)
    else:
        assert counts(db_dsn) == {"memories": 3, "entities": 6, "memory_entities": 6, "history": 4}


def test_async_connection_inside_a_transaction_block(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as conn:
            mem = pgmem.AsyncMemory(conn, embedder=embedder, nlp=analyzer)
            await mem.add("committed on its own", user_id="u0")  # autocommit: its own transaction
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await _write_some(mem)
                    raise RuntimeError("the caller's work failed")
            assert [m.text for m in (await mem.get_all(user_id="u0")).items] == [
                "committed on its own"
            ]

    asyncio.run(main())
    assert counts(db_dsn)["memories"] == 1


def test_async_pool_is_borrowed_and_calls_run_concurrently(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    async def main() -> None:
        async with AsyncConnectionPool(db_dsn, min_size=1, max_size=4, open=False) as pool:
            async with pgmem.AsyncMemory(pool, embedder=embedder, nlp=analyzer) as mem:
                results = await asyncio.gather(
                    *(mem.add(f"note {i} about Paris", user_id="u1") for i in range(8))
                )
                assert len({r.id for r in results}) == 8
            assert not pool.closed  # the caller's pool stays open
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT count(*) FROM pgmem.memories")
                assert await cur.fetchone() == (8,)

    asyncio.run(main())


def test_async_memory_rejects_sync_sources(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn, pytest.raises(pgmem.ConfigurationError, match="Memory"):
        pgmem.AsyncMemory(conn)  # type: ignore[arg-type]

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
            with pytest.raises(pgmem.ConfigurationError, match="AsyncMemory"):
                pgmem.Memory(aconn)  # type: ignore[arg-type]

    asyncio.run(main())
