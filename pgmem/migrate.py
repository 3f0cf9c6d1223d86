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
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from pgmem.errors import ConfigurationError, PgvectorError, SchemaError, translate

if TYPE_CHECKING:  # Alembic is imported when a migration runs: a command that runs none
    from alembic.config import Config  # starts faster (pgmem's CLI)

DEFAULT_SCHEMA = "pgmem"
DEFAULT_DIM = 384
MIN_PGVECTOR = (0, 5)
# pg_advisory_xact_lock key held while migrating ("pgmem" in ASCII).
MIGRATION_LOCK_KEY = 0x70676D656D

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MAX_DIM = 16000  # pgvector's limit for the vector type


@dataclass(frozen=True)
class MigrationSettings:
    """Where the schema lives and the embedding dimension it is created with."""

    schema: str = DEFAULT_SCHEMA
    dim: int = DEFAULT_DIM

    def __post_init__(self) -> None:
        check_schema_name(self.schema)
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or not 1 <= self.dim <= _MAX_DIM:
            raise ConfigurationError(f"dim must be an integer from 1 to {_MAX_DIM}, got {self.dim!r}")


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
    """A SQLAlchemy engine on psycopg 3 for a libpq DSN (URL or key=value; '' uses PG* vars)."""
    return create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))


def alembic_config(settings: MigrationSettings, connection: Connection | None = None) -> Config:
    """An Alembic Config for pgmem's migrations as installed with the package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("pgmem.migrations")))
    config.attributes["pgmem_settings"] = settings
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def migrate(dsn: str = "", *, dim: int = DEFAULT_DIM, schema: str = DEFAULT_SCHEMA) -> None:
    """Create pgmem's schema, or bring it to the newest revision. Safe to call repeatedly.

    ``dsn`` is a libpq connection string or URL; empty uses libpq's ``PG*`` variables.
    ``dim`` is the embedding dimension, fixed when the schema is first created.

    Raises:
        PgvectorError: pgvector is not available on the server, or older than 0.5.
        SchemaError: the schema exists with another embedding dimension.
        DatabaseError: the server refused (e.g. no privilege to create the extension).
    """
    settings = MigrationSettings(schema=schema, dim=dim)
    engine = engine_for(dsn)
    try:
        with _wrap_sqlalchemy_errors(), engine.begin() as connection:
            _check_pgvector(connection)
            from alembic import command

            command.upgrade(alembic_config(settings, connection), "head")
            existing = schema_dimension(connection, schema)
            if existing != dim:
                raise SchemaError(
                    f"schema {schema!r} was created for {existing}-dimensional embeddings; "
                    f"migrate was asked for {dim}"
                )
    finally:
        engine.dispose()


def downgrade(dsn: str = "", revision: str = "base", *, schema: str = DEFAULT_SCHEMA) -> None:
    """Downgrade pgmem's schema to ``revision`` ('base' drops every pgmem table)."""
    settings = MigrationSettings(schema=schema)
    engine = engine_for(dsn)
    try:
        with _wrap_sqlalchemy_errors(), engine.begin() as connection:
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
    row = connection.execute(
        text(
            "SELECT a.atttypmod FROM pg_attribute a"
            " WHERE a.attrelid = to_regclass(:table) AND a.attname = 'embedding'"
        ),
        {"table": f"{schema}.memories"},
    ).first()
    return None if row is None else int(row[0])


def _check_pgvector(connection: Connection) -> None:
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


def parse_version(version: str) -> tuple[int, ...]:
    """'0.8.0' -> (0, 8, 0); non-numeric parts are ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


@contextlib.contextmanager
def _wrap_sqlalchemy_errors() -> Iterator[None]:
    """SQLAlchemy wraps driver errors in its own classes; raise pgmem's instead."""
    try:
        yield
    except DBAPIError as exc:
        if isinstance(exc.orig, psycopg.Error):
            raise translate(exc.orig) from exc
        raise
