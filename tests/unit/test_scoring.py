"""The pure scoring module: parameter table, sigmoid, attenuation, fusion."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pgmem import scoring
from pgmem.scoring import Signals, fuse


@pytest.mark.parametrize(
    ("n_terms", "expected"),
    [
        (0, (5.0, 0.7)), (1, (5.0, 0.7)), (3, (5.0, 0.7)),
        (4, (7.0, 0.6)), (6, (7.0, 0.6)),
        (7, (9.0, 0.5)), (9, (9.0, 0.5)),
        (10, (10.0, 0.5)), (15, (10.0, 0.5)),
        (16, (12.0, 0.5)), (100, (12.0, 0.5)),
    ],
)
def test_sigmoid_parameters_by_number_of_terms(n_terms: int, expected: tuple[float, float]) -> None:
    assert scoring.sigmoid_params(n_terms) == expected


@pytest.mark.parametrize("n_terms", [1, 5, 8, 12, 20])
def test_sigmoid_is_one_half_at_the_midpoint(n_terms: int) -> None:
    midpoint, steepness = scoring.sigmoid_params(n_terms)
    assert scoring.sigmoid(midpoint, midpoint, steepness) == 0.5
    assert scoring.normalize_keyword(midpoint, n_terms) == 0.5


def test_sigmoid_rises_and_saturates() -> None:
    values = [scoring.normalize_keyword(x, 2) for x in (0.5, 2, 5, 8, 20)]
    assert values == sorted(values)
    assert values[-1] > 0.99
    assert scoring.sigmoid(-1e6, 5.0, 0.7) == 0.0  # no overflow
    assert scoring.sigmoid(1e6, 5.0, 0.7) == 1.0


def test_no_keyword_match_scores_zero_not_sigmoid_of_zero() -> None:
    assert scoring.normalize_keyword(None, 2) == 0.0
    assert scoring.normalize_keyword(0.0, 2) == 0.0


def test_rank_cd_is_rescaled_onto_the_bm25_scale() -> None:
    assert scoring.keyword_raw(7.5, 0.1, "bm25") == 7.5
    assert scoring.keyword_raw(7.5, 0.1, "ts_rank_cd") == pytest.approx(0.1 * scoring.RANK_CD_SCALE)
    assert scoring.keyword_raw(None, None, "ts_rank_cd") is None


@pytest.mark.parametrize(("n", "expected"), [(1, 1.0), (10, 0.925), (100, 0.0925)])
def test_spread_attenuation(n: int, expected: float) -> None:
    assert scoring.spread_attenuation(n) == pytest.approx(expected, abs=5e-4)


@pytest.mark.parametrize(
    ("n", "scope_size", "expected"),
    [
        (1, 5, 1.0),  # one memory holds it
        (5, 5, 0.0),  # every memory holds it
        (3, 5, 1.0),  # half the other memories: not yet
        (4, 5, 0.5),  # three quarters of them: half its weight
        (5, 6, 0.4),
        (5, 12, 1.0),
        (94, 184, 0.984),  # a LoCoMo speaker's name in the observations
        (1, 1, 1.0),  # a scope of one memory: no share to speak of
        (3, None, 1.0),  # size unknown
        (7, 5, 0.0),  # never below 0
    ],
)
def test_share_attenuation(n: int, scope_size: int | None, expected: float) -> None:
    assert scoring.share_attenuation(n, scope_size, 0.5) == pytest.approx(expected, abs=5e-4)
    assert scoring.share_attenuation(n, scope_size, None) == 1.0


def test_share_attenuation_falls_with_the_share_and_is_off_for_the_seed() -> None:
    weights = [scoring.share_attenuation(n, 101, 0.5) for n in range(1, 102)]
    assert weights == sorted(weights, reverse=True)
    assert weights[:51] == [1.0] * 51 and weights[-1] == 0.0
    assert scoring.share_attenuation(76, 101, 0.0) == pytest.approx(0.25)  # linear from 0
    assert scoring.DEFAULT.entity_common_share == 0.5
    assert scoring.MEM0.entity_common_share is None
    for n, size in ((5, 5), (100, 101), (3, None)):
        assert scoring.MEM0.spread_weight(n, size) == scoring.spread_attenuation(n)
    assert scoring.DEFAULT.spread_weight(5, 5) == 0.0
    assert scoring.DEFAULT.spread_weight(5, 12) == scoring.spread_attenuation(5)
    # On a large scope the spread's own decay has the last word: the share only bites past half
    # the scope, where the decay has left an entity next to nothing (so a lower bound of a
    # large scope's size does as well as its size).
    assert scoring.spread_attenuation(2501) < 2e-4
    for n in range(1, 2502):
        assert scoring.DEFAULT.spread_weight(n, 5001) == scoring.spread_attenuation(n)


def test_fusion_weighs_entities_by_the_scopes_size() -> None:
    every = [Signals(k, semantic=s, keyword_raw=None, entity_hits=((1.0, 3),))
             for k, s in (("a", 0.5), ("b", 0.6), ("c", 0.4))]
    kwargs: dict[str, Any] = {"n_terms": 0, "keyword_active": False, "entity_active": True,
                              "threshold": 0.1, "limit": 10}
    fused = fuse(every, profile=scoring.DEFAULT, scope_size=3, **kwargs)
    assert [(f.key, f.entity) for f in fused] == [("b", 0.0), ("a", 0.0), ("c", 0.0)]
    assert fused[0].score == pytest.approx(0.6 / 1.5)
    seed = fuse(every, profile=scoring.MEM0, scope_size=3, **kwargs)
    assert [f.entity for f in seed] == pytest.approx([0.5 * scoring.spread_attenuation(3)] * 3)
    # without the scope's size, the spread's weight alone
    unknown = fuse(every, profile=scoring.DEFAULT, **kwargs)
    assert [f.entity for f in unknown] == pytest.approx([0.5 * scoring.spread_attenuation(3)] * 3)


def test_entity_boost_takes_the_best_entity() -> None:
    hits = [(0.9, 100), (0.6, 1), (0.8, 10)]
    assert scoring.entity_boost(hits) == pytest.approx(max(
        0.9 * 0.5 * scoring.spread_attenuation(100), 0.6 * 0.5,
        0.8 * 0.5 * scoring.spread_attenuation(10),
    ))
    assert scoring.entity_boost(hits) == pytest.approx(0.8 * 0.5 * 1 / (1 + 0.001 * 81))
    assert scoring.entity_boost([]) == 0.0


@pytest.mark.parametrize(
    ("keyword", "entity", "expected"),
    [(False, False, 1.0), (False, True, 1.5), (True, False, 2.0), (True, True, 2.5)],
)
def test_fusion_denominator(keyword: bool, entity: bool, expected: float) -> None:
    assert scoring.max_possible(keyword, entity) == expected
    (fused,) = fuse(
        [Signals("a", semantic=0.5, keyword_raw=5.0, entity_hits=((1.0, 1),))],
        n_terms=2, keyword_active=keyword, entity_active=entity, threshold=0.1, limit=10,
    )
    assert fused.max_possible == expected
    numerator = 0.5 + (0.5 if keyword else 0.0) + (0.5 if entity else 0.0)
    assert fused.score == pytest.approx(numerator / expected)


def test_threshold_gates_on_semantic_alone() -> None:
    candidates = [
        Signals("unrelated", semantic=0.05, keyword_raw=50.0, entity_hits=((1.0, 1),)),
        Signals("related", semantic=0.30, keyword_raw=None),
        Signals("edge", semantic=0.10, keyword_raw=None),
    ]
    fused = fuse(candidates, n_terms=1, keyword_active=True, entity_active=True,
                 threshold=0.1, limit=10)
    assert [f.key for f in fused] == ["related", "edge"]


def test_fusion_sorts_and_cuts() -> None:
    candidates = [Signals(i, semantic=s, keyword_raw=None) for i, s in enumerate([0.2, 0.9, 0.5])]
    fused = fuse(candidates, n_terms=0, keyword_active=False, entity_active=False,
                 threshold=0.0, limit=2)
    assert [f.key for f in fused] == [1, 2]
    assert all(math.isclose(f.score, f.semantic) for f in fused)


def test_keyword_hits_can_outrank_a_closer_semantic_match() -> None:
    candidates = [
        Signals("semantic", semantic=0.55, keyword_raw=None),
        Signals("keyword", semantic=0.40, keyword_raw=9.0),
    ]
    fused = fuse(candidates, n_terms=2, keyword_active=True, entity_active=False,
                 threshold=0.1, limit=2)
    assert [f.key for f in fused] == ["keyword", "semantic"]


def test_keyword_only_fusion_has_no_semantic_gate() -> None:
    candidates = [Signals("k", semantic=0.0, keyword_raw=5.0)]
    (fused,) = fuse(candidates, n_terms=1, keyword_active=True, entity_active=False,
                    threshold=0.5, limit=5, semantic_active=False)
    assert fused.score == pytest.approx(0.5)
    assert fused.max_possible == 1.0


def test_internal_limit_over_fetches() -> None:
    assert scoring.internal_limit(1) == 20
    assert scoring.internal_limit(10) == 20
    assert scoring.internal_limit(20) == 40


def test_equal_scores_are_ordered_by_similarity() -> None:
    candidates = [
        Signals("far", semantic=0.2, keyword_raw=5.0),
        Signals("near", semantic=0.6, keyword_raw=5.0),
    ]
    fused = fuse(candidates, n_terms=1, keyword_active=True, entity_active=False,
                 threshold=0.0, limit=2, semantic_active=False)
    assert fused[0].score == fused[1].score
    assert [f.key for f in fused] == ["near", "far"]


# -- scoring profiles ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "n_terms", "expected"),
    [
        (5.0, 2, 0.5),
        (4.0, 4, 0.1418510649),  # the XJ-4471 case: 1 / (1 + e^1.8)
        (12.0, 8, 0.8175744762),
        (2.0, 20, 0.0066928509),
        (None, 3, 0.0),
        (0.0, 3, 0.0),
    ],
)
def test_the_seed_profile_keeps_the_seed_table_exactly(
    raw: float | None, n_terms: int, expected: float
) -> None:
    # the scope's size is ignored: the seed squashes the raw BM25 with its table alone
    for n_docs in (81.0, 1e6, None):
        normalized = scoring.MEM0.normalize_keyword(raw, n_terms, n_docs)
        assert normalized == pytest.approx(expected, abs=1e-9)


def test_the_seed_profile_fuses_as_the_seed_did() -> None:
    seed = scoring.MEM0
    assert (seed.semantic_weight, seed.keyword_weight, seed.entity_weight) == (1.0, 1.0, 0.5)
    assert (seed.keyword, seed.entity_min_similarity, seed.entity_sharpness) == (
        "sigmoid", 0.5, 0.0)
    assert seed.entity_boost([(0.54, 1)]) == pytest.approx(0.27)
    assert seed.entity_boost([(0.49, 1)]) == 0.0
    (fused,) = fuse(
        [Signals("a", semantic=0.5, keyword_raw=7.0, entity_hits=((1.0, 1),))],
        n_terms=5, keyword_active=True, entity_active=True, threshold=0.1, limit=10,
        profile=seed, n_docs=81,
    )
    assert (fused.keyword, fused.entity) == (0.5, 0.5)
    assert fused.score == pytest.approx(1.5 / 2.5)


def test_the_default_stretches_keyword_scores_on_scopes_below_a_thousand_memories() -> None:
    default = scoring.DEFAULT
    assert (default.keyword, default.reference_docs) == ("log-n", 1000)
    # the XJ-4471 case: 81 memories, 4 query terms (table midpoint 7); the rare term's IDF is
    # stretched to what the rarest term scores on a 1,000-memory scope
    rare, common = scoring.bm25_idf(81, 1), scoring.bm25_idf(81, 80)
    assert rare == pytest.approx(math.log(1 + 80.5 / 1.5))
    stretch = scoring.bm25_idf(1000, 1) / rare
    assert stretch == pytest.approx(1.62, abs=0.01)
    assert default.normalize_keyword(rare, 4, 81) == pytest.approx(
        scoring.sigmoid(rare * stretch, 7.0, 0.6))
    assert default.normalize_keyword(rare, 4, 81) > 0.4
    assert scoring.MEM0.normalize_keyword(rare, 4, 81) < 0.15
    # terms every memory holds stay near nothing, as in the seed
    assert default.normalize_keyword(3 * common, 4, 81) < 0.02
    # from 1,000 memories on, and without the scope's size, it is the seed's table exactly
    for raw in (1.0, 5.0, 9.0, 20.0):
        for n_docs in (1000.0, 50_000.0, None):
            assert default.normalize_keyword(raw, 4, n_docs) == \
                scoring.MEM0.normalize_keyword(raw, 4, None)


def test_the_default_entity_curve_keeps_exact_names_and_fades_loose_ones() -> None:
    default = scoring.DEFAULT
    assert default.entity_similarity(1.0) == pytest.approx(1.0)
    assert default.entity_similarity(0.92) == pytest.approx(0.84)
    assert default.entity_similarity(0.54) == pytest.approx(0.08)  # 'yorkshire' for "NYC"
    assert default.entity_similarity(0.49) == 0.0
    assert default.entity_boost([(0.54, 1)]) == pytest.approx(0.04)
    assert default.entity_boost([(1.0, 1), (0.54, 1)]) == pytest.approx(0.5)


def test_profiles_are_named() -> None:
    assert scoring.SCORINGS == {
        "default": scoring.DEFAULT, "mem0": scoring.MEM0, "seed": scoring.MEM0}


def test_an_unknown_scoring_profile_is_a_configuration_error() -> None:
    import pgmem

    with pytest.raises(pgmem.ConfigurationError, match="scoring must be one of"):
        pgmem.Memory("postgresql://nowhere.invalid/x", scoring="bm42")
    with pgmem.Memory("postgresql://nowhere.invalid/x", scoring="mem0") as memory:
        assert memory.scoring == "mem0"  # nothing connects until the first call
    with pgmem.Memory("postgresql://nowhere.invalid/x", scoring="seed") as memory:
        assert memory.scoring == "mem0"  # the older name of the same profile


def _fuse_neighbours(
    profile: scoring.Scoring, answer_semantic: float
) -> dict[object, scoring.Fused]:
    question = Signals("question", semantic=0.8, keyword_raw=None, later=(("answer", 1),))
    answer = Signals("answer", semantic=answer_semantic, keyword_raw=None,
                     earlier=(("question", 1),), later=(("later", 1),))
    later = Signals("later", semantic=0.6, keyword_raw=None, earlier=(("answer", 1),))
    fused = fuse([question, answer, later], n_terms=0, keyword_active=False, entity_active=False,
                 threshold=0.1, limit=10, profile=profile)
    return {f.key: f for f in fused}


def test_a_memory_counts_at_least_a_share_of_its_best_neighbour() -> None:
    p = scoring.DEFAULT
    got = _fuse_neighbours(p, answer_semantic=0.3)
    # 0.75 x the memory before it (0.6) beats 0.5 x the one after it (0.3) and its own 0.3.
    assert got["answer"].score == pytest.approx(p.after_weight * 0.8)
    assert got["answer"].context == pytest.approx(p.after_weight * 0.8 - 0.3)
    assert got["answer"].context_from == "question"
    # Neighbours never lower a score: the question keeps its own.
    assert got["question"].score == 0.8 and got["question"].context == 0.0
    assert got["later"].score == 0.6 and got["later"].context_from is None


def test_a_neighbour_further_away_counts_less_for_each_place() -> None:
    """Two places after the question, the answer takes its share times the decay once."""
    p = scoring.DEFAULT
    assert p.neighbour_window == 2 and 0 < p.neighbour_decay < 1
    question = Signals("question", semantic=0.8, keyword_raw=None,
                       later=(("reply", 1), ("answer", 2)))
    reply = Signals("reply", semantic=0.2, keyword_raw=None,
                    earlier=(("question", 1),), later=(("answer", 1),))
    answer = Signals("answer", semantic=0.3, keyword_raw=None,
                     earlier=(("reply", 1), ("question", 2)))
    got = {f.key: f for f in fuse([question, reply, answer], n_terms=0, keyword_active=False,
                                  entity_active=False, threshold=0.1, limit=10, profile=p)}
    assert got["answer"].score == pytest.approx(p.after_weight * p.neighbour_decay * 0.8)
    assert got["answer"].context_from == "question"
    # Below the similarity floor the reply takes nothing, though it is next to the question.
    assert got["reply"].score == 0.2 and got["reply"].context_from is None


def test_a_memory_below_the_similarity_floor_takes_nothing_from_its_neighbours() -> None:
    p = scoring.DEFAULT
    got = _fuse_neighbours(p, answer_semantic=p.context_min_semantic - 0.01)
    assert got["answer"].score == pytest.approx(p.context_min_semantic - 0.01)
    assert got["answer"].context == 0.0 and got["answer"].context_from is None


def test_the_seed_profile_has_no_neighbour_step() -> None:
    assert scoring.MEM0.after_weight == scoring.MEM0.before_weight == 0
    got = _fuse_neighbours(scoring.MEM0, answer_semantic=0.3)
    assert got["answer"].score == 0.3 and got["answer"].context == 0.0
