"""PgmemRetriever: LangChain's retriever over pgmem's hybrid search, sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain_core.retrievers")

from langchain_core.documents import Document

import pgmem
from pgmem.errors import ConfigurationError, ScopeError
from pgmem.langchain import PgmemRetriever

DOCUMENTS = [
    Document("Caroline moved to Lisbon to study marine biology.", metadata={"topic": "move"}),
    Document("Melanie runs a pottery class on Saturdays.", metadata={"topic": "hobby"}),
    Document("Caroline's favourite book is Becoming Nicole.", metadata={"topic": "books"}),
]


def test_documents_in_and_out_with_the_score_breakdown(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
        retriever = PgmemRetriever(memory=memory, user_id="u1", k=2)
        ids = retriever.add_documents(DOCUMENTS)
        assert len(set(ids)) == 3
        PgmemRetriever(memory=memory, user_id="u2").add_documents([DOCUMENTS[0]])
        docs = retriever.invoke("Where did Caroline move to?")
        assert docs[0].page_content == DOCUMENTS[0].page_content
        assert len(docs) == 2 and docs[0].id == ids[0]
        best = docs[0].metadata
        assert best["topic"] == "move" and best["user_id"] == "u1" and best["id"] == ids[0]
        assert best["score"] == pytest.approx(best["explain"]["score"])
        assert {"semantic", "keyword"} <= set(best["explain"]["legs"])
        filtered = PgmemRetriever(memory=memory, user_id="u1", filters={"topic": "books"})
        assert [d.page_content for d in filtered.invoke("Caroline")] == [DOCUMENTS[2].page_content]
        with pytest.raises(ScopeError):
            PgmemRetriever(memory=memory).invoke("anything")


def test_async_with_an_async_memory_and_with_a_memory(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    async def scenario() -> tuple[list[Document], list[Document]]:
        async with pgmem.AsyncMemory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
            retriever = PgmemRetriever(memory=memory, agent_id="a1", k=1)
            await retriever.aadd_documents(DOCUMENTS)
            with pytest.raises(ConfigurationError):
                retriever.invoke("sync needs a Memory")
            first = await retriever.ainvoke("Who teaches pottery?")
        with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as sync_memory:
            second = await PgmemRetriever(memory=sync_memory, agent_id="a1", k=1).ainvoke(
                "What book does Caroline like?"
            )
        return first, second

    first, second = asyncio.run(scenario())
    assert [d.page_content for d in first] == [DOCUMENTS[1].page_content]
    assert [d.page_content for d in second] == [DOCUMENTS[2].page_content]
