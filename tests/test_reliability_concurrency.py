"""Concurrency: eight threads adding memories that mention the same new entities, searching, and
deleting at once -- through one Memory (its pool) and through a Memory each. No deadlock, no
unique violation escaping, no duplicate entity rows, every acknowledged add present afterwards
with all its entity links.

The real spaCy pipeline finds the entities; :class:`HashEmbedder` keeps the embedding cheap."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from reliability_support import HashEmbedder, assert_in_scope, duplicate_entities, orphans, rows

import pgmem

pytestmark = pytest.mark.also_on_citus

PEOPLE = ["Helga Norberg", "Tomasz Wilk", "Amara Okafor", "Ilse Brandt"]
PLACES = ["Tbilisi", "Ostrava", "Valparaiso", "Trondheim"]
DURATION = 3.0  # seconds of load per run, at least
LONGEST = 30.0  # ... and until enough work was done (ENOUGH), at most this long: a busy machine
ENOUGH_ADDS, ENOUGH_SEARCHES = 20, 5  # more than these, for the checks to mean something
THREADS = 8


@dataclass
class Outcome:
    """What the threads saw: the adds the database acknowledged, and every error."""

    added: dict[uuid.UUID, tuple[str, str]] = field(default_factory=dict)  # id -> (user, text)
    deleted: set[uuid.UUID] = field(default_factory=set)
    errors: list[BaseException] = field(default_factory=list)
    searches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def sentence(rng: random.Random, tag: str) -> str:
    a, b = rng.sample(PEOPLE, 2)
    return f"{a} met {b} in {rng.choice(PLACES)} to talk about the budget ({tag})."


def worker(
    index: int, mem: pgmem.Memory, outcome: Outcome, stop: threading.Event,
    start: threading.Barrier,
) -> None:
    rng = random.Random(index)
    user = f"user{index % 4}"
    n = 0
    start.wait()
    try:
        while not stop.is_set():
            n += 1
            tag = f"t{index}-{n}"
            role = index % 4
            if role == 0:  # single adds
                result = mem.add(sentence(rng, tag), user_id=user, agent_id=f"agent{index}")
                with outcome.lock:
                    outcome.added[result.id] = (user, result.text)
            elif role == 1:  # batches
                texts = [sentence(rng, f"{tag}.{k}") for k in range(rng.randint(2, 6))]
                for result in mem.add_many(texts, user_id=user, batch_size=3):
                    with outcome.lock:
                        outcome.added[result.id] = (user, result.text)
            elif role == 2:  # searches, checked for scope
                for hit in mem.search(f"{rng.choice(PEOPLE)} in {rng.choice(PLACES)}",
                                      user_id=user, limit=10, threshold=0.0):
                    assert_in_scope(hit, user_id=user)
                with outcome.lock:
                    outcome.searches += 1
            else:  # churn: add, update and delete memories linking the same entities
                result = mem.add(sentence(rng, tag), user_id=f"churn{index}")
                if n % 2:
                    mem.update(result.id, text=sentence(rng, tag + "u"))
                mem.delete(result.id)
                with outcome.lock:
                    outcome.deleted.add(result.id)
    except BaseException as exc:  # noqa: BLE001 - every error is the test's business
        with outcome.lock:
            outcome.errors.append(exc)
        stop.set()


def run_load(make_memory: Callable[[int], pgmem.Memory]) -> Outcome:
    outcome, stop = Outcome(), threading.Event()
    start = threading.Barrier(THREADS)
    memories = [make_memory(i) for i in range(THREADS)]
    threads = [
        threading.Thread(target=worker, args=(i, memories[i], outcome, stop, start), daemon=True)
        for i in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    time.sleep(DURATION)
    while not stop.is_set() and time.monotonic() - began < LONGEST:
        with outcome.lock:
            if len(outcome.added) > ENOUGH_ADDS and outcome.searches > ENOUGH_SEARCHES:
                break
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not [t for t in threads if t.is_alive()], "threads hang: a deadlock?"
    return outcome


def check(outcome: Outcome, dsn: str, analyzer: pgmem.TextAnalyzer, mem: pgmem.Memory) -> None:
    assert outcome.errors == [], outcome.errors
    assert len(outcome.added) > ENOUGH_ADDS and outcome.searches > ENOUGH_SEARCHES
    assert duplicate_entities(dsn) == []
    assert orphans(dsn) == {"links": 0, "memories_without_add": 0, "unlinked_entities": 0}
    stored = {
        memory_id: (user, text)
        for memory_id, user, text in rows(dsn, "SELECT id, user_id, text FROM pgmem.memories")
    }
    # every acknowledged add is there, as acknowledged; every deleted one is gone
    assert {k: stored.get(k) for k in outcome.added} == outcome.added
    assert not outcome.deleted & set(stored)
    assert set(stored) == set(outcome.added)
    # ... with a link to each entity its text mentions (none lost to a concurrent delete)
    links: dict[uuid.UUID, set[str]] = {}
    for memory_id, name in rows(
        dsn,
        "SELECT me.memory_id, e.name FROM pgmem.memory_entities me"
        " JOIN pgmem.entities e ON e.tenant = me.tenant AND e.id = me.entity_id",
    ):
        links.setdefault(memory_id, set()).add(name)
    texts = list(outcome.added.values())
    analyses = analyzer.analyze_many([text for _, text in texts])
    for (memory_id, _), analysis in zip(outcome.added.items(), analyses):
        assert links.get(memory_id, set()) == {e.name for e in analysis.entities}
    names = {n for (n,) in rows(dsn, "SELECT name FROM pgmem.entities")}
    assert {"helga norberg", "tbilisi"} <= names
    # and search still answers in scope
    for hit in mem.search("Helga Norberg in Tbilisi", user_id="user0", limit=20):
        assert hit.user_id == "user0"


def test_eight_threads_through_one_memory(db_dsn: str, analyzer: pgmem.TextAnalyzer) -> None:
    with pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer, pool_max_size=6) as mem:
        outcome = run_load(lambda i: mem)
        check(outcome, db_dsn, analyzer, mem)


def test_eight_threads_with_a_memory_each(db_dsn: str, analyzer: pgmem.TextAnalyzer) -> None:
    memories: list[pgmem.Memory] = []

    def make(i: int) -> pgmem.Memory:
        memories.append(pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer,
                                     pool_max_size=2))
        return memories[-1]

    try:
        outcome = run_load(make)
        check(outcome, db_dsn, analyzer, memories[0])
    finally:
        for mem in memories:
            mem.close()


@pytest.mark.parametrize("shared", [True, False], ids=["one Memory", "a Memory each"])
def test_concurrent_adds_of_one_text_store_it_once(
    db_dsn: str, analyzer: pgmem.TextAnalyzer, shared: bool
) -> None:
    texts = [f"{p} moved to {q}." for p, q in zip(PEOPLE, PLACES)]
    one = pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer)
    memories = [one if shared else pgmem.Memory(db_dsn, embedder=HashEmbedder(), nlp=analyzer)
                for _ in range(THREADS)]
    results: list[list[pgmem.AddResult]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def add(mem: pgmem.Memory, k: int) -> None:
        start.wait()
        try:
            if k % 2:
                results.append([mem.add(t, user_id="u", run_id="r") for t in texts])
            else:
                results.append(mem.add_many(texts * 2, user_id="u", run_id="r"))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(m, k)) for k, m in enumerate(memories)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        stored = one.get_all(user_id="u", run_id="r").items
        assert sorted(m.text for m in stored) == sorted(texts)
        by_text = {m.text: m.id for m in stored}
        for batch in results:
            assert all(r.id == by_text[r.text] for r in batch)
        assert sum(not r.duplicate for batch in results for r in batch) == len(texts)
        assert duplicate_entities(db_dsn) == []
    finally:
        for mem in {id(m): m for m in memories}.values():
            mem.close()
