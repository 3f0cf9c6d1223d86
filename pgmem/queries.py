"""pgmem's SQL, kept in the ``.sql`` files of ``sql/`` as ``-- name: <name>`` blocks: the one
loader of those files (:func:`sql_blocks`), and the composer of the statements of
``sql/queries.sql`` (:class:`Queries`).

Blocks hold ``{schema}`` (pgmem's schema), ``{scope}`` (the ``scope`` block, comparing the scope
ids a call gives, with the metadata filter), ``{scope_ids}`` (the scope id comparisons alone) and
``{filters}`` (a compiled metadata filter): identifiers and compiled SQL fragments, composed with
``psycopg.sql``. Any other placeholder naming a block of the file is a fragment: that block's
text stands in its place. Values are never formatted in; they travel as ``%(name)s``
parameters.
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
_PARAMETER = re.compile(r"%\((\w+)\)")
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
        # Statements without a metadata filter, by name and scope ids: composed once (composing
        # the search statement was a measurable part of every search).
        self._unfiltered: dict[tuple[str, tuple[str, ...]], sql.Composed] = {}
        self._texts: dict[str, str] = {}  # statements' texts, their fragments in

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
        raw = self._raw()
        ids = sql.SQL(" ").join(sql.SQL(raw[f"scope_{column}"]) for column in scope_ids)
        scope = sql.SQL(raw["scope"]).format(scope_ids=ids, filters=filters)
        return sql.SQL(self._text(name)).format(
            schema=self.schema, scope=scope, scope_ids=ids, filters=filters
        )

    def commands(self, name: str, **literals: object) -> list[sql.Composed]:
        """Block ``name`` as the commands it holds, one a line (``;`` ending all but the last),
        each with ``literals`` composed in as SQL literals: for commands that take no
        parameters (``SET``)."""
        values = {key: sql.Literal(value) for key, value in literals.items()}
        return [sql.SQL(command).format(**values) for command in self._text(name).split(";\n")]

    def with_rows(self, name: str, row: str, count: int) -> sql.Composed:
        """Statement ``name`` with its ``{rows}``: ``count`` copies of block ``row``, the
        parameters of the k-th (from 0) renamed ``<parameter>_<k>``."""
        template = self._text(row)
        rows = sql.SQL(", ").join(
            sql.SQL(_PARAMETER.sub(rf"%(\1_{k})", template)) for k in range(count)
        )
        return sql.SQL(self._text(name)).format(schema=self.schema, rows=rows)

    def _raw(self) -> Mapping[str, str]:
        return sql_blocks() if self.blocks is None else self.blocks

    def _text(self, name: str) -> str:
        """The text of statement ``name``: its block with its fragments in."""
        text = self._texts.get(name)
        if text is None:
            block, left_out = VARIANTS.get(name, (name, None))
            text = self._texts[name] = _with_fragments(self._raw(), block, left_out)
        return text


#: The placeholders :class:`Queries` composes itself; a block named so is not a fragment.
COMPOSED = frozenset({"schema", "scope", "scope_ids", "filters"})


def _with_fragments(raw: Mapping[str, str], block: str, left_out: str | None) -> str:
    """The text of ``block`` with each placeholder that names another block (a fragment, not
    one of :data:`COMPOSED`) replaced by that block's text, its own fragments in; with nothing
    where the fragment's name begins with ``left_out``."""
    parts = []
    for literal, field, spec, conversion in string.Formatter().parse(raw[block]):
        parts.append(literal.replace("{", "{{").replace("}", "}}"))
        if field is None:
            continue
        if field in raw and field not in COMPOSED:
            left = left_out is not None and field.startswith(left_out)
            parts.append("" if left else _with_fragments(raw, field, left_out))
        else:
            parts.append("{" + field + (f"!{conversion}" if conversion else "")
                         + (f":{spec}" if spec else "") + "}")
    return "".join(parts)
