"""Create or upgrade pgmem's schema with Alembic, from Python or from the command line.

``migrate(dsn)`` is idempotent: it checks pgvector, creates the extension if needed, and runs
every pending migration in pgmem's own schema (version table included) under an advisory lock,
so concurrent callers and a host application's own Alembic history never collide.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgmem.citus import distribute, is_distributed
from pgmem.errors import (
    ConfigurationError,
    DatabaseError,
    ModelMismatchError,
    PgvectorError,
    SchemaError,
    translate,
    wrap_db_errors,
)

if TYPE_CHECKING:  # Alembic and SQLAlchemy are imported when used: a command that runs no
    from alembic.config import Config  # migration starts faster (pgmem's CLI)
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

DEFAULT_SCHEMA = "pgmem"
DEFAULT_DIM = 384
MIN_PGVECTOR = (0, 5)
#: How embeddings are stored: pgvector's ``vector`` (4-byte floats; HNSW up to 2,000
#: dimensions) or ``halfvec`` (2-byte floats, pgvector >= 0.7; HNSW up to 4,000).
STORAGES = ("vector", "halfvec")
MAX_DIM = {"vector": 2000, "halfvec": 4000}  # the most an HNSW index takes
HALFVEC_PGVECTOR = (0, 7)
# pg_advisory_xact_lock key held while migrating ("pgmem" in ASCII).
MIGRATION_LOCK_KEY = 0x70676D656D

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def default_storage(dim: int) -> str:
    """``vector`` up to 2,000 dimensions (pgvector's HNSW limit for it), ``halfvec`` above."""
    return "vector" if dim <= MAX_DIM["vector"] else "halfvec"


def check_storage(dim: object, storage: object) -> tuple[int, str]:
    """``(dim, storage)`` checked, ``storage`` None choosing :func:`default_storage`.

    Raises:
        ConfigurationError: not a dimension an HNSW index of that storage can hold.
    """
    top = MAX_DIM["halfvec"]
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= top:
        raise ConfigurationError(
            f"dim must be an integer from 1 to {top} (pgvector's HNSW limit, as halfvec), "
            f"got {dim!r}"
        )
    chosen = default_storage(dim) if storage is None else storage
    if chosen not in STORAGES:
        raise ConfigurationError(f"storage must be one of {STORAGES}, got {storage!r}")
    assert isinstance(chosen, str)
    if dim > MAX_DIM[chosen]:
        raise ConfigurationError(
            f"{dim} dimensions are more than an HNSW index of {chosen} takes "
            f"({MAX_DIM[chosen]}): use storage='halfvec' (up to {top})"
        )
    return dim, chosen


@dataclass(frozen=True)
class MigrationSettings:
    """Where the schema lives, and the embedding dimension and storage (``vector`` or
    ``halfvec``; None: by the dimension, see :func:`default_storage`) it is created with."""

    schema: str = DEFAULT_SCHEMA
    dim: int = DEFAULT_DIM
    storage: str | None = None

    def __post_init__(self) -> None:
        check_schema_name(self.schema)
        _, storage = check_storage(self.dim, self.storage)
        object.__setattr__(self, "storage", storage)

    @property
    def vector_type(self) -> str:
        """The column type's name, ``vector`` or ``halfvec``."""
        return self.storage or default_storage(self.dim)

    @property
    def cosine_ops(self) -> str:
        """The HNSW operator class for cosine distance on the column type."""
        return f"{self.vector_type}_cosine_ops"


def check_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case identifier; raise ConfigurationError if not."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigurationError(
            f"schema must be a lower-case identifier (letters, digits, _), got {schema!r}"
        )
    return schema


def current_settings() -> MigrationSettings:
    """The settings of the migration run in progress (for use inside migration scripts)."""
    from alembic import context

    settings = context.config.attributes.get("pgmem_settings")
    if not isinstance(settings, MigrationSettings):
        raise SchemaError("pgmem migrations must run through pgmem's Alembic environment")
    return settings


def engine_for(dsn: str) -> Engine:
    """A SQLAlchemy engine on psycopg 3 for a libpq DSN (URL or key=value; '' uses PG* vars).
    Raises ConfigurationError for a malformed one."""
    from sqlalchemy import create_engine

    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"invalid connection string: {exc}") from exc

    # No server-side prepared statements: a migration repeats few statements, and behind a
    # transaction-mode pooler they would stay on a server connection other clients get next.
    return create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn, prepare_threshold=None)
    )


def alembic_config(settings: MigrationSettings, connection: Connection | None = None) -> Config:
    """An Alembic Config for pgmem's migrations as installed with the package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("pgmem.migrations")))
    config.attributes["pgmem_settings"] = settings
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def migrate(
    dsn: str = "",
    *,
    dim: int = DEFAULT_DIM,
    schema: str = DEFAULT_SCHEMA,
    storage: str | None = None,
    model: str | None = None,
) -> None:
    """Create pgmem's schema, or bring it to the newest revision. Safe to call repeatedly.

    ``dsn`` is a libpq connection string or URL; empty uses libpq's ``PG*`` variables.
    ``dim`` is the embedding dimension, fixed when the schema is first created (afterwards
    only :func:`pgmem.reembed` changes it). ``storage`` is ``"vector"`` or ``"halfvec"``
    (half-precision floats: half the space, and HNSW up to 4,000 dimensions, pgvector >= 0.7);
    None chooses ``vector`` up to 2,000 dimensions and ``halfvec`` above for a new schema, and
    accepts what an existing one has. ``model`` records the name of the embedding model (see
    :func:`pgmem.embedding_space.embedder_name`) when none is recorded yet; otherwise the first
    ``Memory`` that writes records its embedder's.

    Raises:
        ConfigurationError: a bad ``dim``, ``storage`` or schema name.
        PgvectorError: pgvector is not available on the server, or older than 0.5 (0.7 for
            halfvec).
        SchemaError: the schema exists with another dimension or storage.
        ModelMismatchError: the schema records another model than ``model``.
        DatabaseError: the server refused (e.g. no privilege to create the extension).
    """
    settings = MigrationSettings(schema=schema, dim=dim, storage=storage)
    engine = engine_for(dsn)
    try:
        with sqlalchemy_errors(), engine.begin() as connection:
            _check_pgvector(connection, halfvec=settings.storage == "halfvec")
            from alembic import command
            from sqlalchemy import text

            command.upgrade(alembic_config(settings, connection), "head")
            existing = stored_model(connection, schema)
            assert existing is not None  # revision 0004 made the table and its row
            stored_name, stored_dim, stored_storage = existing
            if stored_dim != dim:
                raise SchemaError(
                    f"schema {schema!r} stores {stored_dim}-dimensional embeddings; "
                    f"migrate was asked for {dim} (pgmem.reembed moves it to another model)"
                )
            if storage is not None and stored_storage != storage:
                raise SchemaError(
                    f"schema {schema!r} stores embeddings as {stored_storage}; migrate was "
                    f"asked for {storage} (pgmem.reembed(..., storage=...) changes it)"
                )
            if model is not None:
                if stored_name is None:
                    connection.execute(
                        text(
                            f'UPDATE "{schema}".embedding_models SET model = :model'
                            " WHERE role = 'current' AND model IS NULL"
                        ),
                        {"model": model},
                    )
                elif stored_name != model:
                    raise ModelMismatchError(
                        f"schema {schema!r} holds embeddings of model {stored_name!r} "
                        f"({stored_dim} dimensions); migrate was asked for {model!r}: move the "
                        "schema to it with pgmem.reembed (or `pgmem reembed`)"
                    )
    finally:
        engine.dispose()
    _keep_distributed(dsn, schema)


def _keep_distributed(dsn: str, schema: str) -> None:
    """On a Citus coordinator whose schema is distributed, distribute a table a newer revision
    created (it would otherwise stay a local table of the coordinator)."""
    with wrap_db_errors(), psycopg.connect(dsn, autocommit=True) as conn:
        distributed = is_distributed(conn, schema)
    if distributed:
        distribute(dsn, schema=schema)


def downgrade(dsn: str = "", revision: str = "base", *, schema: str = DEFAULT_SCHEMA) -> None:
    """Downgrade pgmem's schema to ``revision`` ('base' drops every pgmem table)."""
    settings = MigrationSettings(schema=schema)
    engine = engine_for(dsn)
    try:
        with sqlalchemy_errors(), engine.begin() as connection:
            from alembic import command

            command.downgrade(alembic_config(settings, connection), revision)
    finally:
        engine.dispose()


def schema_revision(connection: Connection, schema: str = DEFAULT_SCHEMA) -> str | None:
    """The Alembic revision pgmem's schema is at, or None when it was never migrated."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table_schema": schema})
    return context.get_current_revision()


def schema_dimension(connection: Connection, schema: str = DEFAULT_SCHEMA) -> int | None:
    """The dimension of ``memories.embedding`` in the catalog, or None if there is no table."""
    from sqlalchemy import text

    row = connection.execute(
        text(
            "SELECT a.atttypmod FROM pg_attribute a"
            " WHERE a.attrelid = to_regclass(:table) AND a.attname = 'embedding'"
        ),
        {"table": f"{schema}.memories"},
    ).first()
    return None if row is None else int(row[0])


def stored_model(
    connection: Connection, schema: str = DEFAULT_SCHEMA
) -> tuple[str | None, int, str] | None:
    """The model name (None until recorded), dimension and storage recorded for the schema's
    vectors, or None before revision 0004."""
    from sqlalchemy import text

    check_schema_name(schema)
    if connection.execute(
        text("SELECT to_regclass(:table)"), {"table": f"{schema}.embedding_models"}
    ).scalar() is None:
        return None
    row = connection.execute(
        text(f'SELECT model, dim, storage FROM "{schema}".embedding_models'
             " WHERE role = 'current'")
    ).one()
    return row[0], int(row[1]), str(row[2])


def _check_pgvector(connection: Connection, *, halfvec: bool = False) -> None:
    from sqlalchemy import text

    row = connection.execute(
        text(
            "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
            " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"
        )
    ).one()
    installed, available = row
    if installed is None and available is None:
        raise PgvectorError(
            "pgvector is not installed on this PostgreSQL server: install it "
            "(e.g. the postgresql-NN-pgvector package, or the pgvector/pgvector Docker image)"
        )
    version = installed or available
    if parse_version(version) < MIN_PGVECTOR:
        raise PgvectorError(
            f"pgvector {version} is too old: pgmem needs 0.5 or newer (0.8 recommended)"
            + ("; run ALTER EXTENSION vector UPDATE" if installed else "")
        )
    if halfvec and parse_version(version) < HALFVEC_PGVECTOR:
        raise PgvectorError(
            f"pgvector {version} has no halfvec type, which embeddings of more than "
            f"{MAX_DIM['vector']} dimensions need: pgvector 0.7 or newer is required"
        )


def parse_version(version: str) -> tuple[int, ...]:
    """'0.8.0' -> (0, 8, 0); non-numeric parts are ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


@contextlib.contextmanager
def sqlalchemy_errors() -> Iterator[None]:
    """Raise SQLAlchemy's errors (and the driver's it wraps) as pgmem's: the one translation,
    for every SQLAlchemy engine, connection or session pgmem uses."""
    from sqlalchemy import exc as sa_exc

    try:
        yield
    except sa_exc.DBAPIError as exc:
        if isinstance(exc.orig, psycopg.Error):
            raise translate(exc.orig) from exc
        raise DatabaseError(f"{type(exc).__name__}: {exc}") from exc
    except sa_exc.SQLAlchemyError as exc:
        raise DatabaseError(f"{type(exc).__name__}: {exc}") from exc
