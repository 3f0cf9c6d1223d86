"""Failures: a write that fails half-way leaves nothing behind; the server killing pgmem's
connections, a statement timeout and an unreachable or unprepared server surface as specific
PgmemErrors (never psycopg's), and pgmem recovers once the fault is gone."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from reliability_support import (
    FailsOnEntities,
    HashEmbedder,
    counts,
    duplicate_entities,
    orphans,
    rows,
)

import pgmem
from pgmem.errors import ConnectError, ConnectionLostError, QueryTimeoutError

if TYPE_CHECKING:
    from typing_extensions import Self

CLEAN = {"links": 0, "memories_without_add": 0, "unlinked_entities": 0}


@pytest.fixture
def fast(db_dsn: str, analyzer: pgmem.TextAnalyzer) -> Iterator[pgmem.Memory]:
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        yield mem


def execute(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement.encode())


# -- atomicity -------------------------------------------------------------------------------


def test_an_embedder_failing_on_the_entities_writes_nothing(
    db_dsn: str, analyzer: pgmem.TextAnalyzer, fast: pgmem.Memory
) -> None:
    kept = fast.add("Maria lives in Lisbon.", user_id="u")
    before = counts(db_dsn)
    with pgmem.Memory(db_dsn, embedder=FailsOnEntities(1), nlp=analyzer) as mem:
        with pytest.raises(pgmem.EmbeddingError, match="entity embedding failed"):
            mem.add("John met Maria in Paris.", user_id="u")
        with pytest.raises(pgmem.EmbeddingError, match="entity embedding failed"):
            mem.update(kept.id, text="Maria moved to Porto.")
        assert mem.add("no names in this one", user_id="u")  # the text alone embeds fine
    with pgmem.Memory(db_dsn, embedder=FailsOnEntities(3), nlp=analyzer) as mem, \
            pytest.raises(pgmem.EmbeddingError, match="entity embedding failed"):
        mem.add_many(["John met Maria.", "a plain note", "Paris in June."], user_id="u")
    after = counts(db_dsn)
    assert after == {**before, "memories": before["memories"] + 1,
                     "history": before["history"] + 1}
    assert fast.get(kept.id).text == "Maria lives in Lisbon."
    assert orphans(db_dsn) == CLEAN


FAIL_ON_LINK = """
CREATE FUNCTION pgmem.fail_on_link() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT name FROM pgmem.entities WHERE tenant = NEW.tenant AND id = NEW.entity_id)
       = 'zanzibar' THEN
        RAISE EXCEPTION 'injected failure linking %', NEW.memory_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fail_on_link BEFORE INSERT ON pgmem.memory_entities
    FOR EACH ROW EXECUTE FUNCTION pgmem.fail_on_link();
"""

FAIL_ON_EVENT = """
CREATE FUNCTION pgmem.fail_on_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event = ANY (string_to_array(current_setting('pgmem_test.fail_events', true), ','))
    THEN
        RAISE EXCEPTION 'injected failure writing the % event', NEW.event;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fail_on_event BEFORE INSERT ON pgmem.history
    FOR EACH ROW EXECUTE FUNCTION pgmem.fail_on_event();
"""


def test_a_failing_link_insert_leaves_nothing_behind(db_dsn: str, fast: pgmem.Memory) -> None:
    """The trigger fails after the memory row, its entities and its other links are written
    in the statement: add, add_many and update must leave no trace."""
    execute(db_dsn, FAIL_ON_LINK)
    kept = fast.add("John sailed from Mombasa.", user_id="u")
    before = counts(db_dsn)
    with pytest.raises(pgmem.DatabaseError, match="injected failure linking"):
        fast.add("John sailed to Zanzibar with Maria.", user_id="u")
    assert counts(db_dsn) == before
    with pytest.raises(pgmem.DatabaseError, match="injected failure linking"):
        fast.add_many(["Maria flew to Lima.", "Zanzibar has spice farms.", "Kim runs."],
                      user_id="u")
    assert counts(db_dsn) == before
    with pytest.raises(pgmem.DatabaseError, match="injected failure linking"):
        fast.update(kept.id, text="John sailed from Zanzibar.")
    assert counts(db_dsn) == before
    assert fast.get(kept.id).text == "John sailed from Mombasa."
    assert [e.event for e in fast.history(kept.id)] == ["ADD"]
    assert {n for (n,) in rows(db_dsn, "SELECT name FROM pgmem.entities")} == {"john", "mombasa"}

    # add_many: the batches before the failing one stay, whole; the failing one leaves nothing
    progress: list[int] = []
    with pytest.raises(pgmem.DatabaseError):
        fast.add_many(
            ["Ana met Luis in Quito.", "Luis drove to Cusco.",
             "John sailed to Zanzibar with Maria.", "Ana and Luis in Lima."],
            user_id="batch", batch_size=2, on_progress=lambda done, total: progress.append(done),
        )
    assert progress == [2]
    assert sorted(m.text for m in fast.get_all(user_id="batch").items) == [
        "Ana met Luis in Quito.", "Luis drove to Cusco."
    ]
    assert "zanzibar" not in {n for (n,) in rows(db_dsn, "SELECT name FROM pgmem.entities")}
    assert orphans(db_dsn) == CLEAN
    assert duplicate_entities(db_dsn) == []


@pytest.mark.not_behind_pooler(
    "ALTER DATABASE SET reaches new server connections only, and the pooler keeps its own "
    "open"
)
def test_a_failing_history_insert_leaves_nothing_behind(db_dsn: str, fast: pgmem.Memory) -> None:
    """The history event is the last thing written: failing there undoes the memory, its
    entities and its links (add), the new text and links (update), the deletion (delete)."""
    execute(db_dsn, FAIL_ON_EVENT)
    kept = fast.add("Priya works at Globex in Mumbai.", user_id="u")
    db = conninfo_to_dict(db_dsn)["dbname"]
    execute(db_dsn, f"ALTER DATABASE {db} SET pgmem_test.fail_events = 'ADD,UPDATE,DELETE'")
    before = counts(db_dsn)
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=fast.analyzer) as mem:
        for call in (
            lambda: mem.add("Chen opened a bakery in Taipei.", user_id="u"),
            lambda: mem.add_many(["Chen in Taipei.", "Olu in Lagos."], user_id="u"),
            lambda: mem.update(kept.id, text="Priya moved to Initech in Pune."),
            lambda: mem.update(kept.id, metadata={"moved": True}),
            lambda: mem.delete(kept.id),
            lambda: mem.delete_all(user_id="u"),
        ):
            with pytest.raises(pgmem.DatabaseError, match="injected failure"):
                call()
            assert counts(db_dsn) == before
        record = mem.get(kept.id)
        assert (record.text, record.metadata) == ("Priya works at Globex in Mumbai.", {})
    assert {n for (n,) in rows(db_dsn, "SELECT name FROM pgmem.entities")} == {
        "priya", "globex", "mumbai"
    }
    assert orphans(db_dsn) == CLEAN


# -- the server terminating connections ------------------------------------------------------


def terminate_backends(dsn: str) -> int:
    """Kill every other session on the database (pgmem's pooled connections)."""
    (row,) = rows(
        dsn,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    return int(row[0])


@pytest.mark.not_behind_pooler(
    "kills pgmem's server sessions, which a pooler replaces behind its clients' "
    "backs"
)
def test_terminated_pool_connections_are_replaced(db_dsn: str, fast: pgmem.Memory) -> None:
    fast.add_many([f"note {i} about Oslo" for i in range(5)], user_id="u")
    for round_ in range(3):
        assert terminate_backends(db_dsn) >= 1
        time.sleep(0.05)
        assert len(fast.search("Oslo", user_id="u")) == 5 + round_
        assert fast.add(f"after kill {round_} in Oslo", user_id="u")
        assert len(fast.get_all(user_id="u").items) == 6 + round_


@pytest.mark.not_behind_pooler(
    "kills pgmem's server sessions, which a pooler replaces behind its clients' "
    "backs"
)
def test_killing_connections_mid_run_raises_connection_lost_then_recovers(
    db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    acknowledged: list[uuid.UUID] = []
    lock = threading.Lock()

    def loop(mem: pgmem.Memory, k: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if k % 2:
                    mem.search("John in Oslo", user_id="u", limit=5)
                    mem.get_all(user_id="u", limit=5)
                else:
                    ids = [r.id for r in mem.add_many(
                        [f"John {k}.{n}.{j} flew to Oslo." for j in range(3)], user_id="u")]
                    with lock:
                        acknowledged.extend(ids)
            except BaseException as exc:  # noqa: BLE001
                with lock:
                    errors.append(exc)

    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer, pool_max_size=4) as mem:
        mem.add("John lives in Oslo.", user_id="u")
        threads = [threading.Thread(target=loop, args=(mem, k), daemon=True) for k in range(4)]
        for thread in threads:
            thread.start()
        killed = 0
        for _ in range(10):
            time.sleep(0.15)
            killed += terminate_backends(db_dsn)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        assert killed > 0
        assert not any(t.is_alive() for t in threads)
        # whatever failed during the kills failed as a ConnectionLostError
        assert [e for e in errors if type(e) is not ConnectionLostError] == []
        # and now everything works again, with nothing half-written
        for _ in range(5):
            assert mem.search("John in Oslo", user_id="u", limit=5)
            assert mem.add(f"John is back {uuid.uuid4()}", user_id="u")
    stored = {i for (i,) in rows(db_dsn, "SELECT id FROM pgmem.memories")}
    assert set(acknowledged) <= stored
    assert orphans(db_dsn) == CLEAN
    assert duplicate_entities(db_dsn) == []


# -- statement timeouts ------------------------------------------------------------------------


class TableLock:
    """Holds ACCESS EXCLUSIVE on a table (pgmem.memories by default) in a transaction of its
    own: every statement touching the table waits, so a statement timeout fires reliably."""

    def __init__(self, dsn: str, table: str = "pgmem.memories") -> None:
        self.conn = psycopg.connect(dsn)
        self.table = table

    def __enter__(self) -> Self:
        self.conn.execute(f"LOCK TABLE {self.table} IN ACCESS EXCLUSIVE MODE".encode())
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.rollback()
        self.conn.close()


TIMED_CALLS: dict[str, Callable[[pgmem.Memory, uuid.UUID], Any]] = {
    "search": lambda m, i: m.search("Oslo", user_id="u"),
    "add": lambda m, i: m.add("Oslo in winter", user_id="u"),
    "add_many": lambda m, i: m.add_many(["Oslo one", "Oslo two"], user_id="u"),
    "get": lambda m, i: m.get(i),
    "get_all": lambda m, i: m.get_all(user_id="u"),
    "update": lambda m, i: m.update(i, text="Bergen"),
    "delete": lambda m, i: m.delete(i),
}


@pytest.mark.not_behind_pooler(
    "ALTER DATABASE SET reaches new server connections only, and the pooler keeps its own "
    "open"
)
def test_a_database_statement_timeout_raises_query_timeout(
    db_dsn: str, analyzer: pgmem.TextAnalyzer, fast: pgmem.Memory
) -> None:
    kept = fast.add("Oslo in summer", user_id="u")
    db = conninfo_to_dict(db_dsn)["dbname"]
    execute(db_dsn, f"ALTER DATABASE {db} SET statement_timeout = '150ms'")
    before = counts(db_dsn)
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        mem.get(kept.id)  # connected, with the setting
        with TableLock(db_dsn):
            for call in TIMED_CALLS.values():
                with pytest.raises(QueryTimeoutError, match="statement timeout"):
                    call(mem, kept.id)
        assert counts(db_dsn) == before
        assert [h.id for h in mem.search("Oslo", user_id="u")] == [kept.id]  # works again
    execute(db_dsn, f"ALTER DATABASE {db} RESET statement_timeout")


@pytest.mark.not_behind_pooler(
    "ALTER DATABASE SET reaches new server connections only, and the pooler keeps its own "
    "open"
)
def test_a_tiny_statement_timeout_raises_query_timeout(
    db_dsn: str, analyzer: pgmem.TextAnalyzer, fast: pgmem.Memory
) -> None:
    fast.add_many([f"Oslo note {i}" for i in range(200)], user_id="u")
    db = conninfo_to_dict(db_dsn)["dbname"]
    execute(db_dsn, f"ALTER DATABASE {db} SET statement_timeout = '1ms'")
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        raised = 0
        for _ in range(5):  # a 1 ms budget: nearly every call runs out of it
            try:
                mem.search("Oslo note", user_id="u", limit=50)
            except QueryTimeoutError:
                raised += 1
        assert raised >= 1
    execute(db_dsn, f"ALTER DATABASE {db} RESET statement_timeout")


@pytest.mark.not_behind_pooler(
    "ALTER DATABASE SET reaches new server connections only, and the pooler keeps its own "
    "open"
)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_databases_statement_timeout_limits_calls_not_connecting(
    db_dsn: str, analyzer: pgmem.TextAnalyzer, fast: pgmem.Memory, kind: str
) -> None:
    """Setting up a pool connection (pgvector's types, the capabilities query) is pgmem's own
    work: with the catalog it reads locked past the database's statement_timeout, connecting
    waits for the lock instead of failing; the calls themselves keep the timeout."""
    kept = fast.add("Oslo by the fjord", user_id="u")
    db = conninfo_to_dict(db_dsn)["dbname"]
    execute(db_dsn, f"ALTER DATABASE {db} SET statement_timeout = '200ms'")
    try:
        with TableLock(db_dsn, "pg_catalog.pg_extension") as catalog:
            threading.Timer(1.0, catalog.conn.rollback).start()
            if kind == "sync":
                with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
                    assert [h.id for h in mem.search("Oslo", user_id="u")] == [kept.id]
                    with TableLock(db_dsn), pytest.raises(QueryTimeoutError):
                        mem.get_all(user_id="u")
            else:
                async def calls() -> None:
                    async with pgmem.AsyncMemory(
                        db_dsn, embedder=HashEmbedder(), nlp=analyzer
                    ) as mem:
                        assert [h.id for h in await mem.search("Oslo", user_id="u")] == [kept.id]
                        with TableLock(db_dsn), pytest.raises(QueryTimeoutError):
                            await mem.get_all(user_id="u")
                asyncio.run(calls())
    finally:
        execute(db_dsn, f"ALTER DATABASE {db} RESET statement_timeout")


@pytest.mark.not_behind_pooler(
    "a session SET on an autocommit connection stays on one server connection of a "
    "transaction pooler"
)
def test_timeouts_on_a_host_connection(db_dsn: str, analyzer: pgmem.TextAnalyzer) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as host:
        mem = pgmem.Memory(host, embedder=HashEmbedder(), nlp=analyzer)
        kept = mem.add("Oslo by the fjord", user_id="u")
        host.execute("SET statement_timeout = '150ms'")
        with TableLock(db_dsn):
            with pytest.raises(QueryTimeoutError):
                mem.search("Oslo", user_id="u")
            host.execute("SET statement_timeout = 0; SET lock_timeout = '100ms'")
            with pytest.raises(QueryTimeoutError, match="lock"):
                mem.add("Oslo in the rain", user_id="u")
        host.execute("RESET lock_timeout")
        assert host.execute("SELECT 1").fetchone() == (1,)  # the caller's connection is fine
        assert [h.id for h in mem.search("Oslo", user_id="u")] == [kept.id]


def test_a_timeout_inside_the_callers_transaction_rolls_back_only_pgmems_work(
    db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    with psycopg.connect(db_dsn) as host:
        mem = pgmem.Memory(host, embedder=HashEmbedder(), nlp=analyzer)
        with host.transaction():
            host.execute("CREATE TABLE app_orders (id int)")
            host.execute("INSERT INTO app_orders VALUES (1)")
            host.execute("SET LOCAL lock_timeout = '100ms'")
            with TableLock(db_dsn), pytest.raises(QueryTimeoutError):
                mem.add("an order note", user_id="u")
            host.execute("INSERT INTO app_orders VALUES (2)")  # the transaction is usable
        assert host.execute("SELECT count(*) FROM app_orders").fetchone() == (2,)
    assert counts(db_dsn)["memories"] == 0


# -- unreachable and unprepared servers ------------------------------------------------------


def test_an_unreachable_server_fails_fast_naming_the_problem(server_dsn: str) -> None:
    dead = make_conninfo(server_dsn, host="127.0.0.1", port="1")
    mem = pgmem.Memory(dead, embedder=HashEmbedder(), nlp="blank", connect_timeout=3)
    for _ in range(2):  # and again: no "pool cannot be reused" the second time
        started = time.monotonic()
        with pytest.raises(ConnectError) as info:
            mem.search("anything", user_id="u")
        assert time.monotonic() - started < 3 + 2  # within connect_timeout, not after retries
        assert "port 1" in str(info.value) and "refused" in str(info.value).lower()
    mem.close()


def test_a_server_that_does_not_answer_times_out_in_connect_timeout(server_dsn: str) -> None:
    # A TCP listener that never speaks the protocol: the connect attempt hangs until timeout.
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        dsn = make_conninfo(server_dsn, host="127.0.0.1", port=str(port))
        mem = pgmem.Memory(dsn, embedder=HashEmbedder(), nlp="blank", connect_timeout=2)
        started = time.monotonic()
        with pytest.raises(ConnectError, match="timeout|timed out"):
            mem.get_all(user_id="u")
        assert time.monotonic() - started < 8
    finally:
        listener.close()


def test_an_unmigrated_database_says_so_at_once_and_recovers(
    empty_db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    # "At once": not after the pool has waited out its timeout for a usable connection.
    mem = pgmem.Memory(empty_db_dsn, embedder=HashEmbedder(), nlp=analyzer, pool_timeout=10)
    started = time.monotonic()
    with pytest.raises(pgmem.SchemaError, match="migrate"):
        mem.get_all(user_id="u")
    assert time.monotonic() - started < 10
    pgmem.migrate(empty_db_dsn)
    assert mem.add("now it works", user_id="u").text == "now it works"
    mem.close()
    assert mem.get_all(user_id="u").items[0].text == "now it works"  # reopens after close
    mem.close()


def test_a_malformed_dsn_is_a_configuration_error() -> None:
    mem = pgmem.Memory("host=", embedder=HashEmbedder(), nlp="blank")
    with pytest.raises(pgmem.PgmemError):
        mem.get_all(user_id="u")
    mem = pgmem.Memory("not a dsn at all", embedder=HashEmbedder(), nlp="blank")
    with pytest.raises(pgmem.ConfigurationError, match="connection string"):
        mem.get_all(user_id="u")
