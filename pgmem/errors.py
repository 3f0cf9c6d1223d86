"""pgmem's exceptions: one root, so callers catch :class:`PgmemError` and never a driver error.

Each class's docstring is its default message. Errors from psycopg are translated in one place,
:func:`wrap_db_errors`, and raised ``from`` the driver's exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg


class PgmemError(Exception):
    """pgmem failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class InvalidInputError(PgmemError, ValueError):
    """An argument is not valid."""


class LimitError(InvalidInputError):
    """An input is larger than pgmem accepts: the message names the limit and its setting
    (a field of :class:`pgmem.Limits`, or ``max_text_length``)."""


class ScopeError(InvalidInputError):
    """Give at least one of user_id, agent_id or run_id."""


class FilterError(InvalidInputError):
    """The metadata filter is not valid."""


class IdTakenError(InvalidInputError):
    """An item brings an id that a memory of another scope of the tenant has: nothing of its
    batch was written. The message names the id, never the memory."""


class DuplicateError(InvalidInputError):
    """Another memory of the scope already has this text: the update is refused (an add of it
    returns that memory with duplicate=True)."""


class FilterLimitError(FilterError, LimitError):
    """The metadata filter is larger than pgmem accepts (see :class:`pgmem.Limits`)."""


class NotFoundError(PgmemError, LookupError):
    """No memory has this id in this tenant."""


class EmbeddingError(PgmemError):
    """The embedder returned unusable vectors."""


class DimensionMismatchError(EmbeddingError):
    """The embedder's dimension differs from the schema's."""


class SchemaError(PgmemError):
    """The database schema is missing or does not match this version of pgmem."""


class PgvectorError(SchemaError):
    """pgvector is missing from the server, or too old (pgmem needs 0.5 or newer)."""


class ConfigurationError(PgmemError):
    """pgmem is not configured correctly."""


class ModelMismatchError(ConfigurationError):
    """The embedder is not the model the schema's vectors were made with: open the Memory with
    that model, or move the schema to the new one with pgmem.reembed (`pgmem reembed`)."""


class IsolationError(ConfigurationError):
    """Duplicate detection needs READ COMMITTED or SERIALIZABLE, not REPEATABLE READ: use another
    isolation level for the transaction, or pass dedupe=False."""


class UnsafePathError(ConfigurationError):
    """A file or folder pgmem would read from its data directory belongs to another user, or
    others can write to it: pgmem refuses it rather than trust it (the message says how to fix
    it)."""


class DatabaseError(PgmemError):
    """The database reported an error."""


class ConnectionLostError(DatabaseError):
    """The connection to PostgreSQL failed or was closed by the server."""


class ConnectError(DatabaseError):
    """pgmem could not connect to PostgreSQL: check the DSN and that the server runs, or give it
    longer with ``connect_timeout``."""


class ReplicaUnavailableError(ConnectError):
    """The read replica (``read_dsn``) could not be reached or its connection was lost, and
    ``replica_fallback`` is ``"error"``: nothing was read from the primary instead."""


class PoolTimeoutError(DatabaseError):
    """Every connection of pgmem's pool stayed busy for ``pool_timeout`` seconds: raise
    ``pool_max_size`` or ``pool_timeout``, or make fewer calls at once. The server is fine."""


class StatementRefusedError(DatabaseError):
    """The driver refused a statement before sending it (e.g. more than 65,535 parameters):
    nothing was sent and the connection is fine; trying again would fail again."""


class QueryTimeoutError(DatabaseError):
    """A statement ran longer than the server's statement_timeout (or waited for a lock longer
    than lock_timeout) and was cancelled."""


class LockTimeoutError(QueryTimeoutError):
    """A statement waited for a lock longer than lock_timeout (another transaction holds it)
    and was cancelled: the call's transaction wrote nothing, and the call may be retried."""


class MissingSchemaError(DatabaseError, SchemaError):
    """A statement met no table (or schema) where pgmem's schema should be: the database is not
    migrated, is older than this pgmem, or the schema name is not the one migrated."""


# SQLSTATEs after which the session is gone: connection exceptions (class 08), the server
# terminating it (pg_terminate_backend, shutdown, crash, starting up), too many connections,
# idle-in-transaction timeout.
_CONNECTION_SQLSTATES = ("08", "57P01", "57P02", "57P03", "53300", "25P03")


def server_message(exc: psycopg.Error) -> str:
    """The server's message for ``exc``, without the statement text and caret psycopg adds."""
    return exc.diag.message_primary or str(exc).splitlines()[0]


def translate(exc: psycopg.Error, conn: psycopg.BaseConnection[Any] | None = None) -> DatabaseError:
    """The :class:`DatabaseError` subclass that stands for a psycopg error (raised on ``conn``,
    when known: an error without SQLSTATE that leaves it working came from the driver itself)."""
    if refused_by_driver(exc, conn):
        return StatementRefusedError(f"the driver refused the statement, nothing was sent: {exc}")
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return QueryTimeoutError(f"statement cancelled: {exc}")
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return LockTimeoutError(f"lock not available: {server_message(exc)}")
    if _connection_lost(exc):
        return ConnectionLostError(f"connection to PostgreSQL failed: {exc}")
    if isinstance(exc, (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)):
        return MissingSchemaError(
            f"{server_message(exc)}: pgmem's schema is not in this database, or is "
            "older than this pgmem, or has another name: run pgmem.migrate(dsn) or `pgmem "
            "migrate` (with the schema name you use)"
        )
    # Deadlocks, serialization failures, full disks... are OperationalErrors too, but the
    # connection survives them: they are no ConnectionLostError.
    return DatabaseError(f"{type(exc).__name__}: {exc}")


def refused_by_driver(exc: psycopg.Error, conn: psycopg.BaseConnection[Any] | None) -> bool:
    """Whether libpq or psycopg refused a statement on ``conn`` before the server saw it (as
    libpq does past 65,535 parameters): no SQLSTATE, and the connection still works."""
    return (
        conn is not None
        and exc.sqlstate is None
        and isinstance(exc, psycopg.OperationalError)
        and not isinstance(exc, psycopg.errors.PipelineAborted)
        and not conn.closed
        and not conn.broken
        and conn.pgconn.status == psycopg.pq.ConnStatus.OK
        and conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        and conn.info.transaction_status
        in (psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.INTRANS)
    )


def connect_failed(exc: psycopg.Error, connect_timeout: float | None = None) -> DatabaseError:
    """The error for a connection that could not be made (:class:`ConnectError` unless the
    server answered with a SQLSTATE, e.g. a missing database)."""
    if exc.sqlstate is not None and not exc.sqlstate.startswith("08"):
        return translate(exc)
    waited = "" if connect_timeout is None else f" (connect_timeout={connect_timeout:g} s)"
    return ConnectError(
        f"could not connect to PostgreSQL{waited}: {str(exc).strip()}; check the DSN and that "
        "the server runs, or raise connect_timeout"
    )


def _connection_lost(exc: psycopg.Error) -> bool:
    sqlstate = exc.sqlstate
    if sqlstate is not None:
        return sqlstate.startswith(_CONNECTION_SQLSTATES)
    # No SQLSTATE: libpq's own connection failures and psycopg_pool's errors (no connection in
    # time, pool closed) -- but not a pipeline aborted by an earlier error.
    return isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, psycopg.errors.PipelineAborted
    )


@contextlib.contextmanager
def wrap_db_errors(conn: psycopg.BaseConnection[Any] | None = None) -> Iterator[None]:
    """Raise psycopg errors from inside the block (on ``conn``, when known) as
    :class:`DatabaseError` subclasses."""
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc, conn) from exc
