"""The pending model of a re-embedding, as the writes made meanwhile use it: :class:`NextModel`.

While :func:`pgmem.reembed` moves a schema to another model (row ``next`` of
``embedding_models``, column ``embedding_next``), every ``add``, ``add_many`` and ``update``
that can embed with that model also writes its rows' vectors of it, in its own transaction, so
that the re-embedding's backlog only shrinks however fast the application writes. The writing
process finds the pending model's embedder from its recorded name:

1. the ``next_embedder`` given to ``Memory`` / ``AsyncMemory``, when its name is that name;
2. the Memory's own embedder, when its name is that name (a change of storage or dimension);
3. a sentence-transformers model named ``organisation/model`` (``(int8)`` at the end: the
   ONNX backend's int8 weights), loaded as the default embedder loads its model.

Else (a local folder's or an ``--embedder MODULE:NAME`` object's name), or when the pending
model fails, the process cannot help: it logs one warning (per ``Memory`` and model), and its
rows wait for the re-embedding's catch-up, which embeds every row still without a vector of the
new model. Helping never fails a write.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from pgmem.embedding import (
    HUB_MODEL,
    VectorCache,
    cached_embeddings,
    default_backend,
    make_embedder,
)
from pgmem.embedding_space import EmbeddingSpace, embedder_name
from pgmem.errors import PgmemError
from pgmem.settings import Settings

logger = logging.getLogger(__name__)

INT8 = " (int8)"


@dataclass(frozen=True)
class NextVectors:
    """A write's vectors of the pending model ``space``: one per text (``texts``, in the order
    given), then one per entity name (``names``)."""

    space: EmbeddingSpace
    texts: npt.NDArray[np.float32]
    names: tuple[str, ...]
    name_vectors: npt.NDArray[np.float32]


def loadable_by_name(name: str, settings: Settings) -> Any:
    """An embedder of the sentence-transformers model recorded as ``name``, or None when the name
    is not one (no ``organisation/`` part: a local folder's name, or an object's). Nothing loads
    here: the model loads on its first use."""
    base = name.removesuffix(INT8)
    if "/" not in base or os.path.isabs(base) or base.startswith("."):
        return None
    backend = "onnx-int8" if name.endswith(INT8) else default_backend(settings)
    model = None if base == HUB_MODEL else base  # the default's weights, wherever they are
    made = make_embedder(backend, replace(settings, embedding_model=model))
    return made if embedder_name(made) == name else None


class NextModel:
    """The embedder of a re-embedding's pending model, found once per model name (see the
    module docstring), and the caches of entity names' vectors, one per model."""

    def __init__(self, settings: Settings, given: Any = None) -> None:
        self.settings = settings
        self.given = given
        self._found: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._names: dict[str, VectorCache] = {}

    def embedder(self, target: EmbeddingSpace, current: Any) -> Any:
        """The embedder of ``target``'s model, or None (then a warning, once per model)."""
        name = target.model or ""
        with self._lock:
            if name in self._found:
                return self._found[name]
            found = None
            try:
                if self.given is not None and embedder_name(self.given) == name:
                    found = self.given
                elif embedder_name(current) == name:
                    found = current
                else:
                    found = loadable_by_name(name, self.settings)
            except PgmemError as exc:
                logger.debug("no embedder for %r: %s", name, exc)
            if found is None:
                self._cannot_help(target, "this process has no embedder of that name (pass "
                                  "it as Memory(next_embedder=...))")
            self._found[name] = found
            return found

    def vectors(
        self, target: EmbeddingSpace, current: Any, texts: Sequence[str], names: Sequence[str]
    ) -> NextVectors | None:
        """The vectors of ``texts`` then ``names`` by ``target``'s model, in one embedding call
        (names cached); None when this process has no embedder of it, or it failed (then it
        is not used again)."""
        embedder = self.embedder(target, current)
        if embedder is None or not texts and not names:
            return None
        unique = tuple(dict.fromkeys(names))
        with self._lock:
            cache = self._names.setdefault(target.model or "", VectorCache())
        try:
            vectors = cached_embeddings(embedder, texts, unique, target.dim, cache)
        except PgmemError as exc:
            with self._lock:
                self._found[target.model or ""] = None
            self._cannot_help(target, f"its embedder failed ({exc})")
            return None
        return NextVectors(target, vectors[: len(texts)], unique, vectors[len(texts) :])

    def _cannot_help(self, target: EmbeddingSpace, why: str) -> None:
        logger.warning(
            "a re-embedding to %s is in progress, and the rows this process writes will get "
            "that model's vectors from the re-embedding, not from this process: %s",
            target.describe(), why,
        )
