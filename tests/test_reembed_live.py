"""A re-embedding that finishes while the application keeps writing: while a switch is pending,
adds and updates store the pending model's vectors too (pgmem.next_model), so the backlog only
shrinks. Real PostgreSQL, real MiniLM; the second model is MiniLM rotated at 384 dimensions
(tests/model_support.py) or MiniLM's int8 ONNX weights, found by name."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

import pgmem
from pgmem.embedding import make_embedder
from pgmem.next_model import loadable_by_name
from tests.model_support import ProjectedEmbedder
from tests.test_reembed import Killed, demo_items, kill_after, top_text


@pytest.fixture(scope="module")
def rotated(embedder: pgmem.SentenceTransformerEmbedder) -> ProjectedEmbedder:
    return ProjectedEmbedder(embedder, 384, "minilm-rotated-384")


@pytest.fixture
def demo(memory: pgmem.Memory) -> Iterator[pgmem.Memory]:
    memory.add_many(demo_items())
    yield memory


def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        return conn.execute(query).fetchall()


def todo(dsn: str) -> tuple[int, int]:
    status = pgmem.reembed_status(dsn)
    return status.memories_todo, status.entities_todo


def pending(dsn: str, model: Any) -> None:
    """A re-embedding to ``model`` begun and stopped after its first batch."""
    with pytest.raises(Killed):
        pgmem.reembed(dsn, model, batch_size=8, progress=kill_after(1))
    assert pgmem.reembed_status(dsn).space.next is not None


class Writer:
    """A thread of the application on MiniLM: adds, add_many and updates of its own memories,
    until ``stop`` or until the re-embedding has switched (its writes are refused)."""

    def __init__(self, number: int, memory: pgmem.Memory, stop: threading.Event) -> None:
        self.number, self.memory, self.stop = number, memory, stop
        self.texts: dict[uuid.UUID, str] = {}
        self.writes = 0
        self.wrote = threading.Condition()
        self.failures: list[BaseException] = []
        self.switched = False
        self.done = 0  # steps taken, which number the texts

    def step(self, i: int) -> None:
        user = f"w{self.number}"
        text = f"Writer {self.number} noted item {i}: Alice met Bob in Lisbon about the budget"
        if i % 3 == 2:
            more = [f"{text} (part {k})" for k in range(2)]
            for result in self.memory.add_many(more, user_id=user):
                self.texts[result.id] = result.text
        elif i % 4 == 3 and self.texts:
            target = sorted(self.texts)[i % len(self.texts)]
            changed = f"Writer {self.number} changed item {i}: Carla moved to Osaka"
            self.texts[self.memory.update(target, text=changed).id] = changed
        else:
            result = self.memory.add(text, user_id=user)
            self.texts[result.id] = text
        with self.wrote:
            self.writes += 1
            self.wrote.notify_all()

    def run(self, steps: int | None = None) -> None:
        end = None if steps is None else self.done + steps
        try:
            while not self.stop.is_set() and (end is None or self.done < end):
                self.step(self.done)
                self.done += 1
        except pgmem.ModelMismatchError:
            self.switched = True  # the re-embedding switched: this Memory's model is gone
        except BaseException as exc:  # noqa: BLE001 - the test fails on it
            self.failures.append(exc)

    def wait_for(self, writes: int, timeout: float = 120) -> None:
        with self.wrote:
            assert self.wrote.wait_for(lambda: self.writes >= writes or bool(self.failures),
                                       timeout), "the writer stalled"


def test_writes_during_a_reembed_store_both_vectors_and_it_finishes(
    db_dsn: str, demo: pgmem.Memory, rotated: ProjectedEmbedder,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    pending(db_dsn, rotated)
    before = todo(db_dsn)
    stop = threading.Event()
    memories = [
        pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, next_embedder=rotated)
        for _ in range(3)
    ]
    writers = [Writer(n, memory, stop) for n, memory in enumerate(memories)]
    try:
        # The re-embedding is stopped: writes alone do not grow its backlog.
        threads = [threading.Thread(target=w.run, args=(6,)) for w in writers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not [f for w in writers for f in w.failures]
        written = [memory_id for w in writers for memory_id in w.texts]
        assert len(written) >= 3 * 6
        assert todo(db_dsn)[0] <= before[0] and todo(db_dsn)[1] <= before[1]
        assert rows(db_dsn, "SELECT count(*) FROM pgmem.memories WHERE embedding_next IS NULL"
                    " AND user_id LIKE 'w%'") == [(0,)]

        # Resumed while they go on writing, it finishes; each write after its switch is refused.
        threads = [threading.Thread(target=w.run) for w in writers]
        for thread in threads:
            thread.start()
        for w in writers:
            w.wait_for(w.writes + 1)
        marks = [w.writes for w in writers]

        def interleaved(done: int, total: int) -> None:
            for w, mark in zip(writers, marks, strict=True):
                w.wait_for(mark + 2)  # writes land between the run's batches

        resumed_todo = todo(db_dsn)[0]
        report = pgmem.reembed(db_dsn, rotated, batch_size=8, progress=interleaved)
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        for memory in memories:
            memory.close()
    assert not [f for w in writers for f in w.failures]
    assert report.switched and report.new.model == "minilm-rotated-384"
    # The rows the writers stored were never the run's to embed.
    assert report.memories <= resumed_todo
    assert sum(w.writes for w in writers) > sum(marks)

    # Every memory and entity, those written during the run too, holds the new model's vector
    # of its current text (the writers' texts as they last set them).
    stored = rows(db_dsn, "SELECT id, text, embedding FROM pgmem.memories ORDER BY id")
    latest = {memory_id: text for w in writers for memory_id, text in w.texts.items()}
    assert {memory_id for memory_id in latest} <= {row[0] for row in stored}
    assert all(latest.get(row[0], row[1]) == row[1] for row in stored)
    expected = rotated.embed([row[1] for row in stored])
    got = np.stack([np.asarray(row[2].to_numpy()) for row in stored])
    assert np.min(np.sum(expected * got, axis=1)) > 0.9999
    names = rows(db_dsn, "SELECT name, embedding FROM pgmem.entities ORDER BY name")
    assert names
    expected = rotated.embed([row[0] for row in names])
    got = np.stack([np.asarray(row[1].to_numpy()) for row in names])
    assert np.min(np.sum(expected * got, axis=1)) > 0.9999

    with pgmem.Memory(db_dsn, embedder=rotated, nlp=analyzer) as new:
        assert "penicillin" in top_text(new, "What is Alice allergic to?")
        hit = new.search("Where did Carla move?", user_id="w0", limit=1)[0]
        assert "Osaka" in hit.text


def test_a_writer_without_the_pending_model_warns_once_and_the_reembed_still_finishes(
    db_dsn: str, demo: pgmem.Memory, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer, caplog: pytest.LogCaptureFixture,
) -> None:
    other = ProjectedEmbedder(embedder, 384, "minilm-rotated-elsewhere", seed=3)
    pending(db_dsn, other)
    before = todo(db_dsn)[0]
    with (
        caplog.at_level(logging.WARNING, logger="pgmem.next_model"),
        pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as app,
    ):
        added = [app.add(f"Alice planted tree number {k} in the garden", user_id="alice")
                 for k in range(3)]
    warnings = [r.getMessage() for r in caplog.records if r.name == "pgmem.next_model"]
    assert len(warnings) == 1
    assert "'minilm-rotated-elsewhere'" in warnings[0] and "next_embedder" in warnings[0]
    assert todo(db_dsn)[0] == before + 3  # left to the re-embedding

    report = pgmem.reembed(db_dsn, other, batch_size=8)
    assert report.switched and report.memories >= before + 3
    for result in added:
        (row,) = rows(db_dsn, f"SELECT embedding FROM pgmem.memories WHERE id = '{result.id}'")
        vector = np.asarray(row[0].to_numpy())
        assert float(vector @ other.embed([result.text])[0]) == pytest.approx(1.0, abs=1e-4)


def test_a_sentence_transformers_model_is_found_by_its_recorded_name(
    db_dsn: str, demo: pgmem.Memory, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer, caplog: pytest.LogCaptureFixture,
) -> None:
    """MiniLM's int8 weights are another model (cosine ~0.99 to MiniLM's vectors): a Memory on
    MiniLM loads them by name, without being given them, while a switch to them is pending."""
    int8 = make_embedder("onnx-int8")
    pending(db_dsn, int8)
    before = todo(db_dsn)
    with (
        caplog.at_level(logging.WARNING, logger="pgmem.next_model"),
        pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as app,
    ):
        added = app.add("Alice adopted a grey cat called Miso", user_id="alice")
        updated = app.update(added.id, text="Alice adopted a grey cat called Tofu")
    assert not [r for r in caplog.records if r.name == "pgmem.next_model"]
    assert todo(db_dsn)[0] == before[0]
    (row,) = rows(db_dsn, f"SELECT embedding_next FROM pgmem.memories WHERE id = '{added.id}'")
    vector = np.asarray(row[0].to_numpy())
    assert float(vector @ int8.embed([updated.text])[0]) > 0.97
    assert pgmem.abort_reembed(db_dsn)


def test_names_a_process_cannot_load() -> None:
    settings = pgmem.Settings.from_env()
    for name in ("soak-minilm-b", "tests.model_support.ProjectedEmbedder", "my-local-folder"):
        assert loadable_by_name(name, settings) is None
    found = loadable_by_name("sentence-transformers/all-MiniLM-L6-v2 (int8)", settings)
    assert isinstance(found, pgmem.OnnxEmbedder) and found.quantized
