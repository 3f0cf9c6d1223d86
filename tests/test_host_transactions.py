"""Memory writes inside the caller's transaction, on real PostgreSQL: a psycopg Connection, a
SQLAlchemy Connection or Session -- rolled back, nothing is left; committed, everything is; an
app's own row and a memory commit or roll back together. A SQLAlchemy Engine lends a connection
per call, which commits its own work. Isolation levels, failed transactions, and what pgmem must
never close."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import pgmem

TABLES = ("memories", "entities", "memory_entities", "history")
NOTHING = dict.fromkeys(TABLES, 0)
# What write_some leaves: 3 memories (one updated, Ottawa -> Halifax), their entities (caroline,
# halifax, jon, paris, gina, berlin) and links, 3 ADD and 1 UPDATE events.
WRITTEN = {"memories": 3, "entities": 6, "memory_entities": 6, "history": 4}


def counts(dsn: str) -> dict[str, int]:
    """Rows per pgmem table, as another session sees them."""
    with psycopg.connect(dsn) as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM pgmem.{t}").fetchone()[0]  # type: ignore[index]
            for t in TABLES
        }


def write_some(mem: pgmem.Memory) -> pgmem.AddResult:
    """Every kind of write: add, add_many, update, and a delete that fails (NotFoundError) without
    spoiling the caller's transaction."""
    rec = mem.add("Caroline moved to Ottawa", user_id="u1")
    mem.add_many(["Jon went to Paris", "Gina sings in Berlin"], user_id="u1")
    mem.update(rec.id, text="Caroline moved to Halifax")
    with pytest.raises(pgmem.NotFoundError):
        mem.delete("00000000-0000-0000-0000-000000000000")
    assert len(mem.get_all(user_id="u1").items) == 3
    return rec


@pytest.fixture
def engine(db_dsn: str) -> Iterator[sa.Engine]:
    eng = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_dsn))
    yield eng
    eng.dispose()


@pytest.fixture
def new_memory(
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> Callable[[Any], pgmem.Memory]:
    return lambda db: pgmem.Memory(db, embedder=embedder, nlp=analyzer)


# Each host: a context manager that yields (what Memory gets, end the transaction(commit: bool)).
Host = Callable[[str, sa.Engine], Any]


@contextlib.contextmanager
def psycopg_implicit(dsn: str, engine: sa.Engine) -> Iterator[tuple[Any, Callable[[bool], None]]]:
    """A psycopg connection outside autocommit whose transaction has not begun."""
    with psycopg.connect(dsn) as conn:
        yield conn, lambda commit: conn.commit() if commit else conn.rollback()
        assert not conn.closed


@contextlib.contextmanager
def psycopg_block(dsn: str, engine: sa.Engine) -> Iterator[tuple[Any, Callable[[bool], None]]]:
    """An autocommit psycopg connection inside a ``conn.transaction()`` block."""

    class Rollback(Exception):
        pass

    with psycopg.connect(dsn, autocommit=True) as conn:
        outcome: list[bool] = []
        with contextlib.suppress(Rollback), conn.transaction():
            yield conn, outcome.append
            if not outcome[0]:
                raise Rollback
        assert not conn.closed


@contextlib.contextmanager
def sqlalchemy_connection(
    dsn: str, engine: sa.Engine
) -> Iterator[tuple[Any, Callable[[bool], None]]]:
    """A SQLAlchemy Connection, not begun (commit as you go)."""
    with engine.connect() as conn:
        assert not conn.in_transaction()
        yield conn, lambda commit: conn.commit() if commit else conn.rollback()
        assert not conn.closed


@contextlib.contextmanager
def sqlalchemy_begun(dsn: str, engine: sa.Engine) -> Iterator[tuple[Any, Callable[[bool], None]]]:
    """A SQLAlchemy Connection inside ``engine.connect()`` + ``begin()``, with a statement of the
    app's already run."""
    with engine.connect() as conn:
        transaction = conn.begin()
        conn.execute(sa.text("SELECT 1"))
        yield conn, lambda commit: transaction.commit() if commit else transaction.rollback()


@contextlib.contextmanager
def sqlalchemy_session(dsn: str, engine: sa.Engine) -> Iterator[tuple[Any, Callable[[bool], None]]]:
    """An ORM Session, not begun."""
    with Session(engine) as session:
        yield session, lambda commit: session.commit() if commit else session.rollback()
        session.execute(sa.text("SELECT 1"))  # still usable


HOSTS = [
    psycopg_implicit, psycopg_block, sqlalchemy_connection, sqlalchemy_begun, sqlalchemy_session
]


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: h.__name__)
@pytest.mark.parametrize("commit", [False, True], ids=["rollback", "commit"])
def test_writes_commit_or_roll_back_with_the_host_transaction(
    host: Host, commit: bool, db_dsn: str, engine: sa.Engine,
    new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    with host(db_dsn, engine) as (db, end):
        with new_memory(db) as mem:
            write_some(mem)
        assert counts(db_dsn) == NOTHING, "pgmem committed the caller's transaction"
        end(commit)
    assert counts(db_dsn) == (WRITTEN if commit else NOTHING)


# What the search sets for its own statement (search_settings in sql/queries.sql), each first
# given a value of the caller's own in its transaction: after a search, the caller reads its own.
CALLER_SETTINGS = {
    "enable_seqscan": "on", "enable_nestloop": "on", "jit": "on",
    "plan_cache_mode": "force_custom_plan",
    "hnsw.iterative_scan": "off", "hnsw.ef_search": "123",
}
SET_CALLER_SETTINGS = "SELECT " + ", ".join(
    f"set_config('{name}', '{value}', true)" for name, value in CALLER_SETTINGS.items()
)
READ_SETTINGS = "SELECT " + ", ".join(f"current_setting('{name}')" for name in CALLER_SETTINGS)


def _run(db: Any, query: str) -> tuple[Any, ...]:
    """``query``'s one row, run by the caller on its own psycopg or SQLAlchemy object."""
    if isinstance(db, psycopg.Connection):
        row = db.execute(query).fetchone()  # type: ignore[call-overload]
        assert row is not None
        return tuple(row)
    return tuple(db.execute(sa.text(query)).one())


@pytest.mark.also_on_citus
@pytest.mark.parametrize("host", HOSTS, ids=lambda h: h.__name__)
def test_a_search_leaves_the_callers_settings_as_they_were(
    host: Host, db_dsn: str, engine: sa.Engine, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    """search_settings are local to the transaction, and in the caller's they would outlive the
    call: its later statements would run without sequential scans until COMMIT."""
    with host(db_dsn, engine) as (db, end):
        with new_memory(db) as mem:
            mem.add("Caroline moved to Ottawa", user_id="u1")
            _run(db, SET_CALLER_SETTINGS)
            assert mem.search("Where is Caroline?", user_id="u1")
            assert mem.search("Ottawa", user_id="u1", mode="keyword")
            assert _run(db, READ_SETTINGS) == tuple(CALLER_SETTINGS.values())
        end(False)


def test_an_async_search_leaves_the_callers_settings_as_they_were(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    async def search_in_a_transaction() -> tuple[Any, ...]:
        async with await psycopg.AsyncConnection.connect(db_dsn) as conn:
            mem = pgmem.AsyncMemory(conn, embedder=embedder, nlp=analyzer)
            await mem.add("Caroline moved to Ottawa", user_id="u1")
            await conn.execute(SET_CALLER_SETTINGS)  # type: ignore[arg-type]
            assert await mem.search("Where is Caroline?", user_id="u1")
            cursor = await conn.execute(READ_SETTINGS)  # type: ignore[arg-type]
            row = await cursor.fetchone()
            await conn.rollback()
            await mem.close()
            assert row is not None
            return tuple(row)

    assert asyncio.run(search_in_a_transaction()) == tuple(CALLER_SETTINGS.values())


@pytest.mark.parametrize("commit", [False, True], ids=["rollback", "commit"])
def test_a_memory_and_an_app_row_commit_together(
    commit: bool, db_dsn: str, engine: sa.Engine, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    app = sa.MetaData()
    orders = sa.Table(
        "orders", app,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("item", sa.Text, nullable=False),
        sa.Column("memory_id", sa.Uuid),
    )
    app.create_all(engine)
    with Session(engine) as session:
        mem = new_memory(session)
        rec = mem.add("Caroline ordered a sailboat", user_id="caroline")
        session.execute(sa.insert(orders).values(item="sailboat", memory_id=rec.id))
        (session.commit if commit else session.rollback)()
    with engine.connect() as conn:
        stored = conn.execute(sa.select(orders.c.item, orders.c.memory_id)).all()
    assert stored == ([("sailboat", rec.id)] if commit else [])
    assert counts(db_dsn)["memories"] == (1 if commit else 0)
    assert counts(db_dsn)["history"] == (1 if commit else 0)


def test_an_engine_lends_a_connection_per_call_that_commits(
    db_dsn: str, engine: sa.Engine, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    with new_memory(engine) as mem:
        rec = mem.add("Caroline moved to Ottawa", user_id="u1")
        assert counts(db_dsn)["memories"] == 1  # committed by the call
        assert engine.pool.checkedout() == 0  # and the connection went back to the pool
        assert mem.search("Ottawa", user_id="u1")[0].id == rec.id
    with engine.connect() as conn:  # the Engine is still the caller's, open
        assert conn.execute(sa.text("SELECT count(*) FROM pgmem.memories")).scalar() == 1


def test_pgvector_types_are_registered_on_the_callers_connection(
    engine: sa.Engine, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    with engine.connect() as conn:
        new_memory(conn).add("Caroline moved to Ottawa", user_id="u1")
        (embedding,) = conn.execute(sa.text("SELECT embedding FROM pgmem.memories")).one()
        # pgvector's loader parsed it (unregistered, psycopg would return the text).
        assert not isinstance(embedding, str)
        assert np.asarray(embedding.to_list()).shape == (384,)
        conn.rollback()


def test_a_psycopg_pool_lends_a_connection_per_call(
    db_dsn: str, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    from psycopg_pool import ConnectionPool

    with ConnectionPool(db_dsn, min_size=1, max_size=2) as pool:  # connections not autocommit
        with new_memory(pool) as mem:
            write_some(mem)
        assert counts(db_dsn) == WRITTEN
        assert not pool.closed


def test_repeatable_read_refuses_dedupe_and_keeps_the_host_transaction(
    db_dsn: str, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    """Under REPEATABLE READ the snapshot predates the duplicate locks: a concurrent add of the
    same text would be missed, so ``dedupe`` is refused -- nothing of the add is left, and the
    caller's transaction goes on."""
    with psycopg.connect(db_dsn) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        mem = new_memory(conn)
        with pytest.raises(pgmem.IsolationError, match="REPEATABLE READ"):
            mem.add("Caroline moved to Ottawa", user_id="u1")
        with pytest.raises(pgmem.IsolationError):
            mem.add_many(["a", "b"], user_id="u1")
        assert mem.get_all(user_id="u1").items == ()
        rec = mem.add("Caroline moved to Ottawa", user_id="u1", dedupe=False)
        mem.update(rec.id, text="Caroline moved to Halifax")  # locks, then errors, if contended
        conn.commit()
    assert counts(db_dsn)["memories"] == 1


def test_repeatable_read_never_orphans_a_concurrently_linked_entity(
    db_dsn: str, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    """The orphan-entity check of a delete in REPEATABLE READ cannot see a link committed after
    its snapshot -- but deleting that entity then conflicts with the committed writer, so the
    delete fails with a serialization error instead of dropping the other memory's link."""
    with new_memory(db_dsn) as other:
        first = other.add("Jon went to Paris", user_id="u1")
        with psycopg.connect(db_dsn) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            mem = new_memory(conn)
            mem.get(first.id)  # the snapshot is taken
            second = other.add("Gina went to Paris", user_id="u1")  # links paris, commits
            with pytest.raises(pgmem.DatabaseError, match="serializ"):
                mem.delete(first.id)
            conn.rollback()
        hits = other.search("Paris", user_id="u1", threshold=0.0)
        assert {h.id for h in hits} == {first.id, second.id}
        assert all("paris" in {e.name for e in h.explain.entity_hits} for h in hits)


def test_serializable_and_read_committed_hosts_keep_dedupe(
    db_dsn: str, engine: sa.Engine, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    """SERIALIZABLE keeps duplicate detection correct (a concurrent duplicate aborts one of the
    transactions with a serialization failure, for the app to retry, as any SERIALIZABLE app
    does)."""
    for level in ("SERIALIZABLE", "READ COMMITTED"):
        with engine.connect().execution_options(isolation_level=level) as conn:
            mem = new_memory(conn)
            first = mem.add("Jon likes jazz", user_id=level)
            assert mem.add("Jon likes jazz", user_id=level).id == first.id
            conn.commit()
    assert counts(db_dsn)["memories"] == 2

    # Two SERIALIZABLE transactions whose snapshots predate each other's add of one text: the
    # second add cannot see the first, and PostgreSQL aborts it rather than store it twice.
    with engine.connect().execution_options(isolation_level="SERIALIZABLE") as a, \
            engine.connect().execution_options(isolation_level="SERIALIZABLE") as b:
        mem_a, mem_b = new_memory(a), new_memory(b)
        mem_a.get_all(user_id="u1")
        mem_b.get_all(user_id="u1")  # both snapshots taken
        mem_a.add("Gina sings", user_id="u1")
        a.commit()
        with pytest.raises((pgmem.DatabaseError, sa.exc.OperationalError), match="serializ"):
            mem_b.add("Gina sings", user_id="u1")
            b.commit()
    assert counts(db_dsn)["memories"] == 3


def test_a_failed_host_transaction_is_refused_clearly(
    db_dsn: str, new_memory: Callable[[Any], pgmem.Memory],
) -> None:
    with psycopg.connect(db_dsn) as conn:
        mem = new_memory(conn)
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        with pytest.raises(pgmem.DatabaseError, match="roll it back first"):
            mem.add("Caroline moved to Ottawa", user_id="u1")
        conn.rollback()
        mem.add("Caroline moved to Ottawa", user_id="u1")
        conn.commit()
    assert counts(db_dsn)["memories"] == 1


def test_sources_pgmem_cannot_use_are_refused(db_dsn: str) -> None:
    with pytest.raises(pgmem.ConfigurationError, match="psycopg"):
        pgmem.Memory(sa.create_engine("sqlite://"))
    with pytest.raises(pgmem.ConfigurationError, match="db must be"):
        pgmem.Memory(42)  # type: ignore[arg-type]
