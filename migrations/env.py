"""Alembic environment for pgmem's schema.

Runs from ``pgmem.migrate()`` (which hands over a connection and settings through
``config.attributes``) or from Alembic's command line in a checkout:

    alembic -x dsn=postgresql://... [-x schema=pgmem] [-x dim=384] [-x storage=halfvec] upgrade head

Everything, the version table included, lives in pgmem's own PostgreSQL schema, so a host
application's Alembic history in the same database is never touched.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from pgmem.migrate import MIGRATION_LOCK_KEY, MigrationSettings, engine_for

config = context.config


def _settings() -> MigrationSettings:
    settings = config.attributes.get("pgmem_settings")
    if settings is not None:
        return settings  # type: ignore[no-any-return]
    x = context.get_x_argument(as_dictionary=True)
    return MigrationSettings(
        schema=x.get("schema", os.environ.get("PGMEM_SCHEMA", "pgmem")),
        dim=int(x.get("dim", os.environ.get("PGMEM_DIM", "384"))),
        storage=x.get("storage", os.environ.get("PGMEM_STORAGE")) or None,
    )


def _run(connection: Connection, settings: MigrationSettings) -> None:
    config.attributes["pgmem_settings"] = settings
    # One migrator at a time; the lock ends with the migration's transaction.
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    connection.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    quoted = connection.dialect.identifier_preparer.quote_identifier(settings.schema)
    connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
    context.configure(
        connection=connection,
        version_table_schema=settings.schema,
        include_schemas=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    settings = _settings()
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection, settings)
        return
    dsn = context.get_x_argument(as_dictionary=True).get("dsn") or os.environ.get("PGMEM_DSN", "")
    engine = engine_for(dsn)
    with engine.begin() as connection:
        _run(connection, settings)


if context.is_offline_mode():
    raise SystemExit("pgmem migrations run online only: pass -x dsn=... or set PGMEM_DSN")
run_migrations_online()
