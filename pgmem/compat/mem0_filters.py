"""Mem0's ``filters`` as pgmem's: :func:`mem0_filters` splits them into the scope and a
:mod:`pgmem.filters` metadata filter that matches what Mem0 2.2.1's pgvector store matches.

Mem0's store compares ``payload->>key`` in SQL, so a condition on a key a memory lacks (or holds
as JSON null) is neither true nor false but NULL, and ``ne``, ``nin`` and ``NOT`` leave that
memory out: ``{"status": {"ne": "done"}}`` matches only memories that have a status.
pgmem's own filters are two-valued (a missing key is "not equal"). So each Mem0 condition is
translated into two pgmem filters, where it is true and where it is false, and ``NOT`` swaps
them; the memories where neither holds are Mem0's NULLs. ``"*"`` (the key is present) is never
NULL. A scope id ``"*"`` is :data:`pgmem.validate.ANY`: any value, but one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pgmem.errors import FilterError, FilterLimitError, InvalidInputError, ScopeError
from pgmem.filters import COMBINATORS, MAX_DEPTH
from pgmem.queries import SCOPE_IDS
from pgmem.validate import ANY, ScopeId

__all__ = ["SCOPE_IDS", "WILDCARD", "entity_id", "mem0_filters", "scope_args"]

#: Mem0's "any value" (of a metadata key, or of a scope id in a read).
WILDCARD = "*"
# Operators that hold only on a present, non-null value: their "true" needs no presence test.
_PRESENT_ONLY = ("eq", "gt", "gte", "lt", "lte", "in", "text_contains", "text_icontains")
# Mem0's contains / icontains: LIKE / ILIKE on the value's text (payload->>key), JSON text for
# a value that is not a string, with the argument as Python's str() of it.
_TEXT_OPERATORS = {"contains": "text_contains", "icontains": "text_icontains"}
# Mem0 2.2.1's words for a combinator not given a list of conditions.
_NEEDS_LIST = {
    "AND": "AND operator requires a list of conditions",
    "OR": "OR operator requires a non-empty list of conditions",
    "NOT": "NOT operator requires a non-empty list of conditions",
}

Filter = dict[str, Any]


class _Truth(NamedTuple):
    """A Mem0 condition as two pgmem filters: where it is true, and where it is false."""

    true: Filter
    false: Filter


def entity_id(value: object, name: str, *, wildcard: bool = False) -> ScopeId | None:
    """Mem0's check of a scope id: any value as text, trimmed, non-empty, without spaces;
    with ``wildcard`` (an id in ``filters``), ``"*"`` is :data:`~pgmem.validate.ANY`."""
    if value is None:
        return None
    text = (value if isinstance(value, str) else str(value)).strip()
    if not text:
        raise InvalidInputError(
            f"Invalid {name}: cannot be empty or whitespace-only. Provide a valid identifier."
        )
    if any(c.isspace() for c in text):
        raise InvalidInputError(
            f"Invalid {name}: cannot contain whitespace. Provide a valid identifier without "
            "spaces."
        )
    return ANY if wildcard and text == WILDCARD else text


def scope_args(
    user_id: object, agent_id: object, run_id: object, *, required: bool = False
) -> dict[str, str]:
    """The scope ids given as keywords, checked as Mem0 checks them. A keyword id is a literal
    name: ``user_id="*"`` is the user named ``*`` (the wildcard is only in ``filters``).

    Raises:
        ScopeError: none given and ``required``.
        InvalidInputError: an id is blank or holds a space.
    """
    checked = {
        name: entity_id(value, name) for name, value in zip(SCOPE_IDS, (user_id, agent_id, run_id))
    }
    scope = {name: str(value) for name, value in checked.items() if value is not None}
    if required and not scope:
        raise ScopeError("At least one of 'user_id', 'agent_id', or 'run_id' must be provided.")
    return scope


def mem0_filters(
    filters: Mapping[str, Any] | None,
    user_id: object = None,
    agent_id: object = None,
    run_id: object = None,
) -> tuple[dict[str, ScopeId], Filter]:
    """Split Mem0's ``filters`` into the scope (its ``user_id`` / ``agent_id`` / ``run_id``,
    where ``"*"`` is any value, with the keyword ids, which are literal names) and a
    :mod:`pgmem.filters` metadata filter that
    matches the memories Mem0's matches: ``{"key": "*"}`` is "has the key", ``{"key": [..]}``
    is ``in``, ``NOT: [a, b]`` is "neither a nor b", and a condition on a key a memory lacks
    leaves it out, even under ``ne``, ``nin`` or ``NOT``.

    Raises:
        ScopeError: no scope id at all.
        InvalidInputError: a keyword id differs from the one in ``filters``.
        FilterError: the filter is not a dict, or names a scope id inside AND/OR/NOT.
    """
    if filters is None:
        filters = {}
    if not isinstance(filters, Mapping):
        raise FilterError(f"filters must be a dict, got {type(filters).__name__}")
    keywords = scope_args(user_id, agent_id, run_id)
    scope: dict[str, ScopeId] = dict(keywords)
    parts: list[Filter] = []
    for key, value in filters.items():
        if key in SCOPE_IDS:
            checked = entity_id(value, key, wildcard=True)
            if checked is None:
                continue
            if key in keywords and keywords[key] != checked:
                raise InvalidInputError(
                    f"{key} is {keywords[key]!r} as a keyword but {checked!r} in filters"
                )
            scope[key] = checked
        else:
            truth = _entry(key, value, 1)
            if truth is not None:
                parts.append(truth.true)
    if not scope:
        raise ScopeError(
            "filters must contain at least one of: user_id, agent_id, run_id. "
            "Example: filters={'user_id': 'u1'}"
        )
    return scope, all_of(parts)


def all_of(parts: list[Filter]) -> Filter:
    """The pgmem filter matching every one of ``parts`` (``{}``: everything)."""
    return {} if not parts else parts[0] if len(parts) == 1 else {"AND": parts}


def _any_of(parts: list[Filter]) -> Filter:
    return parts[0] if len(parts) == 1 else {"OR": parts}


def _both(parts: list[_Truth]) -> _Truth:
    return _Truth(all_of([p.true for p in parts]), _any_of([p.false for p in parts]))


def _entry(key: str, value: Any, depth: int) -> _Truth | None:
    """One entry of a Mem0 filter, at ``depth`` (1: the top); None for an empty ``AND`` list,
    which Mem0 reads as no condition."""
    if depth > MAX_DEPTH:
        raise FilterLimitError(
            f"filters nest deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH}"
        )
    if key in COMBINATORS:
        name = COMBINATORS[key]
        if not isinstance(value, (list, tuple)) or (not value and name != "AND"):
            raise FilterError(_NEEDS_LIST[name])
        if not value:
            return None
        groups = [_group(condition, key, depth + 1) for condition in value]
        if name == "AND":
            return _both(groups)
        either = _Truth(_any_of([g.true for g in groups]), all_of([g.false for g in groups]))
        # Mem0: NOT [a, b] is NOT (a OR b): true where that OR is false, and false where true.
        return either if name == "OR" else _Truth(either.false, either.true)
    if isinstance(value, str) and value == WILDCARD:
        return _Truth({key: {"exists": True}}, {key: {"exists": False}})
    if isinstance(value, list):
        return _condition(key, "in", value)
    if isinstance(value, Mapping):
        if not value:
            raise FilterError(f"filters[{key!r}]: an empty operator mapping")
        return _both([
            _condition(key, _TEXT_OPERATORS[op], str(arg)) if op in _TEXT_OPERATORS
            else _condition(key, op, arg) for op, arg in value.items()
        ])
    return _condition(key, "eq", value)


def _condition(key: str, op: str, value: Any) -> _Truth:
    """``key op value``: true or false where the key holds a value, neither where it does not."""
    present = {key: {"exists": True, "ne": None}}
    holds = {key: {op: value}}
    true = holds if op in _PRESENT_ONLY and value is not None else {"AND": [present, holds]}
    return _Truth(true, {"AND": [present, {"NOT": holds}]})


def _group(condition: object, where: str, depth: int) -> _Truth:
    """A condition inside AND / OR / NOT: its entries, all of them."""
    if not isinstance(condition, Mapping):
        raise FilterError(
            f"{where}: each condition must be a dict, got {type(condition).__name__}"
        )
    parts = []
    for key, value in condition.items():
        if key in SCOPE_IDS:
            raise FilterError(
                f"{where}: {key} may only appear at the top level of filters (it is the scope)"
            )
        truth = _entry(key, value, depth)
        if truth is not None:
            parts.append(truth)
    if not parts:
        raise FilterError(f"{where}: a condition is empty")
    return _both(parts)
