"""3,072-dimensional embeddings (above pgvector's 2,000-dimension HNSW limit for ``vector``):
stored as halfvec, indexed with halfvec_cosine_ops, and the whole lifecycle -- add, search with
and without metadata filters, get_all, update -- through the same statements, the search on the
HNSW index. The embedder is the real MiniLM mapped to 3,072 dimensions (tests/model_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem import builders
from tests.model_support import ProjectedEmbedder
from tests.test_reembed import demo_items
from tests.test_scale import plan_indexes

ROWS = 8_000

@pytest.fixture(scope="module")
def wide(embedder: pgmem.SentenceTransformerEmbedder) -> ProjectedEmbedder:
    return ProjectedEmbedder(embedder, 3072, "minilm-projected-3072")


@pytest.fixture
def wide_memory(
    empty_db_dsn: str, wide: ProjectedEmbedder, analyzer: pgmem.TextAnalyzer
) -> Iterator[pgmem.Memory]:
    pgmem.migrate(empty_db_dsn, dim=3072)
    with pgmem.Memory(empty_db_dsn, embedder=wide, nlp=analyzer) as mem:
        mem.add_many(demo_items())
        yield mem


def test_add_search_filters_and_update_at_3072_dimensions(
    wide_memory: pgmem.Memory, wide: ProjectedEmbedder, empty_db_dsn: str
) -> None:
    mem = wide_memory
    hits = mem.search("What is Alice allergic to?", user_id="alice", limit=3)
    assert "penicillin" in hits[0].text
    assert hits[0].explain.signals == ("semantic", "keyword", "entity")
    # the similarity from halfvec storage is the float32 cosine to within half precision
    exact = float(wide.embed([hits[0].text])[0] @ wide.embed(["What is Alice allergic to?"])[0])
    assert hits[0].explain.semantic == pytest.approx(exact, abs=2e-3)

    health = mem.search("medicine", user_id="alice", filters={"topic": "health"}, limit=10)
    assert health and {h.metadata["topic"] for h in health} == {"health"}
    others = mem.search("medicine", user_id="alice", filters={"topic": {"ne": "health"}})
    assert "health" not in {h.metadata.get("topic") for h in others}

    page = mem.get_all(user_id="alice", filters={"topic": "home"}, limit=100)
    assert page.items and {r.metadata["topic"] for r in page.items} == {"home"}

    added = mem.add("Alice keeps her spare key with the neighbour at number 12", user_id="alice",
                    metadata={"topic": "home"})
    mem.update(added.id, text="Alice keeps her spare key in the blue flower pot")
    found = mem.search("Where is the spare key?", user_id="alice", limit=1)
    assert found[0].id == added.id and "flower pot" in found[0].text
    with psycopg.connect(empty_db_dsn) as conn:
        stored = conn.execute(
            "SELECT pg_typeof(embedding)::text, vector_dims(embedding::vector)"
            " FROM pgmem.memories WHERE id = %s", (added.id,),
        ).fetchone()
    assert stored == ("halfvec", 3072)


@pytest.mark.slow
def test_a_large_scope_searches_the_halfvec_hnsw_index(
    wide_memory: pgmem.Memory, wide: ProjectedEmbedder, empty_db_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Alice's demo memories copied with noise (each leaning towards another) to 8,000 rows,
    searched as a large scope: through the HNSW index. (Were the 6 kB vectors TOASTed out of
    line, the planner, which does not count reading them, would scan the table instead up to
    well over 10,000 rows.)"""
    rng = np.random.default_rng(5)
    with psycopg.connect(empty_db_dsn) as conn:
        rows = conn.execute(
            "SELECT text, lexemes::text, lexeme_count, metadata::text FROM pgmem.memories"
            " WHERE user_id = 'alice'"
        ).fetchall()
        base = wide.embed([r[0] for r in rows])
        with conn.cursor().copy(
            "COPY pgmem.memories (user_id, text, content_hash, embedding, lexemes, lexeme_count,"
            " metadata) FROM STDIN"
        ) as copy:
            for copy_no in range(-(-ROWS // len(rows))):
                for (text, lexemes, count, metadata), vector in zip(rows, base):
                    # A copy leans towards another memory, so that the copies of one text are
                    # no island in the graph (15 clusters of near-duplicates left the HNSW walk
                    # stuck in the entry point's cluster now and then).
                    other = base[rng.integers(len(base))]
                    noisy = (vector + rng.uniform(0, 0.6) * other
                             + rng.normal(0, 0.003, vector.shape))
                    noisy /= np.linalg.norm(noisy)
                    copy.write_row((
                        "alice", text, f"copy{copy_no}-{text}",
                        "[" + ",".join(f"{x:.3f}" for x in noisy) + "]", lexemes, count, metadata,
                    ))
        conn.execute("ANALYZE pgmem.memories")
    monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 0)  # every scope is "large"
    question = "What is Alice allergic to?"
    plan: dict[str, Any] = wide_memory.explain_search(
        question, user_id="alice", mode="semantic", analyze=True
    )
    assert "memories_embedding_idx" in plan_indexes(plan["Plan"])
    hits = wide_memory.search(question, user_id="alice", limit=10, mode="semantic")
    assert len(hits) == 10 and all("penicillin" in h.text for h in hits[:5])
