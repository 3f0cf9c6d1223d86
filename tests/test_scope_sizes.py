"""A search sends the statement for a small scope unless it knows the scope is large; both
statements answer alike, and what a search finds keeps the choice current."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

import pgmem
from pgmem import builders
from pgmem.queries import NO_FILTER, Queries, sql_blocks
from pgmem.scope_sizes import LargeScopes
from pgmem.store import Statement, Store, explain_statements
from tests.test_scale import plan_nodes

TEXTS = [
    "Caroline moved to Ottawa to work at Shopify",
    "Melanie paints sunsets by the lake in Paris",
    "Jon opened a dance studio in Boston last spring",
    "Gina lost her job at the bank and started a clothing store",
    "Caroline adopted a puppy called Rex from the shelter",
    "Melanie's kids love the camping trips in the mountains",
    "Jon met Gina at a fashion fair in Milan",
    "The book club reads Dune next month",
]
QUERIES = ["Where does Caroline work?", "Who paints?", "What did Jon open?", "pets"]


class Sent:
    """Which search statement each search sent: True for the small scope's."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.small: list[bool] = []
        self.statements: list[Statement[Any]] = []
        search = Store.search

        def spy(store: Store, params: Any, filters: sql.Composable, *, small: bool = False) -> Any:
            self.small.append(small)
            self.statements.append(search(store, params, filters, small=small))
            return self.statements[-1]

        monkeypatch.setattr(Store, "search", spy)

    def take(self) -> list[bool]:
        taken, self.small = self.small, []
        return taken


class AlwaysLarge(LargeScopes):
    """Every scope taken for a large one: every search sends the statement for any size."""

    def __contains__(self, key: Hashable) -> bool:
        return True


def hits_of(memory: pgmem.Memory, query: str, **kwargs: Any) -> list[tuple[Any, ...]]:
    return [(h.id, round(h.score, 9), h.explain.legs)
            for h in memory.search(query, threshold=0.0, **kwargs)]


def test_a_search_sends_the_small_statement_until_it_finds_a_large_scope(
    memory: pgmem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 5)  # a scope of more than 5 is large
    memory.add_many(TEXTS, user_id="big")
    memory.add_many(TEXTS[:3], user_id="small")
    sent = Sent(monkeypatch)

    assert memory.search("Where does Caroline work?", user_id="small")
    assert sent.take() == [True]
    # A large scope: the small statement returns its size only, the whole one answers.
    first = memory.search("Where does Caroline work?", user_id="big")
    assert first and {h.user_id for h in first} == {"big"}
    assert sent.take() == [True, False]
    assert memory.search("Where does Caroline work?", user_id="big") == first
    assert sent.take() == [False]  # remembered as large
    # The same scope, filtered down to a small one, is a scope of its own.
    memory.update(first[0].id, metadata={"topic": "work"})
    assert memory.search("work", user_id="big", filters={"topic": "work"})
    assert sent.take() == [True]
    # Shrunk, the scope is searched as a small one again, from the search after the one
    # that found it small.
    for hit in memory.get_all(user_id="big", limit=100).items[:4]:
        memory.delete(hit.id)
    assert memory.search("Who paints?", user_id="big")
    assert memory.search("Who paints?", user_id="big")
    assert sent.take() == [False, True]
    # An empty scope: its size (0) comes back without candidates, in one statement.
    assert memory.search("anything", user_id="nobody") == []
    assert memory.search("anything", user_id="nobody") == []
    assert sent.take() == [True, True]


def test_an_async_search_of_a_large_scope_sends_the_second_statement_too(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 2)

    async def searches() -> list[list[pgmem.SearchHit]]:
        async with pgmem.AsyncMemory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
            await memory.add_many(TEXTS[:4], user_id="u1")
            return [await memory.search("Where does Caroline work?", user_id="u1")
                    for _ in range(2)]

    sent = Sent(monkeypatch)
    first, second = asyncio.run(searches())
    assert first and first == second
    assert first[0].text == TEXTS[0]
    assert sent.take() == [True, False, False]


def test_both_statements_answer_a_small_scope_alike(memory: pgmem.Memory) -> None:
    memory.add_many(TEXTS, user_id="u1")
    small = {q: hits_of(memory, q, user_id="u1") for q in QUERIES}
    memory._ops._large_scopes = AlwaysLarge()
    whole = {q: hits_of(memory, q, user_id="u1") for q in QUERIES}
    assert small == whole
    assert all(small.values())


def test_a_large_scope_counts_only_the_entity_links_a_filter_keeps(
    memory: pgmem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large scope's entity leg reads its links by their own scope ids; with a metadata
    filter it keeps those of the memories the filter keeps, as a small scope's does: the
    same hits, and each name's spread counts the kept memories only."""
    trips = ["alps", "home", "paris", "paris", "paris"]
    memory.add_many([{"text": text, "user_id": "u1", "metadata": {"trip": trip}}
                     for text, trip in zip(TEXTS[:5], trips)])

    def searched(scan_rows: int) -> list[tuple[Any, ...]]:
        monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", scan_rows)
        hits = memory.search("What did Caroline and Melanie do?", user_id="u1",
                             filters={"trip": {"in": ["alps", "home", "paris"]}}, limit=3)
        kept = memory.search("What did Caroline and Melanie do?", user_id="u1",
                             filters={"trip": {"in": ["alps", "home"]}})
        return [(h.id, round(h.score, 6), [(e.name, e.spread) for e in h.explain.entity_hits])
                for h in (*hits, *kept)]

    small, large = searched(5_000), searched(0)  # every scope small, then every scope large
    assert small == large
    spreads = {name: spread for *_, hits in large[3:] for name, spread in hits}
    assert spreads == {"caroline": 1, "melanie": 1}, spreads  # not 2 each: one of each is in Paris


def test_large_scopes_remembers_the_newest_up_to_its_capacity() -> None:
    scopes = LargeScopes(capacity=2)
    scopes.note("a", 11, 10)
    scopes.note("b", 5, 10)  # small: not remembered
    assert "a" in scopes and "b" not in scopes
    scopes.note("b", 11, 10)
    scopes.note("a", 11, 10)  # seen again: the newest
    scopes.note("c", 11, 10)  # over capacity: "b", the oldest, goes
    assert ["a" in scopes, "b" in scopes, "c" in scopes] == [True, False, True]
    scopes.note("a", 10, 10)  # found small
    assert "a" not in scopes


def test_the_small_statement_is_the_search_statement_without_its_large_scope_blocks() -> None:
    queries = Queries("pgmem")
    whole, small = ([line for line in queries.get(name, NO_FILTER, ["user_id"]).as_string(None)
                     .splitlines() if line.strip()] for name in ("search", "search_small"))
    fragments = [name for name in sql_blocks() if name.startswith("large_scope_")]
    assert len(fragments) == 9 and all(f"{{{name}}}" in sql_blocks()["search"]
                                       for name in fragments)
    assert not any("{large_scope_" in line for line in whole)  # every fragment composed in
    assert set(small) < set(whole)
    rest = iter(whole)  # the small statement is the whole one without some of its lines
    assert all(line in rest for line in small)
    for large_only in ("leg_best_stored", "exact_scan", "ORDER BY m.embedding <=>"):
        assert any(large_only in line for line in whole)
        assert not any(large_only in line for line in small)
    assert any("AS scope_size" in line for line in small)


def search_on_unanalysed_tables(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch, query: str,
) -> tuple[Statement[Any], list[Statement[Any]]]:
    """The small-scope statement a search of ``query`` sent, and the settings sent before it,
    in a scope of TEXTS whose tables have no statistics yet (as an application that loads
    memories and searches at once meets them)."""
    settings: list[Statement[Any]] = []
    search_settings = Store.search_settings

    def spy(store: Store, *args: Any, **kwargs: Any) -> list[Statement[Any]]:
        settings[:] = search_settings(store, *args, **kwargs)
        return settings

    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
        memory.add_many(TEXTS, user_id="u1")
        sent = Sent(monkeypatch)
        monkeypatch.setattr(Store, "search_settings", spy)
        assert memory.search(query, user_id="u1")
    (statement,) = sent.statements
    assert statement.name == "search_small" and settings
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = 'pgmem'"
            " AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)"
        ).fetchone() == (0,)
    return statement, settings


def explained(
    db_dsn: str, statement: Statement[Any], settings: list[tuple[str | sql.Composable, Any]]
) -> list[dict[str, Any]]:
    """The nodes of ``statement``'s EXPLAIN ANALYZE, prepared (a generic plan under
    ``settings``: statements and their parameters, run first in the same transaction)."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        register_vector(conn)
        cursor = psycopg.ClientCursor(conn)
        prepare, explain, deallocate = explain_statements(
            cursor, Statement("explained", statement.query, statement.params, "analyze", dict)
        )
        with conn.transaction():
            for query, params in settings:
                conn.execute(query, params)  # type: ignore[arg-type]
            conn.execute(prepare)
            row = conn.execute(explain).fetchone()
            conn.execute(deallocate)
    assert row is not None
    return list(plan_nodes(row[0][0]["Plan"]))


def test_on_a_table_without_statistics_the_entity_matches_are_made_once(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A generic plan made before the table has statistics once re-ran each query entity's
    match (a sort of the scope's entities) for every entity link of the scope: 40 ms of a
    search of 419 memories. The matches are a CTE of their own, made once (whatever the other
    settings: here a generic plan alone)."""
    statement, _ = search_on_unanalysed_tables(
        db_dsn, embedder, analyzer, monkeypatch, "Did Caroline meet Melanie in Paris?")
    nodes = explained(db_dsn, statement, [
        ("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)", None)])
    # Each query entity's match: a sort of the scope's entities by distance.
    sorts = [n for n in nodes if n["Node Type"] == "Sort"
             and any(c.get("CTE Name") == "scope_entities" for c in plan_nodes(n))]
    entities = len((statement.params or {})["entity_embeddings"])
    assert entities == 3 and sorts
    assert sum(n["Actual Loops"] for n in sorts) == entities


def test_on_a_table_without_statistics_the_candidates_meet_their_signals_by_hash(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A generic plan made before the tables have statistics estimates each CTE at a row or
    two; under pgmem's settings as they were, it joined the candidates to their entity hits in
    a loop, each candidate compared with every hit (20,000 comparisons, a third of the
    statement's time at 400 memories). Under the settings the small statement is sent with,
    every join of two row sets is hashed: no row is compared with one it does not match."""
    statement, settings = search_on_unanalysed_tables(
        db_dsn, embedder, analyzer, monkeypatch, "Did Caroline meet Melanie or Jon in Paris?")
    nodes = explained(db_dsn, statement, [(s.query, s.params) for s in settings])
    hits = [n for n in nodes if n.get("CTE Name") == "entity_hits"]
    assert hits and all(n["Actual Rows"] >= 2 for n in hits)  # hits enough to loop over
    assert sum(n.get("Rows Removed by Join Filter", 0) for n in nodes) == 0
