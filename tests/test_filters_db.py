"""Metadata filters against real PostgreSQL: every operator and AND / OR / NOT combinations,
through ``get_all`` and ``search``, against expectations computed by hand from the table below."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import pgmem

# The metadata of seven memories, named by letter.
ROWS: dict[str, dict[str, Any]] = {
    "a": {"category": "food", "rating": 5, "price": 12.5, "tags": ["vegan", "raw"],
          "city": "Paris", "author": {"name": "Ann"}, "note": "Best Falafel"},
    "b": {"category": "food", "rating": 3, "price": 8, "tags": ["meat"], "city": "Lyon",
          "note": "ok"},
    "c": {"category": "travel", "rating": 4, "city": "Paris", "tags": [],
          "author": {"name": "Bob"}, "note": None},
    "d": {"category": "travel", "rating": "4", "city": "Oslo", "draft": True},
    "e": {"category": "music", "rating": 1.5, "price": 20, "draft": False,
          "note": "Falafel jazz"},
    "f": {},
    "g": {"category": "food", "rating": 4, "tags": "vegan options", "city": "paris",
          "draft": True},
}

CASES: list[tuple[str, Mapping[str, Any], str]] = [
    # eq, and its shorthand; None is JSON null, never a missing key
    ("eq shorthand", {"category": "food"}, "abg"),
    ("eq", {"category": {"eq": "food"}}, "abg"),
    ("eq number: int and float", {"rating": {"eq": 4.0}}, "cg"),
    ("eq bool", {"draft": True}, "dg"),
    ("eq null", {"note": None}, "c"),
    ("eq nested key", {"author.name": "Ann"}, "a"),
    # ne: a missing key is not equal
    ("ne", {"category": {"ne": "food"}}, "cdef"),
    ("ne bool", {"draft": {"ne": True}}, "abcef"),
    # comparisons: numbers only against JSON numbers, strings only against strings
    ("gt", {"rating": {"gt": 3}}, "acg"),
    ("gte", {"rating": {"gte": 4}}, "acg"),
    ("lt", {"rating": {"lt": 3}}, "e"),
    ("lte", {"rating": {"lte": 3}}, "be"),
    ("range", {"rating": {"gte": 3, "lt": 5}}, "bcg"),
    ("gt float", {"price": {"gt": 10}}, "ae"),
    ("gt string", {"rating": {"gt": "3"}}, "d"),
    ("lt string", {"city": {"lt": "M"}}, "b"),
    # in / nin
    ("in", {"city": {"in": ["Paris", "Oslo"]}}, "acd"),
    ("in numbers", {"rating": {"in": [4, 5]}}, "acg"),
    ("nin", {"city": {"nin": ["Paris", "Oslo"]}}, "befg"),
    # contains: substring of a string or element of an array; icontains: strings only
    ("contains", {"tags": {"contains": "vegan"}}, "ag"),
    ("contains substring", {"note": {"contains": "Falafel"}}, "ae"),
    ("contains is case-sensitive", {"note": {"contains": "falafel"}}, ""),
    ("icontains", {"note": {"icontains": "falafel"}}, "ae"),
    ("icontains city", {"city": {"icontains": "PAR"}}, "acg"),
    ("icontains skips arrays", {"tags": {"icontains": "vegan"}}, "g"),
    # exists: present even as null
    ("exists", {"note": {"exists": True}}, "abce"),
    ("not exists", {"note": {"exists": False}}, "dfg"),
    ("exists nested", {"author.name": {"exists": True}}, "ac"),
    # combinations
    ("implicit AND", {"category": "food", "city": "Paris"}, "a"),
    ("OR", {"OR": [{"category": "music"}, {"city": "Oslo"}]}, "de"),
    ("NOT", {"NOT": {"category": "food"}}, "cdef"),
    ("AND with NOT", {"AND": [{"category": "food"}, {"NOT": {"tags": {"contains": "vegan"}}}]},
     "b"),
    ("OR of AND", {"OR": [{"AND": [{"category": "food"}, {"rating": {"gte": 4}}]},
                          {"draft": True}]}, "adg"),
    ("$or with NOT list", {"$or": [{"price": {"lt": 10}},
                                   {"NOT": [{"rating": {"exists": True}}]}]}, "bf"),
    ("NOT of OR", {"NOT": {"OR": [{"city": {"icontains": "paris"}}, {"category": "music"}]}},
     "bdf"),
    ("in with OR", {"category": {"in": ["food", "travel"]},
                    "OR": [{"rating": {"gt": 4}}, {"city": "Oslo"}]}, "ad"),
    ("$and $not", {"$and": [{"$not": {"category": "travel"}}, {"price": {"exists": True}}]},
     "abe"),
]


def text_of(name: str) -> str:
    return f"Project note {name}: an entry about the project"


@pytest.fixture(scope="module")
def names() -> dict[str, str]:
    return {text_of(name): name for name in ROWS}


@pytest.fixture
def filtered(memory: pgmem.Memory) -> pgmem.Memory:
    """The memory holding ROWS for user u1, and decoys with matching metadata elsewhere."""
    memory.add_many(
        [{"text": text_of(name), "metadata": metadata} for name, metadata in ROWS.items()],
        user_id="u1",
    )
    memory.add_many(
        [{"text": f"Project note decoy {n}", "metadata": m} for n, m in ROWS.items()],
        user_id="u2",
    )
    return memory


def test_every_operator_and_combination(filtered: pgmem.Memory, names: dict[str, str]) -> None:
    failures = []
    for label, filters, expected in CASES:
        listed = {names[m.text] for m in filtered.get_all(user_id="u1", filters=filters).items}
        found = {
            names[h.text]
            for h in filtered.search("project note", user_id="u1", filters=filters,
                                     limit=50, threshold=0.0)
        }
        if listed != set(expected) or found != set(expected):
            failures.append(f"{label}: {filters} expected {sorted(expected)}, "
                            f"get_all {sorted(listed)}, search {sorted(found)}")
    assert not failures, "\n".join(failures)


def test_no_filter_means_every_memory(filtered: pgmem.Memory) -> None:
    assert len(filtered.get_all(user_id="u1").items) == len(ROWS)
    assert len(filtered.get_all(user_id="u1", filters={}).items) == len(ROWS)
    hits = filtered.search("project note", user_id="u1", limit=50, threshold=0.0)
    assert len(hits) == len(ROWS)


def test_a_filtered_listing_pages(filtered: pgmem.Memory, names: dict[str, str]) -> None:
    filters = {"OR": [{"category": "food"}, {"draft": True}]}
    seen: list[str] = []
    cursor = None
    while True:
        page = filtered.get_all(user_id="u1", filters=filters, limit=1, cursor=cursor)
        seen.extend(names[m.text] for m in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == ["a", "b", "d", "g"]


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"rating": {"between": [1, 2]}}, "'between'"),
        ({"rating": {"gt": [1]}}, "got list"),
        ({"tags": {"in": []}}, "non-empty"),
        ({"note": {"icontains": 3}}, "expects a str"),
        ({"": 1}, "key"),
        ({"OR": []}, "OR"),
        ("category", "mapping"),
    ],
)
def test_a_bad_filter_is_a_filter_error(memory: pgmem.Memory, filters: Any, message: str) -> None:
    with pytest.raises(pgmem.FilterError, match=message):
        memory.get_all(user_id="u1", filters=filters)
    with pytest.raises(pgmem.FilterError, match=message):
        memory.search("project", user_id="u1", filters=filters)


def test_a_dotted_key_is_the_flat_key_first_then_the_path(memory: pgmem.Memory) -> None:
    """``"source.url"`` reads the member of that name; a memory without one reads the nested
    path. ``text_contains`` / ``text_icontains`` read the value's JSON text (Mem0's LIKE)."""
    rows = {
        "flat": {"source.url": "https://a.example", "tags": ["italian", "pasta"], "rating": 5},
        "nested": {"source": {"url": "https://a.example"}, "rating": 15},
        "both": {"source.url": "https://b.example", "source": {"url": "https://a.example"}},
        "none": {"tags": None},
    }
    memory.add_many([{"text": f"a note ({name})", "metadata": m} for name, m in rows.items()],
                    user_id="u1")

    def listed(filters: Mapping[str, Any]) -> set[str]:
        return {m.text[len("a note ("):-1]
                for m in memory.get_all(user_id="u1", filters=filters).items}

    url = "https://a.example"
    assert listed({"source.url": url}) == {"flat", "nested"}
    assert listed({"source.url": {"in": ["https://b.example"]}}) == {"both"}
    assert listed({"source.url": {"icontains": "A.EXAMPLE"}}) == {"flat", "nested"}
    assert listed({"source.url": {"exists": True}}) == {"flat", "nested", "both"}
    assert listed({"NOT": {"source.url": url}}) == {"both", "none"}
    assert listed({"tags": {"text_icontains": "ITALIAN"}}) == {"flat"}
    assert listed({"tags": {"text_contains": "ital"}}) == {"flat"}
    assert listed({"tags": {"contains": "ital"}}) == set()  # contains: an element
    assert listed({"rating": {"text_contains": "5"}}) == {"flat", "nested"}
    assert listed({"tags": {"text_contains": "null"}}) == set()  # JSON null has no text
