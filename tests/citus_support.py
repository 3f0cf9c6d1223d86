"""The Citus cluster of the tests: ``PGMEM_TEST_CITUS_DSN`` names its coordinator (``.ci/run``
starts one with the shared ``cluster.sh``, and sets it). Without it the Citus tests are skipped
with the command that starts one -- except under ``CI=true``, where that is an error. Each test
gets a schema of its own, migrated and distributed, dropped afterwards (a database per test, as
on one server, would have to be created on every node)."""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgmem
from pgmem.citus import REFERENCE_TABLES, TENANT_TABLES, distribute

HOW_TO_GET_A_CLUSTER = (
    "no Citus cluster for tests: start one with `CITUS_PORT=5601 bash "
    "$PGMEM_CITUS_SCRIPTS/cluster.sh start` (PGMEM_CITUS_SCRIPTS: the folder of a Citus "
    "build's cluster.sh, ../shared/citus beside the repository in CI; after "
    "scripts/test-postgres.sh start, which installs pgvector) and export "
    "PGMEM_TEST_CITUS_DSN=<the DSN it prints>"
)


def cluster_dsn() -> str:
    """The coordinator's DSN; skips (fails under CI=true) when there is no cluster."""
    dsn = os.environ.get("PGMEM_TEST_CITUS_DSN")
    problem = None
    if not dsn:
        problem = HOW_TO_GET_A_CLUSTER
    else:
        try:
            with psycopg.connect(dsn, connect_timeout=10) as conn:
                if conn.execute("SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary'"
                                " AND nodeport <> current_setting('port')::int").fetchone() == (0,):
                    problem = f"the Citus coordinator at {dsn} has no workers"
        except psycopg.Error as exc:
            problem = f"the Citus coordinator at {dsn} does not answer: {exc}"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    assert dsn is not None
    return dsn


def new_schema() -> str:
    """A schema name of its own for one test."""
    return f"citus_{uuid.uuid4().hex[:12]}"


def distributed_schema(dsn: str) -> str:
    """A new pgmem schema on the cluster, migrated and distributed."""
    schema = new_schema()
    pgmem.migrate(dsn, schema=schema)
    distribute(dsn, schema=schema)
    return schema


def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` with its distributed tables."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def schema_facts(dsn: str, schema: str = "pgmem") -> str:
    """The rows of ``schema``'s reference tables as JSON (a new schema's: its embedding-model
    record), for :func:`empty_schema` to put back."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT coalesce(jsonb_agg(e), '[]')::text FROM {} e").format(
                sql.Identifier(schema, "embedding_models")
            )
        ).fetchone()
    assert row is not None
    return str(row[0])


def empty_schema(dsn: str, facts: str, schema: str = "pgmem") -> None:
    """Delete every row of ``schema``'s pgmem tables, then put back the reference rows
    ``facts`` (from :func:`schema_facts`): the schema is as :func:`pgmem.migrate` left it."""
    tables = [sql.Identifier(schema, t) for t in (*TENANT_TABLES, *REFERENCE_TABLES)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(tables)))
        conn.execute(
            sql.SQL("INSERT INTO {t} SELECT * FROM jsonb_populate_recordset(NULL::{t}, %s)").format(
                t=sql.Identifier(schema, "embedding_models")
            ),
            (facts,),
        )


#: The setting that has Citus report each command it sends to a worker, as a notice.
LOG_REMOTE_COMMANDS = "SET citus.log_remote_commands = on"


class RemoteLog:
    """A connection to the coordinator that logs the commands Citus sends to the workers
    (``citus.log_remote_commands``): :meth:`commands` gives those of the calls since
    :meth:`clear`, each with the node that ran it."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self._seen: list[tuple[str, str]] = []
        self.listen(self.conn)
        self.conn.execute(LOG_REMOTE_COMMANDS)

    def listen(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        """Log the remote commands of ``conn`` too (an async connection's, for pgmem's async
        facade), once it has run :data:`LOG_REMOTE_COMMANDS`."""
        conn.add_notice_handler(self._notice)

    def _notice(self, diagnostic: Any) -> None:
        message = diagnostic.message_primary or ""
        if message.startswith("issuing "):
            self._seen.append((message.removeprefix("issuing "), diagnostic.message_detail or ""))

    def clear(self) -> None:
        """Forget what was logged so far."""
        self._seen.clear()

    def commands(self) -> list[tuple[str, str]]:
        """(command, node) of each command sent since :meth:`clear`; the node is "local" for a
        shard of the coordinator itself."""
        return [(c, re.sub(r" connectionId: \d+$", "", n).removeprefix("on server ") or "local")
                for c, n in self._seen]

    def nodes(self) -> set[str]:
        """The nodes the commands since :meth:`clear` went to."""
        return {node for _, node in self.commands()}

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
