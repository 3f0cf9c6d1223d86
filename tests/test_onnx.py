"""The ONNX Runtime backend of the embedder against the torch one, on the real MiniLM weights.

Skipped without onnxruntime (the ``onnx`` extra). The export goes to a temporary cache folder.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem.embedding import HUB_MODEL, OnnxEmbedder
from pgmem.embedding_space import embedder_name

pytest.importorskip("onnxruntime")

TEXTS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's great!",
    "Paris",
    "When did Caroline go to the support group?",
    "word " * 400,  # longer than the model's 256 tokens: truncated alike
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("pgmem-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PGMEM_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def onnx(cache: Path) -> OnnxEmbedder:
    return OnnxEmbedder()


def test_threads_racing_the_first_use_export_once_into_the_cache(
    cache: Path, onnx: OnnxEmbedder
) -> None:
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(onnx.embed(TEXTS[:2])))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and all(np.array_equal(r, results[0]) for r in results)
    assert onnx.path.is_relative_to(cache) and onnx.path.exists()
    files = sorted(p.name for p in onnx.directory.iterdir())
    assert files == ["model.onnx", "settings.json", "tokenizer.json"]  # no temporary left


def test_onnx_vectors_are_torchs(
    onnx: OnnxEmbedder, embedder: pgmem.SentenceTransformerEmbedder
) -> None:
    expected = embedder.embed(TEXTS)
    got = onnx.embed(TEXTS)
    assert got.shape == expected.shape == (len(TEXTS), 384)
    assert float((got * expected).sum(axis=1).min()) > 0.99999
    # Each text alone as in a batch: the padding of the others changes nothing.
    alone = np.vstack([onnx.embed([t]) for t in TEXTS])
    assert np.abs(alone - got).max() < 1e-5


def test_int8_vectors_are_close_to_torchs(
    cache: Path, onnx: OnnxEmbedder, embedder: pgmem.SentenceTransformerEmbedder
) -> None:
    int8 = OnnxEmbedder(quantized=True)
    got, expected = int8.embed(TEXTS), embedder.embed(TEXTS)
    assert int8.path.name == "model-int8.onnx" and int8.path.exists()
    assert float((got * expected).sum(axis=1).min()) > 0.97


def test_int8_vectors_are_a_model_of_their_own(
    cache: Path, onnx: OnnxEmbedder, db_dsn: str, analyzer: pgmem.TextAnalyzer,
    embedder: pgmem.SentenceTransformerEmbedder,
) -> None:
    """fp32 ONNX writes the vectors torch writes (one recorded model); int8 weights write others
    (cosine ~0.97), so a schema of one refuses the other instead of mixing them."""
    int8 = OnnxEmbedder(quantized=True)
    assert embedder_name(onnx) == embedder_name(embedder) == HUB_MODEL
    assert embedder_name(int8) == f"{HUB_MODEL} (int8)"
    with pgmem.Memory(db_dsn, embedder=onnx, nlp=analyzer) as memory:
        memory.add("Melanie paints sunsets by the lake.", user_id="u")
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
        assert memory.search("Who paints?", user_id="u")[0].text.startswith("Melanie")
    with pgmem.Memory(db_dsn, embedder=int8, nlp=analyzer) as memory:
        with pytest.raises(pgmem.ModelMismatchError,
                           match=r"embedder is '.*all-MiniLM-L6-v2 \(int8\)'"):
            memory.add("Caroline went to a support group.", user_id="u")
        with pytest.raises(pgmem.ModelMismatchError):
            memory.search("Who paints?", user_id="u")
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.memories").fetchone() == (1,)
    assert pgmem.reembed(db_dsn, int8).switched  # moving to int8 is a model change
    with pgmem.Memory(db_dsn, embedder=int8, nlp=analyzer) as memory:
        assert memory.search("Who paints?", user_id="u")[0].text.startswith("Melanie")


def test_memory_takes_the_backend_by_name(
    cache: Path, onnx: OnnxEmbedder, db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder="onnx", nlp=analyzer) as memory:
        assert isinstance(memory.embedder, OnnxEmbedder)
        memory.add_many(TEXTS[:2] + ["Melanie paints sunsets by the lake."], user_id="u")
        hits = memory.search("Who went to a support group?", user_id="u", limit=3)
    assert hits[0].text == TEXTS[0]


def test_the_runtime_threads_do_not_spin_unless_asked(cache: Path, onnx: OnnxEmbedder) -> None:
    onnx.embed(TEXTS[:1])
    session = onnx._runtime.get()[0]
    assert session.get_session_options().get_session_config_entry(
        "session.intra_op.allow_spinning") == "0"
    spinning = OnnxEmbedder(spinning=True)
    spinning.embed(TEXTS[:1])
    options = spinning._runtime.get()[0].get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"


def test_one_text_beside_another_process_embeds_on_one_thread(onnx: OnnxEmbedder) -> None:
    """``embed_apart``: one text runs in a second, one-thread session (the analysis in the other
    process keeps a core) and gets the vector ``embed`` gives; a batch runs as ``embed`` does."""
    alone = onnx.embed_apart(TEXTS[:1])
    assert np.abs(alone - onnx.embed(TEXTS[:1])).max() < 1e-5
    single = onnx._one_thread.get()[0].get_session_options()
    assert single.intra_op_num_threads == 1
    assert single.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert onnx._runtime.get()[0].get_session_options().intra_op_num_threads == 0  # every core
    batch = OnnxEmbedder()
    assert np.array_equal(batch.embed_apart(TEXTS[:2]), batch.embed(TEXTS[:2]))
    assert batch._one_thread._value is None  # a batch made no second session


def test_a_batch_gets_the_vectors_its_texts_get_alone(onnx: OnnxEmbedder) -> None:
    """A batch runs in batches that pad little (pgmem.embedding.length_batches)."""
    alone = np.vstack([onnx.embed([text]) for text in TEXTS])
    assert np.abs(onnx.embed(TEXTS) - alone).max() < 1e-5
    one_a_batch = OnnxEmbedder(batch_tokens=1)
    assert np.abs(one_a_batch.embed(TEXTS) - alone).max() < 1e-5
