"""A throwaway database for one benchmark run, on a server the caller names."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

DSN_VARIABLES = ("PGMEM_BENCH_DSN", "PGMEM_TEST_DSN")


def coordinator_dsn(explicit: str | None) -> str:
    """A Citus coordinator's DSN: ``explicit``, else ``PGMEM_TEST_CITUS_DSN``; else SystemExit."""
    dsn = explicit or os.environ.get("PGMEM_TEST_CITUS_DSN")
    if not dsn:
        raise SystemExit("no Citus coordinator: pass --citus-dsn or set PGMEM_TEST_CITUS_DSN")
    return dsn


def server_dsn(explicit: str | None) -> str:
    """``explicit``, else the first of :data:`DSN_VARIABLES` that is set; else SystemExit."""
    for dsn in (explicit, *(os.environ.get(name) for name in DSN_VARIABLES)):
        if dsn:
            return dsn
    raise SystemExit(f"no server: pass --dsn or set one of {', '.join(DSN_VARIABLES)}")


@contextlib.contextmanager
def scratch_database(dsn: str, name: str, *, keep: bool = False) -> Iterator[str]:
    """Create database ``name`` on ``dsn``'s server and yield its DSN; drop it afterwards
    unless ``keep``. Everything connected to it must be closed by then."""
    _execute(dsn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        if not keep:
            _execute(dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def _execute(dsn: str, statement: sql.Composed) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)
