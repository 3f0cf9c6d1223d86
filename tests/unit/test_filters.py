"""Unit tests of pgmem.filters: the SQL text and parameters compiled, and every error.

No database: the SQL is rendered without a connection. How the conditions behave on real rows is
tested against PostgreSQL elsewhere.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Mapping
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

from pgmem.errors import FilterError, FilterLimitError, InvalidInputError, PgmemError
from pgmem.filters import (
    MAX_DEPTH,
    MAX_KEY_LENGTH,
    MAX_LIST_ITEMS,
    OPERATORS,
    compile_filters,
)


def render(composed: sql.Composable) -> str:
    """The SQL text of ``composed``; psycopg 3.2+ renders SQL and Placeholder without a
    connection."""
    return composed.as_string(None)


def plain(params: Mapping[str, object]) -> dict[str, object]:
    """``params`` with each Jsonb wrapper replaced by ``("jsonb", obj)``, so dicts compare."""
    return {k: ("jsonb", v.obj) if isinstance(v, Jsonb) else v for k, v in params.items()}


def compiled(
    filters: Mapping[str, object] | None, *, column: str = "m.metadata", prefix: str = "f"
) -> tuple[str, dict[str, object]]:
    condition, params = compile_filters(filters, column=column, prefix=prefix)
    return render(condition), plain(params)


def error(filters: object) -> str:
    with pytest.raises(FilterError) as info:
        compile_filters(filters)  # type: ignore[arg-type]
    return str(info.value)


EQ = "m.metadata @> %({})s::jsonb"


def cmp_number(path: str, op: str, value: str) -> str:
    return (
        f"CASE WHEN jsonb_typeof(m.metadata #> %({path})s::text[]) = 'number'"
        f" THEN (m.metadata #>> %({path})s::text[])::numeric {op} %({value})s::numeric"
        " ELSE FALSE END"
    )


def cmp_string(path: str, op: str, value: str) -> str:
    return (
        f"CASE WHEN jsonb_typeof(m.metadata #> %({path})s::text[]) = 'string'"
        f" THEN (m.metadata #>> %({path})s::text[]) {op} %({value})s::text ELSE FALSE END"
    )


# --- empty filters -------------------------------------------------------------------------


@pytest.mark.parametrize("filters", [None, {}, types.MappingProxyType({})])
def test_no_filter_is_true(filters: Mapping[str, object] | None) -> None:
    condition, params = compile_filters(filters)
    assert render(condition) == "TRUE"
    assert params == {}


def test_true_is_an_sql_object() -> None:
    condition, _ = compile_filters(None)
    assert isinstance(condition, sql.SQL)


# --- eq --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["food", 1, 1.5, -0.0, True, False, None, "", 10**40])
def test_shorthand_is_eq_by_containment(value: object) -> None:
    text, params = compiled({"k": value})
    assert text == EQ.format("f0")
    assert params == {"f0": ("jsonb", {"k": value})}


def test_explicit_eq_equals_shorthand() -> None:
    assert compiled({"k": {"eq": "v"}}) == compiled({"k": "v"})


def test_bool_and_int_stay_distinct_json_values() -> None:
    _, as_bool = compile_filters({"k": True})
    _, as_int = compile_filters({"k": 1})
    assert as_bool["f0"].obj == {"k": True}  # type: ignore[attr-defined]
    assert as_int["f0"].obj["k"] is not True  # type: ignore[attr-defined]


def test_dotted_key_eq_reads_the_flat_key_first_then_the_nested_path() -> None:
    text, params = compiled({"a.b.c": 2})
    assert text == (
        "(m.metadata @> %(f0)s::jsonb"
        " OR (NOT m.metadata ? %(f1)s::text AND m.metadata @> %(f2)s::jsonb))"
    )
    assert params == {"f0": ("jsonb", {"a.b.c": 2}), "f1": "a.b.c",
                      "f2": ("jsonb", {"a": {"b": {"c": 2}}})}


def test_eq_param_is_a_jsonb_wrapper() -> None:
    _, params = compile_filters({"k": "v"})
    assert isinstance(params["f0"], Jsonb)


def test_ne_negates_containment() -> None:
    text, params = compiled({"lang": {"ne": "en"}})
    assert text == "NOT (m.metadata @> %(f0)s::jsonb)"
    assert params == {"f0": ("jsonb", {"lang": "en"})}


def test_ne_none() -> None:
    text, params = compiled({"x": {"ne": None}})
    assert text == "NOT (m.metadata @> %(f0)s::jsonb)"
    assert params == {"f0": ("jsonb", {"x": None})}


# --- comparisons -----------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "symbol"), [("gt", ">"), ("gte", ">="), ("lt", "<"), ("lte", "<=")])
def test_comparison_with_int(op: str, symbol: str) -> None:
    text, params = compiled({"price": {op: 10}})
    assert text == cmp_number("f0", symbol, "f1")
    assert params == {"f0": ["price"], "f1": 10}


@pytest.mark.parametrize(("op", "symbol"), [("gt", ">"), ("gte", ">="), ("lt", "<"), ("lte", "<=")])
def test_comparison_with_str(op: str, symbol: str) -> None:
    text, params = compiled({"day": {op: "2024-01-01"}})
    assert text == cmp_string("f0", symbol, "f1")
    assert params == {"f0": ["day"], "f1": "2024-01-01"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.1, Decimal("0.1")),
        (0.30000000000000004, Decimal("0.30000000000000004")),
        (1e20, Decimal("1e+20")),
        (-2.5, Decimal("-2.5")),
    ],
)
def test_float_bound_as_exact_decimal_of_its_repr(value: float, expected: Decimal) -> None:
    _, params = compile_filters({"x": {"gt": value}})
    assert params["f1"] == expected
    assert isinstance(params["f1"], Decimal)
    assert Decimal(repr(value)) == params["f1"]


def test_big_int_comparison_kept_exact() -> None:
    _, params = compile_filters({"x": {"lt": 10**30}})
    assert params["f1"] == 10**30


def test_comparison_on_dotted_key_reads_the_flat_key_first() -> None:
    text, params = compiled({"a.b": {"gte": 1}})
    at = "coalesce(m.metadata -> %(f1)s::text, m.metadata #> %(f0)s::text[])"
    assert text == (
        f"CASE WHEN jsonb_typeof({at}) = 'number'"
        f" THEN (({at} #>> '{{}}'))::numeric >= %(f2)s::numeric ELSE FALSE END"
    )
    assert params == {"f0": ["a", "b"], "f1": "a.b", "f2": 1}


def test_comparison_guards_the_numeric_cast_with_case() -> None:
    text, _ = compiled({"x": {"gt": 1}})
    assert text.startswith("CASE WHEN jsonb_typeof(")
    assert text.index("= 'number'") < text.index("::numeric")
    assert text.endswith("ELSE FALSE END")


def test_range_of_two_operators_is_anded_in_order() -> None:
    text, params = compiled({"price": {"gte": 10, "lt": 20}})
    assert text == f"({cmp_number('f0', '>=', 'f1')} AND {cmp_number('f2', '<', 'f3')})"
    assert params == {"f0": ["price"], "f1": 10, "f2": ["price"], "f3": 20}


# --- in / nin --------------------------------------------------------------------------------


def test_in_is_or_of_containments() -> None:
    text, params = compiled({"tag": {"in": ["a", 1, None, True]}})
    assert text == "(" + " OR ".join(EQ.format(f"f{i}") for i in range(4)) + ")"
    assert params == {
        "f0": ("jsonb", {"tag": "a"}),
        "f1": ("jsonb", {"tag": 1}),
        "f2": ("jsonb", {"tag": None}),
        "f3": ("jsonb", {"tag": True}),
    }


def test_in_with_one_item_is_plain_eq() -> None:
    assert compiled({"tag": {"in": ["a"]}}) == compiled({"tag": "a"})


def test_in_accepts_a_tuple() -> None:
    assert compiled({"tag": {"in": ("a", "b")}}) == compiled({"tag": {"in": ["a", "b"]}})


def test_in_on_dotted_key() -> None:
    _, params = compiled({"a.b": {"in": [1, 2]}})
    assert params == {"f0": ("jsonb", {"a.b": 1}), "f1": "a.b", "f2": ("jsonb", {"a": {"b": 1}}),
                      "f3": ("jsonb", {"a.b": 2}), "f4": "a.b", "f5": ("jsonb", {"a": {"b": 2}})}


def test_in_accepts_the_maximum_list() -> None:
    _, params = compile_filters({"n": {"in": list(range(MAX_LIST_ITEMS))}})
    assert len(params) == MAX_LIST_ITEMS
    assert list(params) == [f"f{i}" for i in range(MAX_LIST_ITEMS)]


def test_nin_negates_in() -> None:
    text, params = compiled({"tag": {"nin": ["a", "b"]}})
    assert text == f"NOT ({EQ.format('f0')} OR {EQ.format('f1')})"
    assert params == {"f0": ("jsonb", {"tag": "a"}), "f1": ("jsonb", {"tag": "b"})}


def test_nin_with_one_item() -> None:
    text, _ = compiled({"tag": {"nin": ["a"]}})
    assert text == f"NOT ({EQ.format('f0')})"


# --- contains / icontains / exists -----------------------------------------------------------


def test_contains_str_is_substring_or_array_element() -> None:
    text, params = compiled({"s": {"contains": "50%_off"}})
    assert text == (
        "CASE jsonb_typeof(m.metadata #> %(f0)s::text[])"
        " WHEN 'string' THEN strpos(m.metadata #>> %(f0)s::text[], %(f1)s::text) > 0"
        " WHEN 'array' THEN (m.metadata #> %(f0)s::text[]) @> jsonb_build_array(%(f1)s::text)"
        " ELSE FALSE END"
    )
    assert params == {"f0": ["s"], "f1": "50%_off"}


def test_contains_does_not_use_like() -> None:
    text, _ = compiled({"s": {"contains": "a%"}})
    assert "LIKE" not in text.upper()


@pytest.mark.parametrize("value", [3, 2.5, True, None])
def test_contains_non_str_is_array_element_only(value: object) -> None:
    text, params = compiled({"tags": {"contains": value}})
    assert text == (
        "CASE WHEN jsonb_typeof(m.metadata #> %(f0)s::text[]) = 'array'"
        " THEN (m.metadata #> %(f0)s::text[]) @> %(f1)s::jsonb ELSE FALSE END"
    )
    assert params == {"f0": ["tags"], "f1": ("jsonb", [value])}


def test_icontains_lowers_both_sides() -> None:
    text, params = compiled({"ab": {"icontains": "HeLLo"}})
    assert text == (
        "CASE WHEN jsonb_typeof(m.metadata #> %(f0)s::text[]) = 'string'"
        " THEN strpos(lower(m.metadata #>> %(f0)s::text[]), lower(%(f1)s::text)) > 0"
        " ELSE FALSE END"
    )
    assert params == {"f0": ["ab"], "f1": "HeLLo"}


@pytest.mark.parametrize(("op", "lower"), [("text_contains", False), ("text_icontains", True)])
def test_text_contains_reads_the_json_text(op: str, lower: bool) -> None:
    text, params = compiled({"tags": {op: "Ital"}})
    stored, arg = "m.metadata #>> %(f0)s::text[]", "%(f1)s::text"
    if lower:
        stored, arg = f"lower({stored})", f"lower({arg})"
    assert text == f"coalesce(strpos({stored}, {arg}) > 0, FALSE)"
    assert params == {"f0": ["tags"], "f1": "Ital"}
    assert error({"tags": {op: 5}}).endswith(
        f"operator {op!r} on key 'tags' expects a str, got int")


@pytest.mark.parametrize(("value", "test"), [(True, "IS NOT NULL"), (False, "IS NULL")])
def test_exists(value: bool, test: str) -> None:
    text, params = compiled({"a.b": {"exists": value}})
    assert text == (
        f"(coalesce(m.metadata -> %(f1)s::text, m.metadata #> %(f0)s::text[])) {test}"
    )
    assert params == {"f0": ["a", "b"], "f1": "a.b"}


# --- combinators -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "joiner"), [("AND", "AND"), ("$and", "AND"), ("OR", "OR"), ("$or", "OR")]
)
def test_and_or(name: str, joiner: str) -> None:
    text, params = compiled({name: [{"a": 1}, {"b": 2}, {"c": 3}]})
    assert text == f"({EQ.format('f0')} {joiner} {EQ.format('f1')} {joiner} {EQ.format('f2')})"
    assert params == {
        "f0": ("jsonb", {"a": 1}),
        "f1": ("jsonb", {"b": 2}),
        "f2": ("jsonb", {"c": 3}),
    }


def test_and_or_accept_tuples() -> None:
    assert compiled({"OR": ({"a": 1}, {"b": 2})}) == compiled({"OR": [{"a": 1}, {"b": 2}]})


def test_single_item_and_is_its_item() -> None:
    assert compiled({"AND": [{"a": 1}]}) == compiled({"a": 1})


@pytest.mark.parametrize("name", ["NOT", "$not"])
def test_not_of_a_mapping(name: str) -> None:
    text, params = compiled({name: {"a": 1}})
    assert text == f"NOT ({EQ.format('f0')})"
    assert params == {"f0": ("jsonb", {"a": 1})}


def test_not_of_a_list_negates_their_and() -> None:
    text, _ = compiled({"NOT": [{"a": 1}, {"b": 2}]})
    assert text == f"NOT ({EQ.format('f0')} AND {EQ.format('f1')})"


def test_not_of_a_multi_entry_mapping_is_not_double_parenthesised() -> None:
    text, _ = compiled({"NOT": {"a": 1, "b": 2}})
    assert text == f"NOT ({EQ.format('f0')} AND {EQ.format('f1')})"


def test_double_not() -> None:
    text, _ = compiled({"NOT": {"NOT": {"a": 1}}})
    assert text == f"NOT (NOT ({EQ.format('f0')}))"


def test_not_of_nin() -> None:
    text, _ = compiled({"NOT": {"t": {"nin": [1, 2]}}})
    assert text == f"NOT (NOT ({EQ.format('f0')} OR {EQ.format('f1')}))"


def test_entries_at_one_level_are_anded() -> None:
    text, _ = compiled({"a": 1, "b": {"exists": True}})
    assert text == f"({EQ.format('f0')} AND (m.metadata #> %(f1)s::text[]) IS NOT NULL)"


def test_or_inside_and_keeps_precedence() -> None:
    text, _ = compiled({"a": 1, "OR": [{"b": 2}, {"c": 3}]})
    assert text == f"({EQ.format('f0')} AND ({EQ.format('f1')} OR {EQ.format('f2')}))"


def test_and_inside_or_keeps_precedence() -> None:
    text, _ = compiled({"OR": [{"a": 1, "b": 2}, {"c": 3}]})
    assert text == f"(({EQ.format('f0')} AND {EQ.format('f1')}) OR {EQ.format('f2')})"


def test_multiple_operators_inside_or_are_grouped() -> None:
    text, _ = compiled({"OR": [{"n": {"gt": 1, "lt": 5}}, {"m": 1}]})
    assert text == (
        f"(({cmp_number('f0', '>', 'f1')} AND {cmp_number('f2', '<', 'f3')}) OR {EQ.format('f4')})"
    )


@pytest.mark.parametrize("key", ["and", "or", "not", "And", "$AND", "$Or", "NOT "])
def test_only_exact_combinator_spellings_are_combinators(key: str) -> None:
    text, params = compiled({key: 1})
    assert text == EQ.format("f0")
    assert params == {"f0": ("jsonb", {key: 1})}


def test_complex_filter_numbers_params_in_traversal_order() -> None:
    filters = {
        "category": "food",
        "rating": {"gte": 4},
        "OR": [{"city": "Paris"}, {"NOT": {"tags": {"contains": "meat"}}}],
        "lang": {"in": ["en", "fr"]},
    }
    text, params = compiled(filters)
    assert list(params) == [f"f{i}" for i in range(8)]
    assert params == {
        "f0": ("jsonb", {"category": "food"}),
        "f1": ["rating"],
        "f2": 4,
        "f3": ("jsonb", {"city": "Paris"}),
        "f4": ["tags"],
        "f5": "meat",
        "f6": ("jsonb", {"lang": "en"}),
        "f7": ("jsonb", {"lang": "fr"}),
    }
    placeholders = re.findall(r"%\((\w+)\)s", text)
    assert sorted(set(placeholders), key=lambda n: int(n[1:])) == list(params)
    first_seen = list(dict.fromkeys(placeholders))
    assert first_seen == list(params)


def test_compilation_is_deterministic() -> None:
    filters = {"OR": [{"a.b": {"gt": 1.5}}, {"c": {"nin": [1, "x"]}}], "d": {"exists": False}}
    assert compiled(filters) == compiled(filters)


def test_accepts_any_mapping() -> None:
    frozen = types.MappingProxyType({"a": types.MappingProxyType({"gt": 1})})
    assert compiled(frozen) == compiled({"a": {"gt": 1}})


# --- column and prefix -----------------------------------------------------------------------


def test_prefix_names_the_parameters() -> None:
    text, params = compiled({"a": 1, "b": {"gt": 2}}, prefix="meta_")
    assert list(params) == ["meta_0", "meta_1", "meta_2"]
    assert "%(meta_0)s" in text and "%(meta_2)s" in text
    assert "%(f" not in text


def test_column_is_used_verbatim() -> None:
    text, _ = compiled({"a": 1, "b": {"exists": True}}, column="metadata")
    assert text == "(metadata @> %(f0)s::jsonb AND (metadata #> %(f1)s::text[]) IS NOT NULL)"


@pytest.mark.parametrize(
    "column", ["", "m.", "m.metadata; DROP TABLE x", "a.b.c", "1m", "m metadata"]
)
def test_bad_column_is_a_programming_error(column: str) -> None:
    with pytest.raises(ValueError, match="column"):
        compile_filters({"a": 1}, column=column)


@pytest.mark.parametrize("prefix", ["", "1f", "f)s", "f%", "f-"])
def test_bad_prefix_is_a_programming_error(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        compile_filters({"a": 1}, prefix=prefix)


# --- user text never reaches the SQL ---------------------------------------------------------


INJECTION = "a'); DROP TABLE x;--"


def test_injection_looking_key_is_bound() -> None:
    text, params = compiled({INJECTION: 1, f"{INJECTION}.x": {"gt": 1}})
    assert "DROP" not in text and "'a'" not in text
    assert params["f0"] == ("jsonb", {INJECTION: 1})
    assert params["f1"] == [INJECTION, "x"]


@pytest.mark.parametrize("op", ["eq", "ne", "gt", "in", "nin", "contains", "icontains"])
def test_injection_looking_value_is_bound(op: str) -> None:
    value: object = [INJECTION] if op in ("in", "nin") else INJECTION
    text, params = compiled({"k": {op: value}})
    assert "DROP" not in text
    assert INJECTION in repr(params)


_keys = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00."),
    min_size=1,
    max_size=30,
).filter(lambda k: k not in ("AND", "OR", "NOT", "$and", "$or", "$not"))
_strings = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"))


@given(key=_keys, other=_keys, value=_strings)
def test_sql_text_depends_only_on_the_filter_shape(key: str, other: str, value: str) -> None:
    for op in ("eq", "ne", "gt", "lte", "in", "nin", "contains", "icontains"):
        arg: object = [value] if op in ("in", "nin") else value
        shape = {"OR": [{"x.y": {op: "v" if op not in ("in", "nin") else ["v"]}}, {"z": 1}]}
        text, params = compiled({"OR": [{f"{key}.{other}": {op: arg}}, {key: 1}]})
        assert text == compiled(shape)[0]
        if op in ("eq", "ne", "in", "nin"):
            assert params["f0"] == ("jsonb", {f"{key}.{other}": value})
            assert params["f2"] == ("jsonb", {key: {other: value}})
        else:
            assert params["f0"] == [key, other]
            assert params["f1"] == f"{key}.{other}"
            assert params["f2"] == value


# --- errors ----------------------------------------------------------------------------------


def test_filter_error_is_an_invalid_input_error() -> None:
    with pytest.raises(FilterError) as info:
        compile_filters({"k": {"bogus": 1}})
    assert isinstance(info.value, InvalidInputError)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, PgmemError)


@pytest.mark.parametrize("filters", [[{"a": 1}], "a = 1", 3, ("a", 1)])
def test_top_level_must_be_a_mapping(filters: object) -> None:
    message = error(filters)
    assert message == f"filters: a filter must be a mapping, got {type(filters).__name__}"


def test_unknown_operator_names_it_and_lists_the_operators() -> None:
    message = error({"price": {"between": [1, 2]}})
    assert message.startswith("filters['price']: unknown operator 'between' on key 'price'")
    assert "eq, ne, gt, gte, lt, lte, in, nin, contains, icontains, exists" in message
    assert "'price.between'" in message


@pytest.mark.parametrize(("op", "suggestion"), [("$gt", "gt"), ("GTE", "gte"), ("$IN", "in")])
def test_unknown_operator_suggests_the_real_one(op: str, suggestion: str) -> None:
    assert f"did you mean {suggestion!r}?" in error({"n": {op: 1}})


def test_combinator_as_operator_is_unknown() -> None:
    message = error({"n": {"OR": [{"gt": 1}]}})
    assert "unknown operator 'OR' on key 'n'" in message
    assert "dotted key" not in message


def test_non_str_operator_is_unknown() -> None:
    assert "unknown operator 1 on key 'n'" in error({"n": {1: 2}})


def test_operators_constant_lists_all_thirteen() -> None:
    assert ", ".join(OPERATORS) == (
        "eq, ne, gt, gte, lt, lte, in, nin, contains, icontains, exists, text_contains, "
        "text_icontains"
    )


def test_empty_operator_mapping() -> None:
    message = error({"price": {}})
    assert message.startswith("filters['price']: key 'price' has an empty operator mapping")


SCALARS = "a str, int, float, bool or None"
ORDERABLE = "an int, float or str"
LIST = "a list or tuple of str, int, float, bool or None"
ITEMS = "items of type str, int, float, bool or None"


@pytest.mark.parametrize(
    ("filters", "location", "expects", "got"),
    [
        # eq / ne: scalars only
        ({"k": {"eq": [1]}}, "filters['k']['eq']", SCALARS, "list"),
        ({"k": {"ne": {"a": 1}}}, "filters['k']['ne']", SCALARS, "dict"),
        ({"k": {"eq": Decimal(1)}}, "filters['k']['eq']", SCALARS, "Decimal"),
        ({"k": {"ne": b"x"}}, "filters['k']['ne']", SCALARS, "bytes"),
        # comparisons: numbers and strings only
        ({"k": {"gt": True}}, "filters['k']['gt']", ORDERABLE, "bool"),
        ({"k": {"gte": None}}, "filters['k']['gte']", ORDERABLE, "None"),
        ({"k": {"lt": [1]}}, "filters['k']['lt']", ORDERABLE, "list"),
        ({"k": {"lte": {}}}, "filters['k']['lte']", ORDERABLE, "dict"),
        # in / nin
        ({"k": {"in": "abc"}}, "filters['k']['in']", LIST, "str"),
        ({"k": {"nin": {1, 2}}}, "filters['k']['nin']", LIST, "set"),
        ({"k": {"in": 1}}, "filters['k']['in']", LIST, "int"),
        ({"k": {"nin": None}}, "filters['k']['nin']", LIST, "None"),
        ({"k": {"in": []}}, "filters['k']['in']", "a non-empty list", "an empty list"),
        ({"k": {"nin": ()}}, "filters['k']['nin']", "a non-empty list", "an empty list"),
        ({"k": {"in": ["a", ["b"]]}}, "filters['k']['in'][1]", ITEMS, "list"),
        ({"k": {"nin": [1, 2, {"a": 1}]}}, "filters['k']['nin'][2]", ITEMS, "dict"),
        # contains / icontains
        ({"k": {"contains": ["a"]}}, "filters['k']['contains']", SCALARS, "list"),
        ({"k": {"icontains": 1}}, "filters['k']['icontains']", "a str", "int"),
        ({"k": {"icontains": None}}, "filters['k']['icontains']", "a str", "None"),
        ({"k": {"icontains": ["a"]}}, "filters['k']['icontains']", "a str", "list"),
        # exists
        ({"k": {"exists": 1}}, "filters['k']['exists']", "a bool", "int"),
        ({"k": {"exists": "true"}}, "filters['k']['exists']", "a bool", "str"),
        ({"k": {"exists": None}}, "filters['k']['exists']", "a bool", "None"),
    ],
)
def test_wrong_value_type(
    filters: Mapping[str, Mapping[str, object]], location: str, expects: str, got: str
) -> None:
    op = next(iter(filters["k"]))
    assert error(filters) == f"{location}: operator {op!r} on key 'k' expects {expects}, got {got}"


def test_wrong_value_type_on_a_dotted_key() -> None:
    assert error({"a.b": {"gt": False}}) == (
        "filters['a.b']['gt']: operator 'gt' on key 'a.b' expects an int, float or str, got bool"
    )


@pytest.mark.parametrize("value", [[1, 2], ("a",), {1}, frozenset({1})])
def test_shorthand_with_a_collection_suggests_in(value: object) -> None:
    assert error({"tag": value}) == (
        f"filters['tag']: operator 'eq' (shorthand) on key 'tag' expects a str, int, float, bool "
        f"or None, got {type(value).__name__}; use {{'in': [...]}} to match any of a list"
    )


@pytest.mark.parametrize("value", [b"x", Decimal("1.5"), object(), 1j])
def test_shorthand_with_another_type(value: object) -> None:
    assert error({"k": value}) == (
        f"filters['k']: operator 'eq' (shorthand) on key 'k' expects a str, int, float, bool or "
        f"None, got {type(value).__name__}"
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "make",
    [
        lambda v: {"k": v},
        lambda v: {"k": {"eq": v}},
        lambda v: {"k": {"ne": v}},
        lambda v: {"k": {"gt": v}},
        lambda v: {"k": {"lte": v}},
        lambda v: {"k": {"in": [1, v]}},
        lambda v: {"k": {"nin": [v]}},
        lambda v: {"k": {"contains": v}},
    ],
)
def test_non_finite_floats_are_rejected(bad: float, make: object) -> None:
    filters = make(bad)  # type: ignore[operator]
    message = error(filters)
    assert "on key 'k' expects a finite number, got float" in message
    assert repr(bad) in message


@pytest.mark.parametrize(
    "filters",
    [
        {"k": "a\x00b"},
        {"k": {"ne": "\x00"}},
        {"k": {"gt": "a\x00"}},
        {"k": {"in": ["ok", "a\x00"]}},
        {"k": {"contains": "\x00"}},
        {"k": {"icontains": "\x00"}},
    ],
)
def test_nul_in_string_values_is_rejected(filters: object) -> None:
    assert "on key 'k' expects a str PostgreSQL can store, got one with a NUL character" in (
        error(filters))


def test_in_list_too_long() -> None:
    message = error({"n": {"in": list(range(MAX_LIST_ITEMS + 1))}})
    assert message == (
        f"filters['n']['in']: operator 'in' on key 'n' expects at most {MAX_LIST_ITEMS} items, "
        f"got {MAX_LIST_ITEMS + 1}"
    )


# --- key errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["a..b", ".a", "a.", ".", "..", "a.b."])
def test_empty_path_segment(key: str) -> None:
    assert error({key: 1}) == (
        f"filters: key {key!r} has an empty path segment (a leading, trailing or doubled dot)"
    )


def test_empty_key() -> None:
    assert error({"": 1}) == "filters: keys must not be empty"


def test_key_length_limit() -> None:
    compile_filters({"k" * MAX_KEY_LENGTH: 1})
    message = error({"k" * (MAX_KEY_LENGTH + 1): 1})
    assert message.startswith("filters: key 'kkk")
    assert message.endswith(f"is {MAX_KEY_LENGTH + 1} characters long; the limit is 255")
    assert len(message) < 200


def test_key_with_nul() -> None:
    assert error({"a\x00b": 1}) == (
        "filters: key 'a\\x00b' contains a NUL character, which PostgreSQL cannot store")


@pytest.mark.parametrize("key", [1, None, ("a",), 1.5])
def test_non_str_key(key: object) -> None:
    described = "None" if key is None else f"{type(key).__name__} {key!r}"
    assert error({key: 1}) == f"filters: keys must be strings, got {described}"


def test_key_errors_apply_to_operator_entries_too() -> None:
    assert "empty path segment" in error({"a..b": {"exists": True}})


def test_key_errors_inside_combinators_say_where() -> None:
    message = error({"OR": [{"a": 1}, {"AND": [{"ok": 1}, {"": 1}]}]})
    assert message == "filters['OR'][1]['AND'][1]: keys must not be empty"


# --- combinator errors -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["AND", "OR", "$and", "$or"])
def test_and_or_need_a_list(name: str) -> None:
    assert error({name: {"a": 1}}) == (
        f"filters[{name!r}]: {name} expects a list of filters, got dict"
    )


@pytest.mark.parametrize("name", ["AND", "OR", "NOT", "$not"])
def test_combinator_with_empty_list(name: str) -> None:
    assert error({name: []}) == (
        f"filters[{name!r}]: {name} expects a non-empty list of filters, got an empty list"
    )


@pytest.mark.parametrize("value", ["a", 1, None, True])
def test_not_needs_a_mapping_or_list(value: object) -> None:
    assert error({"NOT": value}) == (
        f"filters['NOT']: NOT expects a filter mapping or a list of them, "
        f"got {'None' if value is None else type(value).__name__}"
    )


def test_combinator_items_must_be_mappings() -> None:
    assert error({"AND": [{"a": 1}, "b"]}) == (
        "filters['AND'][1]: a filter must be a mapping, got str"
    )


def test_combinator_items_must_not_be_empty() -> None:
    assert error({"OR": [{"a": 1}, {}]}) == (
        "filters['OR'][1]: a filter must have at least one entry, got an empty mapping"
    )


def test_not_of_empty_mapping() -> None:
    assert error({"NOT": {}}) == (
        "filters['NOT']: a filter must have at least one entry, got an empty mapping"
    )


def test_errors_deep_inside_say_the_whole_location() -> None:
    message = error({"AND": [{"OR": [{"a": 1}, {"NOT": {"p.q": {"gt": False}}}]}]})
    assert message == (
        "filters['AND'][0]['OR'][1]['NOT']['p.q']['gt']: operator 'gt' on key 'p.q' expects "
        "an int, float or str, got bool"
    )


def _nested_not(levels: int) -> dict[str, object]:
    filters: dict[str, object] = {"a": 1}
    for _ in range(levels):
        filters = {"NOT": filters}
    return filters


def test_nesting_up_to_the_limit_compiles() -> None:
    text, _ = compiled(_nested_not(MAX_DEPTH - 1))
    assert text.count("NOT (") == MAX_DEPTH - 1


def test_nesting_beyond_the_limit_is_rejected() -> None:
    with pytest.raises(FilterLimitError):
        compile_filters(_nested_not(MAX_DEPTH))
    message = error(_nested_not(MAX_DEPTH))
    assert message.endswith(f"filters nest deeper than {MAX_DEPTH} levels")
    assert message.startswith("filters['NOT']['NOT']")


def test_nesting_limit_counts_lists_too() -> None:
    filters: dict[str, object] = {"a": 1}
    for _ in range(MAX_DEPTH):
        filters = {"AND": [{"b": 1}, filters]}
    assert "deeper than 32 levels" in error(filters)


def test_cyclic_filter_is_rejected_not_recursed_forever() -> None:
    items: list[object] = []
    filters = {"OR": items}
    items.append(filters)
    assert "deeper than 32 levels" in error(filters)


def test_first_error_wins_and_nothing_is_partially_returned() -> None:
    message = error({"a": {"gt": None}, "b": {"bogus": 1}})
    assert "operator 'gt' on key 'a'" in message
