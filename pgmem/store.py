"""The store: one method per named statement of ``sql/queries.sql``. No SQL is written here."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgmem.queries import Queries

Row = dict[str, Any]
Conn = psycopg.Connection  # type: ignore[type-arg]


class Store:
    """Runs pgmem's statements for one schema on a connection it is handed."""

    def __init__(self, schema: str) -> None:
        self.queries = Queries(schema)

    def insert_memory(self, conn: Conn, params: Row) -> Row:
        """Insert a memory with its entities, links and ADD event; return id and timestamps."""
        return self._one(conn, self.queries.get("insert_memory"), params)

    def search(self, conn: Conn, params: Row, filters: sql.Composable) -> list[Row]:
        """Every candidate of the three legs with its raw signals."""
        with conn.cursor(row_factory=dict_row) as cur:
            # Never server-prepared: a generic plan cannot prune the optional scope conditions
            # or the unused semantic branch.
            cur.execute(self.queries.get("search", filters), params, prepare=False)
            return cur.fetchall()

    def search_sql(self, conn: Conn, params: Row, filters: sql.Composable) -> str:
        """The search statement with its parameters inlined, for humans (EXPLAIN, --sql)."""
        with psycopg.ClientCursor(conn) as cur:
            return cur.mogrify(self.queries.get("search", filters), params)

    def set_search_options(self, conn: Conn, ef_search: int) -> None:
        """Iterative HNSW scans for this transaction (pgvector >= 0.8)."""
        conn.execute(
            sql.SQL("SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {}")
            .format(sql.Literal(ef_search))
        )

    def schema_dimension(self, conn: Conn, schema: str) -> int | None:
        """The embedding dimension of the memories table, or None when there is none."""
        row = self._one(conn, self.queries.get("schema_dimension"),
                        {"memories_table": f'"{schema}".memories'})
        return None if row is None else int(row["dim"])

    @staticmethod
    def _one(conn: Conn, query: sql.Composed, params: Row) -> Any:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)
            return cur.fetchone()
