"""Read replicas (``read_dsn``), on a real streaming replica of the test server
(tests/replica_support.py): reads go to the replica, writes and the reads that must see them to
the primary, and a replica that goes away is fallen back from or reported, as configured.

A memory written while the replica's replay is paused is on the primary only: a read that
misses it was answered by the replica, a read that finds it by the primary.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem.cli import main
from tests.replica_support import Replica, replay_paused, replayed, streaming_replica


@pytest.fixture(scope="module")
def replica(server_dsn: str) -> Iterator[Replica]:
    with streaming_replica(server_dsn) as running:
        yield running


@pytest.fixture
def replica_dsn(replica: Replica, db_dsn: str) -> str:
    """The test's database on the replica, replayed up to now (started again if a test
    stopped it)."""
    if not replica.running():
        replica.start()
    dsn = replica.dsn(db_dsn)
    replayed(db_dsn, dsn)
    return dsn


def _memory(
    db: object, replica_dsn: str, models: tuple[object, object], **options: Any
) -> pgmem.Memory:
    embedder, analyzer = models
    return pgmem.Memory(
        db, read_dsn=replica_dsn, embedder=embedder, nlp=analyzer, **options  # type: ignore[arg-type]
    )


@pytest.fixture
def models(
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> tuple[object, object]:
    return embedder, analyzer


def test_reads_go_to_the_replica_and_writes_to_the_primary(
    db_dsn: str, replica_dsn: str, models: tuple[object, object]
) -> None:
    with _memory(db_dsn, replica_dsn, models, read_your_writes=0) as mem:
        old = mem.add("Alice keeps bees in her garden in Lyon", user_id="u1")
        replayed(db_dsn, replica_dsn)
        with replay_paused(replica_dsn):
            new = mem.add("Alice also keeps bees on the roof of her office", user_id="u1")
            # Written to the primary (its own connection sees it) ...
            with psycopg.connect(db_dsn) as conn:
                assert conn.execute(
                    "SELECT count(*) FROM pgmem.memories WHERE id = %s", (new.id,)
                ).fetchone() == (1,)
            # ... and every read answered by the replica, which has not replayed it.
            hits = mem.search("bees", user_id="u1")
            assert [hit.id for hit in hits] == [old.id]
            assert [r.id for r in mem.get_all(user_id="u1").items] == [old.id]
            assert mem.get(old.id).text == old.text
            with pytest.raises(pgmem.NotFoundError):
                mem.get(new.id)
            with pytest.raises(pgmem.NotFoundError):
                mem.history(new.id)
            # primary=True: the caller asks for the primary.
            assert mem.get(new.id, primary=True).text == new.text
            assert [e.event for e in mem.history(new.id, primary=True)] == ["ADD"]
            assert {h.id for h in mem.search("bees", user_id="u1", primary=True)} == {
                old.id, new.id
            }
            assert len(mem.get_all(user_id="u1", primary=True).items) == 2
        replayed(db_dsn, replica_dsn)
        assert mem.get(new.id).text == new.text
        assert len(mem.search("bees", user_id="u1")) == 2


def test_reads_right_after_a_write_go_to_the_primary(
    db_dsn: str, replica_dsn: str, models: tuple[object, object]
) -> None:
    window = 2.0
    with _memory(db_dsn, replica_dsn, models, read_your_writes=window) as mem:
        mem.search("warm up", user_id="u1")  # models loaded, schema read
        with replay_paused(replica_dsn):
            added = mem.add("Bob plays the cello on Sundays", user_id="u1")
            # Within the window: the primary answers, the write is seen.
            assert mem.get(added.id).text == added.text
            assert [h.id for h in mem.search("cello", user_id="u1")] == [added.id]
            updated = mem.update(added.id, text="Bob plays the viola on Sundays")
            assert mem.get(added.id).text == updated.text
            time.sleep(window + 0.2)
            # Past the window: the replica again, which has not replayed the write.
            with pytest.raises(pgmem.NotFoundError):
                mem.get(added.id)
            assert mem.search("cello", user_id="u1") == []


def test_a_caller_connection_reads_in_its_own_transaction(
    db_dsn: str, replica_dsn: str, models: tuple[object, object]
) -> None:
    with replay_paused(replica_dsn), psycopg.connect(db_dsn) as conn:
        with _memory(conn, replica_dsn, models, read_your_writes=0) as mem:
            added = mem.add("Carol's flight to Oslo leaves at nine", user_id="u1")
            # Not committed yet: only the caller's transaction can see it.
            assert mem.get(added.id).text == added.text
            assert [h.id for h in mem.search("flight to Oslo", user_id="u1")] == [added.id]
        conn.rollback()


def test_the_async_memory_reads_from_the_replica(
    db_dsn: str, replica_dsn: str, models: tuple[object, object]
) -> None:
    embedder, analyzer = models

    async def scenario() -> None:
        async with pgmem.AsyncMemory(
            db_dsn, read_dsn=replica_dsn, embedder=embedder, nlp=analyzer, read_your_writes=0
        ) as mem:
            with replay_paused(replica_dsn):
                added = await mem.add("Dan's bike is a green Peugeot", user_id="u1")
                with pytest.raises(pgmem.NotFoundError):
                    await mem.get(added.id)
                assert await mem.search("bike", user_id="u1") == []
                assert (await mem.get(added.id, primary=True)).text == added.text
                assert [h.id for h in await mem.search("bike", user_id="u1", primary=True)] == [
                    added.id
                ]

    asyncio.run(scenario())


def test_a_replica_that_goes_away_falls_back_to_the_primary_with_a_warning(
    db_dsn: str, replica: Replica, replica_dsn: str, models: tuple[object, object],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with _memory(db_dsn, replica_dsn, models, read_your_writes=0, replica_retry=600) as mem:
        added = mem.add("Erin's cat is called Miso", user_id="u1")
        replayed(db_dsn, replica_dsn)
        assert [h.id for h in mem.search("cat", user_id="u1")] == [added.id]  # pool opened
        replica.stop()
        with caplog.at_level(logging.WARNING, logger="pgmem.replicas"):
            assert [h.id for h in mem.search("cat", user_id="u1")] == [added.id]
            assert mem.get(added.id).text == added.text
        warnings = [r for r in caplog.records if r.name == "pgmem.replicas"]
        assert len(warnings) == 1  # then reads go to the primary for replica_retry seconds
        assert "read replica failed" in warnings[0].getMessage()


def test_a_replica_that_cannot_be_reached_raises_when_configured(
    db_dsn: str, replica: Replica, replica_dsn: str, models: tuple[object, object],
) -> None:
    with _memory(db_dsn, replica_dsn, models, read_your_writes=0,
                 replica_fallback="error") as mem:
        added = mem.add("Frank's boat is moored in Brest", user_id="u1")
        replayed(db_dsn, replica_dsn)
        assert mem.get(added.id).text == added.text  # the replica's pool is open
        replica.stop()
        with pytest.raises(pgmem.ReplicaUnavailableError) as lost:
            mem.search("boat", user_id="u1")
        assert isinstance(lost.value, pgmem.PgmemError)
        with pytest.raises(pgmem.ReplicaUnavailableError):  # a new connection: refused
            mem.get(added.id)
        # The primary still answers when asked, and writes go on.
        assert mem.get(added.id, primary=True).text == added.text
        mem.add("Frank sold the boat", user_id="u1")
        replica.start()
        replayed(db_dsn, replica_dsn)
        assert len(mem.get_all(user_id="u1").items) == 2


def test_read_dsn_settings_are_checked() -> None:
    with pytest.raises(pgmem.ConfigurationError, match="read_dsn"):
        pgmem.Memory("postgresql://x", read_dsn="")
    with pytest.raises(pgmem.ConfigurationError, match="replica_fallback"):
        pgmem.Memory("postgresql://x", read_dsn="postgresql://y", replica_fallback="maybe")
    with pytest.raises(pgmem.ConfigurationError, match="PGMEM_REPLICA_FALLBACK"):
        pgmem.Settings.from_env({"PGMEM_REPLICA_FALLBACK": "maybe"})
    settings = pgmem.Settings.from_env({
        "PGMEM_READ_DSN": "postgresql://replica/db", "PGMEM_READ_YOUR_WRITES": "0.5",
        "PGMEM_REPLICA_FALLBACK": "error", "PGMEM_REPLICA_RETRY": "10",
    })
    assert (settings.read_dsn, settings.read_your_writes, settings.replica_fallback,
            settings.replica_retry) == ("postgresql://replica/db", 0.5, "error", 10.0)


def test_the_cli_reads_from_the_replica(
    db_dsn: str, replica_dsn: str, models: tuple[object, object],
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGMEM_READ_YOUR_WRITES", "0")
    with _memory(db_dsn, replica_dsn, models) as mem, replay_paused(replica_dsn):
        added = mem.add("Gina's piano needs tuning", user_id="u1")
        assert main(["get", str(added.id), "--dsn", db_dsn, "--json"]) == 0
        capsys.readouterr()
        assert main(["get", str(added.id), "--dsn", db_dsn, "--read-dsn", replica_dsn]) == 2
        assert "no memory" in capsys.readouterr().err.lower()
