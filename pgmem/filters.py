"""Compile a Mem0-style metadata filter into a parameterised SQL condition over a jsonb column.

:func:`compile_filters` turns a filter such as ::

    {"category": "food", "rating": {"gte": 4}, "OR": [{"city": "Paris"}, {"city": "Lyon"}]}

into a SQL condition and its bound parameters (line breaks added)::

    (m.metadata @> %(f0)s::jsonb
     AND CASE WHEN jsonb_typeof(m.metadata #> %(f1)s::text[]) = 'number'
         THEN (m.metadata #>> %(f1)s::text[])::numeric >= %(f2)s::numeric ELSE FALSE END
     AND (m.metadata @> %(f3)s::jsonb OR m.metadata @> %(f4)s::jsonb))

    {"f0": Jsonb({"category": "food"}), "f1": ["rating"], "f2": 4,
     "f3": Jsonb({"city": "Paris"}), "f4": Jsonb({"city": "Lyon"})}

Every key and value from the filter travels as a bound parameter; only the column reference
(a constant chosen by pgmem) and fixed SQL text are part of the statement. Parameters are named
``<prefix>0``, ``<prefix>1``, … in the order the filter is traversed, so the same filter always
compiles to the same SQL. The condition is self-contained (parenthesised where needed), so it can
be ANDed into a larger WHERE clause as is. This module never opens a connection.

The language
------------

A filter is a mapping. Its entries are ANDed together. An entry is one of:

``{"key": value}``
    Shorthand for ``{"key": {"eq": value}}``.
``{"key": {"op": value, ...}}``
    One or more operators applied to the value stored under ``key``; several operators are
    ANDed. ``{"price": {"gte": 10, "lt": 20}}`` means 10 <= price < 20.
``{"AND": [filter, ...]}`` / ``{"OR": [filter, ...]}``
    All / any of a non-empty list of filters.
``{"NOT": filter}``
    The rows the filter does not match. ``{"NOT": [filter, ...]}`` negates the AND of the list.

``$and``, ``$or`` and ``$not`` are accepted as aliases of ``AND``, ``OR`` and ``NOT``. Only these
exact spellings are combinators: ``"and"`` or ``"Or"`` are ordinary metadata keys. A metadata
key literally named ``AND``, ``OR`` or ``NOT`` therefore cannot be filtered on. Combinators nest
to any depth up to 32 levels of filter mappings.

Keys are non-empty strings of at most 255 characters without NUL bytes. A dotted key is the
member of that name first: ``"source.url"`` reads ``{"source.url": ...}``; only a row without
such a member reads it as a path of nested objects, ``{"source": {"url": ...}}``. Empty segments
(``"a..b"``, ``".a"``, ``"a."``) are rejected. Path segments name object members; ``eq``, ``ne``,
``in`` and ``nin`` never descend into arrays, while the other operators use PostgreSQL's ``#>``,
which reads a segment such as ``0`` as an array index when it meets an array — do not rely on
that.

Scalars are ``str``, ``int``, ``float`` (finite only) and ``bool``, and ``None`` for JSON null.
``bool`` is never a number: ``True`` matches JSON ``true`` only, never ``1``.

Operators (``v`` is the value stored at the key; *missing* means the key is absent)
----------------------------------------------------------------------------------

``eq``
    ``v`` equals the scalar with its JSON type: ``1`` matches ``1`` and ``1.0`` but not ``"1"``
    or ``true``; ``None`` matches JSON ``null`` only, never a missing key. Compiled to the
    containment ``column @> '{"key": value}'``, which a GIN index on the column can serve.
``ne``
    ``NOT eq``. A missing key counts as not equal: ``{"lang": {"ne": "en"}}`` matches rows
    without ``lang``.
``gt``, ``gte``, ``lt``, ``lte``
    An ``int``/``float`` compares numerically and only against JSON numbers; a ``str`` compares
    as text (in the database's default collation) and only against JSON strings. Values of any
    other JSON type, and missing keys, never match — and a non-number never raises a cast error.
``in``
    ``v`` equals (as ``eq``) one of a non-empty list or tuple of at most 1000 scalars; compiled
    to an OR of containments, so a GIN index can serve it.
``nin``
    ``NOT in``; a missing key counts as not in the list.
``contains``
    With a ``str``: ``v`` is a JSON string containing it as a case-sensitive substring (``%`` and
    ``_`` are literal characters, and ``""`` matches every string), or ``v`` is a JSON array with
    that string as an element. With another scalar: ``v`` is a JSON array with an element equal
    to it (as ``eq``). ``{"tags": {"contains": "vegan"}}`` matches ``{"tags": ["vegan", "raw"]}``.
``icontains``
    ``v`` is a JSON string containing the ``str`` case-insensitively (both sides go through
    ``lower()``). Arrays and other types never match.
``exists``
    With ``True``: the key is present, even if its value is JSON ``null``. With ``False``: the key
    is absent.
``text_contains``, ``text_icontains``
    The value's text -- a JSON string's own text, any other value's JSON text (``5`` is ``5``,
    ``["italian", "pasta"]`` is ``["italian", "pasta"]``) -- contains the ``str``, case-sensitively
    or not (``lower()`` on both sides); a missing key or JSON ``null`` never matches. This is what
    Mem0's ``contains`` / ``icontains`` mean (SQL ``LIKE`` on ``payload->>key``):
    ``{"tags": {"text_icontains": "ITAL"}}`` matches ``{"tags": ["italian"]}``.

Every compiled condition is TRUE or FALSE, never NULL, provided the column is ``NOT NULL`` (as
pgmem's ``metadata`` column is), so ``NOT`` matches exactly the rows its operand does not.

Errors
------

Anything else raises :class:`~pgmem.errors.FilterError` naming where in the filter the problem
is, the key, the operator and the offending value's type: a filter that is not a mapping, an
empty operator mapping, an empty ``AND``/``OR`` list, an unknown operator, a value of the wrong
type, a non-finite float, an int too long to write as text, a string containing a NUL byte or a
lone surrogate, a list that is empty or longer than 1000 items, or an invalid key; nesting deeper
than 32
levels is a :class:`~pgmem.errors.FilterLimitError`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, TypeGuard

from psycopg import sql
from psycopg.types.json import Jsonb

from pgmem.errors import FilterError, FilterLimitError
from pgmem.queries import NO_FILTER
from pgmem.validate import DEFAULT_LIMITS, Limits, shown, unstorable

if TYPE_CHECKING:
    from typing_extensions import LiteralString

__all__ = ["MAX_DEPTH", "MAX_KEY_LENGTH", "MAX_LIST_ITEMS", "OPERATORS", "compile_filters"]

MAX_DEPTH = 32
"""The deepest nesting of filter mappings accepted; the top-level filter is depth 1."""

MAX_KEY_LENGTH = 255
"""The longest key accepted, in characters, dots included."""

MAX_LIST_ITEMS = 1000
"""The most values an ``in`` or ``nin`` list may hold."""

OPERATORS = (
    "eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains", "exists",
    "text_contains", "text_icontains",
)  # fmt: skip
"""The operators of the filter language, in the order error messages list them."""

#: The combinators of a filter, as written (both spellings) and as SQL.
COMBINATORS = {"AND": "AND", "$and": "AND", "OR": "OR", "$or": "OR", "NOT": "NOT", "$not": "NOT"}

_COMPARISONS: dict[str, LiteralString] = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}

_SCALAR_TYPES = "str, int, float, bool or None"

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")

_JOINERS = {"AND": sql.SQL(" AND "), "OR": sql.SQL(" OR ")}
# Marks the parentheses _join adds, so _parenthesise does not add a second pair.
_OPEN, _CLOSE = sql.SQL("("), sql.SQL(")")


@dataclass
class _Compiler:
    """The state of one compilation: the column and the parameters bound so far."""

    column: sql.Composable
    prefix: str
    limits: Limits = DEFAULT_LIMITS
    params: dict[str, object] = field(default_factory=dict)
    conditions: int = 0

    def bind(self, value: object) -> sql.Placeholder:
        """Bind ``value`` to the next parameter name and return its placeholder."""
        if len(self.params) >= self.limits.max_filter_parameters:
            limit = self.limits.max_filter_parameters
            raise FilterLimitError(
                f"filters bind more than {limit} values; the limit is {limit} "
                "(Limits.max_filter_parameters)"
            )
        name = f"{self.prefix}{len(self.params)}"
        self.params[name] = value
        return sql.Placeholder(name)

    def count(self, conditions: int = 1) -> None:
        """Count ``conditions`` more operator applications (FilterLimitError past the limit)."""
        self.conditions += conditions
        limit = self.limits.max_filter_conditions
        if self.conditions > limit:
            raise FilterLimitError(
                f"filters hold more than {limit} conditions; the limit is {limit} "
                "(Limits.max_filter_conditions)"
            )


@dataclass(frozen=True)
class _Target:
    """A key being filtered on: where it is in the filter, its text and its path segments."""

    where: str
    key: str
    segments: tuple[str, ...]
    shorthand: bool = False  # {"key": value} rather than {"key": {"eq": value}}

    def fail(self, op: str, problem: str) -> FilterError:
        """An error about operator ``op`` applied to this key."""
        if self.shorthand:
            location, name = f"{self.where}[{self.key!r}]", f"{op!r} (shorthand)"
        else:
            location, name = f"{self.where}[{self.key!r}][{op!r}]", repr(op)
        return FilterError(f"{location}: operator {name} on key {shown(self.key, 60)} {problem}")


def compile_filters(
    filters: Mapping[str, object] | None,
    *,
    column: LiteralString = "m.metadata",
    prefix: str = "f",
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[sql.Composable, dict[str, object]]:
    """Compile a Mem0-style metadata filter into a SQL condition over a jsonb column.

    ``filters`` follows the language described in this module's docstring. ``column`` is the
    trusted SQL reference to the jsonb column (a constant from pgmem's code, such as
    ``"m.metadata"``; never user input). ``prefix`` names the parameters ``<prefix>0``,
    ``<prefix>1``, … so that several compiled filters can share one statement.

    Returns the condition and the parameters to execute it with. ``None`` and ``{}`` compile to
    ``TRUE`` with no parameters.

    Raises :class:`~pgmem.errors.FilterError` if the filter is not valid,
    :class:`~pgmem.errors.FilterLimitError` if it is larger than ``limits`` allow (bytes as JSON,
    conditions, bound values: checked as it compiles, so a huge filter fails early), and
    ``ValueError`` if ``column`` or ``prefix`` is not a plain (optionally qualified) SQL name.
    """
    if not _COLUMN.fullmatch(column):
        raise ValueError(f"column must be a plain or qualified SQL name, got {column!r}")
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"prefix must be a letter or underscore then word characters, got {prefix!r}"
        )
    if filters is None:
        return NO_FILTER, {}
    if isinstance(filters, Mapping) and not filters:
        return NO_FILTER, {}
    _check_size(filters, limits.max_filter_bytes)
    compiler = _Compiler(sql.SQL(column), prefix, limits)
    condition = _compile_filter(filters, "filters", 1, compiler)
    return condition, compiler.params


def _compile_filter(filt: object, where: str, depth: int, c: _Compiler) -> sql.Composable:
    """Compile one filter mapping found at ``where``: its entries ANDed."""
    if depth > MAX_DEPTH:
        raise FilterLimitError(f"{where}: filters nest deeper than {MAX_DEPTH} levels")
    if not isinstance(filt, Mapping):
        raise FilterError(f"{where}: a filter must be a mapping, got {_type(filt)}")
    if not filt:
        raise FilterError(f"{where}: a filter must have at least one entry, got an empty mapping")
    parts: list[sql.Composable] = []
    for key, value in filt.items():
        if isinstance(key, str) and key in COMBINATORS:
            parts.append(_compile_combinator(key, value, where, depth, c))
        else:
            parts.append(_compile_entry(key, value, where, c))
    return _join("AND", parts)


def _compile_combinator(
    name: str, value: object, where: str, depth: int, c: _Compiler
) -> sql.Composable:
    """Compile ``{"AND": [...]}``, ``{"OR": [...]}`` or ``{"NOT": ...}`` (or a ``$`` alias)."""
    kind = COMBINATORS[name]
    here = f"{where}[{name!r}]"
    if kind == "NOT" and isinstance(value, Mapping):
        return sql.SQL("NOT {}").format(_parenthesise(_compile_filter(value, here, depth + 1, c)))
    if not _is_list(value):
        expected = "a filter mapping or a list of them" if kind == "NOT" else "a list of filters"
        raise FilterError(f"{here}: {name} expects {expected}, got {_type(value)}")
    if not value:
        raise FilterError(f"{here}: {name} expects a non-empty list of filters, got an empty list")
    parts = [_compile_filter(f, f"{here}[{i}]", depth + 1, c) for i, f in enumerate(value)]
    if kind == "NOT":
        return sql.SQL("NOT {}").format(_parenthesise(_join("AND", parts)))
    return _join(kind, parts)


def _compile_entry(raw_key: object, value: object, where: str, c: _Compiler) -> sql.Composable:
    """Compile ``{"key": value}`` or ``{"key": {"op": value, ...}}``."""
    key, segments = _parse_key(raw_key, where)
    if not isinstance(value, Mapping):
        target = _Target(where, key, segments, shorthand=True)
        if _is_list(value) or isinstance(value, (set, frozenset)):
            raise target.fail(
                "eq",
                f"expects a {_SCALAR_TYPES}, got {_type(value)}; "
                "use {'in': [...]} to match any of a list",
            )
        _check_scalar(target, "eq", value)
        c.count()
        return _eq(target, value, c)
    target = _Target(where, key, segments)
    if not value:
        raise FilterError(
            f"{where}[{key!r}]: key {shown(target.key, 60)} has an empty operator "
            f"mapping; give at least one of {', '.join(OPERATORS)}"
        )
    parts = [_compile_operator(target, op, arg, c) for op, arg in value.items()]
    return _join("AND", parts)


def _parse_key(key: object, where: str) -> tuple[str, tuple[str, ...]]:
    """Validate a key and split it into its dotted path segments."""
    if not isinstance(key, str):
        described = "None" if key is None else f"{_type(key)} {shown(key, 60)}"
        raise FilterError(f"{where}: keys must be strings, got {described}")
    if not key:
        raise FilterError(f"{where}: keys must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise FilterError(
            f"{where}: key {shown(key, 60)} is {len(key)} characters long; "
            f"the limit is {MAX_KEY_LENGTH}"
        )
    if problem := unstorable(key):
        raise FilterError(f"{where}: key {shown(key, 60)} contains {problem}")
    segments = tuple(key.split("."))
    if "" in segments:
        raise FilterError(
            f"{where}: key {shown(key, 60)} has an empty path segment "
            f"(a leading, trailing or doubled dot)"
        )
    return key, segments


def check_filter_size(filters: object, limits: Limits = DEFAULT_LIMITS) -> None:
    """FilterLimitError when ``filters`` (any filter language's) take more bytes as JSON than
    ``limits.max_filter_bytes``."""
    _check_size(filters, limits.max_filter_bytes)


def _check_size(filters: object, limit: int) -> None:
    """FilterLimitError when ``filters`` take more than ``limit`` bytes as JSON. (A filter that
    is no JSON, or nests too deep for it, gets its own error from the compilation.)"""
    try:
        size = len(json.dumps(filters, default=repr).encode())
    except (TypeError, ValueError, RecursionError):
        return
    if size > limit:
        raise FilterLimitError(
            f"filters have {size} bytes as JSON; the limit is {limit} (Limits.max_filter_bytes)"
        )


def _compile_operator(target: _Target, op: object, arg: object, c: _Compiler) -> sql.Composable:
    """Compile one operator applied to ``target``."""
    c.count()
    if op == "eq" or op == "ne":
        _check_scalar(target, op, arg)
        condition = _eq(target, arg, c)
        return condition if op == "eq" else sql.SQL("NOT ({})").format(condition)
    if isinstance(op, str) and op in _COMPARISONS:
        return _compare(target, op, arg, c)
    if op == "in" or op == "nin":
        condition = _in(target, op, arg, c)
        return condition if op == "in" else sql.SQL("NOT {}").format(_parenthesise(condition))
    if op == "contains":
        return _contains(target, arg, c)
    if op == "icontains":
        return _icontains(target, arg, c)
    if op == "exists":
        return _exists(target, arg, c)
    if op == "text_contains" or op == "text_icontains":
        return _text_contains(target, op, arg, c)
    hint = ""
    if isinstance(op, str):
        plain = op.lstrip("$").lower()
        if plain in OPERATORS:
            hint = f"; did you mean {plain!r}?"
        elif op not in COMBINATORS:
            hint = f"; to reach a nested member use the dotted key {target.key + '.' + op!r}"
    raise FilterError(
        f"{target.where}[{target.key!r}]: unknown operator {shown(op, 60)} on key "
        f"{shown(target.key, 60)}; the operators are {', '.join(OPERATORS)}{hint}"
    )


def _eq(target: _Target, value: object, c: _Compiler) -> sql.Composable:
    """``column @> '{"a": value}'``: JSON equality with type, GIN-indexable. A dotted key: the
    member of that name, else (without one) the nested path ``{"a": {"b": value}}``."""
    if len(target.segments) == 1:
        return sql.SQL("{} @> {}::jsonb").format(c.column, c.bind(_nest(target.segments, value)))
    return sql.SQL("({column} @> {flat}::jsonb OR (NOT {column} ? {key}::text"
                   " AND {column} @> {nested}::jsonb))").format(
        column=c.column, flat=c.bind(Jsonb({target.key: value})), key=c.bind(target.key),
        nested=c.bind(_nest(target.segments, value)),
    )


def _value(target: _Target, c: _Compiler) -> tuple[sql.Composable, sql.Composable]:
    """The jsonb at the key (SQL NULL when missing) and its text: ``column #> path`` and
    ``column #>> path``; for a dotted key, the member of that name first, else the path."""
    path = c.bind(list(target.segments))
    if len(target.segments) == 1:
        return (sql.SQL("{} #> {}::text[]").format(c.column, path),
                sql.SQL("{} #>> {}::text[]").format(c.column, path))
    at = sql.SQL("coalesce({column} -> {key}::text, {column} #> {path}::text[])").format(
        column=c.column, key=c.bind(target.key), path=path)
    return at, sql.SQL("({} #>> '{{}}')").format(at)


def _compare(target: _Target, op: str, arg: object, c: _Compiler) -> sql.Composable:
    """``gt``/``gte``/``lt``/``lte``: numbers against JSON numbers, text against JSON strings."""
    if isinstance(arg, bool) or not isinstance(arg, (int, float, str)):
        raise target.fail(op, f"expects an int, float or str, got {_type(arg)}")
    _check_finite(target, op, arg)
    _check_no_nul(target, op, arg)
    at, text = _value(target, c)
    if isinstance(arg, str):
        json_type, cast = sql.SQL("'string'"), sql.SQL("text")
        stored: sql.Composable = sql.SQL("({})").format(text)
        bound: object = arg
    else:
        json_type, cast = sql.SQL("'number'"), sql.SQL("numeric")
        stored = sql.SQL("({})::numeric").format(text)
        # repr() is how the float reaches jsonb through json.dumps, and Decimal keeps every digit
        # of it (PostgreSQL's float8-to-numeric cast would round to 15 significant digits).
        bound = Decimal(repr(arg)) if isinstance(arg, float) else arg
    return sql.SQL(
        "CASE WHEN jsonb_typeof({at}) = {json_type}"
        " THEN {stored} {operator} {value}::{cast} ELSE FALSE END"
    ).format(
        at=at,
        json_type=json_type,
        stored=stored,
        operator=sql.SQL(_COMPARISONS[op]),
        value=c.bind(bound),
        cast=cast,
    )


def _in(target: _Target, op: str, arg: object, c: _Compiler) -> sql.Composable:
    """``in``: an OR of containments, one per list item (each GIN-indexable)."""
    if not _is_list(arg):
        raise target.fail(op, f"expects a list or tuple of {_SCALAR_TYPES}, got {_type(arg)}")
    if not arg:
        raise target.fail(op, "expects a non-empty list, got an empty list")
    if len(arg) > MAX_LIST_ITEMS:
        raise target.fail(op, f"expects at most {MAX_LIST_ITEMS} items, got {len(arg)}")
    for i, item in enumerate(arg):
        if not _is_scalar(item):
            raise FilterError(
                f"{target.where}[{target.key!r}][{op!r}][{i}]: operator {op!r} on "
                f"key {shown(target.key, 60)} expects items of type {_SCALAR_TYPES}, "
                f"got {_type(item)}"
            )
        _check_finite(target, op, item)
        _check_no_nul(target, op, item)
    c.count(len(arg) - 1)  # each item is a condition
    return _join("OR", [_eq(target, item, c) for item in arg])


def _contains(target: _Target, arg: object, c: _Compiler) -> sql.Composable:
    """``contains``: substring of a JSON string, or element of a JSON array."""
    _check_scalar(target, "contains", arg)
    at, text = _value(target, c)
    if isinstance(arg, str):
        return sql.SQL(
            "CASE jsonb_typeof({at})"
            " WHEN 'string' THEN strpos({text}, {value}::text) > 0"
            " WHEN 'array' THEN ({at}) @> jsonb_build_array({value}::text)"
            " ELSE FALSE END"
        ).format(at=at, text=text, value=c.bind(arg))
    return sql.SQL(
        "CASE WHEN jsonb_typeof({at}) = 'array'"
        " THEN ({at}) @> {value}::jsonb ELSE FALSE END"
    ).format(at=at, value=c.bind(Jsonb([arg])))


def _icontains(target: _Target, arg: object, c: _Compiler) -> sql.Composable:
    """``icontains``: case-insensitive substring of a JSON string."""
    if not isinstance(arg, str):
        raise target.fail("icontains", f"expects a str, got {_type(arg)}")
    _check_no_nul(target, "icontains", arg)
    at, text = _value(target, c)
    return sql.SQL(
        "CASE WHEN jsonb_typeof({at}) = 'string'"
        " THEN strpos(lower({text}), lower({value}::text)) > 0"
        " ELSE FALSE END"
    ).format(at=at, text=text, value=c.bind(arg))


def _text_contains(target: _Target, op: str, arg: object, c: _Compiler) -> sql.Composable:
    """``text_contains`` / ``text_icontains``: the value's text (a string's own, any other
    value's JSON text) holds ``arg``; never a missing key or JSON null."""
    if not isinstance(arg, str):
        raise target.fail(op, f"expects a str, got {_type(arg)}")
    _check_no_nul(target, op, arg)
    text = _value(target, c)[1]
    if op == "text_icontains":
        return sql.SQL("coalesce(strpos(lower({}), lower({}::text)) > 0, FALSE)").format(
            text, c.bind(arg))
    return sql.SQL("coalesce(strpos({}, {}::text) > 0, FALSE)").format(text, c.bind(arg))


def _exists(target: _Target, arg: object, c: _Compiler) -> sql.Composable:
    """``exists``: ``#>`` yields SQL NULL only for a missing key (JSON null is not SQL NULL)."""
    if not isinstance(arg, bool):
        raise target.fail("exists", f"expects a bool, got {_type(arg)}")
    test = sql.SQL("IS NOT NULL" if arg else "IS NULL")
    return sql.SQL("({}) {}").format(_value(target, c)[0], test)


def _check_scalar(target: _Target, op: str, value: object) -> None:
    """Raise unless ``value`` is a finite scalar without NUL bytes."""
    if not _is_scalar(value):
        raise target.fail(op, f"expects a {_SCALAR_TYPES}, got {_type(value)}")
    _check_finite(target, op, value)
    _check_no_nul(target, op, value)


def _check_finite(target: _Target, op: str, value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise target.fail(op, f"expects a finite number, got float {value!r}")
    if isinstance(value, int) and not isinstance(value, bool):
        # An int JSON cannot write (more digits than Python converts to text) is no value
        # metadata can hold either.
        try:
            str(value)
        except ValueError:
            raise target.fail(op, "expects an int of at most a few thousand digits") from None


def _check_no_nul(target: _Target, op: str, value: object) -> None:
    # PostgreSQL's text and jsonb cannot hold NUL; fail here rather than in the database.
    if isinstance(value, str) and (problem := unstorable(value)):
        raise target.fail(op, f"expects a str PostgreSQL can store, got one with {problem}")


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _is_list(value: object) -> TypeGuard[list[object] | tuple[object, ...]]:
    return isinstance(value, (list, tuple))


def _nest(segments: Sequence[str], value: object) -> Jsonb:
    """``("a", "b"), 1`` -> ``Jsonb({"a": {"b": 1}})``."""
    nested = value
    for segment in reversed(segments):
        nested = {segment: nested}
    return Jsonb(nested)


def _join(operator: str, parts: list[sql.Composable]) -> sql.Composable:
    """A single part as is; several joined by ``operator`` (AND or OR) inside parentheses."""
    if len(parts) == 1:
        return parts[0]
    return sql.Composed([_OPEN, _JOINERS[operator].join(parts), _CLOSE])


def _parenthesise(condition: sql.Composable) -> sql.Composable:
    """``(condition)``, unless it already is a parenthesised group from :func:`_join`."""
    if isinstance(condition, sql.Composed) and next(iter(condition)) is _OPEN:
        return condition
    return sql.Composed([_OPEN, condition, _CLOSE])


def _type(value: object) -> str:
    """The type name an error message reports for ``value``."""
    return "None" if value is None else type(value).__name__
