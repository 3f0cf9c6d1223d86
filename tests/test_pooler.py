"""pgmem behind PgBouncer in transaction mode (Debian's 1.18, which keeps no protocol prepared
statements): each transaction runs on whichever server connection is free, so nothing pgmem
does may rely on a server session -- prepared statements, session settings, session locks.

Each test starts a PgBouncer of its own (tests/pooler_support.py) with few server
connections, so that pgmem's client connections share them. Before ``pooler="transaction"``,
8 threads of add + search failed within seconds with ``prepared statement "_pg3_4" does not
exist`` and ``prepared statement "_pg3_0" already exists``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import pgmem
from pgmem.errors import LockTimeoutError
from tests.pooler_support import pgbouncer
from tests.reliability_support import HashEmbedder, counts

pytestmark = pytest.mark.not_behind_pooler(
    "starts a PgBouncer of its own in front of the test server"
)

THREADS = 8
ROUNDS = 12


def _text(worker: int, n: int) -> str:
    return f"Traveller {worker} took the night train to city number {n}"


def test_eight_threads_add_and_search_through_a_transaction_pooler(
    db_dsn: str, server_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    errors: list[BaseException] = []
    with pgbouncer(server_dsn, "transaction", pool_size=3) as bouncer, pgmem.Memory(
        bouncer.dsn(db_dsn), embedder=HashEmbedder(), nlp=analyzer, pooler="transaction"
    ) as mem:

        def work(worker: int) -> None:
            try:
                for n in range(ROUNDS):
                    added = mem.add(_text(worker, n), user_id=f"t{worker}")
                    hits = mem.search(f"city number {n}", user_id=f"t{worker}", limit=ROUNDS)
                    assert added.id in {hit.id for hit in hits}
                    assert {hit.user_id for hit in hits} == {f"t{worker}"}
            except BaseException as exc:  # noqa: BLE001 - reported below, with the pooler's log
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [], bouncer.log()[-2000:]
        assert len(mem.get_all(user_id="t3", limit=100).items) == ROUNDS
    assert counts(db_dsn)["memories"] == THREADS * ROUNDS


def test_concurrent_async_calls_through_a_transaction_pooler(
    db_dsn: str, server_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    async def run(dsn: str) -> None:
        async with pgmem.AsyncMemory(
            dsn, embedder=HashEmbedder(), nlp=analyzer, pooler="transaction"
        ) as mem:

            async def work(worker: int) -> None:
                for n in range(ROUNDS // 2):
                    added = await mem.add(_text(worker, n), user_id=f"a{worker}")
                    hits = await mem.search(f"city number {n}", user_id=f"a{worker}")
                    assert added.id in {hit.id for hit in hits}
                    await mem.update(added.id, metadata={"seen": n})
                    assert [e.event for e in await mem.history(added.id)] == ["ADD", "UPDATE"]

            await asyncio.gather(*(work(k) for k in range(THREADS)))

    with pgbouncer(server_dsn, "transaction", pool_size=3) as bouncer:
        asyncio.run(run(bouncer.dsn(db_dsn)))
    assert counts(db_dsn)["memories"] == THREADS * (ROUNDS // 2)


SESSION_STATE = """
SELECT pg_backend_pid() AS pid,
       (SELECT count(*) FROM pg_prepared_statements) AS prepared,
       current_setting('lock_timeout') AS lock_timeout,
       current_setting('enable_seqscan') AS enable_seqscan,
       current_setting('plan_cache_mode') AS plan_cache_mode,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                                       AND pid = pg_backend_pid()) AS advisory_locks,
       pg_my_temp_schema() <> 0 AS temp_tables,
       (SELECT count(*) FROM pg_listening_channels()) AS listening
"""


def _session_state(dsn: str) -> dict[str, Any]:
    """What a server session holds, read through the pooler (with one server connection, the
    one pgmem's calls ran on)."""
    with psycopg.connect(dsn, prepare_threshold=None, autocommit=True) as conn:
        cursor = conn.execute(SESSION_STATE)
        assert cursor.description is not None
        row = cursor.fetchone()
        assert row is not None
        return dict(zip([column.name for column in cursor.description], row, strict=True))


def _every_call(mem: pgmem.Memory) -> None:
    record = mem.add("Priya works at Globex in Mumbai", user_id="u")
    mem.add_many(["Chen opened a bakery in Taipei", "Olu sings in Lagos"], user_id="u")
    assert mem.search("Where does Priya work?", user_id="u")
    mem.explain_search("Globex", user_id="u")
    mem.update(record.id, text="Priya moved to Initech in Pune")
    mem.get(record.id)
    mem.get_all(user_id="u")
    mem.history(record.id)
    mem.delete(record.id)
    mem.delete_all(user_id="u")


@pytest.mark.parametrize(
    ("pooler", "left"),
    [("transaction", {}), ("none", {"prepared": 1, "lock_timeout": "5s"})],
    ids=["pooler=transaction", "pooler=none (the check sees what is left)"],
)
def test_nothing_is_left_on_the_server_connection(
    db_dsn: str, server_dsn: str, analyzer: pgmem.TextAnalyzer, pooler: str,
    left: dict[str, Any],
) -> None:
    """With one server connection, every call of a Memory (one thread: its pool keeps one
    connection) runs on the session a later client gets. With ``pooler="none"`` pgmem keeps
    its search prepared and its lock timeout in that session, which the check sees."""
    with pgbouncer(server_dsn, "transaction", pool_size=1) as bouncer:
        pooled = bouncer.dsn(db_dsn)
        before = _session_state(pooled)
        with pgmem.Memory(pooled, embedder=HashEmbedder(), nlp=analyzer, pooler=pooler) as mem:
            _every_call(mem)
        after = _session_state(pooled)
    assert after["pid"] == before["pid"], "the pooler changed its server connection"
    changed = {key: value for key, value in after.items() if before[key] != value}
    if "prepared" in changed:
        changed["prepared"] = min(changed["prepared"], 1)
    assert changed == left


LOCKED_CALLS: dict[str, Callable[[pgmem.Memory, Any], Any]] = {
    "search": lambda m, i: m.search("Oslo", user_id="u"),
    "add": lambda m, i: m.add("Oslo in winter", user_id="u"),
    "get_all": lambda m, i: m.get_all(user_id="u"),
    "update": lambda m, i: m.update(i, text="Bergen"),
    "delete": lambda m, i: m.delete(i),
}


def test_the_lock_timeout_holds_in_each_transaction_behind_the_pooler(
    db_dsn: str, server_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    """No session setting there: pgmem sets its lock timeout in each of its transactions."""
    with pgbouncer(server_dsn, "transaction", pool_size=2) as bouncer, pgmem.Memory(
        bouncer.dsn(db_dsn), embedder=HashEmbedder(), nlp=analyzer, pooler="transaction",
        lock_timeout=0.2,
    ) as mem:
        kept = mem.add("Oslo by the fjord", user_id="u")
        with psycopg.connect(db_dsn) as holder:
            holder.execute("LOCK TABLE pgmem.memories IN ACCESS EXCLUSIVE MODE")
            for name, call in LOCKED_CALLS.items():
                with pytest.raises(LockTimeoutError):
                    call(mem, kept.id)
                assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS, name
            holder.rollback()
        assert [hit.id for hit in mem.search("Oslo", user_id="u")] == [kept.id]


def test_the_pooler_dsn_reaches_the_same_database(db_dsn: str, server_dsn: str) -> None:
    with pgbouncer(server_dsn, "session") as bouncer, psycopg.connect(
        bouncer.dsn(db_dsn)
    ) as conn:
        row = conn.execute("SELECT current_database(), inet_server_port()").fetchone()
    server_port = int(conninfo_to_dict(server_dsn).get("port") or 5432)
    assert row == (conninfo_to_dict(db_dsn)["dbname"], server_port)


def test_reembed_refuses_a_transaction_pooler(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reembed's session lock would stay on one server connection of the pooler's, for its
    later clients: it needs a direct connection."""
    monkeypatch.setenv("PGMEM_POOLER", "transaction")
    for call in (lambda: pgmem.reembed(db_dsn, HashEmbedder()),
                 lambda: pgmem.abort_reembed(db_dsn)):
        with pytest.raises(pgmem.ConfigurationError, match="direct connection"):
            call()
    with psycopg.connect(db_dsn) as conn:  # and nothing was started
        row = conn.execute("SELECT count(*) FROM pgmem.embedding_models").fetchone()
    assert row == (1,)
