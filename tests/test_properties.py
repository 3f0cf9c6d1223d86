"""Property-based tests (hypothesis) against real PostgreSQL: over random filter trees, valid and
invalid, random texts, queries, metadata and scopes, no driver error ever escapes -- only
PgmemError subclasses -- and no result ever falls outside the requested scope.

One seeded database per module: several users, agents and runs, with metadata the filters can
hit. :class:`HashEmbedder` makes every memory a semantic candidate and every entity a match,
so the candidate sets are as large as they get."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import HashEmbedder, assert_in_scope, orphans, scratch_database

import pgmem
from pgmem.filters import OPERATORS

USERS = ["u0", "u1", "u2"]
AGENTS = ["a0", "a1"]
RUNS = ["r0", "r1"]
CITIES = ["Paris", "Lyon", "Oslo", "Lima"]
PEOPLE = ["John", "Maria", "Chen", "Priya"]
INJECTION = "a'); DROP TABLE pgmem.memories; --"

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    database=None,
)


def seed_items() -> list[dict[str, Any]]:
    items = []
    n = 0
    for user in USERS + [None]:
        for agent in AGENTS + [None]:
            for run in RUNS + [None]:
                if user is None and agent is None and run is None:
                    continue
                for k in range(2):
                    n += 1
                    person, city = PEOPLE[n % 4], CITIES[(n // 4) % 4]
                    items.append({
                        "text": f"{person} met {PEOPLE[(n + 1) % 4]} in {city} (note {n}).",
                        "user_id": user, "agent_id": agent, "run_id": run,
                        "metadata": {
                            "city": city, "rating": n % 6, "score": n / 7, "tags": [city, person],
                            "author": {"name": person, "age": 20 + n % 50},
                            "flag": bool(k), "none": None, INJECTION: n % 2 == 0,
                            **({"only_some": "x"} if n % 3 == 0 else {}),
                        },
                    })
    return items


@pytest.fixture(scope="module")
def world(
    server_dsn: str, template_database: str, analyzer: pgmem.TextAnalyzer
) -> Iterator[tuple[str, pgmem.Memory]]:
    with scratch_database(server_dsn, template_database) as dsn, \
            pgmem.Memory(dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        mem.add_many(seed_items())
        yield dsn, mem


# -- strategies ----------------------------------------------------------------------------

scopes = st.tuples(
    st.sampled_from(USERS + [None, "nobody"]),
    st.sampled_from(AGENTS + [None]),
    st.sampled_from(RUNS + [None]),
)
class HugeInt(int):
    """An int too long for str() (and so for JSON), with a repr hypothesis can print."""

    def __repr__(self) -> str:
        return "10**5000"


weird = st.sampled_from([b"bytes", object(), {1, 2}, HugeInt(10**5000), float("nan"), float("inf"),
                         "nul\x00", "lone \ud800", [], {}, ()])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(CITIES + PEOPLE + [INJECTION, "%", "_", "'", "\\", "%(tenant)s"]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4), weird)
keys = st.one_of(
    st.sampled_from(["city", "rating", "score", "tags", "author.name", "author.age", "flag",
                     "none", "only_some", "missing", "author", "tags.0", INJECTION, "a..b",
                     "", ".x", "AND", "$or", "and", "Or"]),
    st.text(max_size=8), st.integers(), st.none(),
)
operators = st.sampled_from(list(OPERATORS) + ["like", "$eq", "EQ", "regex", "", "NOT"])
conditions = st.one_of(
    st.dictionaries(keys, values, min_size=1, max_size=2),
    st.dictionaries(keys, st.dictionaries(operators, values, max_size=3), min_size=1, max_size=2),
)


def _combine(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda xs: {"AND": xs}, st.lists(children, max_size=3)),
        st.builds(lambda xs: {"$or": xs}, st.lists(children, max_size=3)),
        st.builds(lambda x: {"NOT": x}, children),
        st.builds(lambda xs: {"OR": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda a, b: {**a, **b}, children.filter(lambda c: isinstance(c, dict)),
                  children.filter(lambda c: isinstance(c, dict))),
    )


filter_trees = st.one_of(
    st.none(),
    st.recursive(conditions, _combine, max_leaves=8),
    values,  # not a mapping at all
)
texts = st.one_of(
    st.text(max_size=60),
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=10),  # a lone surrogate
              st.integers(0xD800, 0xDFFF).map(chr), st.text(max_size=10)),
    st.sampled_from([" ", "\x00", "🍕" * 3, "東京で寿司", "مرحبا", INJECTION, "a" * 300,
                     "John met Maria in Paris.", "'|&!:*()<->", "\\'\\", "%s %(x)s {}"]),
    st.builds(lambda a, b: f"{a} met {b} in Oslo", st.sampled_from(PEOPLE), st.text(max_size=10)),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**15, 10**15)
    | st.floats(min_value=-1e15, max_value=1e15, allow_subnormal=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=10,
)
metadatas = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), json_values, max_size=4))


def expected_error(scope: tuple[str | None, ...]) -> bool:
    return all(part is None for part in scope)


# -- properties ----------------------------------------------------------------------------


@SETTINGS
@given(filters=filter_trees, scope=scopes)
def test_random_filters_raise_only_filter_errors_and_stay_in_scope(
    world: tuple[str, pgmem.Memory], filters: Any, scope: tuple[str | None, ...]
) -> None:
    _, mem = world
    user, agent, run = scope
    outcomes: list[object] = []
    for call in (
        lambda: mem.search("John in Paris", user_id=user, agent_id=agent, run_id=run,
                           filters=filters, limit=50, threshold=0.0),
        lambda: mem.get_all(user_id=user, agent_id=agent, run_id=run, filters=filters,
                            limit=1000).items,
    ):
        try:
            found = call()
        except pgmem.PgmemError as exc:
            assert isinstance(exc, (pgmem.FilterError, pgmem.ScopeError)), repr(exc)
            assert not isinstance(exc, pgmem.DatabaseError)
            outcomes.append(type(exc))
            continue
        outcomes.append("ok")
        for item in found:
            assert_in_scope(item, user, agent, run)
    if expected_error(scope):  # which of two bad arguments is reported first may differ
        assert set(outcomes) <= {pgmem.ScopeError, pgmem.FilterError}
    else:  # the same filter is either valid or not, whichever call compiles it
        assert outcomes[0] == outcomes[1]


@SETTINGS
@given(filters=filter_trees)
def test_search_results_match_the_filter_as_get_all_does(
    world: tuple[str, pgmem.Memory], filters: Any
) -> None:
    """A search never returns a memory its filter excludes: its hits are a subset of get_all's
    answer for the same scope and filter."""
    _, mem = world
    try:
        listed = {m.id for m in mem.get_all(user_id="u1", filters=filters, limit=1000).items}
    except pgmem.FilterError:
        return
    hits = mem.search("Maria in Lyon", user_id="u1", filters=filters, limit=100, threshold=0.0)
    assert {h.id for h in hits} <= listed
    assert len(hits) == len(listed)  # HashEmbedder: every memory of the scope is a candidate


@SETTINGS
@given(text=texts, metadata=metadatas, scope=scopes)
def test_random_texts_are_stored_verbatim_or_refused_cleanly(
    world: tuple[str, pgmem.Memory], text: str, metadata: Any, scope: tuple[str | None, ...]
) -> None:
    _, mem = world
    user, agent, run = scope
    try:
        added = mem.add(text, user_id=user, agent_id=agent, run_id=run, metadata=metadata)
    except pgmem.PgmemError as exc:
        assert isinstance(exc, pgmem.InvalidInputError), repr(exc)
        assert (
            expected_error(scope) or not text.strip() or "\x00" in text
            or any(0xD800 <= ord(c) <= 0xDFFF for c in text) or "\\x00" in repr(metadata)
        ), repr(exc)
        return
    record = mem.get(added.id)
    assert record.text == text
    assert_in_scope(record, user, agent, run)
    if not added.duplicate:
        assert record.metadata == (metadata or {})
    hits = mem.search(text, user_id=user, agent_id=agent, run_id=run, limit=20, threshold=0.0)
    assert added.id in {h.id for h in hits}
    for hit in hits:
        assert_in_scope(hit, user, agent, run)


@SETTINGS
@given(query=texts, scope=scopes, limit=st.integers(-5, 1100) | st.sampled_from([True, 2.0]),
       threshold=st.floats(-0.5, 1.5) | st.sampled_from([math.nan, math.inf]),
       mode=st.sampled_from(["hybrid", "semantic", "keyword", "entity", "semantic+entity",
                             "keyword+keyword", "bm25", ""]))
def test_random_searches_stay_in_scope_or_refuse_cleanly(
    world: tuple[str, pgmem.Memory], query: str, scope: tuple[str | None, ...], limit: Any,
    threshold: float, mode: str,
) -> None:
    _, mem = world
    user, agent, run = scope
    try:
        hits = mem.search(query, user_id=user, agent_id=agent, run_id=run, limit=limit,
                          threshold=threshold, mode=mode)
    except pgmem.PgmemError as exc:
        assert isinstance(exc, pgmem.InvalidInputError), repr(exc)
        return
    assert len(hits) <= limit
    for hit in hits:
        assert_in_scope(hit, user, agent, run)
        if "semantic" in hit.explain.signals:
            assert hit.explain.semantic >= threshold


@settings(max_examples=40, deadline=None, database=None)
@given(memory_id=st.one_of(st.uuids(), st.uuids().map(str), st.text(max_size=40), st.integers(),
                           st.none(), st.binary(max_size=16)))
def test_random_ids_are_found_refused_or_not_found(
    world: tuple[str, pgmem.Memory], memory_id: Any
) -> None:
    _, mem = world
    for call in (mem.get, mem.history, lambda i: mem.update(i, metadata={"x": 1}), mem.delete):
        try:
            call(memory_id)
        except pgmem.PgmemError as exc:
            assert isinstance(exc, (pgmem.InvalidInputError, pgmem.NotFoundError)), repr(exc)
        else:
            pytest.fail(f"{memory_id!r} named a memory")  # random ids never do


def test_the_world_is_still_consistent(world: tuple[str, pgmem.Memory]) -> None:
    dsn, mem = world
    assert orphans(dsn) == {"links": 0, "memories_without_add": 0, "unlinked_entities": 0}
    assert len(mem.get_all(agent_id="a0", limit=1000).items) >= 2 * len(RUNS + [None]) * 4 - 2
    assert uuid.UUID(str(mem.get_all(user_id="u0").items[0].id))
