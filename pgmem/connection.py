"""Where pgmem's connections come from, and what the server can do.

pgmem either owns a pool (made from a DSN, opened on first use, closed by :meth:`close`) or
borrows the caller's psycopg connection or pool, which it never closes. Work runs in
``conn.transaction()``: its own transaction on a pool connection, a savepoint inside a caller's
open transaction — so memory writes commit or roll back with the caller's work.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from pgmem.errors import SchemaError, wrap_db_errors
from pgmem.migrate import parse_version

ITERATIVE_SCAN_VERSION = (0, 8)


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
    ) -> None:
        self._owned_pool: ConnectionPool | None = None
        self._pool: ConnectionPool | None = None
        self._connection: psycopg.Connection | None = None
        if isinstance(source, psycopg.Connection):
            self._connection = source
        elif isinstance(source, ConnectionPool):
            self._pool = source
        else:
            self._owned_pool = ConnectionPool(
                source or "",
                min_size=min_size,
                max_size=max_size,
                open=False,
                kwargs={"autocommit": True},
                configure=self._configure,
                check=ConnectionPool.check_connection,
                name="pgmem",
            )
            self._pool = self._owned_pool
        self._capabilities: weakref.WeakKeyDictionary[object, ServerCapabilities] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._opened = False

    def _configure(self, conn: psycopg.Connection) -> None:
        self._capabilities[conn] = prepare_connection(conn)

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
                    with wrap_db_errors():
                        self._owned_pool.open(wait=True, timeout=30)
                    self._opened = True
        with wrap_db_errors(), self._pool.connection() as conn:
            yield conn

    def close(self) -> None:
        """Close pgmem's own pool; a caller's connection or pool is left open."""
        if self._owned_pool is not None:
            self._owned_pool.close()
            self._opened = False
