"""pgmem.reembed with real models: MiniLM's demo memories moved to a second model (MiniLM through a
fixed random map, to 3,072 dimensions stored as halfvec, or rotated at 384), online -- writes
made during the copy and at the switch get new vectors, a killed run resumes, an aborted one
leaves the schema as it was -- and the model on record refusing another embedder before it
writes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from importlib.resources import files
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

import pgmem
from pgmem import reembedding as reembed_module
from pgmem.citus import is_distributed
from tests.model_support import ProjectedEmbedder
from tests.test_migrations import catalog

QUESTIONS = {  # a question, and a word of the memory that answers it
    "What is Alice allergic to?": "penicillin",
    "Where does Alice live now?": "Lisbon",
}


def demo_items() -> list[dict[str, Any]]:
    text = files("pgmem").joinpath("demo/memories.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def wide(embedder: pgmem.SentenceTransformerEmbedder) -> ProjectedEmbedder:
    return ProjectedEmbedder(embedder, 3072, "minilm-projected-3072")


@pytest.fixture(scope="module")
def rotated(embedder: pgmem.SentenceTransformerEmbedder) -> ProjectedEmbedder:
    return ProjectedEmbedder(embedder, 384, "minilm-rotated-384")


@pytest.fixture
def demo(memory: pgmem.Memory) -> Iterator[pgmem.Memory]:
    memory.add_many(demo_items())
    yield memory


def top_text(mem: pgmem.Memory, question: str) -> str:
    return mem.search(question, user_id="alice", limit=1)[0].text


def recorded(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT role, model, dim, storage FROM pgmem.embedding_models ORDER BY role"
        ).fetchall()


def count(dsn: str, query: str = "SELECT count(*) FROM pgmem.memories") -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(query).fetchone()[0])  # type: ignore[index]


def stored_vector(dsn: str, memory_id: uuid.UUID) -> Any:
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        row = conn.execute(
            "SELECT embedding::vector FROM pgmem.memories WHERE id = %s", (memory_id,)
        ).fetchone()
    assert row is not None
    return np.asarray(row[0].to_numpy() if hasattr(row[0], "to_numpy") else row[0])


def catalog_of(dsn: str) -> dict[str, list[tuple[object, ...]]]:
    """The schema's catalog (test_migrations.catalog); on Citus without the columns' storage,
    which a re-embedding there leaves at the type's default (Citus refuses SET STORAGE on a
    distributed table)."""
    found = catalog(dsn)
    with psycopg.connect(dsn) as conn:
        if is_distributed(conn, "pgmem"):
            found["columns"] = [row[:-1] for row in found["columns"]]
    return found


@pytest.mark.also_on_citus
def test_the_first_write_records_the_model_and_another_is_refused(
    db_dsn: str, demo: pgmem.Memory, rotated: ProjectedEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    assert recorded(db_dsn) == [
        ("current", "sentence-transformers/all-MiniLM-L6-v2", 384, "vector")
    ]
    before = count(db_dsn)
    with pgmem.Memory(db_dsn, embedder=rotated, nlp=analyzer) as other:
        with pytest.raises(pgmem.ModelMismatchError) as refused:
            other.add("Alice adopted a cat", user_id="alice")
        with pytest.raises(pgmem.ModelMismatchError):
            other.search("cat", user_id="alice")
    message = str(refused.value)
    assert "'sentence-transformers/all-MiniLM-L6-v2' (384 dimensions, vector)" in message
    assert "'minilm-rotated-384' (384 dimensions)" in message and "reembed" in message
    assert count(db_dsn) == before


def test_reembed_to_3072_halfvec_online(
    db_dsn: str, demo: pgmem.Memory, wide: ProjectedEmbedder, analyzer: pgmem.TextAnalyzer,
    empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writes from the old-model application during the copy and just before the switch all
    end with vectors of the new model; searches work before, during and after."""
    old = demo
    answers = {q: top_text(old, q) for q in QUESTIONS}
    during: dict[str, Any] = {}

    def on_progress(done: int, total: int) -> None:
        # The application, still on MiniLM, writes while the copy runs.
        if "added" not in during:
            during["added"] = old.add(
                "Alice started learning the cello in October", user_id="alice")
            changed = old.search("Where does Alice live now?", user_id="alice", limit=1)[0]
            during["updated"] = old.update(
                changed.id, text="Alice moved from Lisbon to Madrid in the autumn"
            )
            for question, answer in answers.items():  # the old vectors still serve searches
                if "live" not in question:
                    assert top_text(old, question) == answer

    switch = reembed_module._Run.switch

    def late_write_then_switch(run: Any, target: Any) -> Any:
        during["late"] = old.add("Alice booked a ferry to Tangier", user_id="alice")
        return switch(run, target)

    monkeypatch.setattr(reembed_module._Run, "switch", late_write_then_switch)
    report = pgmem.reembed(db_dsn, wide, batch_size=8, progress=on_progress)

    assert report.switched and report.new == pgmem.embedding_space.EmbeddingSpace(
        "minilm-projected-3072", 3072, "halfvec"
    )
    memories = count(db_dsn)
    assert report.memories >= memories and report.at_switch >= 1  # the late add, at the switch
    assert recorded(db_dsn) == [("current", "minilm-projected-3072", 3072, "halfvec")]

    # The schema is what migrate(dim=3072) creates; the old column and its index are gone.
    pgmem.migrate(empty_db_dsn, dim=3072)
    assert catalog(db_dsn) == catalog(empty_db_dsn)

    # Each memory written meanwhile holds the new model's vector of its current text.
    for key, text in (
        ("added", "Alice started learning the cello in October"),
        ("updated", "Alice moved from Lisbon to Madrid in the autumn"),
        ("late", "Alice booked a ferry to Tangier"),
    ):
        stored = stored_vector(db_dsn, during[key].id)
        assert float(stored @ wide.embed([text])[0]) == pytest.approx(1.0, abs=2e-3), key

    # The application still on MiniLM can no longer write; one on the new model can.
    with pytest.raises(pgmem.ModelMismatchError, match="minilm-projected-3072"):
        old.add("Alice sold her bicycle", user_id="alice")
    assert count(db_dsn) == memories
    with pgmem.Memory(db_dsn, embedder=wide, nlp=analyzer) as new:
        assert top_text(new, "What is Alice allergic to?") == answers["What is Alice allergic to?"]
        assert "Madrid" in top_text(new, "Where does Alice live now?")
        assert "cello" in top_text(new, "Which instrument is Alice learning?")
        new.add("Alice sold her bicycle", user_id="alice")
    # and a new Memory on MiniLM is refused before it writes
    with (
        pgmem.Memory(db_dsn, embedder=old.embedder, nlp=analyzer) as stale,
        pytest.raises(pgmem.ModelMismatchError, match=r"3072 dimensions.*384 dimensions"),
    ):
        stale.add("Alice sold her car", user_id="alice")


class Killed(Exception):
    """Stands for the process being killed."""


def kill_after(batches: int) -> Any:
    seen = []

    def on_progress(done: int, total: int) -> None:
        seen.append(done)
        if len(seen) == batches:
            raise Killed

    return on_progress


@pytest.mark.also_on_citus
def test_a_killed_reembed_resumes_and_an_aborted_one_leaves_nothing(
    db_dsn: str, demo: pgmem.Memory, rotated: ProjectedEmbedder, wide: ProjectedEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    before = catalog_of(db_dsn)
    memories = count(db_dsn)
    with pytest.raises(Killed):
        pgmem.reembed(db_dsn, rotated, batch_size=8, progress=kill_after(2))
    status = pgmem.reembed_status(db_dsn)
    assert status.space.next is not None and status.space.next.model == "minilm-rotated-384"
    assert 0 < status.memories_todo < memories
    # The application goes on, on MiniLM, while the re-embedding waits.
    added = demo.add("Alice joined a climbing gym", user_id="alice")
    assert "penicillin" in top_text(demo, "What is Alice allergic to?")
    # Another model cannot take over the half-done run; abort or resume it.
    with pytest.raises(pgmem.ModelMismatchError, match="minilm-rotated-384.*in progress"):
        pgmem.reembed(db_dsn, wide)

    # A killed CREATE INDEX CONCURRENTLY leaves an invalid index: the resumed run rebuilds it.
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 1")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(
                "CREATE INDEX CONCURRENTLY memories_embedding_next_idx ON pgmem.memories"
                " USING hnsw (embedding_next vector_cosine_ops)"
            )
    report = pgmem.reembed(db_dsn, rotated, batch_size=8)
    assert report.switched and 0 < report.memories < memories + 1
    assert recorded(db_dsn) == [("current", "minilm-rotated-384", 384, "vector")]
    assert catalog_of(db_dsn) == before  # same dimension and storage: the same schema
    stored = stored_vector(db_dsn, added.id)
    assert float(stored @ rotated.embed(["Alice joined a climbing gym"])[0]) == pytest.approx(
        1.0, abs=1e-4
    )
    with pgmem.Memory(db_dsn, embedder=rotated, nlp=analyzer) as new:
        assert "penicillin" in top_text(new, "What is Alice allergic to?")
    # Same dimension, other model: MiniLM is refused all the same.
    with pytest.raises(pgmem.ModelMismatchError):
        demo.add("Alice joined a choir", user_id="alice")

    # Start back to MiniLM, kill it, abort: the schema is as it was.
    with pytest.raises(Killed):
        pgmem.reembed(db_dsn, demo.embedder, batch_size=8, progress=kill_after(1))
    assert pgmem.abort_reembed(db_dsn) is True
    assert catalog_of(db_dsn) == before
    assert recorded(db_dsn) == [("current", "minilm-rotated-384", 384, "vector")]
    assert pgmem.abort_reembed(db_dsn) is False
    assert pgmem.reembed(db_dsn, rotated).switched is False  # already on that model


@pytest.mark.also_on_citus
def test_a_run_killed_after_its_switch_is_finished_by_the_next(
    db_dsn: str, demo: pgmem.Memory, rotated: ProjectedEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = catalog_of(db_dsn)

    def killed(run: Any) -> None:
        if run.columns()["not_null_checks"]:
            raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(reembed_module._Run, "finish", killed)
        with pytest.raises(Killed):
            pgmem.reembed(db_dsn, rotated, batch_size=16)
    # Switched: the new model serves, its column not yet NOT NULL but checked for new rows.
    with pgmem.Memory(db_dsn, embedder=rotated, nlp=analyzer) as new:
        new.add("Alice repaired her kayak", user_id="alice")
        assert "penicillin" in top_text(new, "What is Alice allergic to?")
    with psycopg.connect(db_dsn) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "UPDATE pgmem.memories SET embedding = NULL WHERE id = (SELECT min(id::text)::uuid"
            " FROM pgmem.memories)"
        )
    assert catalog_of(db_dsn) != before
    assert pgmem.reembed(db_dsn, rotated).switched is False  # finishes, nothing else to do
    assert catalog_of(db_dsn) == before


def test_bad_arguments_and_an_old_schema(db_dsn: str, wide: ProjectedEmbedder) -> None:
    with pytest.raises(pgmem.InvalidInputError):
        pgmem.reembed(db_dsn, wide, batch_size=0)
    with pytest.raises(pgmem.ConfigurationError, match="more than an HNSW index of vector"):
        pgmem.reembed(db_dsn, wide, storage="vector")
    pgmem.downgrade(db_dsn, "0003")
    with pytest.raises(pgmem.SchemaError, match="revision 0004"):
        pgmem.reembed(db_dsn, wide)
