"""``Memory.export`` and ``pgmem export``: a scope's or tenant's memories as JSON lines, which
``pgmem import`` reads back into another tenant or database with nothing lost."""

from __future__ import annotations

import asyncio
import io
import json
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import create_database, drop_database
from psycopg.rows import dict_row

import pgmem
from pgmem import cli
from pgmem.cli.importing import import_rows, read_rows
from pgmem.memory import run

EXPIRES = "2031-05-04T03:02:01.123456+00:00"
ORIGIN = {"importer": "mem0", "source": "db-1", "collection": "mem0", "version": "v1"}


@pytest.fixture(autouse=True)
def shared_models(
    monkeypatch: pytest.MonkeyPatch,
    embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    """The CLI uses the session's models instead of loading its own."""
    monkeypatch.setattr(cli, "_models", lambda: (embedder, analyzer))


def pgmem_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def fill(memory: pgmem.Memory, dsn: str) -> dict[str, uuid.UUID]:
    """Memories in three scopes with updates, a delete, metadata, two text search
    configurations, an expiry and an origin; another tenant's memory in the same scope."""
    alice = memory.add("Alice moved to Lyon in 2019", user_id="alice",
                       metadata={"topic": "home", "nested": {"a": [1, 2.5, None]}})
    memory.update(alice.id, text="Alice moved to Lyon in 2020")
    memory.update(alice.id, metadata={"topic": "moves"})
    memory.add_many(
        [{"text": f"Alice note {i}: she likes {food}", "metadata": {"i": i}}
         for i, food in enumerate(("olives", "capers", "figs", "tea", "rye bread"))],
        user_id="alice",
    )
    gone = memory.add("Alice once lived in Paris", user_id="alice")
    memory.delete(gone.id)
    simple = memory.add("Ops runbook: restart the Berlin workers", agent_id="ops",
                        run_id="r-7", ts_config="simple")
    bob = memory.add("Bob's garage code is 88417", user_id="bob", agent_id="concierge")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgmem.memories SET expires_at = %s, origin = %s"
            " WHERE tenant = %s AND id = %s",
            (EXPIRES, json.dumps(ORIGIN), memory.tenant, bob.id),
        )
    with pgmem.Memory(dsn, embedder=memory.embedder, nlp=memory.analyzer,
                      tenant="other") as other:
        other.add("Another tenant's Alice fact", user_id="alice")
    return {"alice": alice.id, "simple": simple.id, "bob": bob.id}


MEMORY_COLUMNS = """
    SELECT id, user_id, agent_id, run_id, text, content_hash, metadata, embedding::text,
           lexemes::text, lexeme_count, ts_config, created_at, updated_at, expires_at, origin,
           namespace, key, ttl_minutes
      FROM pgmem.memories WHERE tenant = %s ORDER BY id
"""
HISTORY = """
    SELECT memory_id, event, old_text, new_text, created_at
      FROM pgmem.history WHERE tenant = %s ORDER BY memory_id, id
"""
# Entities are made again from the texts: the same links by name. (An entity's label is the one
# of the first memory that named it, which an import may meet in another order.)
LINKS = """
    SELECT me.memory_id, e.name, me.user_id, me.agent_id, me.run_id
      FROM pgmem.memory_entities me
      JOIN pgmem.entities e ON e.tenant = me.tenant AND e.id = me.entity_id
     WHERE me.tenant = %s ORDER BY 1, 2
"""


def snapshot(dsn: str, tenant: str) -> dict[str, list[dict[str, Any]]]:
    """A tenant's memories, their history (deleted memories' too) and their entity links,
    row by row."""
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        return {
            name: cur.execute(query, (tenant,)).fetchall()
            for name, query in (("memories", MEMORY_COLUMNS), ("history", HISTORY),
                                ("links", LINKS))
        }


@pytest.mark.also_on_citus
def test_a_tenant_round_trips_through_export_and_import_row_by_row(
    memory: pgmem.Memory, db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fill(memory, db_dsn)
    path = tmp_path / "backup.jsonl"
    status, out, err = pgmem_cli(capsys, "export", str(path), "--dsn", db_dsn, "--all",
                                 "--vectors", "--history")
    assert status == 0, err
    assert out == f"exported 8 memories to {path}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["pgmem_export"] == 1 and lines[0]["memories"] == 8
    assert lines[0]["embedding_model"]["dim"] == 384
    assert "Another tenant's" not in path.read_text()
    status, out, err = pgmem_cli(capsys, "import", str(path), "--dsn", db_dsn,
                                 "--tenant", "copy")
    assert status == 0, err
    assert out == (f"imported 8 memories from {path}, and the history of 1 deleted "
                   "memories\n")
    assert lines[-1]["deleted"] is True and len(lines) == 1 + 8 + 1
    source, copy = snapshot(db_dsn, "default"), snapshot(db_dsn, "copy")
    assert len(source["memories"]) == 8 and len(source["history"]) == 8 + 2 + 2
    assert any(row["expires_at"] is not None for row in source["memories"])
    assert {row["ts_config"] for row in source["memories"]} == {"english", "simple"}
    assert source["links"]
    assert copy == source
    # run again: every memory (and the deleted one's history) is there already, nothing changes
    status, out, err = pgmem_cli(capsys, "import", str(path), "--dsn", db_dsn,
                                 "--tenant", "copy")
    assert out == f"imported 0 memories from {path} (8 already stored, skipped)\n", err
    assert snapshot(db_dsn, "copy") == source


@pytest.fixture
def other_database(server_dsn: str, template_database: str) -> Iterator[str]:
    name = f"pgmem_test_{uuid.uuid4().hex[:12]}"
    yield create_database(server_dsn, name, template=template_database)
    drop_database(server_dsn, name)


def test_a_scope_moves_to_another_database_with_the_library(
    memory: pgmem.Memory, db_dsn: str, other_database: str,
) -> None:
    ids = fill(memory, db_dsn)
    out = io.StringIO()
    seen: list[tuple[int, int]] = []
    exported = memory.export(out, user_id="alice", vectors=True, history=True, itersize=2,
                             on_progress=lambda done, total: seen.append((done, total)))
    assert exported == pgmem.Exported(6, "sentence-transformers/all-MiniLM-L6-v2", 384, "vector")
    assert seen == [(0, 6), (2, 6), (4, 6), (6, 6)]
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["scope"] == {"user_id": "alice"}
    assert [line["created_at"] for line in lines[1:]] == sorted(
        line["created_at"] for line in lines[1:]
    )  # a scope comes in the order it was stored
    first = lines[1]
    assert first["id"] == str(ids["alice"]) and first["metadata"] == {"topic": "moves"}
    assert [e["event"] for e in first["history"]] == ["ADD", "UPDATE", "UPDATE"]
    with pgmem.Memory(other_database, embedder=memory.embedder, nlp=memory.analyzer) as target:
        assert import_rows(target, read_rows(out.getvalue(), "jsonl", "x"), "x") == (6, 0, 0)
        moved = snapshot(other_database, "default")
    source = snapshot(db_dsn, "default")
    alice = {row["id"] for row in source["memories"] if row["user_id"] == "alice"}
    expected = {name: [row for row in rows if row.get("memory_id", row.get("id")) in alice]
                for name, rows in source.items()}
    for name, rows in expected.items():
        assert moved[name] == rows, [(a, b) for a, b in zip(moved[name], rows) if a != b][:3]


def test_the_export_reads_one_snapshot(memory: pgmem.Memory, db_dsn: str) -> None:
    """Memories added and deleted while an export runs (between its batches) change nothing
    of what it writes."""
    memory.add_many([f"fact number {i}" for i in range(6)], user_id="u")
    before = [record.id for record in memory.get_all(user_id="u")]
    with pgmem.Memory(db_dsn, embedder=memory.embedder, nlp=memory.analyzer) as meanwhile:
        def change(done: int, total: int) -> None:
            if done == 2:
                meanwhile.add("a fact added during the export", user_id="u")
                meanwhile.delete(before[-1])

        out = io.StringIO()
        exported = memory.export(out, user_id="u", itersize=2, on_progress=change)
    written = [json.loads(line)["id"] for line in out.getvalue().splitlines()[1:]]
    assert exported.memories == 6 and written == [str(i) for i in before]
    assert len(memory.get_all(user_id="u")) == 6  # one added, one deleted


def test_inside_a_transaction_the_export_sees_the_callers_writes(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    with psycopg.connect(db_dsn) as conn:
        with pgmem.Memory(conn, embedder=embedder, nlp=analyzer) as memory:
            memory.add("not committed yet", user_id="u")
            out = io.StringIO()
            assert memory.export(out, user_id="u").memories == 1
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            memory.add("still in the same transaction", user_id="u")
        conn.rollback()


def test_async_export_writes_what_memory_export_writes(
    memory: pgmem.Memory, db_dsn: str,
) -> None:
    fill(memory, db_dsn)
    sync = io.StringIO()
    memory.export(sync, whole_tenant=True, vectors=True, history=True, itersize=3)

    async def export() -> str:
        async with pgmem.AsyncMemory(db_dsn, embedder=memory.embedder,
                                     nlp=memory.analyzer) as amemory:
            out = io.StringIO()
            await amemory.export(out, whole_tenant=True, vectors=True, history=True,
                                 itersize=3)
            return out.getvalue()

    assert asyncio.run(export()) == sync.getvalue()


def test_bad_exports_are_refused_before_anything_is_read(memory: pgmem.Memory) -> None:
    out = io.StringIO()
    with pytest.raises(pgmem.ScopeError, match="whole_tenant=True to export every memory"):
        memory.export(out)
    with pytest.raises(pgmem.ScopeError, match="not both"):
        memory.export(out, user_id="u", whole_tenant=True)
    with pytest.raises(pgmem.InvalidInputError, match="itersize must be an integer from 1"):
        memory.export(out, user_id="u", itersize=0)
    with pytest.raises(pgmem.InvalidInputError, match="anything with write"):
        memory.export(b"", user_id="u")  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInputError, match="user_id must not be empty"):
        memory.export(out, user_id=" ")
    assert out.getvalue() == ""


def test_the_command_line_refuses_what_it_cannot_do(
    memory: pgmem.Memory, db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    memory.add("Alice climbs on Tuesdays", user_id="alice")
    status, _, err = pgmem_cli(capsys, "export", "--dsn", db_dsn)
    assert status == 2 and "give --user, --agent and/or --run, or --all" in err
    path = tmp_path / "alice.jsonl"
    path.write_text("keep me\n")
    status, _, err = pgmem_cli(capsys, "export", str(path), "--dsn", db_dsn, "--user", "alice")
    assert status == 2 and "exists: give another FILE, or --force" in err
    assert path.read_text() == "keep me\n"
    status, out, err = pgmem_cli(capsys, "export", str(path), "--dsn", db_dsn, "--user",
                                 "alice", "--force")
    assert status == 0, err
    assert not Path(f"{path}.partial").exists()
    status, out, err = pgmem_cli(capsys, "export", "--dsn", db_dsn, "--user", "alice")
    assert status == 0 and err.endswith("exported 1 memories to stdout\n")
    assert [json.loads(line)["text"] for line in out.splitlines()[1:]] == [
        "Alice climbs on Tuesdays"
    ]


def test_import_refuses_vectors_of_another_model(
    memory: pgmem.Memory, db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    memory.add("Alice climbs on Tuesdays", user_id="alice")
    out = io.StringIO()
    memory.export(out, user_id="alice", vectors=True)
    header, *rest = out.getvalue().splitlines()
    changed = json.loads(header)
    changed["embedding_model"]["model"] = "another/model"
    path = tmp_path / "other-model.jsonl"
    path.write_text("\n".join([json.dumps(changed), *rest]) + "\n")
    status, _, err = pgmem_cli(capsys, "import", str(path), "--dsn", db_dsn, "--tenant", "t2")
    assert status == 2
    assert "holds vectors of model 'another/model'" in err and "without --vectors" in err
    newer = {**json.loads(header), "pgmem_export": 99}
    path.write_text("\n".join([json.dumps(newer), *rest]) + "\n")
    status, _, err = pgmem_cli(capsys, "import", str(path), "--dsn", db_dsn, "--tenant", "t2")
    assert status == 2 and "format 99" in err
    with pgmem.Memory(db_dsn, embedder=memory.embedder, nlp=memory.analyzer,
                      tenant="t2") as t2:
        assert len(t2.get_all(user_id="alice")) == 0


def test_an_imported_history_is_checked(memory: pgmem.Memory) -> None:
    item = {"text": "a", "user_id": "u", "id": str(uuid.uuid4())}
    with pytest.raises(pgmem.InvalidInputError, match=r"items\[0\]: history\[0\] must be"):
        memory.add_many([{**item, "history": [{"event": "DROP", "created_at": EXPIRES}]}])
    with pytest.raises(pgmem.InvalidInputError, match=r"history\[0\] has no created_at"):
        memory.add_many([{**item, "history": [{"event": "ADD", "new_text": "a"}]}])
    with pytest.raises(pgmem.InvalidInputError, match="history must be a list"):
        memory.add_many([{**item, "history": "ADD"}])
    assert len(memory.get_all(user_id="u")) == 0


def test_a_file_cannot_rewrite_what_the_tenant_holds(memory: pgmem.Memory) -> None:
    """A line's id that the tenant already has: in the line's scope, the memory is skipped as
    already stored and its history, expiry and origin stay as they are; in another scope, the
    import is refused. Ids in a file are never trusted."""
    alice = memory.add("Alice climbs on Tuesdays", user_id="alice")
    forged = {
        "id": str(alice.id), "text": "Alice climbs on Tuesdays", "user_id": "alice",
        "expires_at": EXPIRES, "origin": {"importer": "forged"},
        "history": [{"event": "ADD", "old_text": None, "new_text": "forged",
                     "created_at": EXPIRES}],
    }
    [result] = memory.add_many([forged])
    assert result.duplicate and result.id == alice.id
    assert [(e.event, e.new_text) for e in memory.history(alice.id)] == [
        ("ADD", "Alice climbs on Tuesdays")
    ]
    out = io.StringIO()
    memory.export(out, user_id="alice")
    line = json.loads(out.getvalue().splitlines()[1])
    assert "expires_at" not in line and "origin" not in line
    with pytest.raises(pgmem.IdTakenError, match=r"items\[0\]: id .* another scope"):
        memory.add_many([{**forged, "user_id": "mallory"}])
    assert len(memory.get_all(user_id="mallory")) == 0
    # a deleted memory's history, for a live memory's id or one with a history: not written
    gone = memory.add("Alice once lived in Paris", user_id="alice")
    memory.delete(gone.id)
    lines = [{"id": str(i), "deleted": True, "history": forged["history"]}
             for i in (alice.id, gone.id)]
    assert run(memory._connector, memory._ops.restore_deleted(lines)) == 0
    assert [e.new_text for e in memory.history(alice.id)] == ["Alice climbs on Tuesdays"]
    assert [e.event for e in memory.history(gone.id)] == ["ADD", "DELETE"]
    with pytest.raises(pgmem.InvalidInputError, match=r"histories\[0\]: .* is not a memory id"):
        run(memory._connector, memory._ops.restore_deleted([{**lines[0], "id": "x"}]))
