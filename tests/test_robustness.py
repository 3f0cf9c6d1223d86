"""Robustness under abuse (issue 26): every input dimension has a limit that is a typed error
raised before any statement; driver-side refusals are not connection errors and are never
retried; an exhausted pool and a server out of reach are distinct errors naming the settings to
change; long texts are refused up front; ``update`` keeps ``add``'s duplicate rule, also under
concurrency.

"Before any statement" is shown with a Memory on a DSN where nothing listens: a check that
needed the database would raise :class:`~pgmem.ConnectError` instead.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from reliability_support import HashEmbedder, counts

import pgmem
from pgmem import validate
from pgmem.connection import retryable

NOWHERE = "postgresql://postgres@127.0.0.1:1/nowhere"  # nothing listens on port 1


@pytest.fixture
def offline(analyzer: pgmem.TextAnalyzer) -> Iterator[pgmem.Memory]:
    """A Memory whose every statement would fail to connect."""
    with pgmem.Memory(NOWHERE, embedder=HashEmbedder(), nlp=analyzer, connect_timeout=2) as mem:
        yield mem


@pytest.fixture
def fast(db_dsn: str, analyzer: pgmem.TextAnalyzer) -> Iterator[pgmem.Memory]:
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        yield mem


def nested(depth: int) -> dict[str, Any]:
    """Metadata whose objects nest ``depth`` deep (the metadata object itself is level 1)."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


# -- 1. filters --------------------------------------------------------------------------------

def test_a_65000_term_or_filter_is_refused_before_any_statement(offline: pgmem.Memory) -> None:
    huge = {"OR": [{"k": i} for i in range(65000)]}
    with pytest.raises(pgmem.FilterLimitError, match=r"Limits\.max_filter_bytes"):
        offline.get_all(user_id="bulk", filters=huge)
    with pytest.raises(pgmem.FilterLimitError, match=r"Limits\.max_filter_bytes"):
        offline.search("anything", user_id="bulk", filters=huge)
    # small in bytes, many in conditions
    many = {"OR": [{"k": i} for i in range(1001)]}
    with pytest.raises(pgmem.FilterLimitError, match=r"Limits\.max_filter_conditions"):
        offline.get_all(user_id="bulk", filters=many)
    # 1.3 MB of filter (the MCP reproduction) is refused for its size, before compiling
    wide = {"OR": [{"key_with_a_long_name": f"value {i:08d}"} for i in range(40000)]}
    with pytest.raises(pgmem.FilterLimitError, match=r"Limits\.max_filter_bytes"):
        offline.get_all(user_id="bulk", filters=wide)
    many_values = {"k": {"in": list(range(1000))}, "OR": [{"j": {"in": list(range(999))}}] * 6}
    with pytest.raises(pgmem.FilterLimitError, match=r"Limits\.max_filter_(conditions|parameters)"):
        offline.get_all(user_id="bulk", filters=many_values)
    assert issubclass(pgmem.FilterLimitError, pgmem.FilterError)


def test_filter_limits_are_settings(offline: pgmem.Memory, analyzer: pgmem.TextAnalyzer) -> None:
    small = pgmem.Limits(max_filter_conditions=2)
    with pgmem.Memory(NOWHERE, embedder=HashEmbedder(), nlp=analyzer, limits=small) as mem, \
            pytest.raises(pgmem.FilterLimitError, match="limit is 2"):
        mem.get_all(user_id="u", filters={"a": 1, "b": 2, "c": 3})
    with pytest.raises(pgmem.ConfigurationError, match="max_filter_conditions"):
        pgmem.Limits(max_filter_conditions=0)


class CountingPool(ConnectionPool):
    """A pool that counts the connections it lends."""

    lent = 0

    def getconn(self, timeout: float | None = None) -> Any:
        self.lent += 1
        return super().getconn(timeout)


def test_a_statement_the_driver_refuses_is_no_connection_error_and_is_not_retried(
    db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    # With the limits lifted, libpq refuses the statement client-side (> 65,535 parameters).
    lifted = pgmem.Limits(max_filter_conditions=10**6, max_filter_parameters=10**6,
                          max_filter_bytes=10**8)
    with CountingPool(db_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}) as pool, \
            pgmem.Memory(pool, embedder=HashEmbedder(), nlp=analyzer, limits=lifted) as mem:
        mem.get_all(user_id="bulk")
        before = pool.lent
        with pytest.raises(pgmem.StatementRefusedError, match="65535") as info:  # not sent
            mem.get_all(user_id="bulk", filters={"OR": [{"k": i} for i in range(70000)]})
        assert not isinstance(info.value, pgmem.ConnectionLostError)
        assert not retryable(info.value)
        assert pool.lent == before + 1  # one attempt, on one connection
        assert mem.get_all(user_id="bulk").items == ()  # and that connection still works


# -- 2. metadata -------------------------------------------------------------------------------

def test_deep_metadata_never_gets_in(db_dsn: str, fast: pgmem.Memory) -> None:
    kept = fast.add("Ada keeps a shallow note.", user_id="u", metadata=nested(32))
    before = counts(db_dsn)
    for depth in (33, 254, 496, 988, 5000):
        with pytest.raises(pgmem.LimitError, match=r"Limits\.max_metadata_depth"):
            fast.add("Ada hides a deep note.", user_id="u", metadata=nested(depth))
        with pytest.raises(pgmem.LimitError, match=r"items\[1\].*max_metadata_depth"):
            fast.add_many(["fine", {"text": "deep", "metadata": nested(depth)}], user_id="u")
        with pytest.raises(pgmem.LimitError, match="max_metadata_depth"):
            fast.update(kept.id, metadata=nested(depth))
    deep_list: list[Any] = []
    for _ in range(40):
        deep_list = [deep_list]
    with pytest.raises(pgmem.LimitError, match="max_metadata_depth"):
        fast.add("Ada nests lists.", user_id="u", metadata={"l": deep_list})
    # what `pgmem import` checks every row with
    with pytest.raises(pgmem.LimitError, match="max_metadata_depth"):
        validate.items([{"text": "imported", "metadata": nested(300)}], tenant="default",
                       user_id="u", limits=fast.limits)
    assert counts(db_dsn) == before
    # the reads of the scope keep working
    assert [m.id for m in fast.get_all(user_id="u").items] == [kept.id]
    assert fast.search("shallow note", user_id="u")[0].id == kept.id


def test_metadata_size_is_a_limit_error_naming_its_setting(offline: pgmem.Memory) -> None:
    with pytest.raises(pgmem.LimitError, match=r"Limits\.max_metadata_bytes"):
        offline.add("big", user_id="u", metadata={"blob": "x" * 70_000})


# -- 3. connections ----------------------------------------------------------------------------

def test_an_exhausted_pool_is_not_a_failed_server(
    db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer, pool_max_size=2,
                      pool_timeout=1) as mem:
        mem.get_all(user_id="u")  # opens the pool
        pool = mem._connector._pool  # hold both connections, as two long calls would
        assert pool is not None
        held = [pool.getconn(), pool.getconn()]
        try:
            with pytest.raises(pgmem.PoolTimeoutError, match=r"pool_max_size=2.*pool_timeout=1"):
                mem.get_all(user_id="u")
        finally:
            for conn in held:
                pool.putconn(conn)
        assert mem.get_all(user_id="u").items == ()
    assert not issubclass(pgmem.PoolTimeoutError, pgmem.ConnectionLostError)


def test_a_connection_never_made_is_a_connect_error(offline: pgmem.Memory) -> None:
    with pytest.raises(pgmem.ConnectError, match="connect_timeout=2") as info:
        offline.get_all(user_id="u")
    assert not isinstance(info.value, pgmem.ConnectionLostError)
    assert not retryable(info.value)


def test_the_pool_timeout_is_checked() -> None:
    with pytest.raises(pgmem.ConfigurationError, match="pool_timeout"):
        pgmem.Memory(NOWHERE, pool_timeout=0)


# -- 4. long texts -----------------------------------------------------------------------------

def test_a_2mb_text_is_a_limit_error_not_spacys(offline: pgmem.Memory,
                                                analyzer: pgmem.TextAnalyzer) -> None:
    two_mb = "word " * 400_000
    with pytest.raises(pgmem.LimitError, match="limit is 10000 \\(max_text_length\\)"):
        offline.add(two_mb, user_id="u")
    with pytest.raises(pgmem.LimitError, match="query has 2000000 characters"):
        offline.search(two_mb, user_id="u")
    # the setting cannot be raised to where spaCy (1,000,000 characters) or the time would fail
    with pytest.raises(pgmem.ConfigurationError, match="at most 100000"):
        pgmem.Memory(NOWHERE, max_text_length=30_000_000)
    with pgmem.Memory(NOWHERE, embedder=HashEmbedder(), nlp=analyzer,
                      max_text_length=validate.MAX_TEXT_LENGTH_CEILING) as mem, \
            pytest.raises(pgmem.LimitError, match="limit is 100000"):
        mem.add(two_mb, user_id="u")


def test_the_largest_text_is_stored_and_found(db_dsn: str, analyzer: pgmem.TextAnalyzer) -> None:
    words = " ".join(f"w{i}" for i in range(validate.MAX_TEXT_LENGTH_CEILING // 8))
    text = f"Grace Hopper wrote about compilers. {words}"[: validate.MAX_TEXT_LENGTH_CEILING]
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer,
                      max_text_length=validate.MAX_TEXT_LENGTH_CEILING) as mem:
        added = mem.add(text, user_id="u")
        assert mem.get(added.id).text == text
        assert [h.id for h in mem.search("Grace Hopper compilers", user_id="u")] == [added.id]


# -- 5. update keeps add's duplicate rule -----------------------------------------------------

def test_update_to_a_text_the_scope_holds_is_refused(db_dsn: str, fast: pgmem.Memory) -> None:
    first = fast.add("Alice likes tea.", user_id="u")
    second = fast.add("Bob likes coffee.", user_id="u")
    other_scope = fast.add("Bob likes coffee.", user_id="v")
    before = counts(db_dsn)
    with pytest.raises(pgmem.DuplicateError, match=str(first.id)):
        fast.update(second.id, text="Alice likes tea.")
    assert counts(db_dsn) == before
    assert fast.get(second.id).text == "Bob likes coffee."
    # the same text in another scope, and a memory's own text, are no duplicates
    assert fast.update(other_scope.id, text="Alice likes tea.").text == "Alice likes tea."
    assert fast.update(first.id, text="Alice likes tea.", metadata={"a": 1}).metadata == {"a": 1}


def test_concurrent_updates_to_one_text_leave_one_memory_with_it(
    db_dsn: str, fast: pgmem.Memory
) -> None:
    ids = [r.id for r in fast.add_many([f"Note number {i} about Paris." for i in range(8)],
                                        user_id="u")]
    target = "Everyone moved to Lisbon."
    outcomes: dict[uuid.UUID, str] = {}

    def update(memory_id: uuid.UUID) -> None:
        start.wait()
        try:
            fast.update(memory_id, text=target)
            outcomes[memory_id] = "updated"
        except pgmem.DuplicateError:
            outcomes[memory_id] = "refused"

    def add() -> None:
        start.wait()
        outcomes[uuid.UUID(int=0)] = "dup" if fast.add(target, user_id="u").duplicate else "added"

    threads = [threading.Thread(target=update, args=(i,)) for i in ids]
    threads.append(threading.Thread(target=add))
    start = threading.Barrier(len(threads))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [k for k, v in outcomes.items() if v in ("updated", "added")]
    assert len(winners) == 1, outcomes
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgmem.memories WHERE user_id = 'u' AND text = %s", (target,)
        ).fetchone()
    assert row == (1,)


def test_pgmem_import_refuses_deep_metadata_without_a_traceback(
    db_dsn: str, tmp_path: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, analyzer: pgmem.TextAnalyzer,
) -> None:
    from pgmem import cli

    monkeypatch.setattr(cli, "_models", lambda: (HashEmbedder(), analyzer))
    before = counts(db_dsn)
    for depth, says in ((300, "max_metadata_depth"), (100_000, "not valid JSON")):
        path = tmp_path / f"deep{depth}.jsonl"
        path.write_text('{"text": "fine"}\n'
                        + '{"text": "deep", "metadata": ' + '{"k": ' * depth + "1"
                        + "}" * depth + "}\n")
        capsys.readouterr()
        status = cli.main(["--dsn", db_dsn, "import", str(path), "--user", "u"])
        _, err = capsys.readouterr()
        assert status == 2, err
        assert says in err and "Traceback" not in err
    assert counts(db_dsn) == before
