"""The inspector's reads that the public API does not answer, each a named block of
``sql/ui.sql`` run on the :class:`~pgmem.Memory`'s own connections, for its tenant only."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from psycopg import sql
from psycopg.rows import dict_row

from pgmem.errors import InvalidInputError
from pgmem.queries import sql_blocks

if TYPE_CHECKING:
    from pgmem.memory import Memory

#: The scope id columns a page may name, as the UI spells their kinds.
KINDS = {"user": "user_id", "agent": "agent_id", "run": "run_id"}
#: Counts stop here: a scope shows "10,000+" rather than counting millions for a page.
COUNT_CAP = 10_000
NO_BOUND = sql.SQL("TRUE")


def column_of(kind: str) -> str:
    """The scope id column of a kind (``user`` -> ``user_id``).

    Raises:
        InvalidInputError: not one of :data:`KINDS`.
    """
    try:
        return KINDS[kind]
    except KeyError:
        raise InvalidInputError(
            f"a scope kind is one of {', '.join(KINDS)}, got {kind[:40]!r}"
        ) from None


class ScopeIds(TypedDict):
    """A scope as Memory's keyword arguments."""

    user_id: str | None
    agent_id: str | None
    run_id: str | None


def scope_ids(kind: str, scope_id: str) -> ScopeIds:
    """The keyword arguments of Memory's calls for the scope ``kind`` = ``scope_id``."""
    column = column_of(kind)
    return ScopeIds(
        user_id=scope_id if column == "user_id" else None,
        agent_id=scope_id if column == "agent_id" else None,
        run_id=scope_id if column == "run_id" else None,
    )


class Reads:
    """The named reads of ``sql/ui.sql`` over ``memory``'s connections and tenant."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        self.tenant = memory.tenant
        self._schema = sql.Identifier(memory.schema)

    def _rows(
        self, name: str, params: dict[str, Any], kind: str = "user",
        bound: sql.Composable = NO_BOUND,
    ) -> list[dict[str, Any]]:
        blocks = sql_blocks("ui.sql")
        names = {"schema": self._schema, "column": sql.Identifier(column_of(kind))}
        statement = sql.SQL(blocks[name]).format(
            scope_counts=sql.SQL(blocks["scope_counts"]).format(**names), bound=bound, **names
        )
        connector = self._memory._connector  # the doors run on the Memory's connections
        with connector.transaction() as (conn, _), conn.cursor(row_factory=dict_row) as cur:
            cur.execute(statement, {"tenant": self.tenant, **params})
            return cur.fetchall() if cur.description is not None else []

    def summary(self) -> dict[str, Any]:
        """The tenant's memories and entities, each counted up to :data:`COUNT_CAP`."""
        return self._rows("tenant_summary", {"cap": COUNT_CAP + 1})[0]

    def scopes(
        self, kind: str, *, after: str | None = None, before: str | None = None, page: int = 50,
        last: bool = False,
    ) -> list[dict[str, Any]]:
        """One page of the tenant's scope ids of ``kind`` after ``after`` (or, given
        ``before``, before it; ``last``: the last page; else the first), in order, with their
        counts."""
        column = sql.Identifier(column_of(kind))
        if before is not None or last:
            bound = NO_BOUND if before is None else sql.SQL(
                "m.{} < %(before)s::text").format(column)
            rows = self._rows("scopes_before", {"before": before, "page": page,
                                                "cap": COUNT_CAP + 1}, kind, bound)
            return rows[::-1]
        bound = NO_BOUND if after is None else sql.SQL(
            "m.{} > %(after)s::text").format(column)
        return self._rows("scopes_after", {"after": after, "page": page, "cap": COUNT_CAP + 1},
                          kind, bound)

    def scope(self, kind: str, scope_id: str) -> dict[str, Any]:
        """One scope's counts, as :meth:`scopes` gives them."""
        return self._rows("scope_summary", {"scope_id": scope_id, "cap": COUNT_CAP + 1},
                          kind)[0]

    def extras(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        """Entities, expiry and text search configuration of the memories ``ids``."""
        rows = self._rows("memory_extras", {"ids": list(ids)})
        return {row["id"]: row for row in rows}

    def entities(self, memory_id: uuid.UUID, *, others: int = 5) -> list[dict[str, Any]]:
        """A memory's entities, each with its link count and up to ``others`` other memories
        linked to it."""
        return self._rows("memory_entities", {"id": memory_id, "others": others,
                                              "cap": COUNT_CAP + 1})

    def neighbours(
        self, kind: str, scope_id: str, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, dict[str, Any]]:
        """For memories of the scope: the two stored before and after each (ids, nearest
        first), in the scope's order."""
        rows = self._rows("neighbours", {"scope_id": scope_id, "ids": list(ids)}, kind)
        return {row["id"]: row for row in rows}

    def texts(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        """The text and creation time of memories of the tenant, by id."""
        return {row["id"]: row for row in self._rows("texts", {"ids": list(ids)})}

    def timeline(self, kind: str, scope_id: str, bins: int = 40) -> list[dict[str, Any]]:
        """The scope's memories in ``bins`` equal spans of time (only the spans with some)."""
        return self._rows("timeline", {"scope_id": scope_id, "bins": bins}, kind)

    def fanout(self, kind: str, scope_id: str) -> list[dict[str, Any]]:
        """The scope's entities by the number of its memories each links to."""
        return self._rows("fanout", {"scope_id": scope_id}, kind)
