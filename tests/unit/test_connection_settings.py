"""The settings both connectors check and give their pool, before anything connects (nothing
opens in a constructor)."""

from __future__ import annotations

import pytest

from pgmem.connection import AsyncConnector, Connector, connector_options
from pgmem.errors import ConfigurationError
from pgmem.settings import Settings
from pgmem.store import Store

DSN = "postgresql://localhost/pgmem_never_connected"


@pytest.mark.parametrize("connector", [Connector, AsyncConnector])
@pytest.mark.parametrize("name", ["lock_timeout", "pool_timeout"])
@pytest.mark.parametrize("value", [0, -1.5, True, "1", None, float("nan")])
def test_a_timeout_must_be_a_positive_number_of_seconds(
    connector: type[Connector | AsyncConnector], name: str, value: object
) -> None:
    with pytest.raises(ConfigurationError, match=f"^{name} must be a positive number of seconds"):
        connector(DSN, **{name: value})  # type: ignore[arg-type]


def test_the_twins_make_the_same_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    pools = [
        connector(DSN, min_size=2, max_size=3, connect_timeout=4.5, pool_timeout=6)._pool
        for connector in (Connector, AsyncConnector)
    ]
    for pool in pools:
        assert pool is not None and pool.closed  # made, not opened
        assert (pool.conninfo, pool.name, pool.min_size, pool.max_size, pool.timeout) == (
            DSN, "pgmem", 2, 3, 6.0
        )
        # libpq counts whole seconds: the connect timeout is rounded up
        assert pool.kwargs == {"autocommit": True, "connect_timeout": 5}
    assert Connector(DSN, lock_timeout=0.0001)._lock_timeout == "1ms"
    assert AsyncConnector(DSN, lock_timeout=2.5)._lock_timeout == "2500ms"


@pytest.mark.parametrize("connector", [Connector, AsyncConnector])
def test_behind_a_transaction_pooler_the_pool_prepares_nothing(
    monkeypatch: pytest.MonkeyPatch, connector: type[Connector | AsyncConnector]
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    settings = Settings(pooler="transaction")
    made = connector(DSN, **connector_options(settings))
    assert made._pool is not None
    assert made._pool.kwargs == {"autocommit": True, "connect_timeout": 10,
                                 "prepare_threshold": None}
    # no session setting on a pooled server connection: the lock timeout goes in each transaction
    assert made._session_lock_timeout() is None
    direct = connector(DSN, **connector_options(Settings(pooler="session")))
    assert direct._pool is not None and "prepare_threshold" not in direct._pool.kwargs
    assert direct._session_lock_timeout() == "5000ms"


@pytest.mark.parametrize("connector", [Connector, AsyncConnector])
def test_an_unknown_pooler_is_refused(connector: type[Connector | AsyncConnector]) -> None:
    with pytest.raises(ConfigurationError, match=r"^pooler must be one of \('none', 'session'"):
        connector(DSN, pooler="pgbouncer")


@pytest.mark.parametrize(
    ("pooler", "prepared_statements", "prepares"),
    [("none", None, True), ("session", None, True), ("transaction", None, False),
     ("transaction", True, True), ("none", False, False)],
)
def test_prepared_statements_follow_the_pooler_unless_set(
    pooler: str, prepared_statements: bool | None, prepares: bool
) -> None:
    settings = Settings(pooler=pooler, prepared_statements=prepared_statements)
    assert settings.prepares is prepares
    assert Store("pgmem", prepares=prepares).embedding_models().prepare is (
        None if prepares else False
    )
