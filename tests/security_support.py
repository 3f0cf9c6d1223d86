"""What the security tests share: the ``pgmem`` command run in-process on a test database."""

from __future__ import annotations

import pytest

import pgmem
from pgmem import cli


class PgmemCli:
    """``pgmem`` in-process on one database: ``(status, stdout, stderr)`` of a command."""

    def __init__(self, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.dsn, self.capsys = dsn, capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        status = cli.main(["--dsn", self.dsn, *argv])
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err
        return status, out, err


@pytest.fixture
def pgmem_cli(
    db_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> PgmemCli:
    """The command on the test's database, with the session's models."""
    monkeypatch.setattr(cli, "_models", lambda: (embedder, analyzer))
    return PgmemCli(db_dsn, capsys)
