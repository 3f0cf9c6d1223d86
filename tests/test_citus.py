"""pgmem on a real Citus cluster (tests/citus_support.py): distribution in one step, migrations
after it, and the operations of one tenant, each routed to the one worker holding the tenant."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

import pgmem
from pgmem.distribute import REFERENCE_TABLES, TENANT_TABLES, distribute
from tests.citus_support import drop_schema, new_schema

pytestmark = pytest.mark.citus


def placement(dsn: str, schema: str) -> dict[str, tuple[str, int]]:
    """Each pgmem table Citus knows: its partition method and colocation group."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, p.partmethod, p.colocationid FROM pg_dist_partition p"
            " JOIN pg_class c ON c.oid = p.logicalrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
    return {str(r[0]): (str(r[1]), int(r[2])) for r in rows}


def test_distribute_needs_citus(db_dsn: str) -> None:
    with pytest.raises(pgmem.ConfigurationError, match="no Citus extension"):
        distribute(db_dsn)


def test_distribute_needs_the_schema(citus_dsn: str) -> None:
    with pytest.raises(pgmem.SchemaError, match="migrate"):
        distribute(citus_dsn, schema=new_schema())


def test_distribute_colocates_by_tenant_and_is_idempotent(citus_dsn: str) -> None:
    schema = new_schema()
    try:
        pgmem.migrate(citus_dsn, schema=schema)
        assert distribute(citus_dsn, schema=schema) == [*TENANT_TABLES, *REFERENCE_TABLES]
        assert distribute(citus_dsn, schema=schema) == []
        placed = placement(citus_dsn, schema)
        assert {t: placed[t][0] for t in placed} == {
            **{t: "h" for t in TENANT_TABLES}, **{t: "n" for t in REFERENCE_TABLES}}
        assert len({placed[t][1] for t in TENANT_TABLES}) == 1  # one colocation group
        assert "alembic_version" not in placed
    finally:
        drop_schema(citus_dsn, schema)


def test_distributed_at_an_older_revision_upgrades_to_head(citus_dsn: str) -> None:
    """Revision 0006 alters the distributed tables, 0007 creates one that migrate distributes."""
    schema = new_schema()
    try:
        pgmem.migrate(citus_dsn, schema=schema)
        pgmem.downgrade(citus_dsn, "0005", schema=schema)
        assert "tenant_secrets" not in distribute(citus_dsn, schema=schema)
        pgmem.migrate(citus_dsn, schema=schema)
        placed = placement(citus_dsn, schema)
        assert placed["tenant_secrets"][0] == "h"
        assert placed["tenant_secrets"][1] == placed["memories"][1]
        with psycopg.connect(citus_dsn) as conn:
            assert conn.execute(
                f"SELECT version_num FROM {schema}.alembic_version").fetchone() == ("0007",)
            # 0006's columns and partial unique index reached the shards
            conn.execute(
                f"INSERT INTO {schema}.memories (tenant, namespace, key, text, content_hash,"
                " embedding, lexemes, lexeme_count)"
                " VALUES ('t', '{a}', 'k', 'x', 'h', array_fill(0.1, '{384}')::vector, '', 0)")
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(
                    f"INSERT INTO {schema}.memories (tenant, namespace, key, text, content_hash,"
                    " embedding, lexemes, lexeme_count)"
                    " VALUES ('t', '{a}', 'k', 'y', 'h', array_fill(0.1, '{384}')::vector, '', 0)")
    finally:
        drop_schema(citus_dsn, schema)


def test_cli_distribute(citus_dsn: str) -> None:
    schema = new_schema()
    try:
        command = [sys.executable, "-m", "pgmem.cli", "--dsn", citus_dsn, "--schema", schema,
                   "distribute"]
        first = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        assert "distributed now: memories, entities" in first.stdout
        again = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        assert "already was" in again.stdout
    finally:
        drop_schema(citus_dsn, schema)


def test_cli_distribute_without_citus(db_dsn: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pgmem.cli", "--dsn", db_dsn, "distribute"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "pgmem: error: this database has no Citus extension" in done.stderr
    assert "Traceback" not in done.stderr
