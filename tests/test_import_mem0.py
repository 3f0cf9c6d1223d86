"""pgmem.importers.mem0 (and ``pgmem import --from-mem0``) on a collection written by real Mem0."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from conftest import create_database, drop_database
from mem0_support import mem0_memory, require_mem0
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

import pgmem
from pgmem.compat import mem0 as compat
from pgmem.importers.mem0 import import_collection
from tests.citus_support import RemoteLog
from tests.test_citus import one_round_on, tenant_node

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

COLLECTION = "written_by_mem0"


@pytest.fixture(scope="module")
def source_dsn(server_dsn: str, template_database: str) -> Iterator[str]:
    """A migrated database holding a collection that real Mem0 wrote."""
    require_mem0()
    name = f"pgmem_mem0src_{uuid.uuid4().hex[:10]}"
    yield create_database(server_dsn, name, template=template_database)
    drop_database(server_dsn, name)


@pytest.fixture(scope="module")
def written(source_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Mem0's own results for what it stored, by memory id."""
    real = mem0_memory(source_dsn, COLLECTION, tmp_path_factory.mktemp("mem0home"))
    real.add("I like pizza with olives", user_id="alice",
             metadata={"topic": "food", "rating": 5, "tags": ["italian"]}, infer=False)
    real.add([{"role": "user", "content": "I moved to Lyon"},
              {"role": "assistant", "content": "Lyon is lovely", "name": "concierge"}],
             user_id="alice", agent_id="travel", run_id="r1", infer=False)
    real.add("Bob's garage reference is 88417", user_id="bob", metadata={"kind": "ref"},
             infer=False)
    real.add("The deploy runbook lives in the wiki", agent_id="ops-bot",
             expiration_date="2999-12-31", infer=False)
    updated = real.get_all(filters={"user_id": "alice"})["results"][0]["id"]
    real.update(updated, text="I like pizza with capers", metadata={"rating": 4})
    stored = {}
    for scope in ({"user_id": "alice"}, {"user_id": "bob"}, {"agent_id": "ops-bot"}):
        for row in real.get_all(filters=scope, top_k=100)["results"]:
            stored[row["id"]] = real.get(row["id"])
    real.close()
    assert len(stored) == 5
    return stored


@pytest.fixture
def target(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> Iterator[pgmem.Memory]:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        yield mem


@pytest.mark.also_on_citus
def test_import_keeps_ids_scopes_times_and_metadata(
    source_dsn: str, written: dict[str, Any], target: pgmem.Memory, db_dsn: str
) -> None:
    progress: list[tuple[int, int]] = []
    report = import_collection(target, COLLECTION, source=source_dsn, batch_size=2,
                               on_progress=lambda done, total: progress.append((done, total)))
    assert (report.read, report.imported, report.skipped) == (5, 5, 0)
    assert report.reused, report.vectors
    assert progress == [(2, 5), (4, 5), (5, 5)]
    # Seen through the Mem0 door, each memory is what Mem0 itself returned for it.
    door = compat.Memory(memory=target)
    for memory_id, theirs in written.items():
        mine = door.get(memory_id)
        assert mine is not None, memory_id
        assert mine == theirs
    # pgmem's own view: real scope columns, history from the original creation time.
    lyon = next(i for i, r in written.items() if r["memory"] == "I moved to Lyon")
    record = target.get(lyon)
    assert (record.user_id, record.agent_id, record.run_id) == ("alice", "travel", "r1")
    assert record.metadata == {"role": "user"}  # where it came from is not in its metadata
    origin = origin_of(db_dsn, lyon)
    assert origin["collection"] == f"public.{COLLECTION}" and len(origin["version"]) == 32
    assert origin["source"] == report.source and origin["importer"] == "mem0"
    events = target.history(lyon)
    assert [e.event for e in events] == ["ADD"]
    assert events[0].created_at == record.created_at
    # Searchable on all three signals, in the right scope only.
    hits = target.search("garage reference 88417", user_id="bob", limit=1)
    assert [h.text for h in hits] == ["Bob's garage reference is 88417"]
    assert "keyword" in hits[0].explain.legs
    assert target.search("garage", user_id="alice", threshold=0.0, limit=10) != [] and all(
        h.text != "Bob's garage reference is 88417"
        for h in target.search("garage", user_id="alice", threshold=0.0, limit=10)
    )


@pytest.mark.also_on_citus
def test_reused_vectors_are_the_stored_ones(
    source_dsn: str, written: dict[str, Any], target: pgmem.Memory, db_dsn: str
) -> None:
    import_collection(target, COLLECTION, source=source_dsn)
    from pgvector.psycopg import register_vector

    def vectors(dsn: str, query: str) -> dict[str, np.ndarray]:
        with psycopg.connect(dsn) as conn:
            register_vector(conn)
            rows = conn.execute(query).fetchall()
            return {str(i): np.asarray(getattr(v, "to_numpy", lambda v=v: v)()) for i, v in rows}

    theirs = vectors(source_dsn, f"SELECT id, vector FROM {COLLECTION}")
    mine = vectors(db_dsn, "SELECT id, embedding FROM pgmem.memories")
    assert mine.keys() == theirs.keys() == written.keys()
    for memory_id, vector in theirs.items():
        np.testing.assert_allclose(mine[memory_id], vector / np.linalg.norm(vector), atol=1e-6)


@pytest.mark.also_on_citus
def test_rerun_skips_what_is_there(
    source_dsn: str, written: dict[str, Any], target: pgmem.Memory
) -> None:
    first = next(iter(written))
    import_collection(target, COLLECTION, source=source_dsn)
    target.update(first, text="changed in pgmem since the import")
    again = import_collection(target, COLLECTION, source=source_dsn)
    assert (again.read, again.imported, again.skipped) == (5, 0, 5)
    assert target.get(first).text == "changed in pgmem since the import"
    target.delete(first)
    third = import_collection(target, COLLECTION, source=source_dsn, reuse_vectors=False)
    assert (third.imported, third.skipped) == (1, 4)
    assert not third.reused and "reuse_vectors=False" in third.vectors
    assert target.get(first).text == written[first]["memory"]


def test_another_models_vectors_are_not_reused(
    source_dsn: str, target: pgmem.Memory
) -> None:
    """A collection of another dimension, and one whose vectors are another model's, are
    embedded again."""
    rng = np.random.default_rng(7)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE small (id uuid PRIMARY KEY, vector vector(8), payload jsonb)")
        conn.execute("CREATE TABLE foreign_model "
                     "(id uuid PRIMARY KEY, vector vector(384), payload jsonb)")
        for table, dim in (("small", 8), ("foreign_model", 384)):
            conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s::float4[]::vector, %s)",
                (uuid.uuid4(), rng.normal(size=dim).tolist(),
                 Jsonb({"data": f"a note from {table}", "user_id": "carol"})),
            )
    with pytest.raises(pgmem.DimensionMismatchError):
        import_collection(target, "small", source=source_dsn, reuse_vectors=True)
    small = import_collection(target, "small", source=source_dsn)
    assert (small.imported, small.reused) == (1, False)
    assert "8-dimensional" in small.vectors
    other = import_collection(target, "foreign_model", source=source_dsn)
    assert (other.imported, other.reused) == (1, False)
    assert "another model" in other.vectors
    hit = target.search("a note from small", user_id="carol", limit=2)[0]
    assert hit.explain.semantic > 0.9  # embedded by pgmem's model, not kept random


def test_bad_rows_stop_the_import_before_any_write(
    source_dsn: str, target: pgmem.Memory
) -> None:
    bad = uuid.uuid4()
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE with_bad_row "
                     "(id uuid PRIMARY KEY, vector vector(384), payload jsonb)")
        conn.execute("INSERT INTO with_bad_row SELECT gen_random_uuid(), NULL, %s",
                      (Jsonb({"data": "fine", "user_id": "dan"}),))
        conn.execute("INSERT INTO with_bad_row VALUES (%s, NULL, %s)",
                      (bad, Jsonb({"data": "no scope at all"})))
    with pytest.raises(pgmem.ScopeError, match=str(bad)):
        import_collection(target, "with_bad_row", source=source_dsn)
    assert target.get_all(user_id="dan").items == ()
    with pytest.raises(pgmem.NotFoundError, match="no Mem0 collection") as missing:
        import_collection(target, "no_such_collection", source=source_dsn)
    assert "LINE" not in str(missing.value) and "SELECT" not in str(missing.value)


@pytest.mark.also_on_citus
def test_cli_imports_a_mem0_collection(
    source_dsn: str, written: dict[str, Any], db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    args = ["import", "--from-mem0", "--collection", COLLECTION, "--mem0-dsn", source_dsn,
            "--dsn", db_dsn]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "imported 5 of 5 rows" in out.out
    assert "importing" in out.err  # the progress bar
    assert f"into tenant '{COLLECTION}'" in out.out  # a collection is a tenant, as in compat
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["read"], report["imported"], report["skipped"]) == (5, 0, 5)
    with pgmem.Memory(db_dsn, tenant=COLLECTION) as mem:
        assert {str(r.id) for r in mem.get_all(user_id="alice").items} == {
            i for i, r in written.items() if r.get("user_id") == "alice"
        }
    assert main([*args, "--tenant", "default", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["imported"] == 5


def test_cli_refuses_a_file_with_from_mem0(tmp_path: Path, db_dsn: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from pgmem.cli import main

    assert main(["import", "--from-mem0", "--dsn", db_dsn]) == 2
    assert "--collection" in capsys.readouterr().err


@pytest.mark.also_on_citus
def test_add_many_keeps_given_ids_times_and_embeddings(memory: pgmem.Memory) -> None:
    """The import path of add_many, without Mem0: kept ids, timestamps and vectors; an id
    already there is a duplicate; a given id is never deduplicated by content; bad values
    are refused before anything is written."""
    from datetime import datetime, timezone

    made = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    vector = np.zeros(384, np.float32)
    vector[3] = 1.0
    kept, fresh = uuid.uuid4(), uuid.uuid4()
    memory.add("I like tea", user_id="u")
    results = memory.add_many([
        {"text": "I like tea", "user_id": "u", "id": kept, "created_at": made,
         "updated_at": "2024-06-01T08:00:00+00:00", "embedding": vector.tolist()},
        {"text": "I like tea", "user_id": "u"},
        {"text": "I like coffee", "user_id": "u", "id": str(fresh)},
    ])
    assert [(r.id == kept, r.duplicate) for r in results[:1]] == [(True, False)]
    assert results[1].duplicate and results[1].id not in (kept, fresh)
    assert results[2].id == fresh and not results[2].duplicate
    record = memory.get(kept)
    assert record.created_at == made
    assert record.updated_at == datetime(2024, 6, 1, 8, tzinfo=timezone.utc)
    assert memory.history(kept)[0].created_at == made
    hit = memory.search("I like tea", user_id="u", mode="semantic", threshold=0.0, limit=5)
    assert next(h for h in hit if h.id == kept).explain.semantic < 0.5  # its own vector
    again = memory.add_many([{"text": "changed", "user_id": "u", "id": kept}])
    assert again[0].duplicate and memory.get(kept).text == "I like tea"
    for bad in ({"embedding": [0.0] * 384}, {"embedding": [1.0] * 3}, {"created_at": "soon"},
                {"created_at": datetime(2024, 1, 1)}, {"id": "nope"}):
        with pytest.raises((pgmem.InvalidInputError, pgmem.DimensionMismatchError)):
            memory.add_many([{"text": "ok", "user_id": "v"},
                             {"text": "bad", "user_id": "v", **bad}])
    assert memory.get_all(user_id="v").items == ()


def test_one_id_twice_in_a_call_is_refused_before_any_write(memory: pgmem.Memory) -> None:
    """Two items with one id would make the second a 'duplicate' of the first, or a batch
    insert fail half-way: refused, naming both items, whatever the batch size."""
    twice = uuid.uuid4()
    items = ["first", "second", {"text": "z1", "id": twice}, {"text": "z2", "id": str(twice)}]
    for batch_size in (1, 2, 64):
        with pytest.raises(pgmem.InvalidInputError, match=r"items\[3\].*items\[2\]"):
            memory.add_many(items, user_id="w", batch_size=batch_size)
        assert memory.get_all(user_id="w").items == ()
    far = {"text": "old", "created_at": "0001-01-01T00:00:00+05:00"}
    with pytest.raises(pgmem.InvalidInputError, match="created_at .* out of range"):
        memory.add_many(["fine", far], user_id="w")
    assert memory.get_all(user_id="w").items == ()


def origin_of(dsn: str, memory_id: object, tenant: str = "default") -> Any:
    """The origin an import recorded for a memory (memories.origin), or None."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT origin FROM pgmem.memories WHERE tenant = %s AND id = %s",
                           (tenant, memory_id)).fetchone()
    assert row is not None, memory_id
    return row[0]


def _mem0_rows(dsn: str, table: str, rows: list[tuple[uuid.UUID, dict[str, Any]]]) -> None:
    """A Mem0-shaped collection ``table`` (created if missing) with ``rows`` upserted."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} "
                     "(id uuid PRIMARY KEY, vector vector(384), payload jsonb)")
        for row_id, payload in rows:
            conn.execute(f"INSERT INTO {table} VALUES (%s, NULL, %s) ON CONFLICT (id) "
                         "DO UPDATE SET payload = excluded.payload", (row_id, Jsonb(payload)))


def test_sync_brings_mem0s_updates_and_deletes(
    source_dsn: str, target: pgmem.Memory, tmp_path_factory: pytest.TempPathFactory, db_dsn: str
) -> None:
    """Mem0 changes after an import (an update, a delete, an add): a plain re-import brings
    the add only; --sync brings all three, keeps pgmem's own memories and pgmem's edits of
    rows Mem0 left alone, and a second sync finds nothing to do."""
    collection = f"synced_{uuid.uuid4().hex[:8]}"
    real = mem0_memory(source_dsn, collection, tmp_path_factory.mktemp("mem0sync"))
    ids = {}
    for text, scope, meta in (
        ("I live in Paris", {"user_id": "alice"}, {"topic": "home"}),
        ("I own a red bike", {"user_id": "alice", "run_id": "r1"}, None),
        ("Bob's locker is 12", {"user_id": "bob"}, {"kind": "ref"}),
        ("Deploys freeze on Fridays", {"agent_id": "ops-bot"}, None),
    ):
        ids[text] = real.add(text, **scope, metadata=meta, infer=False)["results"][0]["id"]
    first = import_collection(target, collection, source=source_dsn)
    assert (first.imported, first.skipped) == (4, 0)
    own = target.add("pgmem's own note about Paris", user_id="alice")  # not from Mem0
    bob = ids["Bob's locker is 12"]
    target.update(bob, text="Bob's locker is 12 (checked in pgmem)")  # Mem0 leaves it alone
    ops = ids["Deploys freeze on Fridays"]
    with psycopg.connect(db_dsn) as conn:  # as imported before imports recorded their origin
        conn.execute("UPDATE pgmem.memories SET origin = NULL WHERE id = %s", (ops,))
    paris, bike = ids["I live in Paris"], ids["I own a red bike"]
    real.update(paris, text="I live in Lyon", metadata={"since": 2024})
    real.delete(bike)
    added = real.add("I adopted a cat", user_id="alice", infer=False)["results"][0]["id"]

    plain = import_collection(target, collection, source=source_dsn)
    assert (plain.imported, plain.updated, plain.deleted) == (1, 0, 0)  # the add only
    assert target.get(paris).text == "I live in Paris"

    progress: list[tuple[int, int]] = []
    report = import_collection(target, collection, source=source_dsn, sync=True,
                               on_progress=lambda done, total: progress.append((done, total)))
    assert (report.imported, report.updated, report.deleted, report.skipped) == (0, 1, 1, 3)
    assert report.sync and progress[-1] == (5, 5)
    door = compat.Memory(memory=target)
    for memory_id in (paris, added, ops):
        assert door.get(memory_id) == real.get(memory_id)  # updated_at included: Mem0's
    assert door.get(paris)["metadata"] == {"topic": "home", "since": 2024}
    assert [e.event for e in target.history(paris)] == ["ADD", "UPDATE"]
    assert target.get(bob).text == "Bob's locker is 12 (checked in pgmem)"
    with pytest.raises(pgmem.NotFoundError):
        target.get(bike)
    assert target.get(own.id).text == "pgmem's own note about Paris"

    again = import_collection(target, collection, source=source_dsn, sync=True)
    assert (again.imported, again.updated, again.deleted, again.skipped) == (0, 0, 0, 4)
    assert origin_of(db_dsn, ops)["source"] == report.source  # adopted by the sync
    real.delete(bob)  # deleted in Mem0: deleted in pgmem, pgmem's edit or not
    real.delete(ops)
    assert import_collection(target, collection, source=source_dsn, sync=True).deleted == 2
    assert {str(r.id) for r in target.get_all(user_id="alice").items} == {
        paris, added, str(own.id)}
    real.close()


@pytest.mark.also_on_citus
def test_sync_checks_everything_before_writing(source_dsn: str, target: pgmem.Memory) -> None:
    """A row whose id pgmem holds in another scope, or a row with no text: a clear error naming
    the row (and no stored content), and nothing written -- not the good rows either."""
    table = f"sync_bad_{uuid.uuid4().hex[:8]}"
    kept = uuid.uuid4()
    _mem0_rows(source_dsn, table, [(kept, {"data": "first words", "user_id": "erin"})])
    assert import_collection(target, table, source=source_dsn, sync=True).imported == 1
    secret = target.add("Victim's secret: the code is 4242", user_id="victim")
    new = uuid.uuid4()
    _mem0_rows(source_dsn, table, [
        (kept, {"data": "second words", "user_id": "erin"}),
        (new, {"data": "a new row", "user_id": "erin"}),
        (secret.id, {"data": "taking over", "user_id": "mallory"}),
    ])
    with pytest.raises(pgmem.InvalidInputError, match=str(secret.id)) as taken:
        import_collection(target, table, source=source_dsn, sync=True)
    assert "another scope" in str(taken.value) and "4242" not in str(taken.value)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {table} WHERE id = %s", (secret.id,))
    textless = uuid.uuid4()
    _mem0_rows(source_dsn, table, [(textless, {"user_id": "erin", "memory": "not data"})])
    with pytest.raises(pgmem.InvalidInputError, match=str(textless)):
        import_collection(target, table, source=source_dsn, sync=True)
    assert target.get(kept).text == "first words"
    assert [r.text for r in target.get_all(user_id="erin").items] == ["first words"]
    assert target.get(secret.id).text == "Victim's secret: the code is 4242"


@pytest.mark.citus
def test_import_into_a_distributed_schema(
    citus_dsn: str, citus_schema: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    """An import into a schema distributed over the Citus cluster (the collection: a plain
    table of the coordinator) keeps ids, times and metadata, links entities and writes history
    as on one server; a re-run adds nothing; a sync brings an update and a delete. The import,
    its re-run and the sync each run on the worker holding the tenant alone, without two-phase
    commit: the importer's own reads (the tenant's memories among a page's ids, those imported
    from the collection) and its writes (add_many, update, delete)."""
    from datetime import datetime, timezone

    made = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    texts = ["Helga Norberg moved to Tbilisi last spring",
             "Tomasz Wilk plays chess in Ostrava on Fridays",
             "My cat is called Miso and sleeps all day", "I like green tea from Kyoto"]
    rows = [(uuid.uuid4(), {"data": text, "user_id": "fay", "topic": "notes",
                            "created_at": made.isoformat()}) for text in texts]
    table = "mem0_notes"
    _mem0_rows(citus_dsn, f"{citus_schema}.{table}", rows)
    with pgmem.Memory(citus_dsn, embedder=embedder, nlp=analyzer, schema=citus_schema,
                      tenant="other") as other:  # the schema's first write records the model
        other.add("I like green tea from Kyoto", user_id="fay")
    node = tenant_node(citus_dsn, citus_schema, "acme")
    log = RemoteLog(citus_dsn)
    try:
        with pgmem.Memory(log.conn, embedder=embedder, nlp=analyzer, schema=citus_schema,
                          tenant="acme") as mem:
            report = import_collection(mem, table, source=citus_dsn, source_schema=citus_schema,
                                       batch_size=3)
            assert (report.read, report.imported, report.skipped) == (4, 4, 0)
            one_round_on(log, node)
            assert {r.id for r in mem.get_all(user_id="fay").items} == {i for i, _ in rows}
            helga = mem.get(rows[0][0])
            assert (helga.created_at, helga.metadata["topic"]) == (made, "notes")
            assert [(e.event, e.created_at) for e in mem.history(helga.id)] == [("ADD", made)]
            assert mem.search("Where does Helga live now?", user_id="fay")[0].id == helga.id
            with psycopg.connect(citus_dsn) as conn:
                assert {r[0] for r in conn.execute(
                    f"SELECT name FROM {citus_schema}.entities WHERE tenant = 'acme'")} >= {
                    "helga norberg", "tomasz wilk", "tbilisi", "ostrava", "kyoto"}
            log.clear()
            again = import_collection(mem, table, source=citus_dsn, source_schema=citus_schema,
                                      sync=True)
            assert (again.imported, again.updated, again.deleted, again.skipped) == (0, 0, 0, 4)
            one_round_on(log, node)

            _mem0_rows(citus_dsn, f"{citus_schema}.{table}",
                       [(rows[0][0], {**rows[0][1], "data": "Helga Norberg moved to Oslo"})])
            with psycopg.connect(citus_dsn, autocommit=True) as conn:
                conn.execute(f"DELETE FROM {citus_schema}.{table} WHERE id = %s", (rows[3][0],))
            synced = import_collection(mem, table, source=citus_dsn, source_schema=citus_schema,
                                       sync=True)
            assert (synced.imported, synced.updated, synced.deleted) == (0, 1, 1)
            one_round_on(log, node)
            assert mem.get(helga.id).text == "Helga Norberg moved to Oslo"
            assert [e.event for e in mem.history(helga.id)] == ["ADD", "UPDATE"]
            with pytest.raises(pgmem.NotFoundError):
                mem.get(rows[3][0])
    finally:
        log.close()


def test_cli_sync_reports_each_count(
    source_dsn: str, db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgmem.cli import main

    table = f"cli_sync_{uuid.uuid4().hex[:8]}"
    rows = [(uuid.uuid4(), {"data": f"note {n}", "user_id": "fay"}) for n in range(3)]
    _mem0_rows(source_dsn, table, rows)
    args = ["import", "--from-mem0", "--collection", table, "--mem0-dsn", source_dsn,
            "--dsn", db_dsn, "--sync"]
    assert main(args) == 0
    assert "3 added, 0 updated, 0 deleted, 0 unchanged" in capsys.readouterr().out
    _mem0_rows(source_dsn, table, [(rows[0][0], {"data": "note zero", "user_id": "fay"}),
                                   (uuid.uuid4(), {"data": "note 3", "user_id": "fay"})])
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {table} WHERE id = %s", (rows[1][0],))
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["imported"], report["updated"], report["deleted"], report["skipped"]) == (
        1, 1, 1, 1)
    with pgmem.Memory(db_dsn, tenant=table) as mem:
        assert sorted(r.text for r in mem.get_all(user_id="fay").items) == [
            "note 2", "note 3", "note zero"]


# -- two Mem0 databases into one tenant ----------------------------------------------------------

#: Metadata that imitates the import record older pgmem kept in a memory's metadata.
FORGED = {"_mem0_import": {"collection": "public.mem0", "version": "0" * 32}}


@pytest.fixture
def two_sources(server_dsn: str, template_database: str) -> Iterator[tuple[str, str]]:
    """Two scratch databases, each to hold Mem0's default collection ``public.mem0``."""
    require_mem0()
    names = [f"pgmem_mem0_{side}_{uuid.uuid4().hex[:8]}" for side in "ab"]
    dsns = tuple(create_database(server_dsn, name, template=template_database) for name in names)
    yield dsns[0], dsns[1]
    for name in names:
        drop_database(server_dsn, name)


def _cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from pgmem.cli import main

    assert main([*args, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def _tenant_rows(dsn: str, tenant: str) -> dict[str, tuple[Any, ...]]:
    """Every row of a tenant (memories and store items): id -> text, metadata, updated_at."""
    with psycopg.connect(dsn) as conn:
        return {str(r[0]): r[1:] for r in conn.execute(
            "SELECT id, text, metadata, updated_at, origin FROM pgmem.memories WHERE tenant = %s",
            (tenant,))}


def test_sync_deletes_only_what_came_from_its_database(
    two_sources: tuple[str, str], db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer, tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two Mem0 databases, each with the default collection public.mem0, imported into one
    tenant with hostile metadata around: a sync of A deletes and updates only what came from
    A's collection -- never B's memories, memories written through pgmem (Memory, compat) or a
    LangGraph item whose metadata or value carries the old import key -- a dry run prints the
    plan and writes nothing, and the updated and touched rows carry Mem0's updated_at."""
    from pgmem.langgraph import PgmemStore

    dsn_a, dsn_b = two_sources
    real_a = mem0_memory(dsn_a, "mem0", tmp_path_factory.mktemp("mem0a"))
    real_b = mem0_memory(dsn_b, "mem0", tmp_path_factory.mktemp("mem0b"))
    a_ids = {text: real_a.add(text, user_id="alice", metadata=meta, infer=False)["results"][0][
        "id"] for text, meta in (
            ("Alice likes green tea", FORGED),
            ("Alice moved to Lyon", {"topic": "home"}),
            ("Alice drives a blue van", None),
            ("Alice keeps bees", {"source.url": "https://bees.example"}),
    )}
    b_ids = {text: real_b.add(text, user_id="alice", metadata=meta, infer=False)["results"][0][
        "id"] for text, meta in (
            ("Alice's note from database B", FORGED),
            ("Bob's note from database B", {"kind": "ref"}),
    )}
    common = ["import", "--from-mem0", "--collection", "mem0", "--dsn", db_dsn]
    first_a = _cli_json([*common, "--mem0-dsn", dsn_a], capsys)
    first_b = _cli_json([*common, "--mem0-dsn", dsn_b, "--sync"], capsys)
    assert (first_a["imported"], first_b["imported"]) == (4, 2)
    assert first_a["source"] != first_b["source"]  # same collection, two databases
    assert first_a["source"].endswith("/" + conninfo_to_dict(dsn_a)["dbname"])

    # pgmem's own writes into the same tenant, carrying the key imports once used.
    forged_as_a = {"_mem0_import": {"collection": "public.mem0", "version": "1" * 32}}
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, tenant="mem0") as mem:
        own = mem.add("Alice's pgmem note", user_id="alice", metadata=forged_as_a).id
        door = compat.Memory(memory=mem)
        compat_id = door.add("Alice's compat note", user_id="alice", metadata=FORGED)[
            "results"][0]["id"]
        b_note = b_ids["Alice's note from database B"]
        mem.update(b_note, metadata={**FORGED, "edited": True})  # pgmem's edit of B's memory
        store = PgmemStore(mem)
        store.put(("alice", "prefs"), "tea", {"_mem0_import": FORGED["_mem0_import"],
                                              "text": "an item"})
        # Mem0 changes A: an update, a delete, a touch without a change, an add.
        lyon, van = a_ids["Alice moved to Lyon"], a_ids["Alice drives a blue van"]
        tea = a_ids["Alice likes green tea"]
        real_a.update(lyon, text="Alice moved to Nice", metadata={"since": 2025})
        real_a.delete(van)
        real_a.update(tea, text="Alice likes green tea")
        new = real_a.add("Alice adopted a cat", user_id="alice", infer=False)["results"][0]["id"]

        before = _tenant_rows(db_dsn, "mem0")
        from pgmem.cli import main

        assert main([*common, "--mem0-dsn", dsn_a, "--sync", "--dry-run"]) == 0
        printed = capsys.readouterr().out
        assert "dry run, nothing written" in printed
        assert "would add 1, update 1, delete 1, leave 2 unchanged" in printed
        lines = set(printed.splitlines()[1:])
        assert lines == {f"add    {new}", f"update {lyon}", f"delete {van}"}
        assert _tenant_rows(db_dsn, "mem0") == before  # nothing written

        synced = _cli_json([*common, "--mem0-dsn", dsn_a, "--sync"], capsys)
        assert (synced["imported"], synced["updated"], synced["deleted"], synced["skipped"]) == (
            1, 1, 1, 2)
        assert synced["source"] == first_a["source"]
        after = _tenant_rows(db_dsn, "mem0")
        assert set(before) - set(after) == {van}  # the one memory Mem0 deleted in A, no other
        for kept in (own, compat_id, b_note, b_ids["Bob's note from database B"]):
            assert after[str(kept)] == before[str(kept)]
        assert store.get(("alice", "prefs"), "tea").value["text"] == "an item"
        # What Mem0 returns, updated_at included: updated, touched, added, hostile metadata.
        for memory_id in (lyon, tea, new, a_ids["Alice keeps bees"]):
            assert door.get(memory_id) == real_a.get(memory_id)
        assert door.get(tea)["metadata"] == FORGED  # the app's own key, shown as Mem0 shows it
        assert door.get(own)["metadata"] == forged_as_a

        again = _cli_json([*common, "--mem0-dsn", dsn_a, "--sync"], capsys)
        assert (again["imported"], again["updated"], again["deleted"]) == (0, 0, 0)
        b_again = _cli_json([*common, "--mem0-dsn", dsn_b, "--sync"], capsys)
        assert (b_again["imported"], b_again["updated"], b_again["deleted"]) == (0, 0, 0)
        assert mem.get(b_note).metadata == {**FORGED, "edited": True}  # Mem0 left it alone

        # B loses a row: only that memory goes; A's stay.
        real_b.delete(b_ids["Bob's note from database B"])
        gone = _cli_json([*common, "--mem0-dsn", dsn_b, "--sync"], capsys)
        assert gone["deleted"] == 1
        assert {str(r.id) for r in mem.get_all(user_id="alice").items} == {
            lyon, tea, new, a_ids["Alice keeps bees"], str(own), compat_id, b_note}
        # The same collection read as another source: its memories are not that source's.
        with pytest.raises(pgmem.InvalidInputError, match="source"):
            import_collection(mem, "mem0", source=dsn_a, sync=True, source_id="another-name")
        assert _tenant_rows(db_dsn, "mem0").keys() == after.keys() - {
            b_ids["Bob's note from database B"]}
    real_a.close()
    real_b.close()


def test_origins_kept_in_metadata_move_to_their_column(
    source_dsn: str, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    """Migration 0009 moves the import record older pgmem kept in metadata (``_mem0_import``:
    collection and version) into memories.origin, with no source (it named none), and leaves
    any other value of that key to the caller. A sync then adopts those its collection still
    has, and deletes none of the others: which database they came from is unknown."""
    table = f"legacy_{uuid.uuid4().hex[:8]}"
    kept, dropped = uuid.uuid4(), uuid.uuid4()
    _mem0_rows(source_dsn, table, [(kept, {"data": "a kept row", "user_id": "gus"}),
                                   (dropped, {"data": "a dropped row", "user_id": "gus"})])
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        import_collection(mem, table, source=source_dsn)
        mine = {"_mem0_import": {"collection": f"public.{table}", "note": "the app's own"}}
        own = mem.add("gus's own note", user_id="gus", metadata=mine).id
    pgmem.downgrade(db_dsn, "0007")
    with psycopg.connect(db_dsn) as conn:
        legacy = dict(conn.execute("SELECT id, metadata FROM pgmem.memories").fetchall())
    assert set(legacy[kept]["_mem0_import"]) == {"collection", "version"}  # as 0007 kept it
    pgmem.migrate(db_dsn)
    assert origin_of(db_dsn, kept) == {
        "importer": "mem0", "source": None, "collection": f"public.{table}",
        "version": legacy[kept]["_mem0_import"]["version"], "updated_at": None}
    assert origin_of(db_dsn, own) is None
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        assert mem.get(kept).metadata == {}
        assert mem.get(own).metadata == mine
        with psycopg.connect(source_dsn, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {table} WHERE id = %s", (dropped,))
        report = import_collection(mem, table, source=source_dsn, sync=True)
        assert (report.imported, report.updated, report.deleted) == (0, 0, 0)
        assert origin_of(db_dsn, kept)["source"] == report.source  # adopted
        assert origin_of(db_dsn, dropped)["source"] is None  # not deleted: source unknown
        assert {r.id for r in mem.get_all(user_id="gus").items} == {kept, dropped, own}
