"""The rule that picks the server of a read (pgmem.replicas.ReadRoute), without a database."""

from __future__ import annotations

import logging
import time

import pytest

from pgmem.errors import (
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    DatabaseError,
    PgmemError,
    ReplicaUnavailableError,
)
from pgmem.replicas import ReadRoute, checked_read_dsn, replica_failure

REPLICA = "the replica's connector"


def test_a_read_goes_to_the_replica_unless_a_rule_says_primary() -> None:
    assert ReadRoute(None).reader(True) is None  # no replica
    route = ReadRoute(REPLICA, read_your_writes=0.2)
    assert route.reader(True) == REPLICA
    assert route.reader(False) is None  # primary=True, or not a read
    assert ReadRoute(REPLICA, host=True).reader(True) is None  # the caller's connection
    route.wrote()
    assert route.reader(True) is None  # right after a write
    time.sleep(0.25)
    assert route.reader(True) == REPLICA
    assert ReadRoute(REPLICA, read_your_writes=0).reader(True) == REPLICA


def test_a_failed_replica_is_left_for_retry_after_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    route = ReadRoute(REPLICA, read_your_writes=0, retry_after=0.2)
    with caplog.at_level(logging.WARNING, logger="pgmem.replicas"):
        route.failed(ConnectionLostError("server closed the connection"))
    assert "read replica failed" in caplog.records[0].getMessage()
    assert route.reader(True) is None
    time.sleep(0.25)
    assert route.reader(True) == REPLICA


def test_with_fallback_error_a_failure_raises_a_typed_error() -> None:
    route = ReadRoute(REPLICA, fallback="error")
    with pytest.raises(ReplicaUnavailableError, match="refused") as raised:
        route.failed(ConnectError("connection refused"))
    assert isinstance(raised.value, PgmemError)
    assert route.reader(True) == REPLICA  # tried again on the next read


def test_which_errors_are_replica_failures() -> None:
    assert replica_failure(ConnectError("x")) and replica_failure(ConnectionLostError("x"))
    assert not replica_failure(DatabaseError("syntax")) and not replica_failure(ValueError())


@pytest.mark.parametrize(
    "options", [{"fallback": "maybe"}, {"read_your_writes": -1}, {"retry_after": "soon"}]
)
def test_bad_settings_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        ReadRoute(REPLICA, **options)  # type: ignore[arg-type]


def test_read_dsn_is_a_dsn_or_none() -> None:
    assert checked_read_dsn(None) is None
    assert checked_read_dsn("host=replica") == "host=replica"
    for bad in ("", "  ", 5):
        with pytest.raises(ConfigurationError, match="read_dsn"):
            checked_read_dsn(bad)
