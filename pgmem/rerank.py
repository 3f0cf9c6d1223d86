"""Rerankers: reorder the fused top results (step 9). Any object with
``rerank(query, hits, limit) -> hits`` will do; a failing reranker never fails a search."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pgmem.lazy import Lazy, sentence_transformers
from pgmem.results import SearchHit

DEFAULT_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L-6-v2"


@runtime_checkable
class Reranker(Protocol):
    """Reorders search hits for a query."""

    def rerank(self, query: str, hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
        """The best ``limit`` of ``hits`` for ``query``, best first."""
        ...


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder scoring (query, memory text) pairs.

    ``model`` is a local path or a model name; loaded on first use. Each returned hit keeps its
    fused score and breakdown, with the cross-encoder's score in ``explain.rerank_score``.
    """

    def __init__(self, model: str = DEFAULT_CROSS_ENCODER, *, device: str = "cpu") -> None:
        self.model_name = model
        self.device = device
        self._model: Lazy[Any] = Lazy(
            lambda: sentence_transformers().CrossEncoder(  # type: ignore[attr-defined]
                self.model_name, device=self.device
            )
        )

    @property
    def model(self) -> Any:
        """The loaded CrossEncoder."""
        return self._model.get()

    def rerank(self, query: str, hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
        """``hits`` sorted by the cross-encoder's score of (query, text), best ``limit``."""
        if not hits:
            return []
        scores = self.model.predict([(query, hit.text) for hit in hits], show_progress_bar=False)
        scored = [
            dataclasses.replace(
                hit, explain=dataclasses.replace(hit.explain, rerank_score=float(s)))
            for hit, s in zip(hits, scores)
        ]
        scored.sort(key=lambda h: h.explain.rerank_score or 0.0, reverse=True)
        return scored[:limit]
