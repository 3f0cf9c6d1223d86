"""The memory lifecycle against real PostgreSQL: add_many, duplicates, update, delete,
delete_all, get, get_all paging and history.

Tests that compare or page many rows use :class:`HashEmbedder` (deterministic vectors that do not
depend on the batch) so that they are fast and can compare stored vectors exactly; the others use
the real models."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
import pytest

import pgmem
from pgmem import scoring
from pgmem.citus import citus_version
from pgmem.nlp import TextAnalyzer

pytestmark = pytest.mark.also_on_citus

DIM = 384


class HashEmbedder:
    """Unit vectors seeded by each text's sha256: the same for a text in any batch."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).random(DIM, dtype=np.float32) + 0.01
            rows.append(vector / np.linalg.norm(vector))
        return np.stack(rows).astype(np.float32)


class NanOnSecondCall(HashEmbedder):
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors = super().embed(texts)
        if len(self.calls) == 2:
            vectors[0, 0] = np.nan
        return vectors


@pytest.fixture
def fast_memory(db_dsn: str, analyzer: TextAnalyzer) -> Iterator[pgmem.Memory]:
    """A Memory with the real spaCy pipeline and :class:`HashEmbedder`."""
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        yield mem


def rows(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, params).fetchall()


def linked_entities(dsn: str, memory_id: uuid.UUID) -> set[str]:
    return {
        name
        for (name,) in rows(
            dsn,
            "SELECT e.name FROM pgmem.memory_entities me"
            " JOIN pgmem.entities e ON e.tenant = me.tenant AND e.id = me.entity_id"
            " WHERE me.memory_id = %s",
            memory_id,
        )
    }


def entity_names(dsn: str) -> set[str]:
    return {name for (name,) in rows(dsn, "SELECT name FROM pgmem.entities")}


def count(dsn: str, table: str) -> int:
    return int(rows(dsn, f"SELECT count(*) FROM pgmem.{table}")[0][0])


# -- add and add_many ----------------------------------------------------------------------

NAMES = ["Caroline", "Melanie", "Jon", "Gina", "Maria", "Deborah", "Andrew", "Audrey"]
PLACES = ["Paris", "New York", "Ottawa", "Lake Tahoe", "Berlin", "Boston", "Oslo"]
THINGS = ["a pottery class", "a jazz concert", "the farmers market", "a marathon", "the museum"]


def corpus(n: int) -> list[dict[str, Any]]:
    """``n`` varied items: entities, shared entities, metadata, scopes, duplicates, a text
    without lemmas, quoted titles."""
    items: list[dict[str, Any]] = []
    for i in range(n):
        name, place = NAMES[i % len(NAMES)], PLACES[(i * 3) % len(PLACES)]
        thing, other = THINGS[i % len(THINGS)], NAMES[(i + 3) % len(NAMES)]
        kind = i % 10
        if kind == 0:
            text = f'{name} and {other} watched "Show {i // 10}" in {place}'
        elif kind == 7 and i >= 20:
            text = items[i - 17]["text"]  # a duplicate of an earlier item of the same scope
        elif kind == 9:
            text = "and then it was so" if i % 20 == 9 else f"{name}: thanks, see you soon!"
        else:
            text = f"{name} went to {thing} in {place} with {other} on day {i}"
        item: dict[str, Any] = {"text": text, "metadata": {"i": i % 7, "tag": thing}}
        if i % 13 == 0:
            item["user_id"] = "u2"
        items.append(item)
    return items


def stored(dsn: str, tenant: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything a tenant's memories are made of, apart from ids and timestamps."""
    return {
        "memories": rows(
            dsn,
            "SELECT m.user_id, m.agent_id, m.run_id, m.text, m.content_hash, m.lexemes::text,"
            "       m.lexeme_count, m.metadata, m.embedding::text,"
            "       array(SELECT e.name FROM pgmem.memory_entities me"
            "              JOIN pgmem.entities e ON e.tenant = me.tenant AND e.id = me.entity_id"
            "             WHERE me.tenant = m.tenant AND me.memory_id = m.id ORDER BY e.name)"
            "  FROM pgmem.memories m WHERE m.tenant = %s ORDER BY m.user_id, m.text",
            tenant,
        ),
        "entities": rows(
            dsn,
            "SELECT name, label, embedding::text FROM pgmem.entities WHERE tenant = %s"
            " ORDER BY name",
            tenant,
        ),
        "history": rows(
            dsn,
            "SELECT event, old_text, new_text FROM pgmem.history WHERE tenant = %s ORDER BY id",
            tenant,
        ),
    }


def test_add_many_writes_the_same_rows_as_one_by_one_add(
    db_dsn: str, analyzer: TextAnalyzer
) -> None:
    items = corpus(200)
    embedder = HashEmbedder()
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, tenant="one") as one:
        singles = [
            one.add(item["text"], user_id=item.get("user_id", "u1"), metadata=item["metadata"])
            for item in items
        ]
    embedder.calls.clear()
    progress: list[tuple[int, int]] = []
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, tenant="many") as many:
        batched = many.add_many(items, user_id="u1", batch_size=64, on_progress=
                                lambda done, total: progress.append((done, total)))

    assert embedder.calls and len(embedder.calls) == 4  # one embedder call per batch
    assert progress == [(64, 200), (128, 200), (192, 200), (200, 200)]
    one_rows, many_rows = stored(db_dsn, "one"), stored(db_dsn, "many")
    assert one_rows == many_rows
    assert len(one_rows["memories"]) < 200  # the corpus has duplicates
    assert sum(bool(r[-1]) for r in one_rows["memories"]) > 100  # and entity links
    assert [(r.text, r.user_id, r.duplicate) for r in singles] == [
        (r.text, r.user_id, r.duplicate) for r in batched
    ]
    assert all(r.tenant == "many" for r in batched)
    # A duplicate points at the memory that was stored for the first of its kind.
    first_id: dict[tuple[str | None, str], uuid.UUID] = {}
    for result in batched:
        key = (result.user_id, result.text)
        if result.duplicate:
            assert result.id == first_id[key]
        else:
            first_id[key] = result.id
    assert {r.id for r in batched} == {m.id for m in batched if not m.duplicate}


def test_add_returns_a_record_of_what_was_stored(memory: pgmem.Memory) -> None:
    rec = memory.add("Caroline moved to Ottawa", user_id="u1", run_id="r1", metadata={"k": 1})
    assert isinstance(rec, pgmem.MemoryRecord) and isinstance(rec, pgmem.AddResult)
    assert not rec.duplicate
    assert memory.get(rec.id) == pgmem.MemoryRecord(
        id=rec.id, text="Caroline moved to Ottawa", user_id="u1", agent_id=None, run_id="r1",
        metadata={"k": 1}, created_at=rec.created_at, updated_at=rec.updated_at,
    )
    assert memory.get(str(rec.id)).id == rec.id


def test_add_many_with_per_item_scopes(fast_memory: pgmem.Memory) -> None:
    results = fast_memory.add_many(
        [
            "plain text",
            {"text": "for u2", "user_id": "u2"},
            {"text": "for an agent only", "user_id": None, "agent_id": "a1"},
            {"text": "with a run", "run_id": "r9", "metadata": {"x": [1, 2]}},
        ],
        user_id="u1",
    )
    assert [(r.user_id, r.agent_id, r.run_id) for r in results] == [
        ("u1", None, None), ("u2", None, None), (None, "a1", None), ("u1", None, "r9"),
    ]
    assert results[3].metadata == {"x": [1, 2]}
    assert fast_memory.add_many([], user_id="u1") == []


def test_exact_duplicates_are_stored_once_per_scope(fast_memory: pgmem.Memory, db_dsn: str) -> None:
    first = fast_memory.add("Jon likes jazz", user_id="u1", metadata={"v": 1})
    again = fast_memory.add("Jon likes jazz", user_id="u1", metadata={"v": 2})
    assert again.duplicate and again.id == first.id
    assert again.metadata == {"v": 1} and again.created_at == first.created_at

    # Another scope -- a different user, or the same user with a run -- is another memory.
    other_user = fast_memory.add("Jon likes jazz", user_id="u2")
    with_run = fast_memory.add("Jon likes jazz", user_id="u1", run_id="r1")
    assert not other_user.duplicate and not with_run.duplicate
    assert len({first.id, other_user.id, with_run.id}) == 3
    assert fast_memory.add("Jon likes jazz", user_id="u1", run_id="r1").id == with_run.id
    # Not the same text: one more character is another hash.
    assert not fast_memory.add("Jon likes jazz.", user_id="u1").duplicate

    forced = fast_memory.add("Jon likes jazz", user_id="u1", dedupe=False)
    assert not forced.duplicate and forced.id != first.id

    batch = fast_memory.add_many(["Gina sings", "Gina sings", "Jon likes jazz"], user_id="u9")
    assert [r.duplicate for r in batch] == [False, True, False]
    assert batch[0].id == batch[1].id
    batch = fast_memory.add_many(["Gina sings", "Gina sings"], user_id="u9", dedupe=False)
    assert [r.duplicate for r in batch] == [False, False] and batch[0].id != batch[1].id

    assert count(db_dsn, "memories") == 9
    assert rows(db_dsn, "SELECT count(*) FROM pgmem.history WHERE memory_id = %s", first.id) == [
        (1,)
    ]


def test_concurrent_adds_of_one_text_store_it_once(db_dsn: str, analyzer: TextAnalyzer) -> None:
    """A second add of the text waits for the first's transaction, then finds its memory."""
    results: list[pgmem.AddResult] = []
    with psycopg.connect(db_dsn) as conn, psycopg.connect(db_dsn, autocommit=True) as watcher:
        holder = pgmem.Memory(conn, embedder=HashEmbedder(), nlp=analyzer)
        other = pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer)
        try:
            with conn.transaction():
                first = holder.add("Maria ran a marathon in Paris", user_id="u1")
                thread = threading.Thread(
                    target=lambda: results.append(
                        other.add("Maria ran a marathon in Paris", user_id="u1")
                    )
                )
                thread.start()
                deadline = time.monotonic() + 15
                # on Citus the lock is a worker's: citus_locks sees every node's
                locks = "citus_locks" if citus_version(watcher) else "pg_locks"
                while watcher.execute(
                    f"SELECT count(*) FROM {locks} WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone() != (1,):
                    assert time.monotonic() < deadline, "the second add never waited"
                    time.sleep(0.05)
                assert not results
            thread.join(30)
        finally:
            other.close()
    (second,) = results
    assert second.duplicate and second.id == first.id
    assert count(db_dsn, "memories") == 1


def test_add_many_checks_every_item_before_writing(fast_memory: pgmem.Memory, db_dsn: str) -> None:
    good = ["one", "two", "three"]
    bad_items: list[tuple[object, type[Exception], str]] = [
        ("", pgmem.InvalidInputError, "text is empty"),
        ("a\x00b", pgmem.InvalidInputError, "NUL"),
        ({"text": "x", "metadata": {"n": float("nan")}}, pgmem.InvalidInputError, "metadata"),
        ({"text": "x", "meta": {}}, pgmem.InvalidInputError, "'meta'"),
        ({"metadata": {}}, pgmem.InvalidInputError, "no 'text'"),
        ({"text": "x", "user_id": None}, pgmem.ScopeError, "user_id"),
        ({"text": "x", "user_id": 7}, pgmem.InvalidInputError, "user_id must be a string"),
        (42, pgmem.InvalidInputError, "str or a dict"),
    ]
    for bad, error, message in bad_items:
        with pytest.raises(error, match=r"items\[3\]") as info:
            fast_memory.add_many([*good, bad, "five"], user_id="u1", batch_size=2)  # type: ignore[list-item]
        assert message in str(info.value)
    with pytest.raises(pgmem.InvalidInputError, match="list of texts"):
        fast_memory.add_many("not a list", user_id="u1")
    with pytest.raises(pgmem.InvalidInputError, match="batch_size"):
        fast_memory.add_many(good, user_id="u1", batch_size=0)
    with pytest.raises(pgmem.ScopeError):
        fast_memory.add_many(good)
    for table in ("memories", "entities", "memory_entities", "history"):
        assert count(db_dsn, table) == 0


def test_a_failing_batch_keeps_the_batches_before_it(db_dsn: str, analyzer: TextAnalyzer) -> None:
    progress: list[tuple[int, int]] = []
    with pgmem.Memory(db_dsn, embedder=NanOnSecondCall(), nlp=analyzer) as mem:
        with pytest.raises(pgmem.EmbeddingError):
            mem.add_many(["a b", "c d", "e f", "g h", "i j"], user_id="u1", batch_size=2,
                         on_progress=lambda done, total: progress.append((done, total)))
        assert progress == [(2, 5)]
        assert [m.text for m in mem.get_all(user_id="u1").items] == ["a b", "c d"]


# -- update ----------------------------------------------------------------------------------


def test_update_changes_what_search_finds_and_moves_entity_links(
    memory: pgmem.Memory, db_dsn: str
) -> None:
    rec = memory.add("Caroline adopted a puppy named Biscuit in Ottawa", user_id="u1")
    other = memory.add("Melanie visited Ottawa in May", user_id="u1")
    assert {"biscuit", "ottawa", "caroline"} <= linked_entities(db_dsn, rec.id)
    assert [h.id for h in memory.search("puppy Biscuit", user_id="u1", mode="keyword")] == [rec.id]

    updated = memory.update(rec.id, text="Caroline bought a sailboat in Halifax")

    assert updated.id == rec.id and updated.text == "Caroline bought a sailboat in Halifax"
    assert updated.created_at == rec.created_at and updated.updated_at > rec.updated_at
    assert memory.get(rec.id) == updated
    assert memory.search("puppy Biscuit", user_id="u1", mode="keyword") == []
    assert [h.id for h in memory.search("sailboat Halifax", user_id="u1", mode="keyword")] == [
        rec.id
    ]
    (hit,) = [h for h in memory.search("Halifax", user_id="u1") if h.id == rec.id]
    assert [e.name for e in hit.explain.entity_hits] == ["halifax"]
    # Links moved: biscuit is gone with its last link, ottawa stays for the other memory.
    assert linked_entities(db_dsn, rec.id) == {"caroline", "halifax"}
    assert linked_entities(db_dsn, other.id) >= {"ottawa"}
    assert "biscuit" not in entity_names(db_dsn) and "ottawa" in entity_names(db_dsn)
    assert rows(db_dsn, "SELECT content_hash FROM pgmem.memories WHERE id = %s", rec.id) == [
        (hashlib.sha256(b"Caroline bought a sailboat in Halifax").hexdigest(),)
    ]
    assert [(e.event, e.old_text, e.new_text) for e in memory.history(rec.id)] == [
        ("ADD", None, "Caroline adopted a puppy named Biscuit in Ottawa"),
        ("UPDATE", "Caroline adopted a puppy named Biscuit in Ottawa",
         "Caroline bought a sailboat in Halifax"),
    ]


def test_update_to_a_text_naming_many_entities_links_them_all(
    fast_memory: pgmem.Memory, db_dsn: str
) -> None:
    """More entities than a query's entity leg uses (MAX_QUERY_ENTITIES): each still gets its
    vector, as in add (the update used to embed only the first eight and fail on the ninth)."""
    text = ("Alice, Bob, Carol, Dave, Erin, Frank, Grace, Heidi, Ivan and Judy met in Paris, "
            "Berlin and Oslo.")
    names = {e.name for e in fast_memory.analyzer.analyze(text).entities}
    assert len(names) > scoring.MAX_QUERY_ENTITIES
    added = fast_memory.add(text, user_id="u2")
    rec = fast_memory.add("A short note", user_id="u1")

    updated = fast_memory.update(rec.id, text=text)

    assert updated.text == text
    assert linked_entities(db_dsn, rec.id) == names == linked_entities(db_dsn, added.id)
    missing = rows(db_dsn, "SELECT count(*) FROM pgmem.entities WHERE embedding IS NULL")
    assert missing == [(0,)]


def test_update_of_metadata_only_keeps_text_and_links(
    fast_memory: pgmem.Memory, db_dsn: str
) -> None:
    rec = fast_memory.add("Jon took a pottery class in Paris", user_id="u1", metadata={"a": 1})
    links = linked_entities(db_dsn, rec.id)
    updated = fast_memory.update(rec.id, metadata={"b": 2})
    assert updated.metadata == {"b": 2} and updated.text == rec.text
    assert linked_entities(db_dsn, rec.id) == links == {"jon", "paris"}
    assert fast_memory.update(rec.id, metadata={}).metadata == {}
    both = fast_memory.update(rec.id, text="Jon took a pottery class", metadata={"c": 3})
    assert (both.text, both.metadata) == ("Jon took a pottery class", {"c": 3})
    assert linked_entities(db_dsn, rec.id) == {"jon"}
    assert [(e.event, e.old_text, e.new_text) for e in fast_memory.history(rec.id)] == [
        ("ADD", None, rec.text),
        ("UPDATE", rec.text, rec.text),
        ("UPDATE", rec.text, rec.text),
        ("UPDATE", rec.text, "Jon took a pottery class"),
    ]


def test_update_rejects_bad_arguments(fast_memory: pgmem.Memory) -> None:
    rec = fast_memory.add("something", user_id="u1")
    with pytest.raises(pgmem.InvalidInputError, match="text, new metadata"):
        fast_memory.update(rec.id)
    with pytest.raises(pgmem.InvalidInputError, match="empty"):
        fast_memory.update(rec.id, text="  ")
    with pytest.raises(pgmem.InvalidInputError, match="metadata"):
        fast_memory.update(rec.id, metadata=["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInputError, match="not a memory id"):
        fast_memory.update("nope", text="x")
    with pytest.raises(pgmem.NotFoundError):
        fast_memory.update(uuid.uuid4(), text="x")
    assert fast_memory.get(rec.id).text == "something"


# -- delete ----------------------------------------------------------------------------------


def test_delete_removes_links_and_orphaned_entities_and_lowers_spread(
    memory: pgmem.Memory, db_dsn: str
) -> None:
    paris = memory.add_many(
        ["Jon took a pottery class in Paris", "Gina saw a jazz concert in Paris",
         "Maria ran a marathon in Paris"],
        user_id="u1",
    )
    zanzibar = memory.add("We hiked near Zanzibar last spring", user_id="u1")

    def paris_spread() -> set[int]:
        hits = memory.search("Paris", user_id="u1", limit=10, threshold=0.0)
        return {e.spread for h in hits for e in h.explain.entity_hits if e.name == "paris"}

    assert paris_spread() == {3}
    memory.delete(paris[0].id)
    assert paris_spread() == {2}
    assert linked_entities(db_dsn, paris[0].id) == set()
    assert "jon" not in entity_names(db_dsn)  # only the deleted memory linked it
    assert {"paris", "gina", "maria", "zanzibar"} <= entity_names(db_dsn)

    memory.delete(str(zanzibar.id))
    assert "zanzibar" not in entity_names(db_dsn)
    assert count(db_dsn, "memory_entities") == 4  # paris and a name, twice
    with pytest.raises(pgmem.NotFoundError):
        memory.get(zanzibar.id)
    with pytest.raises(pgmem.NotFoundError):
        memory.delete(zanzibar.id)
    assert [(e.event, e.old_text, e.new_text) for e in memory.history(zanzibar.id)] == [
        ("ADD", None, "We hiked near Zanzibar last spring"),
        ("DELETE", "We hiked near Zanzibar last spring", None),
    ]
    assert {h.id for h in memory.search("Paris", user_id="u1", threshold=0.0)} == {
        paris[1].id, paris[2].id
    }


def test_delete_all_empties_one_scope(fast_memory: pgmem.Memory, db_dsn: str) -> None:
    fast_memory.add_many(
        ["Jon took a pottery class in Paris", "Gina saw a jazz concert in Berlin",
         {"text": "Gina saw a jazz concert in Berlin", "run_id": "r1"}],
        user_id="u1",
    )
    kept = fast_memory.add("Maria ran a marathon in Paris", user_id="u2")
    with pytest.raises(pgmem.ScopeError):
        fast_memory.delete_all()

    assert fast_memory.delete_all(user_id="u1", run_id="r1") == 1
    assert fast_memory.delete_all(user_id="u1") == 2
    assert fast_memory.delete_all(user_id="u1") == 0
    assert [m.id for m in fast_memory.get_all(user_id="u2").items] == [kept.id]
    assert entity_names(db_dsn) == {"maria", "paris"}
    assert count(db_dsn, "memory_entities") == 2
    assert rows(db_dsn, "SELECT event, count(*) FROM pgmem.history GROUP BY 1 ORDER BY 1") == [
        ("ADD", 4), ("DELETE", 3)
    ]


# -- reads -----------------------------------------------------------------------------------


def test_ids_of_another_tenant_are_not_found(db_dsn: str, analyzer: TextAnalyzer) -> None:
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer, tenant="t1") as t1, \
            pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer, tenant="t2") as t2:
        rec = t1.add("a secret of tenant one", user_id="u1")
        for call in (t2.get, t2.delete, t2.history, lambda i: t2.update(i, metadata={})):
            with pytest.raises(pgmem.NotFoundError, match="tenant 't2'"):
                call(rec.id)
        assert t2.get_all(user_id="u1").items == ()
        assert t2.delete_all(user_id="u1") == 0
        assert t1.get(rec.id).tenant == "t1"
        assert len(t1.history(rec.id)) == 1


def test_get_and_history_reject_unknown_and_malformed_ids(fast_memory: pgmem.Memory) -> None:
    for call in (fast_memory.get, fast_memory.history, fast_memory.delete):
        with pytest.raises(pgmem.NotFoundError):
            call(uuid.uuid4())
        with pytest.raises(pgmem.InvalidInputError, match="not a memory id"):
            call("12345")
        with pytest.raises(pgmem.InvalidInputError):
            call(None)  # type: ignore[arg-type]


def test_paging_through_1000_memories_yields_each_exactly_once(
    fast_memory: pgmem.Memory,
) -> None:
    added = fast_memory.add_many(
        [f"memory number {i}" for i in range(1000)], user_id="u1", batch_size=250
    )
    fast_memory.add_many([f"memory number {i}" for i in range(10)], user_id="u2")
    expected = [r.id for r in added]
    assert len(set(expected)) == 1000

    seen: list[pgmem.MemoryRecord] = []
    cursor = None
    pages = 0
    while True:
        page = fast_memory.get_all(user_id="u1", limit=64, cursor=cursor)
        pages += 1
        seen.extend(page.items)
        if page.next_cursor is None:
            break
        assert len(page.items) == 64
        cursor = page.next_cursor
        if pages == 3:
            # Changes while paging neither repeat nor hide the memories still there.
            fast_memory.delete(seen[0].id)
            fast_memory.add("added while paging", user_id="u1")
    assert pages == 16
    ids = [m.id for m in seen]
    assert len(ids) == len(set(ids)) == 1001
    assert set(ids) == set(expected) | {seen[-1].id}
    assert seen[-1].text == "added while paging"
    keys = [(m.created_at, m.id.bytes) for m in seen]
    assert keys == sorted(keys)

    whole = fast_memory.get_all(user_id="u1", limit=1000)
    assert len(whole.items) == 1000 and whole.next_cursor is None


def test_a_page_is_a_sequence_of_its_memories(fast_memory: pgmem.Memory) -> None:
    added = fast_memory.add_many(["first", "second", "third"], user_id="u1")
    page = fast_memory.get_all(user_id="u1", limit=2)
    assert len(page) == 2 and page.next_cursor is not None
    assert [m.text for m in page] == ["first", "second"]
    assert page[0].id == added[0].id and page[-1].id == added[1].id
    assert [m.text for m in page[1:]] == ["second"]
    assert page[0] in page and bool(page)
    rest = fast_memory.get_all(user_id="u1", limit=2, cursor=page.next_cursor)
    assert [m.text for m in rest] == ["third"] and rest.next_cursor is None
    empty = fast_memory.get_all(user_id="nobody")
    assert len(empty) == 0 and list(empty) == [] and not empty


def test_get_all_rejects_malformed_cursors_and_limits(fast_memory: pgmem.Memory) -> None:
    fast_memory.add_many(["one", "two", "three"], user_id="u1")
    page = fast_memory.get_all(user_id="u1", limit=2)
    assert page.next_cursor is not None
    (last,) = fast_memory.get_all(user_id="u1", limit=2, cursor=page.next_cursor).items
    assert last.id not in {m.id for m in page.items}

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).decode()

    for cursor in (
        "", "not a cursor!", "é", b64(b"not json"), b64(b"[1, 2]"), b64(b'["x", "y"]'),
        b64(b'["2024-01-01T00:00:00", "' + str(uuid.uuid4()).encode() + b'"]'),  # naive time
        b64(b'["2024-01-01T00:00:00+00:00", "not-a-uuid"]'), b64(b'{"a": 1}'), 12,
    ):
        with pytest.raises(pgmem.InvalidInputError, match="cursor"):
            fast_memory.get_all(user_id="u1", cursor=cursor)  # type: ignore[arg-type]
    for limit in (0, 1001, "10", True):
        with pytest.raises(pgmem.InvalidInputError, match="limit"):
            fast_memory.get_all(user_id="u1", limit=limit)  # type: ignore[arg-type]
    with pytest.raises(pgmem.ScopeError):
        fast_memory.get_all()


def test_history_is_ordered_and_outlives_the_memory(fast_memory: pgmem.Memory) -> None:
    rec = fast_memory.add("v1", user_id="u1")
    fast_memory.update(rec.id, text="v2")
    fast_memory.update(rec.id, text="v3")
    fast_memory.delete(rec.id)
    events = fast_memory.history(rec.id)
    assert [(e.event, e.old_text, e.new_text) for e in events] == [
        ("ADD", None, "v1"), ("UPDATE", "v1", "v2"), ("UPDATE", "v2", "v3"), ("DELETE", "v3", None)
    ]
    times = [e.created_at for e in events]
    assert times == sorted(times)
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[0].event = "x"  # type: ignore[misc]


def test_calls_by_id_can_be_held_to_a_scope(memory: pgmem.Memory) -> None:
    """An id from outside (a request, an agent's tool call) with the caller's scope: a memory of
    another scope is not found, and nothing of it is read, changed or deleted."""
    mine = memory.add("Kim moved to Seoul.", user_id="u1", agent_id="a1")
    theirs = memory.add("Lee moved to Busan.", user_id="u2")
    assert memory.get(mine.id, user_id="u1").text == "Kim moved to Seoul."
    assert memory.get(mine.id, user_id="u1", agent_id="a1").id == mine.id
    for scope in ({"user_id": "u1"}, {"user_id": "u2", "agent_id": "a1"}, {"run_id": "r1"}):
        with pytest.raises(pgmem.NotFoundError, match=f"no memory {theirs.id} in scope"):
            memory.get(theirs.id, **scope)
        with pytest.raises(pgmem.NotFoundError, match="in scope"):
            memory.update(theirs.id, metadata={"k": 1}, **scope)
        with pytest.raises(pgmem.NotFoundError, match="in scope"):
            memory.delete(theirs.id, **scope)
    assert memory.get(theirs.id).metadata == {} and len(memory.history(theirs.id)) == 1
    with pytest.raises(pgmem.InvalidInputError, match="user_id must be a string"):
        memory.get(mine.id, user_id=7)  # type: ignore[arg-type]
    assert memory.update(mine.id, metadata={"k": 2}, user_id="u1").metadata == {"k": 2}
    memory.delete(theirs.id, user_id="u2")
    with pytest.raises(pgmem.NotFoundError):
        memory.get(theirs.id)


def test_history_held_to_a_scope_answers_for_a_memory_still_there(memory: pgmem.Memory) -> None:
    kept = memory.add("Kim moved to Seoul.", user_id="u1")
    gone = memory.add("Lee moved to Busan.", user_id="u1")
    assert [e.event for e in memory.history(kept.id, user_id="u1")] == ["ADD"]
    with pytest.raises(pgmem.NotFoundError, match="in scope"):
        memory.history(kept.id, user_id="u2")
    memory.delete(gone.id)
    assert [e.event for e in memory.history(gone.id)] == ["ADD", "DELETE"]
    with pytest.raises(pgmem.NotFoundError):  # its events keep no scope to check
        memory.history(gone.id, user_id="u1")
