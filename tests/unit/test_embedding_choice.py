"""Unit tests of the embedder's configuration and entity-vector cache. No database, no models."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import pgmem
from pgmem.embedding import (
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    VectorCache,
    _atomic_write,
    _export_key,
    cache_dir,
    cached_embeddings,
    default_backend,
    make_embedder,
)

DIM = 4


class CountingEmbedder:
    """One-hot-ish vectors by text length; records each call's texts."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        return np.array([[1.0, len(t), 0.0, 0.0] for t in texts], dtype=np.float32)


def test_cached_embeddings_embeds_each_name_once_and_keeps_the_order() -> None:
    embedder, cache = CountingEmbedder(), VectorCache()
    first = cached_embeddings(embedder, ["a text"], ["Ann", "Bob"], DIM, cache)
    second = cached_embeddings(embedder, ["another", "more"], ["Bob", "Ann", "Cy"], DIM, cache)
    assert embedder.calls == [["a text", "Ann", "Bob"], ["another", "more", "Cy"]]
    assert [row[1] for row in first] == [6, 3, 3]
    assert [row[1] for row in second] == [7, 4, 3, 3, 2]


def test_the_cache_forgets_the_least_recently_used() -> None:
    cache = VectorCache(size=2)
    one = np.ones(DIM, dtype=np.float32)
    cache.put("a", one)
    cache.put("b", one)
    assert cache.get("a") is not None  # "b" is now the oldest
    cache.put("c", one)
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None


def test_a_failing_embedder_caches_nothing() -> None:
    class Failing:
        def embed(self, texts: Sequence[str]) -> object:
            raise RuntimeError("model gone")

    cache = VectorCache()
    with pytest.raises(pgmem.EmbeddingError):
        cached_embeddings(Failing(), ["text"], ["Ann"], DIM, cache)
    assert cache.get("Ann") is None


def test_the_backend_is_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_EMBEDDING_BACKEND", "torch")
    assert default_backend() == "torch"
    assert isinstance(make_embedder(None), SentenceTransformerEmbedder)
    monkeypatch.setenv("PGMEM_EMBEDDING_BACKEND", "onnx-int8")
    made = make_embedder(None)
    assert isinstance(made, OnnxEmbedder) and made.quantized
    assert isinstance(make_embedder("onnx"), OnnxEmbedder)
    mine = CountingEmbedder()
    assert make_embedder(mine) is mine
    monkeypatch.setenv("PGMEM_EMBEDDING_BACKEND", "tensorflow")
    with pytest.raises(pgmem.ConfigurationError, match="PGMEM_EMBEDDING_BACKEND"):
        default_backend()
    with pytest.raises(pgmem.ConfigurationError, match="'cuda'"):
        make_embedder("cuda")


def test_the_cache_dir_is_the_users(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PGMEM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "pgmem"
    monkeypatch.setenv("PGMEM_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    embedder = OnnxEmbedder(str(tmp_path / "model"), quantized=True)
    assert embedder.path.parent.parent == tmp_path / "mine" / "onnx"
    assert embedder.path.name == "model-int8.onnx"


def test_the_export_key_changes_with_the_weights(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"one")
    before = _export_key(str(model))
    assert before.startswith("my-model-")
    (model / "model.safetensors").write_bytes(b"three")
    assert _export_key(str(model)) != before
    assert _export_key("org/hub-model") == _export_key("org/hub-model")


def test_atomic_write_leaves_the_old_file_or_the_new_one(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.onnx"
    _atomic_write(target, lambda p: p.write_text("new"))
    assert target.read_text() == "new" and oct(target.stat().st_mode & 0o777) == "0o644"

    def fails(path: Path) -> None:
        path.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        _atomic_write(target, fails)
    assert target.read_text() == "new"
    assert os.listdir(target.parent) == ["file.onnx"]
