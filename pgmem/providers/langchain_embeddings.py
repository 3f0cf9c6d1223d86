"""A LangChain ``Embeddings`` object as pgmem's embedder (no LangChain import here: any object
with LangChain's ``embed_documents(texts)`` and ``embed_query(text)`` will do, and for
``AsyncMemory`` its ``aembed_documents`` and ``aembed_query`` where it has them)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt


class LangChainEmbedder:
    """A LangChain ``Embeddings`` as pgmem's embedder: queries through its ``embed_query``,
    memories and entity names through its ``embed_documents``. Its vectors are recorded under
    ``name`` (default ``langchain:<module>.<class>`` of the object)."""

    def __init__(self, embeddings: Any, name: str | None = None) -> None:
        self.embeddings = embeddings
        kind = type(embeddings)
        self.name = name or f"langchain:{kind.__module__}.{kind.__qualname__}"

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The stored texts' vectors, one row each."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32)

    def embed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The queries' vectors, one row each (LangChain embeds one query a call)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.asarray([self.embeddings.embed_query(text) for text in texts],
                          dtype=np.float32)

    embed = embed_documents  # an embedder of the plain protocol too

    async def aembed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The stored texts' vectors through its ``aembed_documents``, awaited (LangChain's
        default runs ``embed_documents`` in the event loop's executor); an object without one
        embeds in a worker thread."""
        method = getattr(self.embeddings, "aembed_documents", None)
        if not callable(method):
            return await asyncio.to_thread(self.embed_documents, texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.asarray(await method(list(texts)), dtype=np.float32)

    async def aembed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The queries' vectors through its ``aembed_query``, awaited together; an object
        without one embeds in a worker thread."""
        method = getattr(self.embeddings, "aembed_query", None)
        if not callable(method):
            return await asyncio.to_thread(self.embed_query, texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.asarray(await asyncio.gather(*(method(text) for text in texts)),
                          dtype=np.float32)


def is_langchain_embeddings(candidate: Any) -> bool:
    """Whether ``candidate`` is a LangChain ``Embeddings`` (checked only when langchain-core
    is imported already: an object of its class cannot exist otherwise)."""
    import sys

    module = sys.modules.get("langchain_core.embeddings")
    kind = getattr(module, "Embeddings", None)
    return isinstance(kind, type) and isinstance(candidate, kind)
