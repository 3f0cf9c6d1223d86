"""Calls on a database without pgmem's schema (or under another schema name) fail with a
SchemaError that says to migrate, never the driver's "relation does not exist". Real PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

import pgmem
from pgmem.cli import main


def test_reads_and_deletes_without_the_schema_say_to_migrate(
    empty_db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    some_id = uuid.uuid4()
    with pgmem.Memory(empty_db_dsn, embedder=embedder, nlp=analyzer) as memory:
        calls = {
            "get": lambda: memory.get(some_id),
            "history": lambda: memory.history(some_id),
            "delete": lambda: memory.delete(some_id),
            "delete_all": lambda: memory.delete_all(user_id="u"),
            "update metadata": lambda: memory.update(some_id, metadata={"k": 1}),
            "get_all": lambda: memory.get_all(user_id="u"),
        }
        for name, call in calls.items():
            with pytest.raises(pgmem.SchemaError, match="pgmem.migrate") as raised:
                call()
            assert "LINE" not in str(raised.value), name
    pgmem.migrate(empty_db_dsn)
    with (
        pgmem.Memory(empty_db_dsn, embedder=embedder, nlp=analyzer, schema="other") as memory,
        pytest.raises(pgmem.MissingSchemaError, match="another name"),
    ):
        memory.get(some_id)


def test_the_cli_says_to_migrate_too(empty_db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", str(uuid.uuid4()), "--dsn", empty_db_dsn]) != 0
    err = capsys.readouterr().err
    assert "migrate" in err and "Traceback" not in err


def test_a_malformed_dsn_is_a_configuration_error() -> None:
    with pytest.raises(pgmem.ConfigurationError, match="invalid connection string"):
        pgmem.migrate("not a dsn ===")
