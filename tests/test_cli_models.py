"""The ``pgmem`` command makes its models from the settings as ``Memory()`` does: under
``PGMEM_EMBEDDING_BACKEND=onnx-int8`` it records the int8 model ``Memory()`` records, refuses a
schema of another model, and ``pgmem reembed`` moves a torch-written schema to int8.

Real PostgreSQL, real models, the real command in a subprocess (no model replaced: the other
CLI tests hand it the session's models, which is why they could not see the CLI make a torch
embedder whatever the backend said)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import pgmem
from pgmem.embedding import OnnxEmbedder
from pgmem.embedding_space import embedder_name

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parent.parent
TORCH_NAME = "sentence-transformers/all-MiniLM-L6-v2"
INT8_NAME = f"{TORCH_NAME} (int8)"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An ONNX cache with the int8 export made once, here (each command then loads it)."""
    path = tmp_path_factory.mktemp("pgmem-cache")
    OnnxEmbedder(quantized=True, cache=path).embed(["export the model once"])
    yield path


def int8_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGMEM_")}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PGMEM_AUTOSTART="0",
        PGMEM_EMBEDDING_BACKEND="onnx-int8", PGMEM_CACHE_DIR=str(cache),
    )
    return env


def pgmem_command(env: dict[str, str], dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgmem.cli", "--dsn", dsn, "--no-server", *argv],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )


def model_on_record(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT model FROM pgmem.embedding_models WHERE role = 'current'"
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_under_onnx_int8_the_cli_records_the_model_memory_records(
    db_dsn: str, cache: Path
) -> None:
    env = int8_env(cache)
    added = pgmem_command(env, db_dsn, "add", "Alice adopted a cat named Tom", "--user", "alice")
    assert added.returncode == 0, added.stderr
    assert model_on_record(db_dsn) == INT8_NAME
    # Memory() under the same settings records the same name, and reads the schema
    settings = pgmem.Settings.from_env(int8_env(cache))
    with pgmem.Memory(db_dsn, settings=settings) as memory:
        assert embedder_name(memory.embedder) == INT8_NAME
        hits = memory.search("Who adopted a cat?", user_id="alice")
    assert [hit.text for hit in hits] == ["Alice adopted a cat named Tom"]
    found = pgmem_command(env, db_dsn, "search", "Who adopted a cat?", "--user", "alice")
    assert found.returncode == 0, found.stderr
    assert "Alice adopted a cat named Tom" in found.stdout


def test_under_onnx_int8_the_cli_refuses_a_torch_schema_until_reembed_moves_it(
    db_dsn: str, cache: Path, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    torch_settings = pgmem.Settings(dsn=db_dsn)
    with pgmem.Memory(settings=torch_settings, embedder=embedder, nlp=analyzer) as memory:
        memory.add_many(["Bob moved to Lisbon", "Carol plays the cello"], user_id="bob")
    assert model_on_record(db_dsn) == TORCH_NAME
    env = int8_env(cache)
    refused = pgmem_command(env, db_dsn, "add", "Bob likes tea", "--user", "bob")
    assert refused.returncode == 2
    assert refused.stderr.startswith("pgmem: error: ")
    assert f"holds embeddings of model '{TORCH_NAME}'" in refused.stderr
    assert f"embedder is '{INT8_NAME}'" in refused.stderr
    assert "Traceback" not in refused.stderr
    moved = pgmem_command(env, db_dsn, "reembed", "--batch-size", "8")
    assert moved.returncode == 0, moved.stderr
    assert f"-> '{INT8_NAME}'" in moved.stdout
    assert model_on_record(db_dsn) == INT8_NAME
    added = pgmem_command(env, db_dsn, "add", "Bob likes tea", "--user", "bob")
    assert added.returncode == 0, added.stderr
    found = pgmem_command(env, db_dsn, "search", "Where does Bob live?", "--user", "bob")
    assert found.returncode == 0, found.stderr
    assert "Bob moved to Lisbon" in found.stdout
