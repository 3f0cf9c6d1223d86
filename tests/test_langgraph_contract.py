"""PgmemStore keeps LangGraph's store contract: the same calls on PgmemStore and on LangGraph's own
InMemoryStore (and, where InMemoryStore has no say -- TTLs, list order --, LangGraph's
PostgresStore on the same database) give the same results."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.store.postgres")

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import PostgresStore

import pgmem
from pgmem.errors import FilterError, InvalidInputError
from pgmem.langgraph import PgmemStore

# Labels that a LIKE pattern, a regular expression or a text encoding could get wrong.
LABELS = ["a", "ab", "a%", "a_", "a\\", "%", "_", "line\nbreak", "naïve", "日本", "a b", "*"]
NAMESPACES = [
    ("a",), ("ab",), ("a", "b"), ("a", "b", "c"), ("a", "bc"), ("ab", "c"), ("a%", "x"),
    ("a_", "x"), ("ax", "x"), ("a\\", "x"), ("a\\x",), ("%",), ("_",), ("line\nbreak", "z"),
    ("line",), ("naïve", "日本"), ("naïve",), ("日本", "a"), ("a b", "c"), ("x", "a", "b"),
    ("x", "y", "a"), ("*", "a"),
]
PREFIXES = [
    (), ("a",), ("ab",), ("a", "b"), ("a", "b", "c"), ("a", "bc"), ("a%",), ("a_",), ("a\\",),
    ("%",), ("_",), ("line",), ("line\nbreak",), ("naïve",), ("日本",), ("a b",), ("x",),
    ("nothing",), ("a", "b", "c", "d"), ("*",),
]


def shown(items: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((tuple(i.namespace), i.key, json.dumps(i.value, sort_keys=True)) for i in items)


@pytest.fixture
def store(db_dsn: str, embedder: Any, analyzer: Any) -> Iterator[PgmemStore]:
    with PgmemStore(db_dsn, embedder=embedder, nlp=analyzer) as s:
        yield s


@pytest.fixture
def postgres_store(db_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.from_conn_string(db_dsn) as s:
        s.setup()
        yield s


def fill(*stores: Any) -> None:
    for n, namespace in enumerate(NAMESPACES):
        for s in stores:
            s.put(namespace, f"k{n}", {"n": n, "label": namespace[-1]})
            s.put(namespace, "shared", {"n": -n})


def test_get_put_upsert_delete_as_in_memory(store: PgmemStore) -> None:
    reference = InMemoryStore()
    for s in (store, reference):
        s.put(("docs", "u1"), "a", {"text": "first", "nested": {"x": [1, 2]}})
        s.put(("docs", "u1"), "a", {"text": "second"})
        s.put(("docs", "u1"), "b", {"text": "gone"})
        s.delete(("docs", "u1"), "b")
        s.put(("docs", "u1"), "c", {"text": "gone too"})
        s.put(("docs", "u1"), "c", None)  # type: ignore[arg-type]
    for key in ("a", "b", "c", "missing"):
        ours, theirs = store.get(("docs", "u1"), key), reference.get(("docs", "u1"), key)
        assert (ours is None) == (theirs is None), key
        if ours is not None and theirs is not None:
            assert (ours.namespace, ours.key, ours.value) == (
                theirs.namespace, theirs.key, theirs.value
            )
    assert store.get(("docs",), "a") is None  # a namespace is whole, not a prefix


def test_an_update_keeps_created_at_and_moves_updated_at(store: PgmemStore) -> None:
    store.put(("n",), "k", {"v": 1})
    first = store.get(("n",), "k")
    time.sleep(0.01)
    store.put(("n",), "k", {"v": 2})
    second = store.get(("n",), "k")
    assert first is not None and second is not None
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert second.value == {"v": 2}


def test_prefix_search_matches_whole_labels_as_in_memory(store: PgmemStore) -> None:
    reference = InMemoryStore()
    fill(store, reference)
    for prefix in PREFIXES:
        ours = store.search(prefix, limit=1000)
        theirs = reference.search(prefix, limit=1000)
        assert shown(ours) == shown(theirs), prefix


@pytest.mark.parametrize(
    "prefix, suffix, max_depth",
    [
        (None, None, None), (("a",), None, None), (("a", "*"), None, None),
        (("*", "a"), None, None),
        (("*", "*", "*"), None, None), (None, ("x",), None), (None, ("*", "x"), None),
        (("a",), ("c",), None), (None, None, 1), (None, None, 2), (("a",), None, 1),
        (("x", "*"), ("a",), None), (("a\\",), None, None), (("a%",), None, None),
        (("a_",), None, None), (("naïve",), None, None), (("line\nbreak",), None, None),
        (("*",), None, 1), ((), (), None),
    ],
)
def test_list_namespaces_as_in_memory(
    store: PgmemStore, prefix: Any, suffix: Any, max_depth: Any
) -> None:
    reference = InMemoryStore()
    fill(store, reference)
    for limit, offset in ((100, 0), (3, 0), (3, 2), (2, 100)):
        args = {"prefix": prefix, "suffix": suffix, "max_depth": max_depth, "limit": limit,
                "offset": offset}
        assert store.list_namespaces(**args) == reference.list_namespaces(**args), args


@pytest.mark.parametrize(
    "namespace", [("a.b",), ("",), ("a", ""), ("nul\x00",), (1,), ("langgraph", "x")]
)
def test_bad_namespaces_raise_langgraphs_error(store: PgmemStore, namespace: Any) -> None:
    reference = InMemoryStore()
    for s in (store, reference):
        with pytest.raises(InvalidNamespaceError):
            s.put(namespace, "k", {"v": 1})
    if namespace[0] != "langgraph":  # reads may name it
        for s in (store, reference):
            with pytest.raises(InvalidNamespaceError):
                s.get(namespace, "k")
            with pytest.raises(InvalidNamespaceError):
                s.search(namespace)
    # ops given to batch directly are checked too: "a.b" must not reach ("a", "b")
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp((), "k", {"v": 1})])
    assert store.list_namespaces() == []


def test_bad_values_keys_and_filters_raise_pgmem_errors(store: PgmemStore) -> None:
    with pytest.raises(InvalidInputError):
        store.put(("n",), "k", {"v": float("nan")})
    with pytest.raises(InvalidInputError):
        store.put(("n",), "k", {"v": "nul\x00"})
    with pytest.raises(InvalidInputError):
        store.put(("n",), "k", {"v": object()})
    with pytest.raises(InvalidInputError):
        store.put(("n",), "k\x00", {"v": 1})
    with pytest.raises(FilterError):
        store.search(("n",), filter={"v": {"$regex": "x"}})
    with pytest.raises(FilterError):
        store.search(("n",), filter={"v": {"$gt": "not a number"}})
    with pytest.raises(InvalidInputError):
        store.search(("n",), limit=-1)
    assert store.search(("n",)) == []  # nothing was written


def test_a_mixed_batch_reads_before_it_writes_as_in_memory(store: PgmemStore) -> None:
    reference = InMemoryStore()
    for s in (store, reference):
        s.put(("b",), "old", {"v": 0})
    ops = [
        PutOp(("b",), "new", {"v": 1}),
        GetOp(("b",), "new"),
        GetOp(("b",), "old"),
        SearchOp(("b",), None, 10, 0),
        PutOp(("b",), "old", None),
        ListNamespacesOp((MatchCondition("prefix", ("b",)),), None, 10, 0),
        PutOp(("b",), "new", {"v": 2}),  # the last write of a key wins
        PutOp(("c",), "k", {"v": 3}),
        GetOp(("c",), "k"),
    ]
    ours, theirs = store.batch(ops), reference.batch(ops)
    assert len(ours) == len(theirs) == len(ops)
    for n, (a, b) in enumerate(zip(ours, theirs)):
        if isinstance(a, list) and a and hasattr(a[0], "key"):
            assert shown(a) == shown(b), n
        elif hasattr(a, "key") or hasattr(b, "key"):
            assert (a.namespace, a.key, a.value) == (b.namespace, b.key, b.value), n
        else:
            assert a == b, n
    for s in (store, reference):
        assert s.get(("b",), "old") is None
        assert s.get(("b",), "new").value == {"v": 2}  # type: ignore[union-attr]
        assert s.get(("c",), "k").value == {"v": 3}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "filter",
    [
        {"color": "red"}, {"size": 2}, {"size": {"$gt": 1}}, {"size": {"$gte": 2, "$lt": 3}},
        {"size": {"$lte": 1}}, {"color": {"$ne": "red"}}, {"color": {"$eq": "blue"}},
        {"tags": ["x", "y"]}, {"tags": ["x"]}, {"meta": {"a": 1}}, {"meta": {"a": 1, "b": 2}},
        {"missing": None}, {"color": None}, {"color": "red", "size": 1}, {"meta": {}},
    ],
)
def test_filters_as_in_memory(store: PgmemStore, filter: dict[str, Any]) -> None:
    reference = InMemoryStore()
    values = [
        {"color": "red", "size": 1, "tags": ["x", "y"], "meta": {"a": 1, "b": 2}},
        {"color": "blue", "size": 2, "tags": ["x"], "meta": {"a": 1}},
        {"color": "red", "size": 3, "meta": {"a": 2}},
        {"size": 2.5, "color": None},
        {"other": True, "size": 0},  # InMemoryStore's $gt fails on a missing key
    ]
    for s in (store, reference):
        for n, value in enumerate(values):
            s.put(("f", str(n % 2)), f"k{n}", value)
    assert shown(store.search(("f",), filter=filter)) == shown(
        reference.search(("f",), filter=filter)
    )


def test_pages_follow_postgres_stores_order(
    store: PgmemStore, postgres_store: PostgresStore
) -> None:
    reference = InMemoryStore()
    for n in range(23):
        for s in (store, postgres_store, reference):
            s.put(("p", str(n % 3)), f"k{n:02}", {"n": n})
        if n == 10:
            for s in (store, postgres_store, reference):
                s.put(("p", "1"), "k01", {"n": 100})  # moves to the front
    pages = {}
    for name, s in (("ours", store), ("postgres", postgres_store), ("memory", reference)):
        pages[name] = [
            [(i.namespace, i.key) for i in s.search(("p",), limit=5, offset=offset)]
            for offset in range(0, 30, 5)
        ]
    assert pages["ours"] == pages["postgres"]  # most recently updated first
    flat = [key for page in pages["ours"] for key in page]
    assert len(flat) == len(set(flat)) == 23
    assert [len(p) for p in pages["ours"]] == [len(p) for p in pages["memory"]]
    assert store.search(("p",), limit=0) == reference.search(("p",), limit=0) == []


def test_ttl_expiry_and_refresh(db_dsn: str, embedder: Any, analyzer: Any) -> None:
    # LangGraph's semantics (BaseStore.put's docstring, TTLConfig). PostgresStore itself is no
    # reference here: its ttl_minutes column is an integer, so a TTL under a minute is
    # refreshed to nothing.
    ttl = {"default_ttl": 0.05, "refresh_on_read": True}  # 3 seconds
    with PgmemStore(db_dsn, ttl=ttl, embedder=embedder, nlp=analyzer) as store:  # type: ignore[arg-type]
        store.put(("t",), "default", {"v": 1})
        store.put(("t",), "refreshed", {"v": 2})
        store.put(("t",), "forever", {"v": 3}, ttl=None)
        store.put(("t",), "short", {"v": 4}, ttl=0.01)
        store.put(("t",), "listed", {"v": 5})
        time.sleep(2.0)
        assert store.get(("t",), "refreshed") is not None  # starts its 3 seconds again
        assert store.get(("t",), "default", refresh_ttl=False) is not None
        assert len(store.search(("t",), filter={"v": 5})) == 1  # a search refreshes too
        time.sleep(1.5)
        assert store.get(("t",), "short", refresh_ttl=False) is not None  # not swept yet
        assert store.sweep_ttl() == 2
        assert sorted(i.key for i in store.search(("t",))) == ["forever", "listed", "refreshed"]
        assert store.get(("t",), "short") is None
    with psycopg.connect(db_dsn) as conn:  # swept with their entity links and all
        assert conn.execute(
            "SELECT count(*) FROM pgmem.memories WHERE expires_at < now()"
        ).fetchone() == (0,)


def test_a_search_with_a_query_refreshes_the_ttl_of_what_it_finds(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    ttl = {"default_ttl": 10.0, "refresh_on_read": True}
    index = {"dims": 384, "fields": ["text"]}
    with PgmemStore(db_dsn, index=index, ttl=ttl, embedder=embedder, nlp=analyzer) as store:  # type: ignore[arg-type]
        store.put(("r",), "boat", {"text": "Gina sails her boat on the lake."})
        store.put(("r",), "kept", {"text": "Gina sails on weekends."}, ttl=None)
        store.put(("r",), "other", {"text": "Tax forms are due in April."})

        def expiries() -> dict[str, Any]:
            with psycopg.connect(db_dsn) as conn:
                rows = conn.execute(
                    "SELECT key, expires_at FROM pgmem.memories WHERE namespace = '{r}'"
                ).fetchall()
            return dict(rows)

        before = expiries()
        time.sleep(0.05)
        found = store.search(("r",), query="Who sails a boat?", limit=2, refresh_ttl=False)
        assert [item.key for item in found][:1] == ["boat"]
        assert expiries() == before  # refresh_ttl=False: nothing moves
        found = store.search(("r",), query="Who sails a boat?", limit=2)
        assert {item.key for item in found} == {"boat", "kept"}
        after = expiries()
        assert after["boat"] > before["boat"]  # found, with a TTL: starts again
        assert after["kept"] is None  # found, without a TTL
        assert after["other"] == before["other"]  # not found
        assert found[0].namespace == ("r",) and found[0].created_at is not None


def test_omit_expired_hides_items_before_the_sweep(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    ttl = {"omit_expired": True}
    with PgmemStore(db_dsn, ttl=ttl, embedder=embedder, nlp=analyzer) as store:  # type: ignore[arg-type]
        store.put(("o", "x"), "k", {"v": 1}, ttl=0.005)
        store.put(("o", "y"), "k", {"v": 2})
        time.sleep(0.5)
        assert store.get(("o", "x"), "k") is None
        assert [i.namespace for i in store.search(("o",))] == [("o", "y")]
        assert store.list_namespaces(prefix=("o",)) == [("o", "y")]
        assert store.sweep_ttl() == 1


def test_abatch_runs_concurrently_and_keeps_every_write(store: PgmemStore) -> None:
    async def scenario() -> list[Any]:
        writes = [store.aput(("c", str(n % 4)), f"k{n}", {"n": n}) for n in range(40)]
        # concurrent puts of one key serialise: one of them wins, none fails
        same = [store.aput(("c", "same"), "k", {"n": n}) for n in range(8)]
        await asyncio.gather(*writes, *same)
        return await asyncio.gather(
            store.asearch(("c",), limit=100), store.aget(("c", "same"), "k"),
            store.alist_namespaces(prefix=("c",)),
            *[store.aget(("c", str(n % 4)), f"k{n}") for n in range(40)],
        )

    found, same, namespaces, *gets = asyncio.run(scenario())
    assert len(found) == 41
    assert same is not None and same.value["n"] in range(8)
    assert namespaces == [("c", "0"), ("c", "1"), ("c", "2"), ("c", "3"), ("c", "same")]
    assert [g.value["n"] for g in gets] == list(range(40))


def test_items_and_memories_never_meet(db_dsn: str, embedder: Any, analyzer: Any) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as memory, PgmemStore(
        memory, index={"fields": ["text"]}
    ) as store:
        memory.add("Caroline likes hiking in the Alps", user_id="u1")
        store.put(("u1",), "m", {"text": "Caroline likes hiking in the Alps"})
        hits = memory.search("Where does Caroline hike?", user_id="u1")
        assert [h.text for h in hits] == ["Caroline likes hiking in the Alps"]
        assert hits[0].metadata == {}
        found = store.search((), query="Where does Caroline hike?")
        assert [(i.namespace, i.key) for i in found] == [(("u1",), "m")]
        assert memory.get_all(user_id="u1").items[0].metadata == {}


def test_a_query_runs_the_hybrid_search_on_indexed_items(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    with PgmemStore(
        db_dsn, index={"dims": 384, "fields": ["text"]}, embedder=embedder, nlp=analyzer
    ) as store:
        store.put(("m", "u1"), "1", {"text": "Caroline went to the LGBTQ support group", "k": 1})
        store.put(("m", "u1"), "2", {"text": "Melanie painted a sunrise over the lake", "k": 2})
        store.put(("m", "u1"), "3", {"text": "Caroline adopted a dog", "k": 1}, index=False)
        store.put(("m", "u2"), "4", {"text": "Caroline's support group met on Tuesday", "k": 1})
        store.put(("m", "u1"), "5", {"title": "group therapy", "text": "x"}, index=["title"])
        found = store.search(("m", "u1"), query="What support group did Caroline go to?")
        assert found[0].key == "1"
        assert "3" not in {i.key for i in found}  # not indexed: listed, never searched
        assert "4" not in {i.key for i in found}  # another namespace
        best = found[0]
        assert best.score is not None and best.explain is not None  # type: ignore[attr-defined]
        assert set(best.explain.legs) >= {"semantic", "keyword"}  # type: ignore[attr-defined]
        assert [i.score for i in found] == sorted((i.score for i in found), reverse=True)
        filtered = store.search(("m",), query="support group", filter={"k": 1})
        assert {i.key for i in filtered} == {"1", "4"}
        paged = store.search(("m",), query="support group", limit=1, offset=1)
        found = store.search(("m",), query="support group")
        assert [i.key for i in paged] == [i.key for i in found][1:2]
        assert "5" in {i.key for i in store.search(("m",), query="therapy in a group")}
        assert {i.key for i in store.search(("m", "u1"))} == {"1", "2", "3", "5"}


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def test_a_namespace_search_reads_its_items_and_links_by_index(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    with PgmemStore(db_dsn, index={"fields": ["text"]}, embedder=embedder, nlp=analyzer) as store:
        store.put(("plan", "u1"), "k", {"text": "Caroline went to Lisbon"})
        plan = store.explain_search(("plan",), "Where did Caroline go?", analyze=True)
    used = {node.get("Index Name") for node in nodes(plan["Plan"])}
    assert "memories_item_key" in used  # the namespace prefix: one range of the key index
    assert "memory_entities_namespace_idx" in used  # the entity leg: the namespace's links
    assert found_rows(plan["Plan"], "memories_item_key") >= 1


def found_rows(plan: dict[str, Any], index: str) -> float:
    return sum(n.get("Actual Rows", 0) for n in nodes(plan) if n.get("Index Name") == index)
