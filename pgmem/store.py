"""The store: one method per named statement of ``sql/queries.sql``. No SQL is written here."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgmem.queries import Queries

Row = dict[str, Any]
Conn = psycopg.Connection


class Store:
    """Runs pgmem's statements for one schema on a connection it is handed."""

    def __init__(self, schema: str) -> None:
        self.queries = Queries(schema)

    # -- lifecycle: each change runs its lock statements, then the change, in one transaction

    def lock_contents(self, conn: Conn, params: Row) -> None:
        """Take the duplicate-detection locks of a batch (held until the transaction ends).
        Fetches nothing, so that in pipeline mode it travels with ``insert_memories``."""
        conn.execute(self.queries.get("lock_contents"), params)

    def insert_memories(self, conn: Conn, params: Row) -> list[Row]:
        """Insert a batch with its entities, links and ADD events; one row per item, in order:
        the memory standing for it and whether it was a ``duplicate``."""
        return self._all(conn, self.queries.get("insert_memories"), params)

    def get_memory(self, conn: Conn, params: Row) -> Row | None:
        """The memory ``id`` of the tenant, or None."""
        return self._first(conn, self.queries.get("get_memory"), params)

    def list_memories(self, conn: Conn, params: Row, filters: sql.Composable) -> list[Row]:
        """Up to ``limit`` memories of the scope after the cursor position, oldest first."""
        # Not server-prepared: a generic plan cannot prune the optional scope conditions.
        return self._all(conn, self.queries.get("list_memories", filters), params, prepare=False)

    def memory_history(self, conn: Conn, params: Row) -> list[Row]:
        """The events of memory ``id``, oldest first."""
        return self._all(conn, self.queries.get("memory_history"), params)

    def lock_memory(self, conn: Conn, params: Row) -> bool:
        """Lock memory ``id`` for this transaction; False when the tenant has no such memory."""
        return self._first(conn, self.queries.get("lock_memory"), params) is not None

    def lock_scope_memories(self, conn: Conn, params: Row) -> list[uuid.UUID]:
        """Lock every memory of the scope for this transaction; their ids."""
        rows = self._all(conn, self.queries.get("lock_scope_memories"), params, prepare=False)
        return [row["id"] for row in rows]

    def lock_linked_entities(self, conn: Conn, params: Row) -> None:
        """Lock the entities linked to memories ``ids`` for this transaction."""
        self._all(conn, self.queries.get("lock_linked_entities"), params)

    def update_memory(self, conn: Conn, params: Row) -> Row | None:
        """Update memory ``id`` (re-linking its entities for a new text) and write its UPDATE
        event; the updated row, or None when there is no such memory."""
        return self._first(conn, self.queries.get("update_memory"), params)

    def delete_memories(self, conn: Conn, params: Row) -> list[uuid.UUID]:
        """Delete memories ``ids``, their links and the entities left unlinked, and write their
        DELETE events; the ids deleted."""
        return [row["id"] for row in self._all(conn, self.queries.get("delete_memories"), params)]

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

    @staticmethod
    def _first(conn: Conn, query: sql.Composed, params: Row) -> Row | None:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)
            return cur.fetchone()

    @staticmethod
    def _all(
        conn: Conn, query: sql.Composed, params: Row, *, prepare: bool | None = None
    ) -> list[Row]:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params, prepare=prepare)
            return cur.fetchall()
