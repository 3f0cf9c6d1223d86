"""Where pgmem's connections come from, and what the server can do.

pgmem either owns a pool (made from a DSN, opened on first use, closed by :meth:`close`) or
borrows what the caller passes, which it never closes: a psycopg connection or pool, or a
SQLAlchemy Engine, Connection or Session (psycopg driver); :class:`AsyncConnector` is the twin for
psycopg's async connection and pool.

Every call's work runs in ``conn.transaction()`` (see :func:`transaction_mode`): its own
transaction on a connection borrowed for the call (a pool's, an Engine's, an autocommit
connection), committed when the call returns; a savepoint inside the caller's open transaction;
and on a caller's connection whose transaction has not begun yet (psycopg outside autocommit, a
SQLAlchemy Connection or Session), that transaction is begun first, as a statement of the
caller's would begin it, so that pgmem never commits it: the caller commits or rolls back the
memory writes with their own work.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import math
import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, Union, runtime_checkable

import psycopg
from pgvector.psycopg import register_vector, register_vector_async
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from pgmem.errors import (
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    DatabaseError,
    PgmemError,
    PoolTimeoutError,
    SchemaError,
    connect_failed,
    translate,
    wrap_db_errors,
)
from pgmem.migrate import parse_version, sqlalchemy_errors
from pgmem.queries import sql_blocks
from pgmem.settings import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    POOLERS,
    Settings,
)

if TYPE_CHECKING:  # SQLAlchemy is imported only for a SQLAlchemy source (see _sqlalchemy_kind)
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session



@runtime_checkable
class LazyDsn(Protocol):
    """A DSN found when pgmem's pool first opens (the embedded default,
    :class:`pgmem.default_database.DefaultDatabase`), let go of when the pool closes."""

    def dsn(self) -> str:
        """The DSN (this may start a server)."""

    def close(self) -> None:
        """Let go of what :meth:`dsn` started."""


#: What :class:`Connector` accepts (None: ``PGMEM_DSN``, then libpq's ``PG*`` variables).
Source = Union[  # the SQLAlchemy names are strings: SQLAlchemy is imported only when used
    str, LazyDsn, psycopg.Connection, ConnectionPool, "Engine", "SAConnection", "Session", None
]
#: What :class:`AsyncConnector` accepts.
AsyncSource = str | LazyDsn | psycopg.AsyncConnection | AsyncConnectionPool | None

ITERATIVE_SCAN_VERSION = (0, 8)
CAPABILITIES_QUERY = (
    "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
    " EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')"
)
# Any statement makes psycopg begin the caller's transaction the way it begins it for their own
# statements (with the connection's isolation level and read-only settings).
BEGIN_HOST_TRANSACTION = "SELECT"
# A batch in the caller's transaction runs in a savepoint, released afterwards (rolled back,
# then released, after a failure, so that the caller's transaction goes on). Not rolled back on
# success: psycopg forgets its prepared statements after any ROLLBACK, and the search statement
# would then be parsed and planned again on every call.
BATCH_SAVEPOINT = "SAVEPOINT pgmem_batch"
BATCH_RELEASE = "RELEASE SAVEPOINT pgmem_batch"
BATCH_ROLLBACK = ("ROLLBACK TO SAVEPOINT pgmem_batch", BATCH_RELEASE)
# On Citus a batch on a connection of pgmem's own runs in a transaction block of its own, sent
# in the same round trip: Citus copies a block's SET LOCAL commands to the worker (the search's
# settings, see pgmem.steps.search_settings), and in the implicit transaction of a round trip
# there is no block.
CITUS_BATCH = ("BEGIN", "COMMIT", ("ROLLBACK",))
_RETRYABLE = "pgmem_retryable"
LOCK_TIMEOUT_QUERY = (
    "SELECT set_config('lock_timeout', %s, false) WHERE current_setting('lock_timeout') = '0'"
)
# Behind a transaction-mode pooler a session setting would stay on whichever server connection
# ran it, for its later clients, and miss the others: the lock timeout is set in each
# transaction of pgmem's own instead, with the call's first statement (same round trip).
LOCAL_LOCK_TIMEOUT_QUERY = (
    "SELECT set_config('lock_timeout', %s, true) WHERE current_setting('lock_timeout') = '0'"
)
# Setting up a connection of pgmem's own is not the caller's work: a database's or role's
# statement_timeout (even 1 ms) must limit their calls, not refuse every connection. One
# simple-query string opens the transaction and lifts the timeout in it before anything that
# takes time runs; at COMMIT the configured timeout applies again.
SETUP_BEGIN = "BEGIN; SET LOCAL statement_timeout = 0"
SETUP_END = "COMMIT"
# The first statement of an export's own transaction (pgmem.exporting): one snapshot for all
# it reads, and nothing it could write.
SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _lock_timeout_ms(seconds: float) -> str:
    """``lock_timeout`` (seconds) as PostgreSQL's setting: whole milliseconds, at least one."""
    return f"{max(1, round(_positive('lock_timeout', seconds) * 1000))}ms"


def _connect_kwargs(
    conninfo: str, connect_timeout: float, prepares: bool = True
) -> dict[str, Any]:
    """Connection options of pgmem's pool: autocommit, no server-side prepared statements
    unless ``prepares`` (psycopg's ``prepare_threshold=None``: behind a transaction-mode
    pooler the next transaction may run on a server connection that never saw them), and
    libpq's ``connect_timeout`` unless the DSN or ``PGCONNECT_TIMEOUT`` sets one (libpq counts
    whole seconds, at least 2)."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if not prepares:
        kwargs["prepare_threshold"] = None
    try:
        in_dsn = "connect_timeout" in conninfo_to_dict(conninfo)
    except psycopg.Error:  # malformed: connecting will say so
        in_dsn = False
    if not in_dsn and "PGCONNECT_TIMEOUT" not in os.environ:
        kwargs["connect_timeout"] = max(2, math.ceil(connect_timeout))
    return kwargs


@contextlib.contextmanager
def direct_connection(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection of its own to ``dsn`` (what a re-embedding and learning a
    scale run on, beside any pool), closed on exit; every driver error leaves as a
    :class:`~pgmem.errors.PgmemError`, a malformed DSN as a ``ConfigurationError``."""
    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"invalid connection string: {exc}") from exc
    except psycopg.Error as exc:
        raise translate(exc) from exc
    with conn, wrap_db_errors():
        yield conn


@dataclass(frozen=True)
class ServerCapabilities:
    """What the connected server's pgvector supports, and whether it is a Citus node."""

    pgvector_version: str
    #: The database has the Citus extension: its planner cannot distribute the search
    #: statement's generic plan, so searches run with custom plans there.
    citus: bool = False

    @property
    def iterative_scan(self) -> bool:
        """pgvector >= 0.8 can keep scanning the HNSW index until enough filtered rows match."""
        return parse_version(self.pgvector_version) >= ITERATIVE_SCAN_VERSION


def server_capabilities(row: tuple[Any, ...] | None) -> ServerCapabilities:
    """The capabilities from the row of :data:`CAPABILITIES_QUERY`; SchemaError without one."""
    if row is None or row[0] is None:
        raise SchemaError(
            "pgvector is not installed in this database: run pgmem.migrate(dsn) "
            "(or `pgmem migrate`) first"
        )
    return ServerCapabilities(pgvector_version=row[0], citus=bool(row[1]))


def prepare_connection(conn: psycopg.Connection) -> ServerCapabilities:
    """Register pgvector's types on ``conn`` and read the server's capabilities.

    Runs in its own transaction block: a savepoint when the caller's transaction is open, so
    their work is neither committed nor rolled back.
    """
    with wrap_db_errors(), conn.transaction():
        capabilities = server_capabilities(conn.execute(CAPABILITIES_QUERY).fetchone())
        register_vector(conn)
    return capabilities


async def prepare_connection_async(conn: psycopg.AsyncConnection) -> ServerCapabilities:
    """The twin of :func:`prepare_connection` for an async connection."""
    with wrap_db_errors():
        async with conn.transaction():
            cursor = await conn.execute(CAPABILITIES_QUERY)
            capabilities = server_capabilities(await cursor.fetchone())
            await register_vector_async(conn)
    return capabilities


def _set_up(conn: psycopg.Connection, lock_timeout: str | None) -> ServerCapabilities:
    """Prepare an autocommit connection of pgmem's own (see ``SETUP_BEGIN``): its lock timeout
    when ``lock_timeout`` is given, pgvector's types, the server's capabilities."""
    with wrap_db_errors():
        conn.execute(SETUP_BEGIN)
        if lock_timeout is not None:
            conn.execute(LOCK_TIMEOUT_QUERY, (lock_timeout,))
        capabilities = prepare_connection(conn)
        conn.execute(SETUP_END)
    return capabilities


async def _set_up_async(
    conn: psycopg.AsyncConnection, lock_timeout: str | None
) -> ServerCapabilities:
    """The twin of :func:`_set_up` for an async connection."""
    with wrap_db_errors():
        await conn.execute(SETUP_BEGIN)
        if lock_timeout is not None:
            await conn.execute(LOCK_TIMEOUT_QUERY, (lock_timeout,))
        capabilities = await prepare_connection_async(conn)
        await conn.execute(SETUP_END)
    return capabilities


class Mode(enum.Enum):
    """How a call's work runs on a connection (see :func:`transaction_mode`)."""

    OWN = "its own transaction, committed when the call returns"
    SAVEPOINT = "a savepoint in the caller's open transaction"
    JOIN = "the caller's transaction, begun first; then a savepoint in it"


def transaction_mode(status: TransactionStatus, *, autocommit: bool, host: bool) -> Mode:
    """How pgmem's work runs on a connection in state ``status``. ``host``: the connection is
    the caller's (a psycopg Connection, a SQLAlchemy Connection or Session), not one borrowed
    from a pool or Engine for the call.

    Raises:
        DatabaseError: the caller's transaction has failed, or the connection is busy.
        ConnectionLostError: the connection is closed or broken.
    """
    if status == TransactionStatus.INTRANS:
        return Mode.SAVEPOINT
    if status == TransactionStatus.IDLE:
        return Mode.JOIN if host and not autocommit else Mode.OWN
    if status == TransactionStatus.INERROR:
        raise DatabaseError(
            "the transaction of the connection given to pgmem has failed: roll it back first"
        )
    if status == TransactionStatus.ACTIVE:
        raise DatabaseError("the connection given to pgmem is busy with another statement")
    raise ConnectionLostError("the connection given to pgmem is closed or broken")


def retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a :class:`~pgmem.errors.ConnectionLostError` of a connection lent by
    a pool that was lost before the call's work could have been committed (before COMMIT was
    sent, or in a batch, which only reads): the call may run again on another connection. The
    pools check no connection when they lend it (that would cost a round trip per call), so a
    connection the server closed while it was idle fails this way on its first statement."""
    return isinstance(exc, ConnectionLostError) and getattr(exc, _RETRYABLE, False)


class _Attempt:
    """Where a call's work on a connection stands, for :func:`_marking_retryable`."""

    def __init__(self) -> None:
        self.lent = False  # a pool lent the connection (set once it has)
        self.committing = False  # the work may have been committed (set before COMMIT is sent)


@contextlib.contextmanager
def _marking_retryable() -> Iterator[_Attempt]:
    """Mark a ConnectionLostError leaving the block as :func:`retryable` when a pool had lent
    the connection and the work could not have been committed yet. (Not when no connection
    was lent: the server is unreachable, and trying again would only wait again.)"""
    attempt = _Attempt()
    try:
        yield attempt
    except ConnectionLostError as exc:
        if attempt.lent and not attempt.committing:
            setattr(exc, _RETRYABLE, True)
        raise


@contextlib.contextmanager
def _pool_errors(
    pool: ConnectionPool | AsyncConnectionPool, connect_timeout: float, pool_timeout: float,
    owned: bool = True,
) -> Iterator[None]:
    """Translate a pool's errors: no connection in time is :class:`PoolTimeoutError` when the
    pool holds as many connections as it may (all busy), else :class:`ConnectError` (it could
    not make one); other driver errors as :func:`~pgmem.errors.translate`."""
    try:
        yield
    except PoolTimeout as exc:
        stats = pool.get_stats()
        if stats.get("pool_size", 0) >= pool.max_size and pool.max_size > 0:
            settings = (
                f"pool_max_size={pool.max_size}, pool_timeout={pool_timeout:g} s: raise them, or "
                "make fewer calls at once" if owned else "the pool's max_size and timeout"
            )
            raise PoolTimeoutError(
                f"pool exhausted: all {pool.max_size} connections stayed busy for "
                f"{pool.timeout:g} s ({settings}); the server is fine"
            ) from exc
        raise ConnectError(
            f"could not connect to PostgreSQL: the pool made {stats.get('pool_size', 0)} of "
            f"{pool.max_size} connections in {pool.timeout:g} s (connect_timeout="
            f"{connect_timeout:g} s); check that the server runs and accepts connections"
        ) from exc
    except psycopg.Error as exc:
        raise translate(exc) from exc


def _batch_block(mode: Mode) -> tuple[str, str, tuple[str, ...]]:
    """How a batch that needs a block of its own begins, ends and is undone: a savepoint in the
    caller's transaction, else (Citus) a transaction block (:data:`CITUS_BATCH`)."""
    if mode is Mode.OWN:
        return CITUS_BATCH
    return BATCH_SAVEPOINT, BATCH_RELEASE, BATCH_ROLLBACK


def _caller_settings(mode: Mode) -> tuple[sql.SQL | None, sql.SQL | None]:
    """In the caller's transaction, the statements that keep its settings before a batch and
    restore them after it (``keep_caller_settings``, ``restore_caller_settings``): what the
    batch sets locally must not outlive the call. None and None in pgmem's own transaction."""
    if mode is Mode.OWN:
        return None, None
    blocks = sql_blocks()
    return sql.SQL(blocks["keep_caller_settings"]), sql.SQL(blocks["restore_caller_settings"])


def _end_batch_block(conn: psycopg.Connection, undo: tuple[str, ...]) -> None:
    """Undo the batch's block after a failure (when it is open)."""
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        for command in undo:
            conn.execute(command)


async def _end_batch_block_async(conn: psycopg.AsyncConnection, undo: tuple[str, ...]) -> None:
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        for command in undo:
            await conn.execute(command)


def connector_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of :class:`Connector` and :class:`AsyncConnector` that
    ``settings`` give: pgmem's pool, its timeouts, and the pooler in front of the server."""
    return {
        "max_size": settings.pool_max_size,
        "connect_timeout": settings.connect_timeout,
        "lock_timeout": settings.lock_timeout,
        "pool_timeout": settings.pool_timeout,
        "pooler": settings.pooler,
        "prepares": settings.prepares,
    }


def default_source(source: Any) -> Any:
    """``source``, or the environment's DSN (``PGMEM_DSN``; else empty: libpq's ``PG*``
    variables) for None."""
    return (Settings.from_env().dsn or "") if source is None else source


def _psycopg_connection(sa_connection: SAConnection) -> psycopg.Connection:
    """The psycopg connection under a SQLAlchemy Connection."""
    driver_connection = sa_connection.connection.driver_connection
    if not isinstance(driver_connection, psycopg.Connection):
        raise ConfigurationError(
            "pgmem needs SQLAlchemy's psycopg (3) driver (postgresql+psycopg://...), got "
            f"{type(driver_connection).__name__}"
        )
    return driver_connection


def _check_driver(dialect: Any) -> None:
    if getattr(dialect, "driver", None) != "psycopg" or getattr(dialect, "is_async", False):
        raise ConfigurationError(
            "pgmem needs SQLAlchemy's psycopg (3) driver (postgresql+psycopg://...), got "
            f"{getattr(dialect, 'name', '?')}+{getattr(dialect, 'driver', '?')}"
        )


def _sqlalchemy_kind(source: Any) -> str | None:
    """'engine', 'connection' or 'session' for a SQLAlchemy object, else None. A process that
    never imported SQLAlchemy holds none of its objects, and does not import it here."""
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

    for kind, cls in (("engine", Engine), ("connection", SAConnection), ("session", Session)):
        if isinstance(source, cls):
            return kind
    return None


PoolT = TypeVar("PoolT", ConnectionPool, AsyncConnectionPool)


class _Pooled(Generic[PoolT]):
    """What :class:`Connector` and :class:`AsyncConnector` share: the settings of pgmem's own
    pool (which each twin's ``_new_pool`` makes), the pool in use, and what the server of each
    connection can do."""

    def __init__(
        self, *, min_size: int, max_size: int, connect_timeout: float, lock_timeout: float,
        pool_timeout: float, pooler: str, prepares: bool,
    ) -> None:
        if pooler not in POOLERS:
            raise ConfigurationError(f"pooler must be one of {POOLERS}, got {pooler!r}")
        self._lock_timeout = _lock_timeout_ms(lock_timeout)
        #: Behind a transaction-mode pooler: no session state (see LOCAL_LOCK_TIMEOUT_QUERY).
        self._per_transaction = pooler == "transaction"
        self._prepares = prepares
        self._owned_pool: PoolT | None = None
        self._pool: PoolT | None = None
        self._connect_timeout = connect_timeout
        self._pool_timeout = _positive("pool_timeout", pool_timeout)
        self._pool_sizes = (min_size, max_size)
        self._lazy: LazyDsn | None = None
        self._capabilities: weakref.WeakKeyDictionary[object, ServerCapabilities] = (
            weakref.WeakKeyDictionary()
        )
        self._opened = False

    def _new_pool(self) -> PoolT:
        raise NotImplementedError

    def _pool_arguments(self) -> dict[str, Any]:
        """The arguments of pgmem's pool, but for its ``configure`` hook. Not opened here; and a
        psycopg pool that was closed (by close(), or by a failed open) cannot be opened again,
        so each open after one gets a new pool."""
        min_size, max_size = self._pool_sizes
        return {
            "conninfo": self._conninfo,
            "min_size": min_size,
            "max_size": max_size,
            "open": False,
            "kwargs": self._connect_kwargs,
            "name": "pgmem",
            "timeout": self._pool_timeout,
        }

    def _use_conninfo(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._connect_kwargs = _connect_kwargs(conninfo, self._connect_timeout, self._prepares)
        self._owned_pool = self._pool = self._new_pool()

    def _unopened(self) -> bool:
        """pgmem's own pool is still to be opened (it opens on first use)."""
        return (self._owned_pool is not None or self._lazy is not None) and not self._opened

    @contextlib.contextmanager
    def _probe_errors(self) -> Iterator[None]:
        """Translate the errors of the connection made before pgmem's pool opens (see
        :meth:`Connector._open_pool`)."""
        try:
            yield
        except psycopg.ProgrammingError as exc:  # a malformed DSN
            raise ConfigurationError(f"invalid connection string: {exc}") from exc
        except psycopg.Error as exc:
            raise connect_failed(exc, self._connect_timeout) from exc

    @contextlib.contextmanager
    def _opening(self) -> Iterator[PoolT]:
        """pgmem's own pool, for the block to open, its errors translated; a new pool in its
        place when the block fails."""
        assert self._owned_pool is not None
        try:
            with _pool_errors(self._owned_pool, self._connect_timeout, self._pool_timeout):
                yield self._owned_pool
        except PgmemError:
            self._owned_pool = self._pool = self._new_pool()
            raise

    def _closed(self) -> None:
        """After pgmem's own pool is closed: a new one for the next use (a :class:`LazyDsn`'s
        is made when it opens)."""
        self._owned_pool = self._pool = None if self._lazy else self._new_pool()
        self._opened = False

    @property
    def host(self) -> bool:
        """Whether the source is the caller's own connection (whose transaction pgmem joins),
        not a pool, an Engine or a DSN."""
        raise NotImplementedError

    @property
    def retries(self) -> int:
        """How many times a call may run again after a :func:`retryable` failure: each lost
        connection leaves the pool, so after as many as the pool holds a new one is made."""
        return 0 if self._pool is None else self._pool.max_size

    def _owned(self) -> bool:
        return self._owned_pool is not None and self._pool is self._owned_pool

    def _session_lock_timeout(self) -> str | None:
        """The lock timeout to set on each new connection of pgmem's pool (None behind a
        transaction-mode pooler: see :meth:`_transaction_lock_timeout`)."""
        return None if self._per_transaction else self._lock_timeout

    def _transaction_lock_timeout(self, mode: Mode) -> str | None:
        """The lock timeout to set in a transaction of pgmem's own pool behind a
        transaction-mode pooler (:data:`LOCAL_LOCK_TIMEOUT_QUERY`), else None."""
        if self._per_transaction and mode is Mode.OWN and self._owned():
            return self._lock_timeout
        return None


class Connector(_Pooled[ConnectionPool]):
    """Hands out connections inside a transaction: from pgmem's pool, or from what the caller
    passed (see :data:`Source`)."""

    def __init__(
        self,
        source: Source,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
        pooler: str = "none",
        prepares: bool = True,
    ) -> None:
        super().__init__(
            min_size=min_size, max_size=max_size, connect_timeout=connect_timeout,
            lock_timeout=lock_timeout, pool_timeout=pool_timeout, pooler=pooler,
            prepares=prepares,
        )
        self._connection: psycopg.Connection | None = None
        self._engine: Engine | None = None
        self._sa_connection: SAConnection | None = None
        self._session: Session | None = None
        source = default_source(source)
        kind = _sqlalchemy_kind(source)
        sa_source: Any = source  # of the SQLAlchemy class that kind names
        if isinstance(source, LazyDsn):
            self._lazy = source  # the pool is made when it first opens
        elif isinstance(source, psycopg.Connection):
            self._connection = source
        elif isinstance(source, ConnectionPool):
            self._pool = source
        elif kind == "engine":
            _check_driver(sa_source.dialect)
            self._engine = sa_source
        elif kind == "connection":
            _check_driver(sa_source.dialect)
            self._sa_connection = sa_source
        elif kind == "session":
            self._session = sa_source
        elif not isinstance(source, str):
            raise ConfigurationError(
                "db must be a DSN, a psycopg Connection or ConnectionPool, or a SQLAlchemy "
                f"Engine, Connection or Session, got {type(source).__name__}"
                + (": use pgmem.AsyncMemory" if "Async" in type(source).__name__ else "")
            )
        else:
            self._use_conninfo(source)
        self._lock = threading.Lock()

    @property
    def host(self) -> bool:
        """Whether the source is the caller's own connection (a psycopg Connection, a SQLAlchemy
        Connection or Session), not a pool, an Engine or a DSN."""
        return any(
            source is not None
            for source in (self._connection, self._sa_connection, self._session)
        )

    def _configure(self, conn: psycopg.Connection) -> None:
        # pgmem's own transactions are READ COMMITTED whatever the server's default: duplicate
        # detection needs each statement's fresh snapshot (see pgmem.errors.IsolationError).
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        self._capabilities[conn] = _set_up(conn, self._session_lock_timeout())

    def _new_pool(self) -> ConnectionPool:
        return ConnectionPool(configure=self._configure, **self._pool_arguments())

    def _open_pool(self) -> None:
        """Open pgmem's pool, or fail within the connect timeout saying why.

        One connection is made first, outside the pool: the pool retries a failing connection
        until its timeout and then says only that it timed out, while this one fails at once
        with libpq's reason (refused, unknown host, authentication) or pgmem's (no pgvector).
        """
        if self._lazy is not None and self._owned_pool is None:
            self._use_conninfo(self._lazy.dsn())
        with self._probe_errors():
            probe = psycopg.connect(self._conninfo, **self._connect_kwargs)
        with probe:
            _set_up(probe, None)
        with self._opening() as pool:
            pool.open(wait=True, timeout=self._connect_timeout)

    @contextlib.contextmanager
    def transaction(
        self, *, pipeline: bool = False
    ) -> Iterator[tuple[psycopg.Connection, ServerCapabilities]]:
        """A connection inside a transaction -- pgmem's own, or a savepoint in the caller's (see
        :func:`transaction_mode`) -- and what its server can do; in psycopg's pipeline mode
        with ``pipeline`` (the statements between BEGIN and COMMIT travel together up to each
        result the steps read: an add's are BEGIN, the model check, the locks and insert,
        the sync, COMMIT -- five round trips; opening the pipeline before the transaction
        made psycopg sync after BEGIN and before COMMIT, which saved none).
        Errors leave as :class:`~pgmem.errors.PgmemError` subclasses (see :func:`retryable`)."""
        with self._lend() as (conn, mode, capabilities, attempt), wrap_db_errors(conn), \
                conn.transaction():
            lock_timeout = self._transaction_lock_timeout(mode)
            if pipeline:
                with conn.pipeline():
                    if lock_timeout is not None:
                        conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                    yield conn, capabilities
            else:
                if lock_timeout is not None:
                    conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                yield conn, capabilities
            attempt.committing = True

    @contextlib.contextmanager
    def batch(self) -> Iterator[tuple[psycopg.Connection, ServerCapabilities]]:
        """A connection in pipeline mode, for read-only statements that do not need each
        other's results: what the block queues (:func:`pgmem.store.send`) travels in one round
        trip when the block ends; read the results after it. On a connection of pgmem's own in
        autocommit, with no transaction block (the statements share the implicit transaction of
        the round trip); in the caller's transaction, in a savepoint (what the statements set
        locally lasts until that transaction ends); on a borrowed connection outside
        autocommit (an Engine's), in a transaction of its own (three round trips); on Citus,
        in a transaction block of its own in the same round trip (:data:`CITUS_BATCH`)."""
        with self._lend() as (conn, mode, capabilities, _), wrap_db_errors(conn):
            lock_timeout = self._transaction_lock_timeout(mode)
            if mode is Mode.OWN and conn.autocommit and not capabilities.citus:
                with conn.pipeline():
                    if lock_timeout is not None:
                        conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                    yield conn, capabilities
            elif mode is Mode.OWN and not conn.autocommit:
                # psycopg would send BEGIN (and sync) before the first statement
                with conn.transaction(), conn.pipeline():
                    yield conn, capabilities
            else:
                begin, end, undo = _batch_block(mode)
                keep, restore = _caller_settings(mode)
                try:
                    with conn.pipeline():
                        conn.execute(begin)
                        if lock_timeout is not None:
                            conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                        if keep is not None:
                            conn.execute(keep)
                        yield conn, capabilities
                        if restore is not None:
                            conn.execute(restore)
                        conn.execute(end)
                except BaseException:
                    _end_batch_block(conn, undo)
                    raise

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[psycopg.Connection]:
        """A connection in a read-only REPEATABLE READ transaction of its own -- one snapshot
        for a long read (:class:`pgmem.effects.Stream`) -- or, on the caller's connection in a
        transaction, in a savepoint of it (the caller's snapshot and isolation: pgmem does
        not change them). Errors leave as :class:`~pgmem.errors.PgmemError` subclasses."""
        with self._lend() as (conn, mode, _, _), wrap_db_errors(conn), conn.transaction():
            if mode is Mode.OWN:
                conn.execute(SNAPSHOT)
            yield conn

    @contextlib.contextmanager
    def _lend(self) -> Iterator[tuple[psycopg.Connection, Mode, ServerCapabilities, _Attempt]]:
        """A connection for one call: its transaction mode (with the caller's transaction begun
        when pgmem joins it), what its server can do, and how far the call got (see
        :func:`_marking_retryable`)."""
        with _marking_retryable() as attempt, self._checkout() as (conn, host):
            attempt.lent = self._pool is not None
            with wrap_db_errors():
                mode = transaction_mode(
                    conn.info.transaction_status, autocommit=conn.autocommit, host=host
                )
                if mode is Mode.JOIN:
                    conn.execute(BEGIN_HOST_TRANSACTION)
            yield conn, mode, self._capabilities_of(conn), attempt

    def _capabilities_of(self, conn: psycopg.Connection) -> ServerCapabilities:
        capabilities = self._capabilities.get(conn)
        if capabilities is None:
            capabilities = self._capabilities[conn] = prepare_connection(conn)
        return capabilities

    @contextlib.contextmanager
    def _checkout(self) -> Iterator[tuple[psycopg.Connection, bool]]:
        """A connection, and whether it is the caller's own (whose transaction pgmem joins)."""
        if self._connection is not None:
            yield self._connection, True
            return
        if self._sa_connection is not None or self._session is not None:
            with sqlalchemy_errors():
                if self._session is not None:
                    sa_connection = self._session.connection()
                    _check_driver(sa_connection.dialect)
                else:
                    assert self._sa_connection is not None
                    sa_connection = self._sa_connection
                if not sa_connection.in_transaction():
                    # As SQLAlchemy's autobegin does for a statement: the caller's commit() or
                    # rollback() then ends the transaction that holds pgmem's writes.
                    sa_connection.begin()
                conn = _psycopg_connection(sa_connection)
            yield conn, True
            return
        if self._engine is not None:
            with sqlalchemy_errors():
                sa_connection = self._engine.connect()
            try:
                yield _psycopg_connection(sa_connection), False
            finally:
                with sqlalchemy_errors():
                    sa_connection.close()
            return
        if self._unopened():
            with self._lock:
                if not self._opened:
                    self._open_pool()
                    self._opened = True
        assert self._pool is not None
        with _pool_errors(self._pool, self._connect_timeout, self._pool_timeout, self._owned()), \
                self._pool.connection() as conn:
            yield conn, False

    def close(self) -> None:
        """Close pgmem's own pool (and let go of a :class:`LazyDsn`'s server); a caller's
        connection or pool is left open."""
        if self._owned_pool is not None:
            with self._lock:
                self._owned_pool.close()
                self._closed()
        if self._lazy is not None:
            self._lazy.close()


class AsyncConnector(_Pooled[AsyncConnectionPool]):
    """The twin of :class:`Connector` for psycopg's ``AsyncConnection`` and
    ``AsyncConnectionPool`` (see :data:`AsyncSource`)."""

    def __init__(
        self,
        source: AsyncSource,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
        pooler: str = "none",
        prepares: bool = True,
    ) -> None:
        super().__init__(
            min_size=min_size, max_size=max_size, connect_timeout=connect_timeout,
            lock_timeout=lock_timeout, pool_timeout=pool_timeout, pooler=pooler,
            prepares=prepares,
        )
        self._connection: psycopg.AsyncConnection | None = None
        source = default_source(source)
        if isinstance(source, LazyDsn):
            self._lazy = source  # the pool is made when it first opens
        elif isinstance(source, psycopg.AsyncConnection):
            self._connection = source
        elif isinstance(source, AsyncConnectionPool):
            self._pool = source
        elif not isinstance(source, str):
            raise ConfigurationError(
                "db must be a DSN, or a psycopg AsyncConnection or AsyncConnectionPool, got "
                f"{type(source).__name__}"
                + ("" if "Async" in type(source).__name__ else ": use pgmem.Memory")
            )
        else:
            self._use_conninfo(source)
        self._lock = asyncio.Lock()

    @property
    def host(self) -> bool:
        """Whether the source is the caller's own ``AsyncConnection``, not a pool or a DSN."""
        return self._connection is not None

    async def _configure(self, conn: psycopg.AsyncConnection) -> None:
        await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)
        self._capabilities[conn] = await _set_up_async(conn, self._session_lock_timeout())

    def _new_pool(self) -> AsyncConnectionPool:
        return AsyncConnectionPool(configure=self._configure, **self._pool_arguments())

    async def _open_pool(self) -> None:
        """Open pgmem's pool, or fail within the connect timeout saying why (as
        :meth:`Connector._open_pool`)."""
        if self._lazy is not None and self._owned_pool is None:
            self._use_conninfo(await asyncio.to_thread(self._lazy.dsn))
        with self._probe_errors():
            probe = await psycopg.AsyncConnection.connect(self._conninfo, **self._connect_kwargs)
        async with probe:
            await _set_up_async(probe, None)
        with self._opening() as pool:
            await pool.open(wait=True, timeout=self._connect_timeout)

    @contextlib.asynccontextmanager
    async def transaction(
        self, *, pipeline: bool = False
    ) -> AsyncIterator[tuple[psycopg.AsyncConnection, ServerCapabilities]]:
        """As :meth:`Connector.transaction`."""
        async with self._lend() as (conn, mode, capabilities, attempt):
            with wrap_db_errors(conn):
                async with conn.transaction():
                    lock_timeout = self._transaction_lock_timeout(mode)
                    if pipeline:
                        async with conn.pipeline():
                            if lock_timeout is not None:
                                await conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                            yield conn, capabilities
                    else:
                        if lock_timeout is not None:
                            await conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                        yield conn, capabilities
                    attempt.committing = True

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[tuple[psycopg.AsyncConnection, ServerCapabilities]]:
        """As :meth:`Connector.batch`."""
        async with self._lend() as (conn, mode, capabilities, _):
            with wrap_db_errors(conn):
                lock_timeout = self._transaction_lock_timeout(mode)
                if mode is Mode.OWN and conn.autocommit and not capabilities.citus:
                    async with conn.pipeline():
                        if lock_timeout is not None:
                            await conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                        yield conn, capabilities
                elif mode is Mode.OWN and not conn.autocommit:
                    async with conn.transaction(), conn.pipeline():
                        yield conn, capabilities
                else:
                    begin, end, undo = _batch_block(mode)
                    keep, restore = _caller_settings(mode)
                    try:
                        async with conn.pipeline():
                            await conn.execute(begin)
                            if lock_timeout is not None:
                                await conn.execute(LOCAL_LOCK_TIMEOUT_QUERY, (lock_timeout,))
                            if keep is not None:
                                await conn.execute(keep)
                            yield conn, capabilities
                            if restore is not None:
                                await conn.execute(restore)
                            await conn.execute(end)
                    except BaseException:
                        await _end_batch_block_async(conn, undo)
                        raise

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """As :meth:`Connector.snapshot`."""
        async with self._lend() as (conn, mode, _, _):
            with wrap_db_errors(conn):
                async with conn.transaction():
                    if mode is Mode.OWN:
                        await conn.execute(SNAPSHOT)
                    yield conn

    @contextlib.asynccontextmanager
    async def _lend(
        self,
    ) -> AsyncIterator[tuple[psycopg.AsyncConnection, Mode, ServerCapabilities, _Attempt]]:
        """As :meth:`Connector._lend`."""
        with _marking_retryable() as attempt:
            async with self._checkout() as (conn, host):
                attempt.lent = self._pool is not None
                with wrap_db_errors():
                    mode = transaction_mode(
                        conn.info.transaction_status, autocommit=conn.autocommit, host=host
                    )
                    if mode is Mode.JOIN:
                        await conn.execute(BEGIN_HOST_TRANSACTION)
                yield conn, mode, await self._capabilities_of(conn), attempt

    async def _capabilities_of(self, conn: psycopg.AsyncConnection) -> ServerCapabilities:
        capabilities = self._capabilities.get(conn)
        if capabilities is None:
            capabilities = self._capabilities[conn] = await prepare_connection_async(conn)
        return capabilities

    @contextlib.asynccontextmanager
    async def _checkout(self) -> AsyncIterator[tuple[psycopg.AsyncConnection, bool]]:
        if self._connection is not None:
            yield self._connection, True
            return
        if self._unopened():
            async with self._lock:
                if not self._opened:
                    await self._open_pool()
                    self._opened = True
        assert self._pool is not None
        with _pool_errors(self._pool, self._connect_timeout, self._pool_timeout, self._owned()):
            async with self._pool.connection() as conn:
                yield conn, False

    async def close(self) -> None:
        """Close pgmem's own pool (and let go of a :class:`LazyDsn`'s server); a caller's
        connection or pool is left open."""
        if self._owned_pool is not None:
            async with self._lock:
                await self._owned_pool.close()
                self._closed()
        if self._lazy is not None:
            await asyncio.to_thread(self._lazy.close)
