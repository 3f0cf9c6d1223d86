"""Second embedding models for tests, made from the real MiniLM: its vectors through a fixed
random linear map -- to another dimension (3,072: a width above pgvector's 2,000-dimension HNSW
limit for ``vector``), or a rotation at the same 384. A random map keeps the geometry of
MiniLM's vectors (cosine similarities change by a few hundredths at 3,072 dimensions), so
searches still find what MiniLM finds, while the vectors themselves are another model's: a
MiniLM query vector is unrelated to them. Each has a ``name`` of its own."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

import pgmem


class ProjectedEmbedder:
    """MiniLM followed by a fixed random linear map to ``dim`` dimensions (orthogonal when
    ``dim`` is 384: a rotation), normalised."""

    def __init__(
        self, base: pgmem.SentenceTransformerEmbedder, dim: int, name: str, seed: int = 14
    ) -> None:
        self.base = base
        self.name = name
        rng = np.random.default_rng(seed)
        matrix = rng.normal(size=(384, dim))
        if dim == 384:
            matrix, _ = np.linalg.qr(matrix)
        self.matrix = matrix.astype(np.float32)
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        vectors = np.asarray(self.base.embed(texts), dtype=np.float32) @ self.matrix
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def rotated_minilm() -> ProjectedEmbedder:
    """MiniLM rotated at 384 dimensions, for ``pgmem reembed --embedder``."""
    return ProjectedEmbedder(pgmem.SentenceTransformerEmbedder(), 384, "minilm-rotated-384")
