"""``close()`` releases everything a Memory started -- its pool's threads, the thread a query
embeds in beside spaCy, the spaCy process -- and a later call starts them again (real
PostgreSQL, real models)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import psutil
import pytest

import pgmem


class Overlapping:
    """The session's MiniLM, saying it embeds beside the analysis (as ONNX does): a query's
    embedding then runs in the Memory's embedding thread while spaCy analyses it here."""

    overlaps_analysis = True

    def __init__(self, embedder: pgmem.SentenceTransformerEmbedder) -> None:
        self._embedder = embedder
        self.model_name = embedder.model_name

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embedder.embed(texts)


@pytest.fixture(autouse=True)
def loaded(embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer) -> None:
    """The session's models loaded before threads are counted: loading them starts threads
    of their libraries' own (tqdm's monitor), which live as long as the process."""
    embedder.embed(["loaded"])
    analyzer.analyze("loaded")


def threads() -> set[str]:
    return {thread.name for thread in threading.enumerate()}


def children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def use(memory: pgmem.Memory) -> None:
    memory.add("Alice adopted a cat named Tom", user_id="alice")
    hits = memory.search("Who adopted a cat?", user_id="alice")
    assert [hit.text for hit in hits] == ["Alice adopted a cat named Tom"]


def test_close_leaves_no_thread_behind_and_a_later_call_works(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    before = threads()
    memory = pgmem.Memory(db_dsn, embedder=Overlapping(embedder), nlp=analyzer)
    use(memory)
    assert any(name.startswith("pgmem-embed") for name in threads() - before)
    memory.close()
    assert threads() - before == set()
    # close releases, it does not end the object: the next call makes the thread again
    assert memory.search("Who adopted a cat?", user_id="alice")
    assert any(name.startswith("pgmem-embed") for name in threads() - before)
    memory.close()
    assert threads() - before == set()


def test_close_stops_the_spacy_process_pgmem_started(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder
) -> None:
    if not pgmem.nlp_process.can_start_children():
        pytest.skip("this interpreter cannot start the spaCy process")
    before, before_children = threads(), children()
    settings = pgmem.Settings(dsn=db_dsn, nlp_process=True)
    with pgmem.Memory(settings=settings, embedder=Overlapping(embedder)) as memory:
        assert memory.analyzer.runs_apart
        use(memory)
        assert children() - before_children
    assert threads() - before == set()
    assert children() - before_children == set()


def test_async_close_leaves_no_thread_behind(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    before = threads()

    async def main() -> Any:
        memory = pgmem.AsyncMemory(db_dsn, embedder=Overlapping(embedder), nlp=analyzer)
        await memory.add("Alice adopted a cat named Tom", user_id="alice")
        hits = await memory.search("Who adopted a cat?", user_id="alice")
        started = threads() - before
        await memory.close()
        return hits, started

    hits, started = asyncio.run(main())
    assert [hit.text for hit in hits] == ["Alice adopted a cat named Tom"]
    assert any(name.startswith("pgmem-embed") for name in started)
    assert threads() - before == set()
