"""pgmem.compat.mem0_filters and the wildcard scope id, without a database (the comparisons
with real Mem0 are in tests/test_compat_mem0.py)."""

from __future__ import annotations

import pytest

import pgmem
from pgmem import validate
from pgmem.compat.mem0_filters import mem0_filters
from pgmem.filters import compile_filters
from pgmem.validate import ANY


def test_a_star_scope_id_is_any_value_but_one() -> None:
    scope, condition = mem0_filters({"user_id": "alice", "run_id": "*"})
    assert scope == {"user_id": "alice", "run_id": ANY} and condition == {}
    assert mem0_filters({"user_id": "*"})[0] == {"user_id": ANY}
    assert validate.scope("t", ANY, None, None, wildcard=True).user_id is ANY


def test_a_wildcard_is_never_stored_nor_a_guard() -> None:
    with pytest.raises(pgmem.InvalidInputError):
        validate.scope("t", ANY, None, None)
    with pytest.raises(pgmem.InvalidInputError):
        validate.items([{"text": "x", "user_id": ANY}], tenant="t")
    with pytest.raises(pgmem.ScopeError):
        validate.scope("t", None, None, None, wildcard=True)


def test_ne_and_not_need_the_key() -> None:
    """Mem0's NULL: ne holds only where the key has a value; NOT swaps true and false, so
    NOT [eq] also needs the key."""
    present = {"status": {"exists": True, "ne": None}}
    ne = mem0_filters({"user_id": "u", "status": {"ne": "done"}})[1]
    assert ne == {"AND": [present, {"status": {"ne": "done"}}]}
    negated = mem0_filters({"user_id": "u", "NOT": [{"status": "done"}]})[1]
    assert negated == {"AND": [present, {"NOT": {"status": {"eq": "done"}}}]}
    assert mem0_filters({"user_id": "u", "NOT": [{"status": "*"}]})[1] == {
        "status": {"exists": False}}
    compile_filters(mem0_filters({"user_id": "u", "NOT": [{"OR": [{"a": 1}, {"b": {"nin": [2]}}]}],
                                  "c": {"gte": 3, "ne": 5}})[1])  # valid pgmem filters


def test_a_keyword_star_is_a_name_and_a_filter_star_any_value() -> None:
    assert mem0_filters(None, user_id="*")[0] == {"user_id": "*"}
    assert mem0_filters(None, user_id=" * ")[0] == {"user_id": "*"}
    assert mem0_filters({"user_id": " * "})[0] == {"user_id": ANY}
    with pytest.raises(pgmem.InvalidInputError, match="as a keyword"):
        mem0_filters({"user_id": "*"}, user_id="*")


def test_contains_reads_the_text_of_any_value() -> None:
    _, condition = mem0_filters({"user_id": "u", "rating": {"contains": 5},
                                 "tags": {"icontains": "ITAL"}})
    assert condition == {"AND": [{"rating": {"text_contains": "5"}},
                                 {"tags": {"text_icontains": "ITAL"}}]}
    compile_filters(condition)


@pytest.mark.parametrize(("filters", "message"), [
    ({"NOT": {"rating": 5}}, "NOT operator requires a non-empty list of conditions"),
    ({"$not": []}, "NOT operator requires a non-empty list of conditions"),
    ({"OR": []}, "OR operator requires a non-empty list of conditions"),
    ({"AND": {"rating": 5}}, "AND operator requires a list of conditions"),
])
def test_combinators_want_lists_in_mem0s_words(filters: dict[str, object], message: str) -> None:
    with pytest.raises(pgmem.FilterError) as refused:
        mem0_filters({"user_id": "u", **filters})
    assert str(refused.value) == message
    assert mem0_filters({"user_id": "u", "AND": []})[1] == {}  # Mem0: no condition


def test_deep_nesting_is_a_limit_not_a_recursion_error() -> None:
    deep: dict[str, object] = {"rating": 5}
    for _ in range(2000):
        deep = {"NOT": [deep]}
    with pytest.raises(pgmem.FilterLimitError, match="32 levels"):
        mem0_filters({"user_id": "u", **deep})
