"""Which server answers a read: the primary, or the read replica (``read_dsn``).

A :class:`ReadRoute` holds what a ``Memory`` (or ``AsyncMemory``) knows to decide it -- when it
last wrote, whether its replica failed lately -- and the replica's connector. The facades' runners
(:func:`pgmem.memory.run`, :func:`pgmem.aio.run_async`) ask it for each transaction or batch an
operation marks as a read a replica may answer (:func:`pgmem.effects.on_replica`), and tell it
when the replica failed. The rule (docs/production.md, "Read replicas"): a read goes to the
replica unless

- ``db`` is the caller's own connection (a psycopg ``Connection``, a SQLAlchemy ``Connection``
  or ``Session``): the read must see the caller's transaction, so it runs in it;
- this Memory wrote less than ``read_your_writes`` seconds ago (a write by another ``Memory`` or
  process is not known here);
- the call asked for the primary (``primary=True``);
- the replica failed less than ``replica_retry`` seconds ago (``replica_fallback="primary"``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Generic, TypeVar

from pgmem.errors import (
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    PgmemError,
    ReplicaUnavailableError,
)

C = TypeVar("C")

log = logging.getLogger(__name__)

#: What ``replica_fallback`` may be: read from the primary (with a warning), or raise.
FALLBACKS = ("primary", "error")


def replica_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a read on the replica, means the replica is unreachable or
    its connection was lost (so the read may go to the primary instead)."""
    return isinstance(exc, (ConnectError, ConnectionLostError))


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigurationError(f"{name} must be a number of seconds (0 or more), got {value!r}")
    return float(value)


class ReadRoute(Generic[C]):
    """Where a Memory's reads go (see the module docstring). ``replica`` is the replica's
    connector (None: every read goes to the primary); ``host``: the primary source is the
    caller's own connection. Safe to share between threads and tasks."""

    def __init__(
        self,
        replica: C | None,
        *,
        host: bool = False,
        read_your_writes: float = 5.0,
        fallback: str = "primary",
        retry_after: float = 30.0,
    ) -> None:
        if fallback not in FALLBACKS:
            raise ConfigurationError(
                f"replica_fallback must be one of {FALLBACKS}, got {fallback!r}"
            )
        self.replica = replica
        self.host = host
        self.window = _seconds("read_your_writes", read_your_writes)
        self.fallback = fallback
        self.retry_after = _seconds("replica_retry", retry_after)
        self._last_write = -float("inf")
        self._down_until = -float("inf")
        self._lock = threading.Lock()

    def wrote(self) -> None:
        """Note a write of this Memory (called before and after each write call): its reads go
        to the primary for ``read_your_writes`` seconds from the later of the two."""
        with self._lock:
            self._last_write = time.monotonic()

    def reader(self, allowed: bool) -> C | None:
        """The replica's connector, when a read that a replica may answer (``allowed``) should
        go there now; None: the primary."""
        if self.replica is None or not allowed or self.host:
            return None
        now = time.monotonic()
        with self._lock:
            if now - self._last_write < self.window or now < self._down_until:
                return None
        return self.replica

    def failed(self, exc: PgmemError) -> None:
        """The replica failed a read with ``exc`` (see :func:`replica_failure`): with
        ``replica_fallback="error"``, raise :class:`~pgmem.errors.ReplicaUnavailableError`;
        else log a warning and send reads to the primary for ``retry_after`` seconds (the caller
        then runs the read there). The caller closes the replica's pool either way, so that the
        next read there connects afresh (and fails at once while the replica is down).

        Raises:
            ReplicaUnavailableError: ``replica_fallback`` is ``"error"``.
        """
        if self.fallback == "error":
            raise ReplicaUnavailableError(f"the read replica failed: {exc}") from exc
        with self._lock:
            self._down_until = time.monotonic() + self.retry_after
        log.warning(
            "pgmem: the read replica failed (%s: %s); reading from the primary for %g s",
            type(exc).__name__, exc, self.retry_after,
        )


def checked_read_dsn(value: object) -> str | None:
    """``read_dsn`` checked: None (no replica) or a DSN.

    Raises:
        ConfigurationError: anything else, or an empty DSN (libpq's ``PG*`` variables would
            then name the primary).
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"read_dsn must be a non-empty DSN or None, got {value!r}")
    return value
