"""PgmemStore's inputs are bounded as a Memory's are: LangMem hands an LLM-chosen filter, limit
and offset straight to ``store.search``. A 20,000-key filter ran 129 s of server CPU, and
``limit=2**63`` ended as a DatabaseError; now the filter obeys ``pgmem.Limits`` (the Memory's)
and ``limit``, ``offset`` and ``max_depth`` have bounds, each refused before any SQL with the
error a Memory gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import pgmem
from pgmem.langgraph import PgmemStore

HUGE = 2**63


@pytest.fixture
def store(db_dsn: str, embedder: Any, analyzer: Any) -> Iterator[PgmemStore]:
    with PgmemStore(db_dsn, embedder=embedder, nlp=analyzer, index={"dims": 384}) as s:
        s.put(("docs",), "a", {"text": "Ana likes tea", "n": 1})
        yield s


def test_a_huge_filter_is_refused_with_the_filter_limit_error(store: PgmemStore) -> None:
    huge = {f"key{n}": n for n in range(20_000)}
    for query in (None, "tea"):
        with pytest.raises(pgmem.FilterLimitError, match="Limits.max_filter"):
            store.search(("docs",), query=query, filter=huge)
    many = {f"key{n}": n for n in range(1_001)}  # under the byte limit, over the conditions'
    with pytest.raises(pgmem.FilterLimitError, match="Limits.max_filter_conditions"):
        store.search(("docs",), filter=many)
    assert [i.key for i in store.search(("docs",), filter={"n": 1})] == ["a"]


def test_the_filter_obeys_the_memorys_limits(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    for limits, refused, setting in (
        (pgmem.Limits(max_filter_conditions=3), {"a": 1, "b": 2, "c": 3, "d": 4},
         "Limits.max_filter_conditions"),
        (pgmem.Limits(max_filter_parameters=4), {"a": {"$gt": 1}, "b": {"$lt": 2}},
         "Limits.max_filter_parameters"),
        (pgmem.Limits(max_filter_bytes=100), {"a": "x" * 100}, "Limits.max_filter_bytes"),
    ):
        with PgmemStore(db_dsn, embedder=embedder, nlp=analyzer, limits=limits) as store:
            store.put(("docs",), "a", {"n": 1, "m": 2})
            assert len(store.search(("docs",), filter={"n": 1, "m": 2})) == 1
            with pytest.raises(pgmem.FilterLimitError, match=setting):
                store.search(("docs",), filter=refused)


@pytest.mark.parametrize("call", [
    lambda s: s.search(("docs",), limit=HUGE),
    lambda s: s.search(("docs",), offset=HUGE),
    lambda s: s.search(("docs",), query="tea", limit=HUGE),
    lambda s: s.search(("docs",), query="tea", offset=HUGE),
    lambda s: s.list_namespaces(limit=HUGE),
    lambda s: s.list_namespaces(offset=HUGE),
    lambda s: s.list_namespaces(max_depth=HUGE),
    lambda s: s.search(("docs",), limit=10_001),
    lambda s: s.list_namespaces(max_depth=1_001),
], ids=["limit", "offset", "query-limit", "query-offset", "ns-limit", "ns-offset",
        "max-depth", "limit-10001", "max-depth-1001"])
def test_limit_offset_and_max_depth_are_bounded(store: PgmemStore, call: Any) -> None:
    with pytest.raises(pgmem.InvalidInputError, match="must be at most|at most 1000") as raised:
        call(store)
    assert not isinstance(raised.value, pgmem.DatabaseError)


def test_the_bounds_themselves_are_accepted(store: PgmemStore) -> None:
    assert [i.key for i in store.search(("docs",), limit=10_000)] == ["a"]
    assert store.search(("docs",), offset=1_000_000) == []
    assert store.list_namespaces(max_depth=1_000, limit=10_000) == [("docs",)]
