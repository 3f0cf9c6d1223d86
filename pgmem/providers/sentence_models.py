"""A sentence-transformers model by name, with its query and document prompts (e5's
``query: `` / ``passage: ``, bge's search instruction), as pgmem's embedder (the
``embeddings`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pgmem.embedding import SentenceTransformerEmbedder

#: Prompts of model families, by a part of the model's name (lower case), first match:
#: (query prompt, document prompt). A model whose sentence-transformers config has its own
#: ``prompts`` ("query" and "document" or "passage") uses those first.
KNOWN_PROMPTS: tuple[tuple[str, tuple[str, str]], ...] = (
    ("e5-", ("query: ", "passage: ")),
    ("bge-", ("Represent this sentence for searching relevant passages: ", "")),
    ("nomic-embed-text", ("search_query: ", "search_document: ")),
)


def known_prompts(model: str) -> tuple[str, str]:
    """The (query, document) prompts of ``model``'s family (:data:`KNOWN_PROMPTS`), else
    ``("", "")``."""
    lowered = model.lower()
    for part, prompts in KNOWN_PROMPTS:
        if part in lowered and "instruct" not in lowered:
            return prompts
    return "", ""


class SentenceTransformerModel(SentenceTransformerEmbedder):
    """A sentence-transformers model whose queries and documents get their prompts.

    ``query_prompt`` / ``document_prompt``: text put before each query / document; None takes
    the model's own ``prompts`` (its config's ``query`` and ``document`` or ``passage``), else
    its family's (:func:`known_prompts`). The other arguments are
    :class:`~pgmem.embedding.SentenceTransformerEmbedder`'s; ``name`` (default: the model's
    recorded name) is the name its vectors are recorded under.
    """

    def __init__(
        self,
        model: str,
        *,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(model, **options)
        self._prompts = (query_prompt, document_prompt)
        if name is not None:
            self.name = name

    @property
    def prompts(self) -> tuple[str, str]:
        """The (query, document) prompts in use (loads the model when one is not given)."""
        query, document = self._prompts
        if query is None or document is None:
            own = dict(getattr(self.model, "prompts", None) or {})
            family = known_prompts(self.model_name)
            if query is None:
                query = str(own.get("query", family[0]))
            if document is None:
                document = str(own.get("document", own.get("passage", family[1])))
        return query, document

    def embed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors of search queries, each after the query prompt."""
        return self.embed([self.prompts[0] + text for text in texts])

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors of stored texts, each after the document prompt."""
        return self.embed([self.prompts[1] + text for text in texts])
