"""The schema: Alembic round trips, schema.sql in lock-step, the Citus key layout, and living
beside a host application's own Alembic history."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

import psycopg
import pytest

import pgmem
from pgmem.errors import ConfigurationError, SchemaError
from tests.revision_support import HEAD

REPO = Path(__file__).resolve().parent.parent

CATALOG = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attstorage
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE n.nspname = 'pgmem' AND c.relkind = 'r' AND a.attnum > 0
           AND NOT a.attisdropped AND c.relname <> 'alembic_version'
         ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes
         WHERE schemaname = 'pgmem' AND tablename <> 'alembic_version' ORDER BY 1""",
    "storage options": """
        SELECT c.relname, c.reloptions
          FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'pgmem' AND c.relkind = 'r' AND c.relname <> 'alembic_version'
         ORDER BY 1""",
    "constraints": """
        SELECT c.relname, k.conname, pg_get_constraintdef(k.oid)
          FROM pg_constraint k
          JOIN pg_class c ON c.oid = k.conrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'pgmem' AND c.relname <> 'alembic_version'
         ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_function_arguments(p.oid), p.prosecdef, p.proconfig, p.prosrc
          FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'pgmem'
         ORDER BY 1, 2""",
}


def catalog(dsn: str) -> dict[str, list[tuple[object, ...]]]:
    with psycopg.connect(dsn) as conn:
        return {name: conn.execute(query).fetchall() for name, query in CATALOG.items()}


def tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'pgmem'")
        return {r[0] for r in rows}


def test_upgrade_downgrade_upgrade_round_trips(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn)
    first = catalog(empty_db_dsn)
    assert {"memories", "entities", "memory_entities", "history"} <= tables(empty_db_dsn)

    pgmem.downgrade(empty_db_dsn, "base")
    assert tables(empty_db_dsn) == {"alembic_version"}

    pgmem.migrate(empty_db_dsn)
    assert catalog(empty_db_dsn) == first


LINK_SCOPES = """
    SELECT count(*) FILTER (WHERE (me.user_id, me.agent_id, me.run_id)
                                  IS NOT DISTINCT FROM (m.user_id, m.agent_id, m.run_id)),
           count(*)
      FROM pgmem.memory_entities me
      JOIN pgmem.memories m ON m.tenant = me.tenant AND m.id = me.memory_id"""


def test_links_carry_their_memory_scope_written_or_migrated(
    empty_db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    pgmem.migrate(empty_db_dsn)
    with pgmem.Memory(empty_db_dsn, embedder=embedder, nlp=analyzer) as memory:
        memory.add_many(["Caroline moved to Ottawa", "Melanie paints in Paris"], user_id="u1")
        memory.add("Jon met Caroline in Boston", agent_id="a1", run_id="r1")
        moved = memory.add("Gina works in Berlin", user_id="u2", agent_id="a2")
        memory.update(moved.id, text="Gina works for Siemens in Munich")  # new links
    with psycopg.connect(empty_db_dsn) as conn:
        same, links = conn.execute(LINK_SCOPES).fetchone()  # type: ignore[misc]
        assert links >= 7 and same == links
    pgmem.downgrade(empty_db_dsn, "0001")  # links without scope ids
    pgmem.migrate(empty_db_dsn)  # 0002 copies them from the memories
    with psycopg.connect(empty_db_dsn) as conn:
        assert conn.execute(LINK_SCOPES).fetchone() == (links, links)


def test_migrate_is_idempotent(db_dsn: str) -> None:
    before = catalog(db_dsn)
    pgmem.migrate(db_dsn)
    assert catalog(db_dsn) == before


def test_schema_sql_matches_the_migrations(db_dsn: str, empty_db_dsn: str) -> None:
    schema_sql = files("pgmem.sql").joinpath("schema.sql").read_text()
    with psycopg.connect(empty_db_dsn) as conn:
        conn.execute(schema_sql)  # type: ignore[call-overload]
    from_file, from_migrations = catalog(empty_db_dsn), catalog(db_dsn)
    for part in CATALOG:
        assert from_file[part] == from_migrations[part], part
    assert len(from_migrations["indexes"]) >= 10


def test_every_key_includes_the_tenant(db_dsn: str) -> None:
    # embedding_models holds one row per schema, not per tenant: under Citus a reference table.
    query = """
        SELECT c.relname, k.conname, k.contype,
               (SELECT array_agg(a.attname) FROM pg_attribute a
                 WHERE a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)),
               (SELECT array_agg(a.attname) FROM pg_attribute a
                 WHERE a.attrelid = k.confrelid AND a.attnum = ANY (k.confkey))
          FROM pg_constraint k
          JOIN pg_class c ON c.oid = k.conrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'pgmem' AND k.contype IN ('p', 'u', 'f')
           AND c.relname NOT IN ('alembic_version', 'embedding_models')"""
    with psycopg.connect(db_dsn) as conn:
        keys = conn.execute(query).fetchall()
        unique_indexes = conn.execute(
            """SELECT i.indexrelid::regclass::text,
                      (SELECT array_agg(a.attname) FROM pg_attribute a
                        WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey))
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'pgmem' AND i.indisunique
                  AND c.relname NOT IN ('alembic_version', 'embedding_models')"""
        ).fetchall()
    kinds = {contype for _, _, contype, _, _ in keys}
    assert kinds == {"p", "u", "f"}
    for table, name, contype, columns, referenced in keys:
        assert "tenant" in columns, f"{table}.{name} lacks tenant"
        if contype == "f":
            assert "tenant" in referenced, f"{table}.{name} does not reference tenant"
    assert unique_indexes and all("tenant" in cols for _, cols in unique_indexes)


def test_a_host_alembic_history_is_left_alone(empty_db_dsn: str) -> None:
    with psycopg.connect(empty_db_dsn) as conn:
        conn.execute("CREATE TABLE public.alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO public.alembic_version VALUES ('host_app_42')")
    pgmem.migrate(empty_db_dsn)
    pgmem.downgrade(empty_db_dsn, "base")
    pgmem.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn) as conn:
        host = conn.execute("SELECT version_num FROM public.alembic_version").fetchall()
        ours = conn.execute("SELECT version_num FROM pgmem.alembic_version").fetchall()
    assert host == [("host_app_42",)]
    assert ours == [(HEAD,)]


# A memory of ~1,300 characters: with its 384-dimensional vector a row of ~3.5 kB, past the
# 2 kB at which PostgreSQL moves long values out of line unless toast_tuple_target says otherwise.
LONG_TEXT = " ".join(
    f"On day {i} Caroline walked her dog Rex past the old mill on Fenwick Street and counted"
    f" {i * 7} sparrows." for i in range(1, 14)
)
ROW_STORAGE = """
    SELECT max(pg_column_size(m.*)) AS row_size,
           count(*) FILTER (WHERE pg_column_compression(m.text) IS NOT NULL
                               OR pg_column_compression(m.lexemes) IS NOT NULL) AS compressed
      FROM pgmem.memories m"""


def out_of_line_chunks(conn: psycopg.Connection) -> int:
    (toast,) = conn.execute(  # type: ignore[misc]
        "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'pgmem.memories'::regclass"
    ).fetchone()
    (chunks,) = conn.execute(f"SELECT count(*) FROM {toast}").fetchone()  # type: ignore[misc]
    return int(chunks)


def test_a_long_memory_stays_in_its_row(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
        memory.add(LONG_TEXT, user_id="u1")
        with psycopg.connect(db_dsn) as conn:
            row = conn.execute(ROW_STORAGE).fetchone()
            assert row is not None and row[0] > 3000 and row[1] == 0
            assert out_of_line_chunks(conn) == 0
        pgmem.downgrade(db_dsn, "0004")  # before 0005, such a row went out of line
        with psycopg.connect(db_dsn) as conn:  # (pgmem itself writes to the newest schema)
            conn.execute(
                "INSERT INTO pgmem.memories (tenant, user_id, text, content_hash, metadata,"
                " embedding, lexemes, lexeme_count, ts_config)"
                " SELECT tenant, user_id, text || ' Again.', content_hash || '2', metadata,"
                " embedding, lexemes, lexeme_count, ts_config FROM pgmem.memories"
            )
            assert out_of_line_chunks(conn) > 0
        pgmem.migrate(db_dsn)
        hits = memory.search("sparrows by the mill", user_id="u1")  # out of line or not
        assert sorted(h.text for h in hits) == [LONG_TEXT, LONG_TEXT + " Again."]


def test_the_dimension_is_chosen_at_creation(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn, dim=8)
    with psycopg.connect(empty_db_dsn) as conn:
        types = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attname = 'embedding' AND attrelid IN"
            " ('pgmem.memories'::regclass, 'pgmem.entities'::regclass)"
        ).fetchall()
    assert types == [("vector(8)",), ("vector(8)",)]
    with pytest.raises(SchemaError, match="8-dimensional.*asked for 384"):
        pgmem.migrate(empty_db_dsn, dim=384)


def test_above_2000_dimensions_the_schema_stores_halfvec(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn, dim=3072)
    with psycopg.connect(empty_db_dsn) as conn:
        types = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attname = 'embedding' AND attrelid IN"
            " ('pgmem.memories'::regclass, 'pgmem.entities'::regclass)"
        ).fetchall()
        index = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'memories_embedding_idx'"
        ).fetchone()
        recorded = conn.execute("SELECT role, model, dim, storage FROM pgmem.embedding_models")
        assert recorded.fetchall() == [("current", None, 3072, "halfvec")]
    assert types == [("halfvec(3072)",), ("halfvec(3072)",)]
    assert index is not None and "hnsw (embedding halfvec_cosine_ops)" in index[0]
    pgmem.migrate(empty_db_dsn, dim=3072)  # idempotent, the storage found as it is
    with pytest.raises(ConfigurationError, match="more than an HNSW index of vector takes"):
        pgmem.migrate(empty_db_dsn, dim=3072, storage="vector")  # refused before connecting
    with pytest.raises(ConfigurationError, match="from 1 to 4000"):
        pgmem.migrate(empty_db_dsn, dim=4001)
    pgmem.downgrade(empty_db_dsn, "0003")  # 0004's downgrade rebuilds the entity HNSW index
    pgmem.migrate(empty_db_dsn, dim=3072)


def test_0004_records_the_model_of_an_existing_schema(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn, dim=8, storage="halfvec")
    pgmem.downgrade(empty_db_dsn, "0003")
    pgmem.migrate(empty_db_dsn, dim=8)  # 0004 reads the dimension and storage of the column
    with psycopg.connect(empty_db_dsn) as conn:
        rows = conn.execute("SELECT role, model, dim, storage FROM pgmem.embedding_models")
        assert rows.fetchall() == [("current", None, 8, "halfvec")]
    with pytest.raises(SchemaError, match="stores embeddings as halfvec.*asked for vector"):
        pgmem.migrate(empty_db_dsn, dim=8, storage="vector")
    pgmem.migrate(empty_db_dsn, dim=8, model="tiny-model")  # recorded once
    pgmem.migrate(empty_db_dsn, dim=8, model="tiny-model")
    with pytest.raises(pgmem.ModelMismatchError, match="'tiny-model'.*'other-model'"):
        pgmem.migrate(empty_db_dsn, dim=8, model="other-model")


def test_another_schema_name(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn, schema="agent_memory")
    with psycopg.connect(empty_db_dsn) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'agent_memory'"
        ).fetchone()
    assert found == (7,)
    with pytest.raises(ConfigurationError, match="schema must be"):
        pgmem.migrate(empty_db_dsn, schema='x"; DROP TABLE y; --')


def test_alembic_command_line_from_the_checkout(empty_db_dsn: str) -> None:
    env = {**os.environ, "PGMEM_DSN": empty_db_dsn}
    alembic = [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini")]
    subprocess.run([*alembic, "upgrade", "head"], check=True, env=env, cwd=REPO)
    current = subprocess.run(
        [*alembic, "current"], check=True, env=env, cwd=REPO, capture_output=True, text=True
    )
    assert f"{HEAD} (head)" in current.stdout
    assert {"memories", "history"} <= tables(empty_db_dsn)


def test_the_wheel_ships_sql_and_migrations(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(REPO)],
        check=True,
    )
    (wheel,) = tmp_path.glob("pgmem-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "pgmem/sql/queries.sql",
        "pgmem/sql/schema.sql",
        "pgmem/sql/catalog.sql",
        "pgmem/cli/__init__.py",
        "pgmem/cli/__main__.py",
        "pgmem/migrations/env.py",
        "pgmem/migrations/script.py.mako",
        "pgmem/migrations/versions/0001_initial.py",
        "pgmem/migrations/versions/0002_link_scope.py",
        "pgmem/migrations/versions/0004_models_and_paging.py",
        "pgmem/migrations/versions/0005_rows_inline.py",
        "pgmem/migrations/versions/0006_store_items.py",
        "pgmem/sql/langgraph.sql",
        "pgmem/sql/export.sql",
        "pgmem/py.typed",
    } <= names
