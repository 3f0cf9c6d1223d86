"""pgmem on a real Citus cluster (tests/citus_support.py): distribution in one step, migrations
after it, and the operations of one tenant, each routed to the one worker holding the tenant."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest

import pgmem
from pgmem.citus import REFERENCE_TABLES, TENANT_TABLES, distribute
from tests.citus_support import RemoteLog, drop_schema, new_schema
from tests.revision_support import HEAD

pytestmark = pytest.mark.citus


def placement(dsn: str, schema: str) -> dict[str, tuple[str, int]]:
    """Each pgmem table Citus knows: its partition method and colocation group."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, p.partmethod, p.colocationid FROM pg_dist_partition p"
            " JOIN pg_class c ON c.oid = p.logicalrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
    return {str(r[0]): (str(r[1]), int(r[2])) for r in rows}


def test_pgmem_distribute_is_the_function_the_docs_call() -> None:
    assert pgmem.distribute is distribute
    assert callable(pgmem.distribute)


def test_distribute_needs_citus(db_dsn: str) -> None:
    with pytest.raises(pgmem.ConfigurationError, match="no Citus extension"):
        distribute(db_dsn)


def test_distribute_needs_the_schema(citus_dsn: str) -> None:
    with pytest.raises(pgmem.SchemaError, match="migrate"):
        distribute(citus_dsn, schema=new_schema())


def test_distribute_colocates_by_tenant_and_is_idempotent(citus_dsn: str) -> None:
    schema = new_schema()
    try:
        pgmem.migrate(citus_dsn, schema=schema)
        assert distribute(citus_dsn, schema=schema) == [*TENANT_TABLES, *REFERENCE_TABLES]
        assert distribute(citus_dsn, schema=schema) == []
        placed = placement(citus_dsn, schema)
        assert {t: placed[t][0] for t in placed} == {
            **{t: "h" for t in TENANT_TABLES}, **{t: "n" for t in REFERENCE_TABLES}}
        assert len({placed[t][1] for t in TENANT_TABLES}) == 1  # one colocation group
        assert "alembic_version" not in placed
    finally:
        drop_schema(citus_dsn, schema)


def test_distributed_at_an_older_revision_upgrades_to_head(citus_dsn: str) -> None:
    """Revision 0006 alters the distributed tables, 0007 creates one that migrate distributes."""
    schema = new_schema()
    try:
        pgmem.migrate(citus_dsn, schema=schema)
        pgmem.downgrade(citus_dsn, "0005", schema=schema)
        with psycopg.connect(citus_dsn) as conn:  # a row from before: copied to its shard
            conn.execute(
                f"INSERT INTO {schema}.memories (tenant, user_id, text, content_hash, embedding,"
                " lexemes, lexeme_count)"
                " VALUES ('t', 'u', 'x', 'h', array_fill(0.1, '{384}')::vector, '', 0)")
        assert "tenant_secrets" not in distribute(citus_dsn, schema=schema)
        pgmem.migrate(citus_dsn, schema=schema)
        placed = placement(citus_dsn, schema)
        assert placed["tenant_secrets"][0] == "h"
        assert placed["tenant_secrets"][1] == placed["memories"][1]
        with psycopg.connect(citus_dsn) as conn:
            assert conn.execute(
                f"SELECT version_num FROM {schema}.alembic_version").fetchone() == (HEAD,)
            assert conn.execute(f"SELECT text FROM {schema}.memories").fetchall() == [("x",)]
            assert conn.execute(  # the coordinator's own copy was emptied
                "SELECT pg_relation_size(%s)", (f"{schema}.memories",)).fetchone() == (0,)
            # 0006's columns and partial unique index reached the shards
            conn.execute(
                f"INSERT INTO {schema}.memories (tenant, namespace, key, text, content_hash,"
                " embedding, lexemes, lexeme_count)"
                " VALUES ('t', '{a}', 'k', 'x', 'h', array_fill(0.1, '{384}')::vector, '', 0)")
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(
                    f"INSERT INTO {schema}.memories (tenant, namespace, key, text, content_hash,"
                    " embedding, lexemes, lexeme_count)"
                    " VALUES ('t', '{a}', 'k', 'y', 'h', array_fill(0.1, '{384}')::vector, '', 0)")
    finally:
        drop_schema(citus_dsn, schema)


def test_cli_distribute(citus_dsn: str) -> None:
    schema = new_schema()
    try:
        command = [sys.executable, "-m", "pgmem.cli", "--dsn", citus_dsn, "--schema", schema,
                   "distribute"]
        first = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        assert "distributed now: memories, entities" in first.stdout
        again = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        assert "already was" in again.stdout
    finally:
        drop_schema(citus_dsn, schema)


def test_cli_distribute_without_citus(db_dsn: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pgmem.cli", "--dsn", db_dsn, "distribute"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "pgmem: error: this database has no Citus extension" in done.stderr
    assert "Traceback" not in done.stderr


# -- operations, each on the one worker holding the tenant ---------------------------------

FACTS = [
    ("I like green tea from Kyoto", {"topic": "food"}),
    ("Helga Norberg moved to Tbilisi last spring", {"topic": "people"}),
    ("My cat is called Miso and sleeps all day", {"topic": "pets"}),
    ("Tomasz Wilk plays chess in Ostrava on Fridays", {"topic": "people"}),
    ("The budget meeting is on Monday at nine", {"topic": "work"}),
]


@pytest.fixture
def logged(citus_dsn: str, citus_schema: str, embedder: pgmem.SentenceTransformerEmbedder,
           analyzer: pgmem.TextAnalyzer) -> Iterator[tuple[pgmem.Memory, RemoteLog]]:
    """A Memory of tenant ``acme`` on a connection whose remote commands are logged, with
    FACTS stored for user u1 (and one memory of another tenant)."""
    with pgmem.Memory(citus_dsn, embedder=embedder, nlp=analyzer, schema=citus_schema,
                      tenant="other") as other:
        other.add("I like green tea from Kyoto", user_id="u1")
    log = RemoteLog(citus_dsn)
    try:
        with pgmem.Memory(log.conn, embedder=embedder, nlp=analyzer, schema=citus_schema,
                          tenant="acme") as mem:
            mem.add_many([{"text": t, "user_id": "u1", "metadata": m} for t, m in FACTS])
            mem.search("warm up", user_id="u1")
            log.clear()
            yield mem, log
    finally:
        log.close()


def tenant_node(dsn: str, schema: str, tenant: str) -> str:
    """The node holding ``tenant``'s shard of ``memories``, as RemoteLog names nodes."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT nodename || ':' || nodeport FROM citus_shards"
            " WHERE shardid = get_shard_id_for_distribution_column(%s::regclass, %s::text)",
            (f"{schema}.memories", tenant),
        ).fetchone()
    assert row is not None
    return f"postgres@{row[0]}"


def one_round_on(log: RemoteLog, node: str) -> None:
    """Every command since the last clear went to ``node``, and none is a two-phase commit."""
    commands = log.commands()
    assert commands, "nothing reached a worker"
    assert log.nodes() == {node}, commands
    assert not [c for c, _ in commands if "PREPARE TRANSACTION" in c], commands
    log.clear()


@pytest.mark.parametrize("large", [False, True], ids=["small scope", "any-size statement"])
def test_search_is_routed_to_the_tenants_worker(
    logged: tuple[pgmem.Memory, RemoteLog], citus_dsn: str, citus_schema: str, large: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: "could not create distributed plan" (a generic plan), and with custom plans the
    any-size statement's HNSW and GIN legs went to every shard."""
    from pgmem import builders

    if large:
        monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 0)  # every scope is "large"
    mem, log = logged
    node = tenant_node(citus_dsn, citus_schema, "acme")
    for mode in ("hybrid", "semantic", "keyword", "entity", "semantic+keyword"):
        hits = mem.search("Where does Helga Norberg live?", user_id="u1", mode=mode, limit=3)
        assert hits and hits[0].text == FACTS[1][0], (mode, hits)
        # The worker runs the statement with the search's settings (set_config's would stay on
        # the coordinator: the worker searched with ef_search 40 and no iterative scan).
        sent = " ".join(command for command, _ in log.commands())
        for setting in ("plan_cache_mode = force_custom_plan", "jit = off",
                        "enable_seqscan = off", "hnsw.iterative_scan = relaxed_order",
                        "hnsw.ef_search = 40"):
            assert f"SET LOCAL {setting}" in sent, (setting, sent[:300])
        one_round_on(log, node)
    hits = mem.search("a drink", user_id="u1", filters={"topic": "food"}, threshold=0.0)
    assert [h.text for h in hits] == [FACTS[0][0]]
    one_round_on(log, node)
    plan = mem.explain_search("green tea", user_id="u1", analyze=True)
    assert plan["Plan"]["Distributed Query"]["Job"]["Task Count"] == 1  # a router plan
    one_round_on(log, node)


def test_reads_and_writes_of_a_tenant_give_correct_results(
    logged: tuple[pgmem.Memory, RemoteLog], citus_dsn: str, citus_schema: str,
) -> None:
    mem, log = logged
    node = tenant_node(citus_dsn, citus_schema, "acme")
    page = mem.get_all(user_id="u1", limit=2)
    assert len(page) == 2 and page.next_cursor is not None
    rest = mem.get_all(user_id="u1", limit=10, cursor=page.next_cursor)
    assert len(rest) == 3
    one_round_on(log, node)
    first = page.items[0]
    assert mem.get(first.id).text == first.text
    one_round_on(log, node)
    # Each write runs on the tenant's worker alone, committed there without two-phase commit:
    # its data-modifying statement as the schema's function delegated to that worker.
    updated = mem.update(first.id, text="I like jasmine tea from Fuzhou")
    assert updated.text == "I like jasmine tea from Fuzhou"
    one_round_on(log, node)
    mem.update(first.id, metadata={"topic": "drinks"})
    one_round_on(log, node)
    assert [e.event for e in mem.history(first.id)] == ["ADD", "UPDATE", "UPDATE"]
    one_round_on(log, node)
    assert mem.search("jasmine", user_id="u1", limit=1)[0].id == first.id
    one_round_on(log, node)
    added = mem.add("Kenji Sato fixes old bicycles in Kyoto", user_id="u1")
    one_round_on(log, node)
    assert mem.add("Kenji Sato fixes old bicycles in Kyoto", user_id="u1").duplicate
    one_round_on(log, node)
    many = mem.add_many([{"text": "Ravi Menon sings in a choir", "user_id": "u2"},
                         {"text": "Ilse Brandt grows tomatoes", "user_id": "u2",
                          "id": str(uuid.uuid4())}])
    one_round_on(log, node)
    mem.delete(first.id)
    one_round_on(log, node)
    with pytest.raises(pgmem.NotFoundError):
        mem.get(first.id)
    assert mem.delete_all(user_id="u2") == len(many)
    one_round_on(log, node)
    assert mem.delete_all(user_id="u1") == 5
    one_round_on(log, node)
    assert len(mem.get_all(user_id="u1")) == 0
    assert [e.event for e in mem.history(added.id)] == ["ADD", "DELETE"]
    log.clear()
    # the other tenant's memory is untouched
    with psycopg.connect(citus_dsn) as conn:
        assert conn.execute(f"SELECT tenant, count(*) FROM {citus_schema}.memories"
                            " GROUP BY tenant").fetchall() == [("other", 1)]


# -- locks -----------------------------------------------------------------------------------

HOLD = 2.0  # seconds a transaction holds its locks


def held_while(first: Callable[[pgmem.Memory], object], second: Callable[[], object],
               dsn: str, schema: str, embedder: object, analyzer: object) -> float:
    """Run ``first`` in a transaction of a connection of its own that stays open HOLD seconds
    after it; meanwhile (once ``first`` returned) run ``second``. Returns how long ``second``
    took: about HOLD when ``first``'s locks held it up."""
    started = threading.Event()
    waited: list[float] = []

    def then() -> None:
        started.wait(30)
        t0 = time.monotonic()
        second()
        waited.append(time.monotonic() - t0)

    thread = threading.Thread(target=then)
    thread.start()
    with (psycopg.connect(dsn) as conn, conn.transaction(),
          pgmem.Memory(conn, embedder=embedder, nlp=analyzer, schema=schema,
                       tenant="acme") as mem):
        first(mem)
        started.set()
        time.sleep(HOLD)
    thread.join(60)
    assert waited, "the second call did not finish"
    return waited[0]


def test_adds_and_updates_of_one_tenants_entities_exclude_each_other(
    citus_memory: pgmem.Memory, citus_dsn: str, citus_schema: str,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    """Before: the add took the entity-name lock on the coordinator and the update on a worker,
    so an update waited 0.16 s for an add holding the lock 5 s."""
    mem = citus_memory
    kept = mem.add("Helga Norberg likes long walks", user_id="u1")
    gone = mem.add("Helga Norberg once lived in Oslo", user_id="u2")
    # an update waits for an add of the same entity...
    took = held_while(lambda m: m.add("Helga Norberg moved to Tbilisi", user_id="u3"),
                      lambda: mem.update(kept.id, text="Helga Norberg likes short walks"),
                      citus_dsn, citus_schema, embedder, analyzer)
    assert took >= HOLD * 0.8, took
    # ... a delete too, and an add waits for an update
    took = held_while(lambda m: m.add("Helga Norberg bought a bike", user_id="u4"),
                      lambda: mem.delete(gone.id), citus_dsn, citus_schema, embedder, analyzer)
    assert took >= HOLD * 0.8, took
    took = held_while(lambda m: m.update(kept.id, text="Helga Norberg likes the sea"),
                      lambda: mem.add("Helga Norberg visits Ostrava", user_id="u5"),
                      citus_dsn, citus_schema, embedder, analyzer)
    assert took >= HOLD * 0.8, took
    # another entity is not held up
    took = held_while(lambda m: m.add("Helga Norberg reads novels", user_id="u6"),
                      lambda: mem.add("Tomasz Wilk plays chess", user_id="u7"),
                      citus_dsn, citus_schema, embedder, analyzer)
    assert took < HOLD * 0.5, took
    with psycopg.connect(citus_dsn) as conn:
        assert conn.execute(f"SELECT count(*) FROM {citus_schema}.entities"
                            " WHERE name = 'helga norberg'").fetchone() == (1,)


def test_stats_sizes_the_shards(citus_memory: pgmem.Memory, citus_dsn: str,
                                citus_schema: str) -> None:
    """Before: 0 B, the size of the coordinator's empty tables."""
    citus_memory.add_many([t for t, _ in FACTS], user_id="u1")
    done = subprocess.run(
        [sys.executable, "-m", "pgmem.cli", "--dsn", citus_dsn, "--schema", citus_schema,
         "--tenant", "acme", "stats", "--json"],
        check=True, capture_output=True, text=True, timeout=120)
    stats = json.loads(done.stdout)
    sizes = {r["name"]: r for r in stats["relations"]}
    assert sizes["memories"]["size"] > 0
    assert sizes["memories"]["total_size"] > sizes["memories"]["size"]
    assert sizes["memories_embedding_idx"]["size"] > 0
    assert [(t["tenant"], t["memories"]) for t in stats["tenants"]] == [("acme", 5)]


def test_sixteen_threads_of_mixed_writes_and_searches(
    citus_dsn: str, citus_schema: str, analyzer: pgmem.TextAnalyzer,
) -> None:
    """tests/test_reliability_concurrency.py's load (adds, batches, searches in scope, add-update-
    delete churn over shared entities), 16 threads on the cluster: no error, no duplicate
    entity, every acknowledged add there and every deleted one gone."""
    from reliability_support import HashEmbedder

    from tests.test_reliability_concurrency import Outcome, worker

    threads_n = 16
    outcome, stop, start = Outcome(), threading.Event(), threading.Barrier(threads_n)
    with pgmem.Memory(citus_dsn, embedder=HashEmbedder(), nlp=analyzer, schema=citus_schema,
                      tenant="acme", pool_max_size=8) as mem:
        threads = [threading.Thread(target=worker, args=(i, mem, outcome, stop, start),
                                    daemon=True) for i in range(threads_n)]
        for thread in threads:
            thread.start()
        time.sleep(4.0)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        assert not [t for t in threads if t.is_alive()], "threads hang: a deadlock?"
    assert outcome.errors == [], outcome.errors
    assert len(outcome.added) > 10 and outcome.searches > 0
    with psycopg.connect(citus_dsn) as conn:
        assert conn.execute(
            f"SELECT tenant, name FROM {citus_schema}.entities"
            " GROUP BY tenant, name HAVING count(*) > 1").fetchall() == []
        stored = {r[0]: (r[1], r[2]) for r in conn.execute(
            f"SELECT id, user_id, text FROM {citus_schema}.memories")}
        unlinked = conn.execute(
            f"SELECT count(*) FROM {citus_schema}.entities e WHERE NOT EXISTS (SELECT FROM"
            f" {citus_schema}.memory_entities me WHERE me.tenant = e.tenant"
            " AND me.entity_id = e.id)").fetchone()
    assert {k: stored.get(k) for k in outcome.added} == outcome.added
    assert not outcome.deleted & set(stored)
    assert unlinked == (0,)


def vector_types(dsn: str, schema: str) -> set[tuple[str, str]]:
    """(table, type) of the embeddings stored in ``schema``'s memories and entities."""
    with psycopg.connect(dsn) as conn:
        return {(str(t), str(k)) for t, k in conn.execute(
            f"SELECT 'memories', pg_typeof(embedding)::text FROM {schema}.memories UNION"
            f" SELECT 'entities', pg_typeof(embedding)::text FROM {schema}.entities")}


def test_a_halfvec_schema_works_on_citus(
    citus_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: every add failed with "not enough default arguments". Citus casts the rows an
    INSERT ... SELECT brings to the target columns' types by calling the cast's function with
    the value alone, and pgvector's vector-to-halfvec cast function takes three arguments. On
    Citus pgmem now writes vectors with multi-row INSERT ... VALUES (pgmem.routed), whose
    values PostgreSQL casts itself."""
    from pgmem import builders

    schema = new_schema()
    try:
        pgmem.migrate(citus_dsn, schema=schema, storage="halfvec")
        distribute(citus_dsn, schema=schema)
        with pgmem.Memory(citus_dsn, embedder=embedder, nlp=analyzer, schema=schema,
                          tenant="acme") as mem:
            mem.add_many([{"text": t, "user_id": "u1", "metadata": m} for t, m in FACTS])
            added = mem.add("Helga Norberg keeps bees", user_id="u1")
            mem.update(added.id, text="Tomasz Wilk keeps bees in Brno")  # new entities
            for large in (False, True):
                monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 0 if large else 5_000)
                hits = mem.search("Who keeps bees?", user_id="u1", limit=1)
                assert [h.id for h in hits] == [added.id], large
            mem.delete(added.id)
            assert len(mem.get_all(user_id="u1")) == len(FACTS)
        assert vector_types(citus_dsn, schema) == {("memories", "halfvec"),
                                                   ("entities", "halfvec")}
    finally:
        drop_schema(citus_dsn, schema)


def test_reembed_to_halfvec_on_citus(
    citus_memory: pgmem.Memory, citus_dsn: str, citus_schema: str,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    """A re-embedding to a model of 3,072 dimensions (halfvec storage) runs on a distributed
    schema, and adds and searches work after it (it was refused while halfvec adds failed)."""
    from tests.model_support import ProjectedEmbedder

    citus_memory.add_many(["I like green tea from Kyoto", "Helga Norberg moved to Tbilisi"],
                          user_id="u1")
    wide = ProjectedEmbedder(embedder, 3072, "minilm-projected-3072")
    report = pgmem.reembed(citus_dsn, wide, schema=citus_schema)
    assert (report.new.dim, report.new.storage, report.memories) == (3072, "halfvec", 2)
    with pgmem.Memory(citus_dsn, embedder=wide, nlp=analyzer, schema=citus_schema,
                      tenant="acme") as mem:
        mem.add("Tomasz Wilk plays chess in Ostrava", user_id="u1")
        assert mem.search("green tea", user_id="u1")[0].text == "I like green tea from Kyoto"
        assert mem.search("Who plays chess?", user_id="u1")[0].text.startswith("Tomasz")
    assert vector_types(citus_dsn, citus_schema) == {("memories", "halfvec"),
                                                     ("entities", "halfvec")}


def test_a_busy_tenant_moves_to_another_worker(
    citus_dsn: str, citus_schema: str, analyzer: pgmem.TextAnalyzer,
) -> None:
    """citus_move_shard_placement (online, Citus' default transfer mode) of the tenant's shard
    group while 8 clients search and add to it: every call succeeds, nothing is lost, and the
    tenant lives on the other worker afterwards."""
    from reliability_support import HashEmbedder

    errors: list[BaseException] = []
    added: list[object] = []
    searches = [0]
    stop = threading.Event()
    with pgmem.Memory(citus_dsn, embedder=HashEmbedder(), nlp=analyzer, schema=citus_schema,
                      tenant="busy", pool_max_size=8) as mem:
        mem.add_many([f"Helga Norberg wrote note {i}" for i in range(50)], user_id="u")

        def client(k: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    if k % 2:
                        added.append(mem.add(f"client {k} note {n} from Tbilisi", user_id="u").id)
                    else:
                        assert mem.search("Helga in Tbilisi", user_id="u", limit=5)
                        searches[0] += 1
                except BaseException as exc:  # noqa: BLE001 - every error is the test's business
                    errors.append(exc)

        clients = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(8)]
        for thread in clients:
            thread.start()
        time.sleep(1.0)
        before = tenant_node(citus_dsn, citus_schema, "busy")
        with psycopg.connect(citus_dsn, autocommit=True) as conn:
            shard, host, port = conn.execute(
                "SELECT shardid, nodename, nodeport FROM citus_shards"
                " WHERE shardid = get_shard_id_for_distribution_column(%s::regclass, 'busy')",
                (f"{citus_schema}.memories",)).fetchone() or (None, None, None)
            target = conn.execute(
                "SELECT nodeport FROM pg_dist_node WHERE noderole = 'primary'"
                " AND shouldhaveshards AND nodeport <> %s ORDER BY nodeid LIMIT 1",
                (port,)).fetchone()
            assert target is not None
            conn.execute("SELECT citus_move_shard_placement(%s, %s, %s, %s, %s)",
                         (shard, host, port, host, target[0]))
        time.sleep(1.0)
        stop.set()
        for thread in clients:
            thread.join(timeout=60)
        after = tenant_node(citus_dsn, citus_schema, "busy")
        assert after != before
        assert errors == [], errors[:3]
        assert len(added) > 0 and searches[0] > 0
        stored = {m.id for m in mem.get_all(user_id="u", limit=1000)}
        assert set(added) <= stored and len(stored) == 50 + len(added)
