"""pgmem on Citus: distribute its schema over a cluster by tenant, in one idempotent step.

``pgmem.distribute(dsn)`` (this module's :func:`distribute`) runs on the Citus coordinator after
:func:`pgmem.migrate`: the tenant tables become distributed tables on ``tenant``, colocated with
``memories`` (one tenant's memories,
entities, links, history and lock salt live on one shard), and ``embedding_models`` -- one row
per schema, not per tenant -- a reference table copied to every node. Alembic's version table
stays a local table of the coordinator. A table already distributed is left as it is, so the
call is safe to repeat; :func:`pgmem.migrate` calls it again after upgrading a distributed
schema, so that a table a newer revision creates is distributed too.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgmem.errors import ConfigurationError, SchemaError, wrap_db_errors

#: The table every tenant table is colocated with, first to be distributed.
ANCHOR = "memories"
#: Tables distributed on ``tenant``, in an order that distributes a foreign key's target before
#: the table holding it (``memory_entities`` references ``memories`` and ``entities``).
TENANT_TABLES = ("memories", "entities", "memory_entities", "history", "tenant_secrets")
#: Tables that hold facts of the whole schema, copied to every node.
REFERENCE_TABLES = ("embedding_models",)


def citus_version(conn: psycopg.Connection[Any]) -> str | None:
    """The Citus extension's version in the connected database, or None without it."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()
    return None if row is None else str(row[0])


def is_distributed(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether ``schema.memories`` is a Citus distributed table (False without Citus)."""
    if citus_version(conn) is None:
        return False
    row = conn.execute(
        "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass(%s)",
        (f"{schema}.{ANCHOR}",),
    ).fetchone()
    return row is not None


def distribute(dsn: str = "", *, schema: str = "pgmem") -> list[str]:
    """Distribute pgmem's tables of ``schema`` over the Citus cluster whose coordinator ``dsn``
    names; return the tables this call distributed (empty when all already were).

    Raises:
        ConfigurationError: the server has no Citus extension in this database.
        SchemaError: the schema was not created yet (run :func:`pgmem.migrate` first).
        DatabaseError: Citus refused (e.g. a worker is down).
    """
    done: list[str] = []
    with wrap_db_errors(), psycopg.connect(dsn, autocommit=True) as conn:
        version = citus_version(conn)
        if version is None:
            raise ConfigurationError(
                "this database has no Citus extension: pgmem.distribute needs a Citus "
                "coordinator (CREATE EXTENSION citus, and the workers added with "
                "citus_add_node); on one server, pgmem needs no distribution"
            )
        present = {
            str(row[0])
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            )
        }
        if ANCHOR not in present:
            raise SchemaError(
                f"schema {schema!r} has no pgmem tables in this database: run pgmem.migrate "
                "(or `pgmem migrate`) on the coordinator first"
            )
        placed = {
            str(row[0]): str(row[1])
            for row in conn.execute(
                "SELECT c.relname, p.partmethod FROM pg_dist_partition p"
                " JOIN pg_class c ON c.oid = p.logicalrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s",
                (schema,),
            )
        }
        for table, method in placed.items():
            expected = "n" if table in REFERENCE_TABLES else "h"
            if table in TENANT_TABLES + REFERENCE_TABLES and method != expected:
                raise SchemaError(
                    f"{schema}.{table} is already placed by Citus in another way than pgmem's "
                    f"(partition method {method!r}, pgmem's is {expected!r}): undistribute it "
                    "with undistribute_table and run distribute again"
                )
        anchor = sql.Literal(f"{schema}.{ANCHOR}")
        for table in TENANT_TABLES:
            if table not in present or table in placed:
                continue
            colocate = sql.SQL("'default'") if table == ANCHOR else anchor
            conn.execute(
                sql.SQL(
                    "SELECT create_distributed_table({table}, 'tenant', colocate_with => {co})"
                ).format(table=sql.Literal(f"{schema}.{table}"), co=colocate)
            )
            done.append(table)
        for table in REFERENCE_TABLES:
            if table not in present or table in placed:
                continue
            conn.execute(
                sql.SQL("SELECT create_reference_table({table})").format(
                    table=sql.Literal(f"{schema}.{table}")
                )
            )
            done.append(table)
        # Citus copies a table's rows to its shards and leaves the local copy behind, unread.
        for table in done:
            conn.execute(
                "SELECT truncate_local_data_after_distributing_table(%s)", (f"{schema}.{table}",)
            )
    return done
