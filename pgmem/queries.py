"""pgmem's SQL, kept in ``sql/queries.sql`` as ``-- name: <name>`` blocks and parsed once.

Blocks hold ``{schema}`` (pgmem's schema), ``{scope}`` (the ``scope`` block, comparing the scope
ids a call gives, with the metadata filter), ``{scope_ids}`` (the scope id comparisons alone)
and ``{filters}`` (a compiled metadata filter): identifiers and compiled SQL fragments, composed with
``psycopg.sql``. Values are never formatted in; they travel as ``%(name)s`` parameters.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from importlib.resources import files

from psycopg import sql

NO_FILTER = sql.SQL("TRUE")
SCOPE_IDS = ("user_id", "agent_id", "run_id")
#: The scope blocks of store items (pgmem.langgraph): a namespace prefix, or every item.
NAMESPACE_SCOPES = ("namespace", "any_namespace")
_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_COMMENT = re.compile(r"\s*--.*$")
# The lines a search of a large scope needs only (see the search block), markers included.
_LARGE_SCOPE = re.compile(
    r"^[ \t]*-- \[large scope\][ \t]*\n.*?^[ \t]*-- \[/large scope\][ \t]*\n",
    re.MULTILINE | re.DOTALL,
)


def named_blocks(text: str) -> dict[str, str]:
    """The ``-- name: <name>`` blocks of a queries file's text, by name, without their comments
    (a statement is sent on every call; its comments are for the file's readers). A block with
    lines between ``-- [large scope]`` and ``-- [/large scope]`` also gives ``<name>_small``:
    the block without them."""
    parts = _BLOCK.split(text)[1:]
    blocks = {}
    for name, body in zip(parts[::2], parts[1::2]):
        blocks[name] = _without_comments(body)
        small = _LARGE_SCOPE.sub("", body)
        if small != body:
            blocks[f"{name}_small"] = _without_comments(small)
    return blocks


def _without_comments(body: str) -> str:
    """``body`` without ``--`` comments and the lines they leave empty. (pgmem's SQL holds no
    ``--`` inside a string literal; a test checks.)"""
    lines = (_COMMENT.sub("", line).rstrip() for line in body.splitlines())
    return "\n".join(line for line in lines if line.strip())


@functools.cache
def raw_queries() -> dict[str, str]:
    """Every named block of queries.sql, by name."""
    return named_blocks(files("pgmem.sql").joinpath("queries.sql").read_text(encoding="utf-8"))


class Queries:
    """The named statements for one pgmem schema: those of queries.sql, or ``blocks`` (the
    benchmarks compose another revision's statements this way)."""

    def __init__(self, schema: str, blocks: Mapping[str, str] | None = None) -> None:
        self.schema = sql.Identifier(schema)
        self.blocks = blocks
        # Statements without a metadata filter, by name and scope ids: composed once (a
        # search statement's composition was 60 µs of every search).
        self._unfiltered: dict[tuple[str, tuple[str, ...]], sql.Composed] = {}

    def get(
        self, name: str, filters: sql.Composable = NO_FILTER, scope_ids: Iterable[str] = ()
    ) -> sql.Composed:
        """Statement ``name`` with the schema, the scope (comparing ``scope_ids``, of
        :data:`SCOPE_IDS` and :data:`NAMESPACE_SCOPES`) and ``filters`` composed in."""
        if filters is not NO_FILTER:
            return self._compose(name, filters, scope_ids)
        key = (name, tuple(scope_ids))
        composed = self._unfiltered.get(key)
        if composed is None:
            composed = self._unfiltered[key] = self._compose(name, filters, key[1])
        return composed

    def _compose(
        self, name: str, filters: sql.Composable, scope_ids: Iterable[str]
    ) -> sql.Composed:
        raw = raw_queries() if self.blocks is None else self.blocks
        ids = sql.SQL(" ").join(sql.SQL(raw[f"scope_{column}"]) for column in scope_ids)
        scope = sql.SQL(raw["scope"]).format(scope_ids=ids, filters=filters)
        return sql.SQL(raw[name]).format(
            schema=self.schema, scope=scope, scope_ids=ids, filters=filters
        )
