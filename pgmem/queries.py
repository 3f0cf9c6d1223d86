"""pgmem's SQL, kept in the ``.sql`` files of ``sql/`` as ``-- name: <name>`` blocks: the one
loader of those files (:func:`sql_blocks`), and the composer of the statements of
``sql/queries.sql`` (:class:`Queries`).

Blocks hold ``{schema}`` (pgmem's schema), ``{scope_ids}`` (the scope id comparisons a call
gives), ``{filters}`` (a compiled metadata filter) and fragments: a placeholder naming another
block of the file, such as ``{scope}``, is that block, composed the same way. These are
identifiers and compiled SQL, composed with ``psycopg.sql``. Values are never formatted in; they
travel as ``%(name)s`` parameters.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable, Mapping
from importlib.resources import files

from psycopg import sql

NO_FILTER = sql.SQL("TRUE")
SCOPE_IDS = ("user_id", "agent_id", "run_id")
#: The scope blocks of store items (pgmem.langgraph): a namespace prefix, or every item.
NAMESPACE_SCOPES = ("namespace", "any_namespace")
#: Statements made of another block with some of its fragments left out, by name: the block,
#: and how the names of the fragments left out begin. ``search_small`` is ``search`` without
#: the paths of a scope too large to read row by row (:mod:`pgmem.scope_sizes`).
VARIANTS = {"search_small": ("search", "large_scope_")}
_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_COMMENT = re.compile(r"\s*--.*$")


def named_blocks(text: str) -> dict[str, str]:
    """The ``-- name: <name>`` blocks of a ``.sql`` file's text, by name, without their comments
    (a statement is sent on every call; its comments are for the file's readers)."""
    parts = _BLOCK.split(text)[1:]
    return {name: _without_comments(body) for name, body in zip(parts[::2], parts[1::2])}


def _without_comments(body: str) -> str:
    """``body`` without ``--`` comments and the lines they leave empty. (pgmem's SQL holds no
    ``--`` inside a string literal; a test checks.)"""
    lines = (_COMMENT.sub("", line).rstrip() for line in body.splitlines())
    return "\n".join(line for line in lines if line.strip())


@functools.cache
def sql_blocks(file: str = "queries.sql") -> Mapping[str, str]:
    """The named blocks of ``sql/<file>`` (shipped in the package), by name, read once."""
    return named_blocks(files("pgmem.sql").joinpath(file).read_text(encoding="utf-8"))


class Queries:
    """The named statements for one pgmem schema: those of queries.sql, or ``blocks`` (the
    benchmarks compose another revision's statements this way), and the :data:`VARIANTS`."""

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
        raw = sql_blocks() if self.blocks is None else self.blocks
        block, left_out = VARIANTS.get(name, (name, None))
        ids = sql.SQL(" ").join(sql.SQL(raw[f"scope_{column}"]) for column in scope_ids)
        values: dict[str, sql.Composable] = {
            "schema": self.schema, "scope_ids": ids, "filters": filters
        }

        def compose(text: str) -> sql.Composed:
            fragments = {
                field: sql.SQL("") if left_out and field.startswith(left_out)
                else compose(raw[field])
                for field in _fields(text) if field not in values and field in raw
            }
            return sql.SQL(text).format(**values, **fragments)

        return compose(raw[block])


def _fields(text: str) -> set[str]:
    """The names of the ``{placeholders}`` of a block."""
    return {field for _, field, _, _ in string.Formatter().parse(text) if field}
