"""A query embeds beside its analysis, or before it when the embedder says the two would
fight over the cores (torch with a thread per core)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

import pgmem
from pgmem import operations
from pgmem.embedding import OnnxEmbedder, embeds_beside_analysis, usable_cores
from pgmem.nlp import Analysis


class ThreadRecordingAnalyzer(pgmem.TextAnalyzer):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def analyze(self, text: str) -> Analysis:
        self.threads.append(threading.current_thread().name)
        return Analysis(lexemes=(text,), entities=())


class ThreadRecordingEmbedder:
    def __init__(self, overlaps: bool | None) -> None:
        if overlaps is not None:
            self.overlaps_analysis = overlaps
        self.threads: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.mark.parametrize(("overlaps", "beside"), [(None, True), (True, True), (False, False)])
def test_the_query_embeds_where_the_embedder_says(overlaps: bool | None, beside: bool) -> None:
    embedder, analyzer = ThreadRecordingEmbedder(overlaps), ThreadRecordingAnalyzer()
    ops = operations.Operations(
        embedder=embedder, nlp=analyzer, reranker=None, schema="pgmem", tenant="t",
        keyword_score="bm25", max_text_length=100,
    )
    analysis, vectors = ops._query_vectors("where is the crate?", 4, ops.languages.get())
    assert analysis.lexemes == ("where is the crate?",) and vectors.shape == (1, 4)
    caller = threading.current_thread().name
    assert analyzer.threads == [caller]
    assert embeds_beside_analysis(embedder) is beside
    if beside:
        assert embedder.threads[0].startswith("pgmem-embed")
    else:
        assert embedder.threads == [caller]


def test_torch_overlaps_only_when_it_leaves_a_core_free() -> None:
    torch = pytest.importorskip("torch")
    embedder = pgmem.SentenceTransformerEmbedder()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(usable_cores())
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
    analyzer.analyze_many = lambda texts, batch_size=64: [  # type: ignore[method-assign]
        analyzer.analyze(text) for text in texts
    ]
    ops = operations.Operations(
        embedder=embedder, nlp=analyzer, reranker=None, schema="pgmem", tenant="t",
        keyword_score="bm25", max_text_length=100,
    )
    scope = Scope(tenant="t", user_id="u")
    one = [NewMemory(scope=scope, text="the crate is blue", metadata={})]
    params = ops._batch_params(one, 4, True, ops.languages.get())
    assert len(params["embeddings"]) == 1
    caller = threading.current_thread().name
    if overlaps:
        assert embedder.threads[0].startswith("pgmem-embed")
    else:
        assert embedder.threads == [caller]
    embedder.threads.clear()
    two = [*one, NewMemory(scope=scope, text="the box is red", metadata={})]
    ops._batch_params(two, 4, True, ops.languages.get())
    assert embedder.threads == [caller]  # a batch: one call, where its analysis ran
