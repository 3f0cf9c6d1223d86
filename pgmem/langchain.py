"""A LangChain retriever over pgmem's hybrid search: :class:`PgmemRetriever` (extra
``pgmem[langchain]``).

::

    retriever = PgmemRetriever(memory=pgmem.Memory(dsn), user_id="u1", k=5)
    retriever.add_documents([Document("Caroline moved to Lisbon")])
    docs = retriever.invoke("Where does Caroline live?")
    docs[0].metadata["score"], docs[0].metadata["explain"]["semantic"]

Each ``Document`` is a hit: its text, its metadata, and under pgmem's own keys its ``id``,
``score`` and ``explain`` (the signals behind the score, as plain JSON values).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from pgmem.aio import AsyncMemory
from pgmem.errors import ConfigurationError
from pgmem.memory import Memory
from pgmem.results import SearchHit, jsonable

__all__ = ["PgmemRetriever"]


class PgmemRetriever(BaseRetriever):
    """The ``k`` memories of a scope most relevant to a query, as LangChain ``Document``\\ s.

    ``memory``: a :class:`~pgmem.Memory` or :class:`~pgmem.AsyncMemory` (the caller closes
    it). ``user_id``, ``agent_id``, ``run_id``: the scope searched and written (at least one).
    ``filters``: a metadata filter (:mod:`pgmem.filters`); ``threshold``, ``mode``,
    ``rerank``: as :meth:`pgmem.Memory.search`. The sync calls need a ``Memory``; the async
    ones take either (a ``Memory``'s calls run in a worker thread).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    k: int = 4
    filters: dict[str, Any] | None = None
    threshold: float = 0.1
    mode: str = "hybrid"
    rerank: bool = False

    def _scope(self) -> dict[str, str | None]:
        return {"user_id": self.user_id, "agent_id": self.agent_id, "run_id": self.run_id}

    def _search_args(self) -> dict[str, Any]:
        return {
            **self._scope(), "limit": self.k, "filters": self.filters,
            "threshold": self.threshold, "mode": self.mode, "rerank": self.rerank,
        }

    def _sync_memory(self) -> Memory:
        if not isinstance(self.memory, Memory):
            raise ConfigurationError(
                "the sync calls of PgmemRetriever need a pgmem.Memory; with an AsyncMemory use "
                "ainvoke / aadd_documents"
            )
        return self.memory

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits = self._sync_memory().search(query, **self._search_args())
        return [_document(hit) for hit in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if isinstance(self.memory, AsyncMemory):
            hits = await self.memory.search(query, **self._search_args())
        else:
            hits = await asyncio.to_thread(
                self._sync_memory().search, query, **self._search_args()
            )
        return [_document(hit) for hit in hits]

    def add_documents(self, documents: Sequence[Document], **kwargs: Any) -> list[str]:
        """Store each document's text with its metadata in the retriever's scope (as
        :meth:`pgmem.Memory.add_many`, ``kwargs`` going to it); the memories' ids, in order
        (a duplicate's is the memory already there)."""
        results = self._sync_memory().add_many(
            _items(documents), user_id=self.user_id, agent_id=self.agent_id, run_id=self.run_id,
            **kwargs,
        )
        return [str(result.id) for result in results]

    async def aadd_documents(self, documents: Sequence[Document], **kwargs: Any) -> list[str]:
        """:meth:`add_documents`, awaited."""
        if isinstance(self.memory, AsyncMemory):
            results = await self.memory.add_many(
                _items(documents), user_id=self.user_id, agent_id=self.agent_id,
                run_id=self.run_id, **kwargs,
            )
            return [str(result.id) for result in results]
        return await asyncio.to_thread(self.add_documents, documents, **kwargs)


def _items(documents: Sequence[Document]) -> list[dict[str, Any]]:
    return [
        {"text": document.page_content, "metadata": dict(document.metadata or {})}
        for document in documents
    ]


def _document(hit: SearchHit) -> Document:
    metadata: dict[str, Any] = dict(hit.metadata)
    metadata.update(
        id=str(hit.id), score=hit.score, explain=jsonable(hit.explain),
        created_at=hit.created_at.isoformat(), updated_at=hit.updated_at.isoformat(),
        **{name: value for name, value in (("user_id", hit.user_id), ("agent_id", hit.agent_id),
                                            ("run_id", hit.run_id)) if value is not None},
    )
    return Document(page_content=hit.text, metadata=metadata, id=str(hit.id))
