"""Where pgmem's connections come from, and what the server can do.

pgmem either owns a pool (made from a DSN, opened on first use, closed by :meth:`close`) or
borrows the caller's psycopg connection or pool, which it never closes. Work runs in
``conn.transaction()``: its own transaction on a pool connection, a savepoint inside a caller's
open transaction — so memory writes commit or roll back with the caller's work.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from pgvector.psycopg import register_vector
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from pgmem.errors import ConfigurationError, PgmemError, SchemaError, translate, wrap_db_errors
from pgmem.migrate import parse_version

ITERATIVE_SCAN_VERSION = (0, 8)
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds to connect and fill the pool's minimum


def _connect_kwargs(conninfo: str, connect_timeout: float) -> dict[str, object]:
    """Connection options of pgmem's pool: autocommit, and libpq's ``connect_timeout`` unless
    the DSN or ``PGCONNECT_TIMEOUT`` sets one (libpq counts whole seconds, at least 2)."""
    kwargs: dict[str, object] = {"autocommit": True}
    try:
        in_dsn = "connect_timeout" in conninfo_to_dict(conninfo)
    except psycopg.Error:  # malformed: connecting will say so
        in_dsn = False
    if not in_dsn and "PGCONNECT_TIMEOUT" not in os.environ:
        kwargs["connect_timeout"] = max(2, math.ceil(connect_timeout))
    return kwargs


@dataclass(frozen=True)
class ServerCapabilities:
    """What the connected server's pgvector supports."""

    pgvector_version: str

    @property
    def iterative_scan(self) -> bool:
        """pgvector >= 0.8 can keep scanning the HNSW index until enough filtered rows match."""
        return parse_version(self.pgvector_version) >= ITERATIVE_SCAN_VERSION


def prepare_connection(conn: psycopg.Connection) -> ServerCapabilities:
    """Register pgvector's types on ``conn`` and read the server's capabilities.

    Runs in its own transaction block: a savepoint when the caller's transaction is open, so
    their work is neither committed nor rolled back.
    """
    with wrap_db_errors(), conn.transaction():
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row is None:
            raise SchemaError(
                "pgvector is not installed in this database: run pgmem.migrate(dsn) "
                "(or `pgmem migrate`) first"
            )
        register_vector(conn)
    return ServerCapabilities(pgvector_version=row[0])


class Connector:
    """Hands out connections inside a transaction, from pgmem's pool or the caller's."""

    def __init__(
        self,
        source: str | psycopg.Connection | ConnectionPool | None,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self._owned_pool: ConnectionPool | None = None
        self._pool: ConnectionPool | None = None
        self._connection: psycopg.Connection | None = None
        self._connect_timeout = connect_timeout
        if isinstance(source, psycopg.Connection):
            self._connection = source
        elif isinstance(source, ConnectionPool):
            self._pool = source
        else:
            self._conninfo = source or ""
            self._connect_kwargs = _connect_kwargs(self._conninfo, connect_timeout)
            self._pool_sizes = (min_size, max_size)
            self._owned_pool = self._pool = self._new_pool()
        self._capabilities: weakref.WeakKeyDictionary[object, ServerCapabilities] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._opened = False

    def _configure(self, conn: psycopg.Connection) -> None:
        self._capabilities[conn] = prepare_connection(conn)

    def _new_pool(self) -> ConnectionPool:
        # Not opened here; and a psycopg pool that was closed (by close(), or by a failed
        # open) cannot be opened again, so each open after one gets a new pool.
        min_size, max_size = self._pool_sizes
        return ConnectionPool(
            self._conninfo,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs=self._connect_kwargs,
            configure=self._configure,
            check=ConnectionPool.check_connection,
            name="pgmem",
        )

    def _open_pool(self) -> None:
        """Open pgmem's pool, or fail within the connect timeout saying why.

        One connection is made first, outside the pool: the pool retries a failing connection
        until its timeout and then says only that it timed out, while this one fails at once
        with libpq's reason (refused, unknown host, authentication) or pgmem's (no pgvector).
        """
        try:
            probe = psycopg.connect(self._conninfo, **self._connect_kwargs)
        except psycopg.ProgrammingError as exc:  # a malformed DSN
            raise ConfigurationError(f"invalid connection string: {exc}") from exc
        except psycopg.Error as exc:
            raise translate(exc) from exc
        with probe:
            prepare_connection(probe)
        assert self._owned_pool is not None
        try:
            with wrap_db_errors():
                self._owned_pool.open(wait=True, timeout=self._connect_timeout)
        except PgmemError:
            self._owned_pool = self._pool = self._new_pool()
            raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[tuple[psycopg.Connection, ServerCapabilities]]:
        """A connection inside a transaction (or a savepoint of the caller's), and what its
        server can do. Errors leave as :class:`~pgmem.errors.DatabaseError` subclasses."""
        with self._checkout() as conn:
            capabilities = self._capabilities.get(conn)
            if capabilities is None:
                capabilities = self._capabilities[conn] = prepare_connection(conn)
            with wrap_db_errors(), conn.transaction():
                yield conn, capabilities

    @contextlib.contextmanager
    def _checkout(self) -> Iterator[psycopg.Connection]:
        if self._connection is not None:
            yield self._connection
            return
        assert self._pool is not None
        if self._owned_pool is not None and not self._opened:
            with self._lock:
                if not self._opened:
                    self._open_pool()
                    self._opened = True
        with wrap_db_errors(), self._pool.connection() as conn:
            yield conn

    def close(self) -> None:
        """Close pgmem's own pool; a caller's connection or pool is left open."""
        if self._owned_pool is not None:
            with self._lock:
                self._owned_pool.close()
                self._owned_pool = self._pool = self._new_pool()
                self._opened = False
