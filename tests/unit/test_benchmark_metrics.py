"""Unit tests of the retrieval benchmark's metrics and LoCoMo parsing. No database, no models."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.dialogues import (
    DEV_CONVERSATIONS,
    Item,
    load_conversations,
    parse_evidence,
    task_memories,
    task_questions,
    turn_text,
)
from benchmarks.metrics import (
    Scores,
    dcg,
    is_relevant,
    mean_scores,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank,
    score_question,
)

EVIDENCE = frozenset({"D1:1", "D1:2"})


# -- recall ------------------------------------------------------------------------------------


def test_recall_counts_the_evidence_found_in_the_top_k() -> None:
    ranking = [("D9:9",), ("D1:1",), ("D1:2",)]
    assert recall_at_k(ranking, EVIDENCE, 1) == 0.0
    assert recall_at_k(ranking, EVIDENCE, 2) == 0.5
    assert recall_at_k(ranking, EVIDENCE, 3) == 1.0
    assert recall_at_k(ranking, EVIDENCE, 20) == 1.0


def test_recall_counts_each_evidence_id_once() -> None:
    ranking = [("D1:1",), ("D1:1", "D5:5"), ("D1:1",)]
    assert recall_at_k(ranking, EVIDENCE, 3) == 0.5


def test_an_observation_covers_all_its_evidence_ids() -> None:
    assert recall_at_k([("D1:1", "D1:2", "D3:3")], EVIDENCE, 1) == 1.0


def test_recall_of_an_empty_ranking_is_zero() -> None:
    assert recall_at_k([], EVIDENCE, 5) == 0.0


def test_recall_without_evidence_is_an_error() -> None:
    with pytest.raises(ValueError):
        recall_at_k([("D1:1",)], frozenset(), 1)


# -- nDCG --------------------------------------------------------------------------------------


def test_dcg_discounts_by_log2_of_rank_plus_one() -> None:
    assert dcg([]) == 0.0
    assert dcg([1.0]) == 1.0
    assert dcg([0.0, 1.0]) == pytest.approx(1 / math.log2(3))
    assert dcg([1.0, 1.0, 1.0]) == pytest.approx(1 + 1 / math.log2(3) + 0.5)


def test_ndcg_is_one_when_the_relevant_memories_come_first() -> None:
    ranking = [("D1:1",), ("D1:2",), ("D9:9",)]
    assert ndcg_at_k(ranking, EVIDENCE, n_relevant=2, k=10) == pytest.approx(1.0)


def test_ndcg_of_a_late_hit() -> None:
    ranking = [("D9:9",), ("D8:8",), ("D1:1",)]
    assert ndcg_at_k(ranking, EVIDENCE, n_relevant=1, k=10) == pytest.approx(0.5)


def test_ndcg_ideal_uses_the_corpus_count_not_the_evidence_count() -> None:
    # Two evidence ids but three relevant memories in the corpus: finding two is not ideal.
    ranking = [("D1:1",), ("D1:2",)]
    expected = dcg([1, 1]) / dcg([1, 1, 1])
    assert ndcg_at_k(ranking, EVIDENCE, n_relevant=3, k=10) == pytest.approx(expected)


def test_ndcg_ideal_is_capped_at_k() -> None:
    ranking = [("D1:1",)] * 10
    assert ndcg_at_k(ranking, EVIDENCE, n_relevant=15, k=10) == pytest.approx(1.0)


def test_ndcg_ignores_results_past_k() -> None:
    ranking = [("D9:9",)] * 10 + [("D1:1",)]
    assert ndcg_at_k(ranking, EVIDENCE, n_relevant=1, k=10) == 0.0


def test_ndcg_is_zero_when_no_memory_is_relevant() -> None:
    assert ndcg_at_k([("D9:9",)], EVIDENCE, n_relevant=0, k=10) == 0.0


def test_ndcg_gives_binary_gain_to_a_memory_covering_several_ids() -> None:
    ranking = [("D1:1", "D1:2")]
    assert ndcg_at_k(ranking, EVIDENCE, n_relevant=1, k=10) == pytest.approx(1.0)


# -- MRR ---------------------------------------------------------------------------------------


def test_reciprocal_rank_of_the_first_relevant_memory() -> None:
    assert reciprocal_rank([("D1:2",)], EVIDENCE) == 1.0
    ranking = [("D9:9",), ("D8:8",), ("D1:1",), ("D1:2",)]
    assert reciprocal_rank(ranking, EVIDENCE) == pytest.approx(1 / 3)


def test_reciprocal_rank_is_zero_past_the_depth_or_without_a_hit() -> None:
    assert reciprocal_rank([("D9:9",)] * 20 + [("D1:1",)], EVIDENCE, depth=20) == 0.0
    assert reciprocal_rank([], EVIDENCE) == 0.0


def test_relevance_is_any_shared_id() -> None:
    assert is_relevant(("D3:3", "D1:1"), EVIDENCE)
    assert not is_relevant(("D3:3",), EVIDENCE)
    assert not is_relevant((), EVIDENCE)


# -- per question and means --------------------------------------------------------------------


def test_score_question_combines_every_metric() -> None:
    ranking = [("D9:9",), ("D1:1",)] + [("D8:8",)] * 3 + [("D1:2",)]
    scores = score_question(ranking, EVIDENCE, n_relevant=2)
    assert (scores.recall_1, scores.recall_5, scores.recall_10, scores.recall_20) == (
        0.0, 0.5, 1.0, 1.0,
    )
    assert scores.mrr == 0.5
    assert scores.ndcg_10 == pytest.approx(dcg([0, 1, 0, 0, 0, 1]) / dcg([1, 1]))


def test_mean_scores_averages_each_metric() -> None:
    a = Scores(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    b = Scores(0.0, 0.5, 0.5, 1.0, 0.0, 0.25)
    assert mean_scores([a, b]) == Scores(0.5, 0.75, 0.75, 1.0, 0.5, 0.625)
    with pytest.raises(ValueError):
        mean_scores([])


# -- LoCoMo parsing ----------------------------------------------------------------------------


def test_parse_evidence_splits_on_semicolons_and_spaces() -> None:
    assert parse_evidence(["D8:6; D9:17", "D1:3", " D2:1  D2:2 ", "", "D1:3"]) == frozenset(
        {"D8:6", "D9:17", "D1:3", "D2:1", "D2:2"}
    )


def test_turn_text_appends_the_photo_caption() -> None:
    turn = {"speaker": "Mel", "text": "Look!", "dia_id": "D1:1"}
    assert turn_text(turn) == "Mel: Look!"
    assert turn_text({**turn, "image_caption": "a dog"}) == "Mel: Look! [shares a photo of a dog]"


def test_questions_skip_category_five_and_count_relevant_memories() -> None:
    conversation = {
        "turns": [{"dia_id": f"D1:{i}", "speaker": "A", "text": f"t{i}"} for i in (1, 2, 3)],
        "observations": [{"text": "o", "dia_ids": ["D1:1", "D1:2"]}],
        "questions": [
            {"question": "q1", "category": 1, "evidence": ["D1:1; D1:2"]},
            {"question": "q5", "category": 5, "evidence": ["D1:1"]},
            {"question": "no evidence", "category": 2, "evidence": []},
        ],
    }
    turns = task_memories(conversation, "turns")
    assert turns[0] == Item("A: t1", ("D1:1",))
    (question,) = task_questions(conversation, turns)
    assert (question.text, question.evidence, question.n_relevant) == (
        "q1", frozenset({"D1:1", "D1:2"}), 2,
    )
    observations = task_memories(conversation, "observations")
    assert task_questions(conversation, observations)[0].n_relevant == 1


# -- which conversations -------------------------------------------------------------------------


def _sample(sample_id: str) -> dict[str, object]:
    """A conversation of locomo10.json as published: two sessions, one question."""
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1 May 2023", "session_2_date_time": "2 May 2023",
            "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "I moved to Porto."}],
            "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Look!",
                           "blip_caption": "a dog"}],
        },
        "observation": {"session_1_observation": {"Ana": [["Ana moved to Porto.", "D1:1"]]}},
        "qa": [{"question": "Where did Ana move?", "answer": "Porto", "category": 1,
                "evidence": ["D1:1"]}],
    }


def test_locomo10_is_read_as_published_and_conversations_are_chosen(tmp_path: Path) -> None:
    path = tmp_path / "locomo10.json"
    ids = [f"conv-{n}" for n in (26, 30, 41, 42, 43, 44)]
    path.write_text(json.dumps([_sample(i) for i in ids]), encoding="utf-8")
    every = load_conversations(path)
    assert [c["id"] for c in every] == ids
    assert [turn_text(t) for t in every[0]["turns"]] == [
        "Ana: I moved to Porto.", "Ben: Look! [shares a photo of a dog]"]
    assert every[0]["observations"][0]["dia_ids"] == ["D1:1"]
    assert [c["id"] for c in load_conversations(path, "dev")] == list(DEV_CONVERSATIONS)
    assert [c["id"] for c in load_conversations(path, "2")] == ids[:2]
    assert [c["id"] for c in load_conversations(path, "conv-44,conv-26")] == ["conv-44", "conv-26"]
    with pytest.raises(SystemExit, match="no conv-99"):
        load_conversations(path, "conv-99")


def test_no_data_says_where_to_download_it(tmp_path: Path) -> None:
    for missing in (None, tmp_path / "nowhere.json"):
        with pytest.raises(SystemExit, match="snap-research/LoCoMo.*--data PATH.*PGMEM_LOCOMO"):
            load_conversations(missing)
