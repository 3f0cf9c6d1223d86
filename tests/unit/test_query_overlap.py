"""A query embeds beside its analysis, or before it when the embedder says the two would
fight over the cores (torch with a thread per core); beside an analysis in another process, in
the calling thread, between sending the text and waiting for its analysis."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pytest

import pgmem
from pgmem import operations
from pgmem.embedding import OnnxEmbedder, embeds_beside_analysis, usable_cores
from pgmem.model_work import ModelWork
from pgmem.nlp import Analysis, Entity
from pgmem.nlp_process import can_start_children
from pgmem.settings import Settings


def made(embedder: object, nlp: pgmem.TextAnalyzer | None) -> operations.Operations:
    """Operations on these models, with settings of their own (none from the environment); the
    query analysed in full, by the analyzer's ``analyze_many`` (the tagged one overlaps the same
    way: tests/test_query_analysis.py)."""
    settings = Settings(tenant="t", max_text_length=100, query_analysis="full")
    return operations.Operations(settings, ModelWork(settings, embedder=embedder, nlp=nlp))


class ThreadRecordingAnalyzer(pgmem.TextAnalyzer):
    def __init__(self, events: list[str] | None = None) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.events = [] if events is None else events

    def analyze(self, text: str) -> Analysis:
        return self.analyze_many([text])[0]

    def analyze_many(self, texts: Iterable[str], batch_size: int = 64) -> list[Analysis]:
        self.threads.append(threading.current_thread().name)
        self.events.append("analyze")
        return [Analysis(lexemes=(text,), entities=(Entity("crate", "crate", "PROPN"),))
                for text in texts]


class ApartAnalyzer(ThreadRecordingAnalyzer):
    """Says it analyses in another process: records when a text is sent and when its analysis
    is waited for."""

    runs_apart = True

    def analyze_many_later(
        self, texts: Sequence[str], batch_size: int = 64
    ) -> Callable[[], list[Analysis]]:
        self.events.append("sent")
        self.threads.append(threading.current_thread().name)

        def wait() -> list[Analysis]:
            self.events.append("waited")
            return ThreadRecordingAnalyzer.analyze_many(self, texts)

        return wait


class ThreadRecordingEmbedder:
    def __init__(self, overlaps: bool | None, events: list[str] | None = None) -> None:
        if overlaps is not None:
            self.overlaps_analysis = overlaps
        self.threads: list[str] = []
        self.events = [] if events is None else events

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        self.events.append(f"embed {len(texts)}")
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.mark.parametrize(("overlaps", "beside"), [(None, True), (True, True), (False, False)])
def test_the_query_embeds_where_the_embedder_says(overlaps: bool | None, beside: bool) -> None:
    embedder, analyzer = ThreadRecordingEmbedder(overlaps), ThreadRecordingAnalyzer()
    ops = made(embedder, analyzer)
    analysis, vectors = ops.models.query_vectors(
        "where is the crate?", 4, ops.models.languages.get())
    assert analysis.lexemes == ("where is the crate?",) and vectors.shape == (2, 4)
    caller = threading.current_thread().name
    assert analyzer.threads == [caller]
    assert embeds_beside_analysis(embedder) is beside
    # The query, then its entity's name (here, after the analysis)
    if beside:
        assert embedder.threads[0].startswith("pgmem-embed") and embedder.threads[1] == caller
    else:
        assert embedder.threads == [caller, caller]


def test_torch_overlaps_only_when_it_leaves_a_core_free_or_its_threads_sleep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    embedder = pgmem.SentenceTransformerEmbedder()
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    try:
        torch.set_num_threads(usable_cores())
        assert embedder.overlaps_analysis is False
        monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
        assert embedder.overlaps_analysis is True
        monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
        assert embedder.overlaps_analysis is False
        if usable_cores() > 1:
            torch.set_num_threads(1)
            assert embedder.overlaps_analysis is True
    finally:
        torch.set_num_threads(before)
    assert pgmem.SentenceTransformerEmbedder(device="cuda").overlaps_analysis is True


def test_onnx_overlaps_unless_its_threads_spin() -> None:
    assert OnnxEmbedder().overlaps_analysis is True
    assert OnnxEmbedder(spinning=True).overlaps_analysis is False


@pytest.mark.parametrize("overlaps", [True, False])
def test_one_added_memory_embeds_beside_its_analysis_a_batch_in_one_call(overlaps: bool) -> None:
    from pgmem.validate import NewMemory, Scope

    embedder, analyzer = ThreadRecordingEmbedder(overlaps), ThreadRecordingAnalyzer()
    ops = made(embedder, analyzer)
    scope = Scope(tenant="t", user_id="u")
    one = [NewMemory(scope=scope, text="the crate is blue", metadata={})]
    params = ops._batch_params(one, 4, True, ops.models.languages.get())
    assert len(params["embeddings"]) == 1
    caller = threading.current_thread().name
    if overlaps:
        assert embedder.threads[0].startswith("pgmem-embed")
    else:
        assert embedder.threads == [caller]
    embedder.threads.clear()
    two = [*one, NewMemory(scope=scope, text="the box is red", metadata={})]
    ops._batch_params(two, 4, True, ops.models.languages.get())
    assert embedder.threads == [caller]  # a batch: one call, where its analysis ran


def apart_operations(overlaps: bool) -> tuple[operations.Operations, list[str]]:
    events: list[str] = []
    ops = made(ThreadRecordingEmbedder(overlaps, events), ApartAnalyzer(events))
    return ops, events


def test_beside_an_analysis_in_another_process_the_query_embeds_in_the_calling_thread() -> None:
    ops, events = apart_operations(overlaps=True)
    analysis, vectors = ops.models.query_vectors(
        "where is the crate?", 4, ops.models.languages.get())
    assert analysis.lexemes == ("where is the crate?",) and vectors.shape == (2, 4)
    # Sent, embedded while the other process works, waited for; then the entity name.
    assert events == ["sent", "embed 1", "waited", "analyze", "embed 1"]
    caller = threading.current_thread().name
    assert set(ops.models.embedder.threads) == set(ops.models.analyzer.threads) == {caller}


def test_beside_an_analysis_in_another_process_a_batch_embeds_its_texts_meanwhile() -> None:
    from pgmem.validate import NewMemory, Scope

    ops, events = apart_operations(overlaps=True)
    scope = Scope(tenant="t", user_id="u")
    items = [NewMemory(scope=scope, text=t, metadata={}) for t in ("a crate", "a box", "a bin")]
    params = ops._batch_params(items, 4, True, ops.models.languages.get())
    assert len(params["embeddings"]) == 3
    assert events == ["sent", "embed 3", "waited", "analyze", "embed 1"]


def test_beside_an_analysis_in_another_process_an_embedder_s_embed_apart_is_used() -> None:
    """Where the embedder has ``embed_apart`` (ONNX: one text on one thread), the texts embedded
    while the other process analyses go through it; the names after the analysis do not."""
    ops, events = apart_operations(overlaps=True)
    embedder = ops.models.embedder

    def embed_apart(texts: Sequence[str]) -> np.ndarray:
        events.append("apart")
        return embedder.embed(texts)

    embedder.embed_apart = embed_apart  # type: ignore[attr-defined]
    ops.models.query_vectors("where is the crate?", 4, ops.models.languages.get())
    assert events == ["sent", "apart", "embed 1", "waited", "analyze", "embed 1"]
    events.clear()
    # spaCy in this process: the query embeds in a pool thread with ``embed``.
    here = made(embedder, ThreadRecordingAnalyzer(events))
    here.models.query_vectors("where is the crate?", 4, here.models.languages.get())
    assert "apart" not in events and events.count("embed 1") == 2


def test_beside_a_tagged_analysis_in_another_process_the_query_embeds_on_every_thread() -> None:
    """A query's tagged analysis (the default) ends well before its embedding, which then runs
    on every thread (``embed``), not on one (``embed_apart``): a search ~1 ms faster
    (docs/benchmarks.md, "Figures behind the code's choices"); still in the calling thread,
    between sending the query and waiting for its analysis."""
    events: list[str] = []

    class TaggedApart(ApartAnalyzer):
        def analyze_tagged_later(self, text: str) -> Callable[[], Analysis]:
            wait = self.analyze_many_later([text])
            return lambda: wait()[0]

    embedder = ThreadRecordingEmbedder(True, events)

    def embed_apart(texts: Sequence[str]) -> np.ndarray:
        events.append("apart")
        return embedder.embed(texts)

    embedder.embed_apart = embed_apart  # type: ignore[attr-defined]
    settings = Settings(tenant="t", max_text_length=100, query_analysis="tagged")
    ops = operations.Operations(
        settings, ModelWork(settings, embedder=embedder, nlp=TaggedApart(events)))
    ops.models.query_vectors("where is the crate?", 4, ops.models.languages.get())
    assert events == ["sent", "embed 1", "waited", "analyze", "embed 1"]
    events.clear()
    # the full analysis of a query keeps the one-thread embedding beside it
    full = made(embedder, TaggedApart(events))
    full.models.query_vectors("where is the crate?", 4, full.models.languages.get())
    assert events == ["sent", "apart", "embed 1", "waited", "analyze", "embed 1"]


def test_an_embedder_that_takes_every_core_embeds_before_an_analysis_in_another_process() -> None:
    ops, events = apart_operations(overlaps=False)
    ops.models.query_vectors("where is the crate?", 4, ops.models.languages.get())
    assert events == ["embed 1", "sent", "waited", "analyze", "embed 1"]


def test_a_failed_embedding_still_collects_the_analysis_it_started() -> None:
    ops, events = apart_operations(overlaps=True)

    def fail(texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("the embedder broke")

    ops.models.embedder.embed = fail  # type: ignore[method-assign]
    with pytest.raises(pgmem.EmbeddingError, match="embedder broke"):
        ops.models.query_vectors("where is the crate?", 4, ops.models.languages.get())
    assert events == ["sent", "waited", "analyze"]


def test_a_given_analyzer_leaves_the_embedder_unasked() -> None:
    """Where spaCy runs is the embedder's question only for an analyzer pgmem makes: torch's
    answer imports torch, which a CLI command that embeds nothing should not wait for."""

    class Asked(ThreadRecordingEmbedder):
        asked = 0

        @property
        def overlaps_analysis(self) -> bool:  # type: ignore[override]
            Asked.asked += 1
            return True

    embedder = Asked(None)
    made(embedder, ThreadRecordingAnalyzer())
    assert Asked.asked == 0
    ops = made(embedder, None)
    assert Asked.asked == 1 and ops.models.analyzer.runs_apart is can_start_children()
