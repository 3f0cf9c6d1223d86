"""The embedder of a Mem0 config's ``embedder`` section (mem0ai 2.2.1's providers and their
keys), made of pgmem's own (:mod:`pgmem.providers`): nothing here imports mem0.

==================  ==========================================================================
Mem0 provider       pgmem embedder
==================  ==========================================================================
``openai``          :class:`~pgmem.providers.openai_endpoint.OpenAIEmbedder`: ``model``
                    (default ``text-embedding-3-small``), ``api_key``, ``openai_base_url``,
                    ``embedding_dims`` (sent as ``dimensions`` only when given, as Mem0 does)
``azure_openai``    the same over ``AzureOpenAI``: ``azure_kwargs`` (``api_key``,
                    ``azure_deployment``, ``azure_endpoint``, ``api_version``,
                    ``default_headers``), else Mem0's ``EMBEDDING_AZURE_*`` variables
``ollama``          Ollama's OpenAI-compatible ``/v1`` at ``ollama_base_url`` (default
                    ``http://localhost:11434``); ``model`` default ``nomic-embed-text``
``lmstudio``        LM Studio's ``/v1`` at ``lmstudio_base_url``
``huggingface``     a local sentence-transformers ``model`` with its prompts, or Text
                    Embeddings Inference at ``huggingface_base_url`` (OpenAI-compatible)
``langchain``       ``model``: a LangChain ``Embeddings`` object
==================  ==========================================================================

Any other provider (gemini, vertexai, together, aws_bedrock, fastembed) is not made here: a
warning says so and pgmem's default embedder is used, or the config's ``pgmem`` section's
``embedder``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from pgmem.errors import ConfigurationError
from pgmem.providers.langchain_embeddings import LangChainEmbedder, is_langchain_embeddings

logger = logging.getLogger(__name__)

#: Mem0's defaults where a config leaves them out.
OPENAI_MODEL = "text-embedding-3-small"
OLLAMA_URL = "http://localhost:11434"
OLLAMA_MODEL = "nomic-embed-text"
LMSTUDIO_URL = "http://localhost:1234/v1"
LMSTUDIO_MODEL = "nomic-ai/nomic-embed-text-v1.5-GGUF/nomic-embed-text-v1.5.f16.gguf"
#: Mem0's own variables for an Azure embedder without ``azure_kwargs``.
AZURE_VARIABLES = {
    "api_key": "EMBEDDING_AZURE_OPENAI_API_KEY",
    "azure_deployment": "EMBEDDING_AZURE_DEPLOYMENT",
    "azure_endpoint": "EMBEDDING_AZURE_ENDPOINT",
    "api_version": "EMBEDDING_AZURE_API_VERSION",
}
PROVIDERS = ("openai", "azure_openai", "ollama", "lmstudio", "huggingface", "langchain")


def mem0_embedder(section: object) -> tuple[Any, int | None]:
    """The embedder of a Mem0 ``embedder`` section (``{"provider": ..., "config": {...}}``)
    and the dimension it names (``embedding_dims``), or ``(None, None)`` for no section or a
    provider pgmem does not make (a warning says so).

    Raises:
        ConfigurationError: the section is malformed, or its client cannot be made (no API
            key for ``openai``, no Azure endpoint, no LangChain object).
    """
    if section is None:
        return None, None
    if not isinstance(section, Mapping):
        raise ConfigurationError(f"the embedder config must be a dict, got {section!r}")
    provider = section.get("provider", "openai")
    config = section.get("config") or {}
    if not isinstance(config, Mapping):
        raise ConfigurationError(f"the {provider!r} embedder's config must be a dict")
    dims = config.get("embedding_dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise ConfigurationError(f"embedding_dims must be a positive integer, got {dims!r}")
    if provider not in PROVIDERS:
        logger.warning(
            "pgmem.compat.mem0: the %r embedder is not one pgmem makes (%s); pgmem embeds "
            "with its own (all-MiniLM-L6-v2, 384 dimensions, or Memory(embedder=...) through "
            "the 'pgmem' section of the config)", provider, ", ".join(PROVIDERS),
        )
        return None, None
    return _made(str(provider), config, dims), dims


def _made(provider: str, config: Mapping[str, Any], dims: int | None) -> Any:
    model = config.get("model")
    if provider == "langchain":
        if not is_langchain_embeddings(model):
            raise ConfigurationError(
                "a langchain embedder's 'model' must be a LangChain Embeddings object"
            )
        return LangChainEmbedder(model)
    if provider == "huggingface" and not config.get("huggingface_base_url"):
        if not model:
            return None  # pgmem's default all-MiniLM-L6-v2
        from pgmem.providers.sentence_models import SentenceTransformerModel

        return SentenceTransformerModel(str(model), **dict(config.get("model_kwargs") or {}))
    from pgmem.providers.openai_endpoint import OpenAIEmbedder

    if provider == "azure_openai":
        given = dict(config.get("azure_kwargs") or {})
        azure = {key: given.get(key) or os.environ.get(variable)
                 for key, variable in AZURE_VARIABLES.items()}
        api_key = azure.pop("api_key")
        if not api_key or not azure["azure_endpoint"]:
            raise ConfigurationError(
                "an azure_openai embedder needs azure_kwargs' api_key and azure_endpoint (or "
                "EMBEDDING_AZURE_OPENAI_API_KEY and EMBEDDING_AZURE_ENDPOINT); pgmem does not "
                "use Azure AD credentials: pass your own client through "
                "pgmem.providers.openai_endpoint.OpenAIEmbedder(client=...)"
            )
        if given.get("default_headers"):
            azure["default_headers"] = given["default_headers"]
        deployment = azure.get("azure_deployment")
        return OpenAIEmbedder(
            str(model or deployment or OPENAI_MODEL), api_key=str(api_key),
            azure={k: v for k, v in azure.items() if v}, name=_name("azure", model or deployment),
        )
    if provider == "openai":
        return OpenAIEmbedder(
            str(model or OPENAI_MODEL), base_url=config.get("openai_base_url"),
            api_key=config.get("api_key"), dimensions=dims,
        )
    if provider == "ollama":
        url = str(config.get("ollama_base_url") or OLLAMA_URL).rstrip("/")
        return OpenAIEmbedder(
            str(model or OLLAMA_MODEL), base_url=url if url.endswith("/v1") else f"{url}/v1",
            api_key="ollama", name=_name("ollama", model or OLLAMA_MODEL),
        )
    if provider == "lmstudio":
        return OpenAIEmbedder(
            str(model or LMSTUDIO_MODEL), base_url=str(config.get("lmstudio_base_url")
                                                       or LMSTUDIO_URL),
            api_key=str(config.get("api_key") or "lm-studio"),
            name=_name("lmstudio", model or LMSTUDIO_MODEL),
        )
    # huggingface with a base URL: Text Embeddings Inference's OpenAI-compatible API
    return OpenAIEmbedder(
        str(model or "tei"), base_url=str(config["huggingface_base_url"]),
        api_key=str(config.get("api_key") or "hf"), name=_name("tei", model or "tei"),
    )


def _name(kind: str, model: object) -> str:
    return f"{kind}:{model}"
