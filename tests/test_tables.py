"""pgmem.tables against the migrated catalog -- every column's type, nullability, default and
position, every key -- and an app's own table joined to memories through SQLAlchemy Core."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

import pgmem
from pgmem import tables as pgmem_tables

COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       d.adbin IS NOT NULL, a.attidentity
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname <> 'alembic_version'
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY c.relname, a.attnum
"""
CONSTRAINTS = """
SELECT cl.relname, con.conname, con.contype,
       CASE WHEN con.contype = 'c' THEN '{}'::text[] ELSE
       array(SELECT a.attname::text
               FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, i)
               JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
              ORDER BY k.i) END,
       coalesce(ref.relname, ''), con.confdeltype
  FROM pg_constraint con
  JOIN pg_class cl ON cl.oid = con.conrelid
  JOIN pg_namespace n ON n.oid = cl.relnamespace
  LEFT JOIN pg_class ref ON ref.oid = con.confrelid
 WHERE n.nspname = %s AND con.contype IN ('p', 'u', 'f', 'c') AND cl.relname <> 'alembic_version'
"""
KINDS = {
    sa.PrimaryKeyConstraint: "p", sa.UniqueConstraint: "u", sa.ForeignKeyConstraint: "f",
    sa.CheckConstraint: "c",
}


def declared_columns(t: pgmem_tables.Tables) -> list[tuple[Any, ...]]:
    dialect = postgresql.dialect()
    return [
        (
            # format_type() shows no collation (namespace is COLLATE "C")
            table.name, column.name,
            column.type.compile(dialect=dialect).lower().replace(' collate "c"', ""),
            not column.nullable, column.server_default is not None and column.identity is None,
            "a" if column.identity is not None and column.identity.always else "",
        )
        for table in sorted(t.metadata.tables.values(), key=lambda table: table.name)
        for column in table.columns
    ]


def declared_constraints(t: pgmem_tables.Tables) -> set[tuple[Any, ...]]:
    found = set()
    for table in t.metadata.tables.values():
        for constraint in table.constraints:
            kind = KINDS[type(constraint)]
            columns = () if kind == "c" else tuple(c.name for c in constraint.columns)
            ref, on_delete = "", " "
            if isinstance(constraint, sa.ForeignKeyConstraint):
                ref = constraint.referred_table.name
                on_delete = {"CASCADE": "c", None: "a"}[constraint.ondelete]
            found.add((table.name, constraint.name, kind, columns, ref, on_delete))
    return found


def catalog(dsn: str, schema: str) -> tuple[list[tuple[Any, ...]], set[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        columns = [
            (*row[:5], row[5] or "") for row in conn.execute(COLUMNS, (schema,)).fetchall()
        ]
        constraints = {
            (table, name, kind, tuple(cols), ref, on_delete)
            for table, name, kind, cols, ref, on_delete in conn.execute(
                CONSTRAINTS, (schema,)
            ).fetchall()
        }
    return columns, constraints


def test_the_tables_match_the_migrated_catalog(db_dsn: str) -> None:
    columns, constraints = catalog(db_dsn, "pgmem")
    assert len(columns) == 19 + 6 + 6 + 8 + 8 + 2
    assert declared_columns(pgmem_tables.tables()) == columns
    assert declared_constraints(pgmem_tables.tables()) == constraints
    assert pgmem_tables.memories.c.embedding.type.compile(dialect=postgresql.dialect()) == (
        "VECTOR(384)"
    )
    assert {t.schema for t in pgmem_tables.metadata.tables.values()} == {"pgmem"}


def test_the_tables_of_another_schema_and_dimension(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn, schema="agent_memory", dim=8)
    other = pgmem_tables.tables("agent_memory", 8)
    columns, constraints = catalog(empty_db_dsn, "agent_memory")
    assert declared_columns(other) == columns
    assert declared_constraints(other) == constraints
    assert other is pgmem_tables.tables("agent_memory", 8)
    assert other.memories is not pgmem_tables.memories
    assert other.memories.fullname == "agent_memory.memories"
    with pytest.raises(pgmem.ConfigurationError, match="schema"):
        pgmem_tables.tables("Robert'); DROP TABLE")


def test_the_tables_of_a_halfvec_schema(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn, schema="wide", dim=3072)  # above 2,000: halfvec
    wide = pgmem_tables.tables("wide", 3072)
    columns, constraints = catalog(empty_db_dsn, "wide")
    assert declared_columns(wide) == columns
    assert declared_constraints(wide) == constraints
    assert wide.memories.c.embedding.type.compile(dialect=postgresql.dialect()) == "HALFVEC(3072)"
    assert pgmem_tables.tables("wide", 384, "halfvec").entities.c.embedding.type.dim == 384
    with pytest.raises(pgmem.ConfigurationError, match="4000"):
        pgmem_tables.tables("wide", 5000)


def test_an_app_joins_its_own_table_to_memories(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    app = sa.MetaData()
    tickets = sa.Table(
        "tickets", app,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("memory_id", sa.Uuid, nullable=False),
    )
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_dsn))
    try:
        app.create_all(engine)
        with engine.begin() as conn:
            mem = pgmem.Memory(conn, embedder=embedder, nlp=analyzer)
            alice = mem.add("Alice's router reboots every night", user_id="alice",
                            metadata={"priority": "high"})
            bob = mem.add("Bob cannot print from Paris", user_id="bob")
            conn.execute(sa.insert(tickets), [
                {"title": "Router reboots", "memory_id": alice.id},
                {"title": "Printer", "memory_id": bob.id},
            ])

        m, me, e, h = (pgmem_tables.memories, pgmem_tables.memory_entities,
                       pgmem_tables.entities, pgmem_tables.history)
        query = (
            sa.select(tickets.c.title, m.c.text, m.c.user_id, m.c.metadata["priority"].astext)
            .join(m, sa.and_(m.c.tenant == "default", m.c.id == tickets.c.memory_id))
            .order_by(tickets.c.id)
        )
        entity_names = (
            sa.select(tickets.c.title, e.c.name)
            .join(me, sa.and_(me.c.tenant == "default", me.c.memory_id == tickets.c.memory_id))
            .join(e, sa.and_(e.c.tenant == me.c.tenant, e.c.id == me.c.entity_id))
            .where(tickets.c.title == "Printer")
            .order_by(e.c.name)
        )
        events = sa.select(h.c.event, h.c.new_text).where(h.c.memory_id == alice.id)
        with engine.connect() as conn:
            assert conn.execute(query).all() == [
                ("Router reboots", "Alice's router reboots every night", "alice", "high"),
                ("Printer", "Bob cannot print from Paris", "bob", None),
            ]
            assert conn.execute(entity_names).all() == [("Printer", "bob"), ("Printer", "paris")]
            assert conn.execute(events).all() == [("ADD", "Alice's router reboots every night")]
    finally:
        engine.dispose()


def test_the_tables_are_an_attribute_of_pgmem_without_loading_sqlalchemy_first() -> None:
    """As the README writes it: ``pgmem.tables.memories`` after ``import pgmem`` alone, in a
    fresh interpreter, where ``import pgmem`` itself loads no SQLAlchemy."""
    import subprocess
    import sys

    code = ("import sys, pgmem; loaded = 'sqlalchemy' in sys.modules; "
            "print(loaded, pgmem.tables.memories.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "memories"]
