"""A table holding a handful of scopes: a search reads its scope, not every scope's rows.

The search statement runs with a generic plan, which estimates a scope at 1/n_distinct of the
table: with a few scopes a quarter of it, where a sequential scan of the whole table looked
cheaper than the scope's index -- so each search read every scope's memories (issue 29: five
LoCoMo conversations in one database). The search's settings turn sequential scans off where
another path exists.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgmem
from tests.test_scale import plan_nodes

SCOPES = 4
PER_SCOPE = 48
TOPICS = [
    "moved to Ottawa to work at Shopify", "paints sunsets by the lake", "opened a dance studio",
    "started a clothing store", "adopted a puppy from the shelter", "went camping in the hills",
    "met a friend at a fashion fair", "reads Dune with the book club",
]
PEOPLE = ["Caroline", "Melanie", "Jon", "Gina", "Tim", "Audrey"]


def texts(scope: int) -> list[str]:
    return [f"{PEOPLE[(i + scope) % len(PEOPLE)]} {TOPICS[i % len(TOPICS)]}, "
            f"day {i} of scope {scope}"
            for i in range(PER_SCOPE)]


def ran_scans(plan: dict[str, Any], relation: str) -> list[str]:
    """The scan node types on ``relation`` that ran."""
    return [n["Node Type"] for n in plan_nodes(plan["Plan"])
            if n.get("Relation Name") == relation and n.get("Actual Loops", 0) > 0]


@pytest.fixture
def few_scopes(memory: pgmem.Memory, db_dsn: str) -> pgmem.Memory:
    for scope in range(SCOPES):
        memory.add_many(texts(scope), user_id=f"user{scope}")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.memories")
        (distinct,) = conn.execute(
            "SELECT n_distinct FROM pg_stats WHERE schemaname = 'pgmem'"
            " AND tablename = 'memories' AND attname = 'user_id'").fetchone()  # type: ignore[misc]
    assert distinct == SCOPES  # what the generic plan's estimate of a scope comes from
    return memory


def test_a_search_reads_its_scope_not_the_table(few_scopes: pgmem.Memory) -> None:
    plan = few_scopes.explain_search("Who adopted a puppy?", user_id="user2", analyze=True)
    scans = ran_scans(plan, "memories")
    assert scans and "Seq Scan" not in scans, scans
    hits = few_scopes.search("Who adopted a puppy?", user_id="user2")
    assert hits and {h.user_id for h in hits} == {"user2"}
