"""The search's neighbour step: a memory counts at least a share of the score of the memories
stored up to two places before (or after) it in the searched scope, so that the turn answering a
question comes in with the question. Real PostgreSQL, real models."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

import pgmem
from pgmem import builders, scoring

BEFORE = [
    "Melanie: My pottery class meets every Tuesday evening this summer.",
    "Caroline: I loved the summer pottery workshop we did last year.",
    "Melanie: The kids keep asking about the summer camp schedule.",
]
QUESTION = "Caroline: Which city did you pick for the summer pottery retreat?"
ANSWER = "Melanie: Lisbon! We booked the flights last night."
AFTER = [
    "Caroline: My counselling course starts in September.",
    "Melanie: Summer retreats are always so busy with the kids.",
]
QUERY = "Which city did Melanie choose for the pottery retreat?"


@pytest.fixture
def seed_memory(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> Iterator[pgmem.Memory]:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, scoring="mem0") as mem:
        yield mem


def by_text(hits: list[pgmem.SearchHit]) -> dict[str, pgmem.SearchHit]:
    return {h.text: h for h in hits}


def test_the_answer_stored_after_a_matching_question_takes_a_share_of_its_score(
    memory: pgmem.Memory, seed_memory: pgmem.Memory
) -> None:
    memory.add_many([*BEFORE, QUESTION, ANSWER, *AFTER], user_id="u1")
    hits = by_text(memory.search(QUERY, user_id="u1", limit=10))
    question, answer = hits[QUESTION], hits[ANSWER]

    assert answer.explain.context > 0 and answer.explain.context_from == question.id
    own_question = question.score - question.explain.context / question.explain.max_possible
    assert answer.score == pytest.approx(scoring.DEFAULT.after_weight * own_question)
    # The seed's scoring has no neighbour step: the answer scores on its own.
    seed = by_text(seed_memory.search(QUERY, user_id="u1", limit=10))
    assert seed[ANSWER].explain.context == 0 and seed[ANSWER].score < answer.score


@pytest.mark.parametrize("path", ["rows", "indexes"])
def test_an_answer_two_turns_after_the_question_takes_a_smaller_share(
    memory: pgmem.Memory, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn between the question and its answer: the answer, two places after the question,
    takes its share times the decay, whether the scope is read row by row or probed."""
    if path == "indexes":
        monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 0)  # every scope is "large"
    aside = "Caroline: Sorry, the doorbell -- one second."
    memory.add_many([*BEFORE, QUESTION, aside, ANSWER, *AFTER], user_id="u1")
    hits = by_text(memory.search(QUERY, user_id="u1", limit=10))
    question, answer = hits[QUESTION], hits[ANSWER]

    assert answer.explain.context_from == question.id
    own_question = question.score - question.explain.context / question.explain.max_possible
    share = scoring.DEFAULT.after_weight * scoring.DEFAULT.neighbour_decay
    assert answer.score == pytest.approx(share * own_question)


def test_an_unrelated_neighbour_is_not_lifted(memory: pgmem.Memory) -> None:
    memory.add_many([QUESTION, "The office router was rebooted on Monday."],
                    user_id="u1")
    hits = by_text(memory.search(QUERY, user_id="u1", limit=10, threshold=0.0))
    unrelated = hits["The office router was rebooted on Monday."]
    assert unrelated.explain.semantic < scoring.DEFAULT.context_min_semantic
    assert unrelated.explain.context == 0


@pytest.mark.parametrize("path", ["rows", "indexes"])
def test_neighbours_are_those_of_the_searched_scope(
    memory: pgmem.Memory, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same neighbours whether the scope is read row by row (a small one: each row's
    neighbours come with it) or searched through the indexes (a large one: probed)."""
    if path == "indexes":
        monkeypatch.setattr(builders, "SCOPE_SCAN_ROWS", 0)  # every scope is "large"

    def session(texts: list[str], n: int) -> list[dict[str, object]]:
        return [{"text": t, "metadata": {"session": n}} for t in texts]

    *_, question = memory.add_many(session([*BEFORE, QUESTION], 1), user_id="u1")
    memory.add("Melanie: Porto! We booked the flights last night.", user_id="u2")
    memory.add_many(session([ANSWER, *AFTER], 2), user_id="u1")

    hits = memory.search(QUERY, user_id="u1", limit=10)
    assert {h.user_id for h in hits} == {"u1"}
    assert by_text(hits)[ANSWER].explain.context_from == question.id
    # Filtered out, the question is no neighbour.
    hits = memory.search(QUERY, user_id="u1", filters={"session": 2}, limit=10)
    assert by_text(hits)[ANSWER].explain.context_from != question.id


@pytest.mark.parametrize("mode", ["semantic", "keyword", "semantic+keyword"])
def test_a_search_of_some_signals_takes_no_neighbour_step(
    memory: pgmem.Memory, mode: str
) -> None:
    memory.add_many([*BEFORE, QUESTION, ANSWER, *AFTER], user_id="u1")
    hits = memory.search(QUERY, user_id="u1", limit=10, mode=mode)
    assert hits and all(h.explain.context == 0 for h in hits)


def test_a_batch_is_stored_in_its_order(memory: pgmem.Memory) -> None:
    texts = [f"Note {i}: the reading group meets on Wednesday." for i in range(40)]
    memory.add_many(texts, user_id="u1", batch_size=16)
    items = memory.get_all(user_id="u1", limit=100).items
    assert [m.text for m in items] == texts
    assert all(a.created_at < b.created_at for a, b in itertools.pairwise(items))
