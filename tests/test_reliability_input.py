"""Bad input gets a specific PgmemError subclass and writes nothing; odd but valid input (other
scripts, emoji, SQL-looking text) is stored and found verbatim.

Every bad call runs against one seeded database per module, and after each the row counts of
all four tables must be what they were. A MiniLM-free :class:`HashEmbedder` keeps this fast;
the verbatim round trips use the real models."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from reliability_support import (
    BrokenEmbedder,
    HashEmbedder,
    counts,
    orphans,
    rows,
    scratch_database,
)

import pgmem
from pgmem.errors import ConfigurationError, DimensionMismatchError

INJECTION = "a'); DROP TABLE pgmem.memories; --"
INJECTION_KEY = "a'); DROP TABLE memories CASCADE; --"  # no dot: a dotted key is a path
SEEDS = [
    {"text": "John moved to Paris in May.", "metadata": {"city": "Paris", "rating": 4}},
    {"text": "Alice adopted a cat named Whiskers.", "metadata": {"tags": ["pet", "cat"]}},
    {"text": "The router needs a reboot every Monday.", "metadata": {INJECTION_KEY: INJECTION}},
]


@pytest.fixture(scope="module")
def seeded(
    server_dsn: str, template_database: str, analyzer: pgmem.TextAnalyzer
) -> Iterator[tuple[str, pgmem.Memory, list[uuid.UUID]]]:
    """A database holding SEEDS for user 'alice', a Memory on it, and the seeds' ids."""
    with scratch_database(server_dsn, template_database) as dsn, \
            pgmem.Memory(dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        ids = [r.id for r in mem.add_many(SEEDS, user_id="alice", agent_id="bot")]
        yield dsn, mem, ids


def expect_nothing_written(
    dsn: str, call: Callable[[], Any], error: type[pgmem.PgmemError], match: str | None = None
) -> pytest.ExceptionInfo[pgmem.PgmemError]:
    before = counts(dsn)
    with pytest.raises(error, match=match) as info:
        call()
    assert counts(dsn) == before
    return info


# -- texts, queries, scopes, limits, thresholds ------------------------------------------------

def _searching_with_threshold(value: object) -> Callable[[pgmem.Memory, uuid.UUID], Any]:
    return lambda m, i: m.search("John", user_id="alice", threshold=value)  # type: ignore[arg-type]


BAD_CALLS: dict[str, tuple[Callable[[pgmem.Memory, uuid.UUID], Any], type[pgmem.PgmemError]]] = {
    # empty and whitespace-only texts and queries
    "add empty": (lambda m, i: m.add("", user_id="u"), pgmem.InvalidInputError),
    "add whitespace": (lambda m, i: m.add(" \t\n\u3000 ", user_id="u"), pgmem.InvalidInputError),
    "add None": (lambda m, i: m.add(None, user_id="u"), pgmem.InvalidInputError),  # type: ignore[arg-type]
    "add bytes": (lambda m, i: m.add(b"hello", user_id="u"), pgmem.InvalidInputError),  # type: ignore[arg-type]
    "add int": (lambda m, i: m.add(42, user_id="u"), pgmem.InvalidInputError),  # type: ignore[arg-type]
    "add_many one empty": (
        lambda m, i: m.add_many(["fine text", "  "], user_id="u"), pgmem.InvalidInputError
    ),
    "add_many dict blank": (
        lambda m, i: m.add_many([{"text": "\n"}], user_id="u"), pgmem.InvalidInputError
    ),
    "add_many unknown key": (
        lambda m, i: m.add_many([{"text": "x", "tenant": "other"}], user_id="u"),
        pgmem.InvalidInputError,
    ),
    "search empty": (lambda m, i: m.search("", user_id="alice"), pgmem.InvalidInputError),
    "search whitespace": (lambda m, i: m.search("   ", user_id="alice"), pgmem.InvalidInputError),
    "search None": (lambda m, i: m.search(None, user_id="alice"), pgmem.InvalidInputError),  # type: ignore[arg-type]
    "update blank text": (lambda m, i: m.update(i, text=" "), pgmem.InvalidInputError),
    "update nothing": (lambda m, i: m.update(i), pgmem.InvalidInputError),
    # no scope, bad scope ids
    "add no scope": (lambda m, i: m.add("a fine text"), pgmem.ScopeError),
    "add_many no scope": (lambda m, i: m.add_many(["a fine text"]), pgmem.ScopeError),
    "add_many item scope None": (
        lambda m, i: m.add_many([{"text": "x", "user_id": None}], user_id="u"), pgmem.ScopeError
    ),
    "search no scope": (lambda m, i: m.search("John"), pgmem.ScopeError),
    "get_all no scope": (lambda m, i: m.get_all(), pgmem.ScopeError),
    "delete_all no scope": (lambda m, i: m.delete_all(), pgmem.ScopeError),
    "empty user_id": (lambda m, i: m.add("x", user_id=""), pgmem.InvalidInputError),
    "blank agent_id": (lambda m, i: m.search("x", agent_id="  "), pgmem.InvalidInputError),
    "int run_id": (lambda m, i: m.add("x", run_id=7), pgmem.InvalidInputError),  # type: ignore[arg-type]
    "long user_id": (lambda m, i: m.add("x", user_id="u" * 256), pgmem.InvalidInputError),
    "delete_all blank": (lambda m, i: m.delete_all(user_id=" "), pgmem.InvalidInputError),
    # limits
    "limit 0": (lambda m, i: m.search("John", user_id="alice", limit=0), pgmem.InvalidInputError),
    "limit -1": (lambda m, i: m.search("John", user_id="alice", limit=-1), pgmem.InvalidInputError),
    "limit huge": (
        lambda m, i: m.search("John", user_id="alice", limit=10**12), pgmem.InvalidInputError
    ),
    "limit bool": (
        lambda m, i: m.search("John", user_id="alice", limit=True), pgmem.InvalidInputError
    ),
    "limit float": (
        lambda m, i: m.search("John", user_id="alice", limit=5.0), pgmem.InvalidInputError  # type: ignore[arg-type]
    ),
    "limit str": (
        lambda m, i: m.search("John", user_id="alice", limit="5"), pgmem.InvalidInputError  # type: ignore[arg-type]
    ),
    "get_all limit 0": (lambda m, i: m.get_all(user_id="alice", limit=0), pgmem.InvalidInputError),
    "get_all limit huge": (
        lambda m, i: m.get_all(user_id="alice", limit=1_000_001), pgmem.InvalidInputError
    ),
    "get_all limit float": (
        lambda m, i: m.get_all(user_id="alice", limit=2.5), pgmem.InvalidInputError  # type: ignore[arg-type]
    ),
    "limit absurd": (
        lambda m, i: m.search("John", user_id="alice", limit=10**5000), pgmem.InvalidInputError
    ),
    "threshold absurd": (
        lambda m, i: m.search("John", user_id="alice", threshold=-(10**5000)),
        pgmem.InvalidInputError,
    ),
    "get_all limit absurd": (
        lambda m, i: m.get_all(user_id="alice", limit=10**5000), pgmem.InvalidInputError
    ),
    "get_all cursor absurd": (
        lambda m, i: m.get_all(user_id="alice", cursor=10**5000), pgmem.InvalidInputError  # type: ignore[arg-type]
    ),
    "add_many batch_size absurd": (
        lambda m, i: m.add_many(["x"], user_id="u", batch_size=10**5000), pgmem.InvalidInputError
    ),
    "mode unknown": (
        lambda m, i: m.search("John", user_id="alice", mode="bm25"), pgmem.InvalidInputError
    ),
    "mode absurd": (
        lambda m, i: m.search("John", user_id="alice", mode=10**5000), pgmem.InvalidInputError  # type: ignore[arg-type]
    ),
    "legs not a list": (
        lambda m, i: m.search("John", user_id="alice", legs=5), pgmem.InvalidInputError  # type: ignore[arg-type]
    ),
    "legs unhashable": (
        lambda m, i: m.search("John", user_id="alice", legs=[["semantic"]]),  # type: ignore[list-item]
        pgmem.InvalidInputError,
    ),
    "legs unknown": (
        lambda m, i: m.search("John", user_id="alice", legs=["vector"]), pgmem.InvalidInputError
    ),
    "get_all bad cursor": (
        lambda m, i: m.get_all(user_id="alice", cursor="'; DROP TABLE x; --"),
        pgmem.InvalidInputError,
    ),
    # thresholds
    **{
        f"threshold {value!r}": (_searching_with_threshold(value), pgmem.InvalidInputError)
        for value in (-1.01, 1.01, float("nan"), float("inf"), float("-inf"), True, "0.5", None)
    },
    # NUL characters, which PostgreSQL cannot store, and lone surrogates, which are no Unicode
    "NUL in text": (lambda m, i: m.add("a\x00b", user_id="u"), pgmem.InvalidInputError),
    "NUL in query": (lambda m, i: m.search("a\x00b", user_id="alice"), pgmem.InvalidInputError),
    "NUL in update": (lambda m, i: m.update(i, text="a\x00b"), pgmem.InvalidInputError),
    "NUL in metadata key": (
        lambda m, i: m.add("x", user_id="u", metadata={"k\x00": 1}), pgmem.InvalidInputError
    ),
    "NUL in metadata value": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": "v\x00"}), pgmem.InvalidInputError
    ),
    "NUL nested in metadata": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": [1, {"deep": ["\x00"]}]}),
        pgmem.InvalidInputError,
    ),
    "NUL in updated metadata": (
        lambda m, i: m.update(i, metadata={"k": "\x00"}), pgmem.InvalidInputError
    ),
    "NUL in user_id": (lambda m, i: m.add("x", user_id="u\x00"), pgmem.InvalidInputError),
    "NUL in agent_id": (lambda m, i: m.search("x", agent_id="\x00a"), pgmem.InvalidInputError),
    "NUL in run_id": (lambda m, i: m.get_all(run_id="r\x00"), pgmem.InvalidInputError),
    "NUL in delete_all scope": (
        lambda m, i: m.delete_all(user_id="alice\x00"), pgmem.InvalidInputError
    ),
    "NUL in add_many item scope": (
        lambda m, i: m.add_many([{"text": "x", "agent_id": "a\x00"}], user_id="u"),
        pgmem.InvalidInputError,
    ),
    "surrogate in text": (lambda m, i: m.add("bad \ud800", user_id="u"), pgmem.InvalidInputError),
    "surrogate in query": (
        lambda m, i: m.search("bad \udfff", user_id="alice"), pgmem.InvalidInputError
    ),
    "surrogate in user_id": (lambda m, i: m.add("x", user_id="\ud83d"), pgmem.InvalidInputError),
    "surrogate in metadata": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": "\ud800"}), pgmem.InvalidInputError
    ),
    "surrogate in metadata key": (
        lambda m, i: m.add("x", user_id="u", metadata={"\ud800": 1}), pgmem.InvalidInputError
    ),
    # metadata that JSON or jsonb cannot hold
    "metadata list": (
        lambda m, i: m.add("x", user_id="u", metadata=["a"]), pgmem.InvalidInputError  # type: ignore[arg-type]
    ),
    "metadata NaN": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": float("nan")}), pgmem.InvalidInputError
    ),
    "metadata set": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": {1, 2}}), pgmem.InvalidInputError
    ),
    "metadata too large": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": "v" * 70_000}), pgmem.LimitError
    ),
    "metadata too deep": (
        lambda m, i: m.add("x", user_id="u", metadata=_nested(100_000)), pgmem.LimitError
    ),
    "metadata huge int": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": 10**5000}), pgmem.InvalidInputError
    ),
    # JSON would turn these keys into strings: what comes back would not be what was given
    "metadata int key": (
        lambda m, i: m.add("x", user_id="u", metadata={1: "a"}), pgmem.InvalidInputError
    ),
    "metadata nested None key": (
        lambda m, i: m.add("x", user_id="u", metadata={"k": [{None: 1}]}), pgmem.InvalidInputError
    ),
}


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_input_raises_a_specific_error_and_writes_nothing(
    seeded: tuple[str, pgmem.Memory, list[uuid.UUID]], case: str
) -> None:
    dsn, mem, ids = seeded
    call, error = BAD_CALLS[case]
    info = expect_nothing_written(dsn, lambda: call(mem, ids[0]), error)
    assert type(info.value) is error  # the specific class, not a parent
    assert mem.get(ids[0]).text == SEEDS[0]["text"]


def test_the_maximum_text_length_is_configurable(
    db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer, max_text_length=20) as mem:
        kept = mem.add("x" * 20, user_id="u")
        for call in (
            lambda: mem.add("y" * 21, user_id="u"),
            lambda: mem.add_many(["fine", "z" * 21], user_id="u"),
            lambda: mem.search("q" * 21, user_id="u"),
            lambda: mem.update(kept.id, text="w" * 21),
        ):
            expect_nothing_written(db_dsn, call, pgmem.LimitError, match="limit is 20")
        # characters, not bytes: 20 four-byte emoji fit
        assert mem.add("🍕" * 20, user_id="u").text == "🍕" * 20
    for bad in (0, -5, True, 2.5, "100", None):
        with pytest.raises(ConfigurationError, match="max_text_length"):
            pgmem.Memory(db_dsn, embedder=HashEmbedder(), max_text_length=bad)  # type: ignore[arg-type]


def test_a_bad_tenant_is_refused_at_construction(db_dsn: str) -> None:
    for tenant in ("", "  ", "t\x00", 5, None, "t" * 256):
        with pytest.raises(pgmem.InvalidInputError, match="tenant"):
            pgmem.Memory(db_dsn, embedder=HashEmbedder(), tenant=tenant)  # type: ignore[arg-type]


# -- embedders that return unusable vectors ----------------------------------------------------

EMBEDDER_CALLS: dict[str, Callable[[pgmem.Memory, uuid.UUID], Any]] = {
    "add": lambda m, i: m.add("Bob flew to Berlin with Carol.", user_id="u"),
    "add_many": lambda m, i: m.add_many(["Bob met Carol.", "Dana lives in Oslo."], user_id="u"),
    "update": lambda m, i: m.update(i, text="Erin visited Rome."),
    "search": lambda m, i: m.search("Where did John move?", user_id="alice"),
}


@pytest.mark.parametrize("kind", BrokenEmbedder.KINDS)
@pytest.mark.parametrize("operation", list(EMBEDDER_CALLS))
def test_unusable_embeddings_raise_embedding_error_and_write_nothing(
    seeded: tuple[str, pgmem.Memory, list[uuid.UUID]], analyzer: pgmem.TextAnalyzer,
    kind: str, operation: str,
) -> None:
    dsn, _, ids = seeded
    with pgmem.Memory(dsn, embedder=BrokenEmbedder(kind), nlp=analyzer) as broken:
        error = DimensionMismatchError if kind == "dimension" else pgmem.EmbeddingError
        info = expect_nothing_written(dsn, lambda: EMBEDDER_CALLS[operation](broken, ids[0]), error)
    if kind == "dimension":
        assert "3-dimensional" in str(info.value) and "384-dimensional" in str(info.value)
    if kind == "raises":
        assert "CUDA out of memory" in str(info.value)
        assert isinstance(info.value.__cause__, RuntimeError)


# -- ids -----------------------------------------------------------------------------------

MALFORMED_IDS = [
    "", "   ", "not-a-uuid", "1234", "' OR '1'='1", f"{uuid.uuid4()}\x00", f"{uuid.uuid4()}x",
    42, 4.2, None, b"0123456789abcdef", ["a"], object(), 10**5000,
]
ID_CALLS: dict[str, Callable[[pgmem.Memory, Any], Any]] = {
    "get": lambda m, i: m.get(i),
    "update": lambda m, i: m.update(i, text="new text"),
    "update metadata": lambda m, i: m.update(i, metadata={"a": 1}),
    "delete": lambda m, i: m.delete(i),
    "history": lambda m, i: m.history(i),
}


@pytest.mark.parametrize("operation", list(ID_CALLS))
def test_malformed_ids_are_invalid_input_and_unknown_ids_not_found(
    seeded: tuple[str, pgmem.Memory, list[uuid.UUID]], operation: str
) -> None:
    dsn, mem, _ = seeded
    call = ID_CALLS[operation]
    for bad in MALFORMED_IDS:
        info = expect_nothing_written(dsn, functools.partial(call, mem, bad),
                                      pgmem.InvalidInputError)
        assert type(info.value) is pgmem.InvalidInputError
    for unknown in (uuid.uuid4(), str(uuid.uuid4()), str(uuid.uuid4()).upper()):
        expect_nothing_written(dsn, functools.partial(call, mem, unknown), pgmem.NotFoundError)


# -- filters -------------------------------------------------------------------------------

def _nots(depth: int, inner: dict[str, Any]) -> dict[str, Any]:
    """``{"NOT": {"NOT": ... inner}}``, ``depth`` NOTs deep."""
    for _ in range(depth):
        inner = {"NOT": inner}
    return inner


BAD_FILTERS: list[Any] = [
    {"city": {"like": "Par%"}},
    {"city": {"$regex": ".*"}},
    {"city": {"EQ": "Paris"}},
    {"city": {"eq": ["Paris"]}},
    {"city": {"eq": {"nested": 1}}},
    {"rating": {"gt": None}},
    {"rating": {"gt": [1]}},
    {"rating": {"gt": True}},
    {"rating": {"gte": float("nan")}},
    {"rating": {"lt": float("inf")}},
    {"rating": {"gt": 10**5000}},
    {"rating": 10**5000},
    {"city": {"in": "Paris"}},
    {"city": {"in": []}},
    {"city": {"in": list(range(1001))}},
    {"city": {"nin": [["Paris"]]}},
    {"city": {"exists": "yes"}},
    {"city": {"icontains": 3}},
    {"city": {}},
    {"city": object()},
    {"city": b"Paris"},
    {"city": {"Paris", "Lyon"}},
    {"city": ["Paris"]},
    {"city": "Par\x00is"},
    {"city": "Par\ud800is"},
    {"ci\x00ty": "Paris"},
    {"ci\udfffty": "Paris"},
    {1: "Paris"},
    {10**5000: "Paris"},
    {"city": {10**5000: "Paris"}},
    {None: "Paris"},
    {"": "Paris"},
    {"a..b": 1},
    {".a": 1},
    {"k" * 256: 1},
    {"OR": {"city": "Paris"}},
    {"OR": []},
    {"AND": "city = 'Paris'"},
    {"NOT": 5},
    {"OR": [{"city": "Paris"}, "x"]},
    {"OR": [{}]},
    ["city", "Paris"],
    "city = 'Paris' OR 1=1",
    {"city": _nested(3)},
    _nots(40, {"city": "Paris"}),
]


@pytest.mark.parametrize("index", range(len(BAD_FILTERS)))
def test_bad_filters_raise_filter_error_and_write_nothing(
    seeded: tuple[str, pgmem.Memory, list[uuid.UUID]], index: int
) -> None:
    dsn, mem, _ = seeded
    bad = BAD_FILTERS[index]
    for call in (
        lambda: mem.search("John", user_id="alice", filters=bad),
        lambda: mem.get_all(user_id="alice", filters=bad),
    ):
        info = expect_nothing_written(dsn, call, pgmem.FilterError)
        # Too deep a nesting is a limit (FilterLimitError, a FilterError); the rest plain.
        deep = bad is BAD_FILTERS[-1]
        assert type(info.value) is (pgmem.FilterLimitError if deep else pgmem.FilterError)


def test_injection_looking_filters_are_plain_values(
    seeded: tuple[str, pgmem.Memory, list[uuid.UUID]]
) -> None:
    dsn, mem, ids = seeded
    before = counts(dsn)
    looks_bad: list[dict[str, Any]] = [
        {INJECTION_KEY: INJECTION},
        {"city": INJECTION},
        {INJECTION_KEY: {"exists": True}},
        {"city": {"in": [INJECTION, "x' OR '1'='1"]}},
        {"city": {"contains": "%' OR 1=1 --"}},
        {"city": {"icontains": "'; DELETE FROM pgmem.entities; --"}},
        {"rating": {"gt": "0); DROP TABLE pgmem.history; --"}},
        {"%(tenant)s": "%(user_id)s"},
        {"{schema}": "{scope}"},
        {"a.b'c.d\"e": {"ne": "\\x00"}},
        {"OR": [{INJECTION_KEY: INJECTION}, {"city": "Paris"}]},
    ]
    found = []
    for filters in looks_bad:
        found.append({h.id for h in mem.search("router John", user_id="alice", filters=filters,
                                               threshold=0.0)})
        assert counts(dsn) == before
    # the key that looks like an injection is an ordinary key: it finds its memory, exactly
    assert found[0] == {ids[2]}
    assert found[2] == {ids[2]}
    assert found[-1] == {ids[0], ids[2]}
    assert all(not f for f in found[1:2] + found[3:-2])
    assert found[-2] == set(ids)  # "ne": a missing key is not equal
    assert rows(dsn, "SELECT to_regclass('pgmem.memories'), to_regclass('pgmem.history')") == [
        ("pgmem.memories", "pgmem.history")
    ]
    assert mem.get_all(user_id="alice", filters={INJECTION_KEY: INJECTION}).items[0].id == ids[2]


def test_metadata_that_merely_looks_like_an_escape_is_stored(
    db_dsn: str, analyzer: pgmem.TextAnalyzer
) -> None:
    # The literal six characters \u0000 are no NUL character.
    meta = {"path": "C:\\u0000\\dir", "k\\u0000": "\\x00"}
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        added = mem.add("a note about escapes", user_id="u", metadata=meta)
        assert mem.get(added.id).metadata == meta
        assert mem.get_all(user_id="u", filters={"path": "C:\\u0000\\dir"}).items[0].id == added.id


# -- verbatim round trips ------------------------------------------------------------------

VERBATIM = [
    "東京で美味しい寿司を食べました。来週は京都に行きます。",
    "我喜欢在北京的胡同里散步",
    "서울에서 친구를 만났어요",
    "أحب القهوة العربية في الصباح مع أصدقائي في القاهرة",
    "Zoë's crème brûlée at the café in Besançon was très délicieuse — naïve façade!",
    "Ich wohne in Köln und fahre gern Fahrrad über die Brücke.",
    "Привет! Я живу в Москве и люблю борщ.",
    "I ❤️ pizza 🍕 with my family 👨‍👩‍👧‍👦 and the 🐶",
    "🍕🍕🍕",
    "Robert'); DROP TABLE pgmem.memories; --",
    "SELECT * FROM pgmem.memories WHERE 1=1; -- ' OR '1'='1",
    "%(tenant)s %s $1 {schema} {scope} :name ?",
    "to_tsquery('a & b') | !c <-> d:* & 'e''f'",
    "C:\\Users\\bob\\file.txt and a trailing backslash \\",
    "tab\tand\nnewline\r\nand zero-width\u200bjoiner and RTL \u202emark",
]


def test_other_scripts_emoji_and_sql_are_stored_and_found_verbatim(
    memory: pgmem.Memory, db_dsn: str
) -> None:
    added = memory.add_many(
        [{"text": t, "metadata": {"text": t, t: True}} for t in VERBATIM], user_id="intl"
    )
    assert [a.text for a in added] == VERBATIM
    for result, text in zip(added, VERBATIM):
        record = memory.get(result.id)
        assert record.text == text and record.metadata == {"text": text, text: True}
        hits = memory.search(text, user_id="intl", limit=len(VERBATIM), threshold=0.0)
        best = hits[0].explain.semantic
        # the text itself is the best semantic match (ties possible for texts MiniLM reads
        # as unknown tokens), returned character for character
        (hit,) = [h for h in hits if h.id == result.id]
        assert hit.text == text and hit.explain.semantic == pytest.approx(best, abs=1e-5)
        assert memory.get_all(user_id="intl", filters={"text": text}).items[0].id == result.id
        if "." not in text:  # a dotted key addresses nested objects
            assert memory.get_all(user_id="intl", filters={text: True}).items[0].id == result.id
    # keyword search with words in other scripts
    for query, expected in (("Köln Fahrrad", 5), ("Москве борщ", 6), ("café Besançon", 4)):
        hit = memory.search(query, user_id="intl", limit=3, mode="keyword", threshold=0.0)[0]
        assert hit.id == added[expected].id
    assert counts(db_dsn)["memories"] == len(VERBATIM)
    assert orphans(db_dsn) == {"links": 0, "memories_without_add": 0, "unlinked_entities": 0}


def test_verbatim_text_survives_update_and_history(memory: pgmem.Memory) -> None:
    first, second = VERBATIM[3], VERBATIM[9]
    added = memory.add(first, user_id="intl")
    memory.update(added.id, text=second)
    assert memory.get(added.id).text == second
    memory.delete(added.id)
    events = memory.history(added.id)
    assert [(e.event, e.old_text, e.new_text) for e in events] == [
        ("ADD", None, first), ("UPDATE", first, second), ("DELETE", second, None)
    ]


def test_the_database_is_intact(seeded: tuple[str, pgmem.Memory, list[uuid.UUID]]) -> None:
    """Runs after the bad calls of this module: the seeds are all still there."""
    dsn, mem, ids = seeded
    assert counts(dsn)["memories"] == len(SEEDS)
    assert {m.id for m in mem.get_all(user_id="alice").items} == set(ids)
    with psycopg.connect(dsn) as conn:
        changed = conn.execute("SELECT count(*) FROM pgmem.history WHERE event <> 'ADD'")
        assert changed.fetchone() == (0,)
