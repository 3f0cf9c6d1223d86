"""``pgmem reembed`` and ``pgmem migrate --storage`` on the command line, with real models."""

from __future__ import annotations

import pytest

from tests.test_cli import Run, shared_models  # noqa: F401 - the CLI on the session's models
from tests.test_reembed import demo_items


@pytest.fixture
def run(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(db_dsn, capsys)


def test_reembed_status_abort_and_switch(run: Run, tmp_path: object) -> None:
    import json
    from pathlib import Path

    items = Path(str(tmp_path)) / "demo.jsonl"
    items.write_text("\n".join(json.dumps(item) for item in demo_items()[:12]))
    run.ok("import", str(items))
    out = run.ok("reembed", "--status")
    assert "'sentence-transformers/all-MiniLM-L6-v2' (384 dimensions, vector)" in out
    assert run.ok("reembed", "--abort") == "no re-embedding in progress\n"
    err = run.error("reembed", "--embedder", "tests.model_support:no_such_thing")
    assert "no_such_thing" in err
    status, out, err = run("reembed", "--embedder", "tests.model_support:rotated_minilm",
                           "--batch-size", "4")
    assert status == 0, err
    assert "-> 'minilm-rotated-384' (384 dimensions, vector)" in out
    assert "reembed" in err  # the progress bar
    assert "'minilm-rotated-384'" in run.ok("reembed", "--status")
    # the CLI's own model is MiniLM: it is refused now, before it writes
    assert "minilm-rotated-384" in run.error("add", "Alice adopted a cat", "--user", "alice")


def test_migrate_with_halfvec_storage(
    empty_db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(empty_db_dsn, capsys)
    assert "(384-dimensional embeddings)" in run.ok("migrate", "--storage", "halfvec")
    assert "halfvec" in run.ok("reembed", "--status")
