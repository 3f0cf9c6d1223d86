"""How search scores are made: keyword normalisation, entity boosts and fusion.

A pure module (no database, no models) so that every constant can be read, tested and tuned in
one place. The SQL statement only collects raw signals; this module turns them into a score.

    score = (semantic + keyword + entity) / max_possible

- ``semantic``: cosine similarity of the query and memory embeddings; a candidate below the
  threshold is dropped whatever its other signals.
- ``keyword``: a BM25 score (or a calibrated ``ts_rank_cd``) squashed to 0..1 by a sigmoid whose
  midpoint and steepness depend on the number of query terms (:data:`KEYWORD_SIGMOID_TABLE`).
- ``entity``: the best ``similarity * ENTITY_WEIGHT * spread_attenuation(n)`` over the query
  entities that link to the memory, where ``n`` is how many memories in the searched scope the
  entity links to: common entities boost little. A profile may weigh it further by the share
  of the scope it reaches (:func:`share_attenuation`), so that on a small scope a name every
  memory holds lifts none.
- ``max_possible``: 1.0, plus 1.0 when the query has keyword terms, plus ENTITY_WEIGHT when it
  has entities; so scores stay comparable whether or not a signal could contribute.

A profile may then let a memory count at least a share of the score of its neighbours -- the
memories stored up to ``neighbour_window`` places before and after it in the searched scope (the
search statement's neighbour step): ``score = max(own, after_weight * decay^(d-1) * own(the
memory d places before), before_weight * decay^(d-1) * own(the memory d places after))`` when
the memory's own similarity reaches ``context_min_semantic``. In a conversation the turn that
answers a question rarely repeats its words; the question does, a turn or two before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

# (largest number of query terms, sigmoid midpoint, steepness); the last row has no upper bound.
# Fitted to Okapi BM25 scores, which typically run from 0 to 20 and more.
KEYWORD_SIGMOID_TABLE: tuple[tuple[int | None, float, float], ...] = (
    (3, 5.0, 0.7),
    (6, 7.0, 0.6),
    (9, 9.0, 0.5),
    (15, 10.0, 0.5),
    (None, 12.0, 0.5),
)

BM25_K1 = 1.2
BM25_B = 0.75

# ts_rank_cd is about 0.1 per matching term, with no IDF and no saturation. This factor maps it
# onto the BM25 scale of the sigmoid table. Measured with `python -m benchmarks.retrieval` on the
# LoCoMo dev conversations, hybrid recall@10 (turns / observations): x10 0.590 / 0.605,
# x25 0.654 / 0.626, x50 0.642 / 0.620, x100 0.574 / 0.614; BM25 0.665 / 0.633 (the default).
RANK_CD_SCALE = 25.0

KEYWORD_SCORES = ("bm25", "ts_rank_cd")

ENTITY_WEIGHT = 0.5
ENTITY_MIN_SIMILARITY = 0.5
SPREAD_DECAY = 0.001
MAX_QUERY_ENTITIES = 8
# Known entities fetched per query entity before the similarity cut.
ENTITY_NEIGHBOURS = 16
# How many places on each side the search statement's neighbour step can reach (its small-scope
# rows carry that many neighbours a side).
MAX_NEIGHBOUR_WINDOW = 2
#: How many hits a search returns unless told (Memory, AsyncMemory and ``pgmem search``).
SEARCH_LIMIT = 20



def internal_limit(limit: int) -> int:
    """How many candidates each leg fetches: twice ``limit``, at least 20, so that a memory
    good on several signals but in no leg's top ``limit`` can still be fused in, and the
    threshold can drop some. Measured with `python -m benchmarks.retrieval` (limit 20), hybrid
    recall@1/5/10/20 and nDCG on the dev turns and observations: the same to three decimals
    at 1x, 1.25x, 1.5x and 2x (0.734 / 0.644 at 10) -- the union of the legs already holds
    what fusion ranks first -- while 1x made a search ~4% faster (fewer candidates to return
    and fuse) and changed the hits or scores of 60 of 400 searches below what the metrics see.
    Kept at 2x: a smaller candidate set can only lose what a larger one finds."""
    return max(limit * 2, 20)


def neighbour_limit(limit: int) -> int:
    """Of how many of each leg's best the neighbour step finds the neighbours: half ``limit``,
    rounded up -- the neighbours of the rest did not reach the results (LoCoMo dev: recall@5,
    10 and 20 the same from each leg's best limit / 2 up)."""
    return (limit + 1) // 2


def sigmoid_params(n_terms: int) -> tuple[float, float]:
    """The (midpoint, steepness) of the keyword sigmoid for a query of ``n_terms`` terms."""
    for max_terms, midpoint, steepness in KEYWORD_SIGMOID_TABLE:
        if max_terms is None or n_terms <= max_terms:
            return midpoint, steepness
    raise AssertionError("the last row of KEYWORD_SIGMOID_TABLE has no upper bound")


def sigmoid(x: float, midpoint: float, steepness: float) -> float:
    """``1 / (1 + exp(-steepness * (x - midpoint)))``, safe for any finite ``x``."""
    z = -steepness * (x - midpoint)
    if z > 700:  # exp overflows past ~709
        return 0.0
    return 1.0 / (1.0 + math.exp(z))


def keyword_raw(bm25: float | None, rank_cd: float | None, keyword_score: str) -> float | None:
    """The raw keyword score on the BM25 scale, or None when the memory did not match."""
    if keyword_score == "bm25":
        return bm25
    return None if rank_cd is None else rank_cd * RANK_CD_SCALE


def normalize_keyword(raw: float | None, n_terms: int) -> float:
    """A raw keyword score squashed to 0..1; 0 for a memory that matched no query term."""
    if raw is None or raw <= 0:
        return 0.0
    return sigmoid(raw, *sigmoid_params(n_terms))


def spread_attenuation(n: int) -> float:
    """The weight of an entity that links to ``n`` memories in the searched scope."""
    return 1.0 / (1.0 + SPREAD_DECAY * (n - 1) ** 2)


def share_attenuation(n: int, scope_size: float | None, common_share: float | None) -> float:
    """The weight of an entity that links to ``n`` memories of a scope of ``scope_size``, by
    the share ``s = (n - 1) / (N - 1)`` of the scope's other memories it reaches: 1 up to
    ``common_share``, then falling linearly to 0 for an entity every memory holds,
    ``(1 - s) / (1 - common_share)``. 1 when ``common_share`` is None or the size is unknown
    (None) or below 2."""
    if common_share is None or scope_size is None or scope_size < 2:
        return 1.0
    share = min(1.0, max(0.0, (n - 1) / (scope_size - 1)))
    if share <= common_share:
        return 1.0
    return (1.0 - share) / (1.0 - common_share)


def entity_boost(hits: Iterable[tuple[float, int]]) -> float:
    """The best boost over (similarity, spread) pairs of the query entities linked to a memory."""
    return max(
        (similarity * ENTITY_WEIGHT * spread_attenuation(spread) for similarity, spread in hits),
        default=0.0,
    )


def max_possible(
    keyword_active: bool,
    entity_active: bool,
    semantic_active: bool = True,
    profile: Scoring | None = None,
) -> float:
    """The largest score a memory could reach given which signals this query has."""
    p = profile or MEM0
    return (
        (p.semantic_weight if semantic_active else 0.0)
        + (p.keyword_weight if keyword_active else 0.0)
        + (p.entity_weight if entity_active else 0.0)
    )


# -- scoring profiles ---------------------------------------------------------------------------


def bm25_idf(n_docs: float, df: float) -> float:
    """BM25's inverse document frequency of a term held by ``df`` of ``n_docs`` documents (the
    form the search statement uses; never negative)."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Scoring:
    """A named way to turn raw signals into a score (see the module docstring).

    ``keyword``: ``"sigmoid"`` squashes the raw BM25 with :data:`KEYWORD_SIGMOID_TABLE`;
    ``"log-n"`` first stretches it, on a scope of fewer than ``reference_docs`` memories, by
    ``idf(reference_docs) / idf(n)`` -- the IDF of a term only one memory holds, which grows
    with log N -- so that an exact match of the query's rarest term scores on a small scope as
    it would on a scope of ``reference_docs`` memories (the table's midpoints assume large
    ones). ``entity_min_similarity``: entity matches below it do not count;
    ``entity_sharpness`` > 0 maps a match's similarity ``s`` to ``((s - floor) / (1 - floor))
    ** sharpness`` so that near-exact names weigh and loose ones fade. ``after_weight``: the
    share of a memory's score the memory stored just after it counts at least;
    ``before_weight``: the share the memory stored just before it counts at least (both 0: no
    neighbour step); only a memory whose own similarity to the query reaches
    ``context_min_semantic`` takes a share, so that an unrelated neighbour is not lifted.
    ``neighbour_window``: how many places on each side the step reaches; a neighbour ``d``
    places away counts ``neighbour_decay ** (d - 1)`` of its share.
    ``entity_common_share``: an entity reaching more than this share of the scope's other
    memories weighs less, down to nothing for one every memory holds
    (:func:`share_attenuation`; None: by its spread alone, whatever the scope's size).
    """

    name: str
    keyword: str = "sigmoid"
    reference_docs: float = 1000.0
    semantic_weight: float = 1.0
    keyword_weight: float = 1.0
    entity_weight: float = ENTITY_WEIGHT
    entity_min_similarity: float = ENTITY_MIN_SIMILARITY
    entity_sharpness: float = 0.0
    after_weight: float = 0.0
    before_weight: float = 0.0
    context_min_semantic: float = 0.25
    neighbour_window: int = 1
    neighbour_decay: float = 1.0
    entity_common_share: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.neighbour_window <= MAX_NEIGHBOUR_WINDOW:
            raise ValueError(f"neighbour_window must be 1..{MAX_NEIGHBOUR_WINDOW}")

    def normalize_keyword(self, raw: float | None, n_terms: int, n_docs: float | None) -> float:
        """A raw keyword score (BM25 scale) as a 0..1 signal; ``n_docs``: the scope's size."""
        return self.keyword_normalizer(n_terms, n_docs)(raw)

    def keyword_normalizer(
        self, n_terms: int, n_docs: float | None
    ) -> Callable[[float | None], float]:
        """:meth:`normalize_keyword` for one query (its terms and scope), what depends on them
        worked out once."""
        stretch = 1.0
        if self.keyword == "log-n" and n_docs:
            stretch = max(1.0, bm25_idf(self.reference_docs, 1) / bm25_idf(n_docs, 1))
        midpoint, steepness = sigmoid_params(n_terms)

        def normalize(raw: float | None) -> float:
            if raw is None or raw <= 0:
                return 0.0
            return sigmoid(raw * stretch, midpoint, steepness)

        return normalize

    def entity_similarity(self, similarity: float) -> float:
        """The weight of one entity match of this ``similarity`` (0 below the floor)."""
        floor = self.entity_min_similarity
        if similarity < floor:
            return 0.0
        if self.entity_sharpness <= 0 or floor >= 1:
            return similarity
        return float(((similarity - floor) / (1 - floor)) ** self.entity_sharpness)

    def spread_weight(self, spread: int, scope_size: float | None) -> float:
        """The weight of a query entity that links to ``spread`` memories of a scope of
        ``scope_size`` (None: unknown): :func:`spread_attenuation`, times
        :func:`share_attenuation` with ``entity_common_share`` (None: not)."""
        return spread_attenuation(spread) * share_attenuation(
            spread, scope_size, self.entity_common_share
        )

    def entity_boost(
        self, hits: Iterable[tuple[float, int]], scope_size: float | None = None
    ) -> float:
        """The best boost over (similarity, spread) pairs of the query entities linked to a
        memory; ``scope_size``: the searched scope's size."""
        return max(
            (self.entity_similarity(similarity) * self.entity_weight
             * self.spread_weight(spread, scope_size)
             for similarity, spread in hits),
            default=0.0,
        )


# Mem0's scoring, exactly: its sigmoid table, entity matches from 0.5, every weight 1.
MEM0 = Scoring("mem0")
# Chosen with `python -m benchmarks.fusion` on three dev conversations (docs/retrieval.md):
# stretching up to a 1,000-memory scope fitted best of 300 / 1,000 / 3,000 / 10,000 (300 does
# not put the XJ-4471 memory first), and the sharper entity curve is neutral on LoCoMo while a
# loose match such as 'yorkshire' for "NYC" no longer lifts a memory.
# The neighbour weights were fitted on the same three conversations, both tasks together, over
# after 0.6-0.8 x before 0-0.6, then the window (1-3 places) and its decay (0.6-1.0) with them
# (docs/retrieval.md).
# The spread decay alone only bites from tens of memories on, so on a small scope the user's
# own name lifted every memory alike. The share past which an entity weighs less: 0.4 and 0.5
# fitted best of 0-0.9 and of the IDF and power forms, neutral on LoCoMo, whose widely shared
# names (its speakers') the decay has already all but silenced (docs/retrieval.md).
DEFAULT = Scoring(
    "default", keyword="log-n", reference_docs=1000, entity_sharpness=1.0,
    after_weight=0.75, before_weight=0.5, neighbour_window=2, neighbour_decay=0.9,
    entity_common_share=0.5,
)
#: The profiles by name; "seed" is an older name of "mem0", kept so that code using it still runs.
SCORINGS = {"default": DEFAULT, "mem0": MEM0, "seed": MEM0}


#: A model's semantic scale: the similarities (lo, hi) stretched linearly onto [0, 1] before
#: fusion (:func:`stretch`). None: the similarity as it is (all-MiniLM-L6-v2's, whose cosine
#: between unrelated texts is already near 0).
SemanticScale = tuple[float, float]


def stretch(similarity: float, scale: SemanticScale | None) -> float:
    """``similarity`` on the fusion's scale: as it is without a ``scale``, else stretched from
    ``[lo, hi]`` onto ``[0, 1]`` and clipped there. A model whose cosines crowd a narrow band
    (multilingual-e5-small: 90% of pairs between 0.72 and 0.85) otherwise adds an almost
    constant semantic part, and the keyword and entity signals decide alone."""
    if scale is None:
        return similarity
    lo, hi = scale
    return min(1.0, max(0.0, (similarity - lo) / (hi - lo)))


class Signals(NamedTuple):
    """The raw signals of one candidate, as the search statement returns them (a named tuple:
    a search makes a hundred or more)."""

    key: object
    semantic: float
    keyword_raw: float | None
    entity_hits: tuple[tuple[float, int], ...] = ()
    # (key, places away) of the candidates stored before this one, and after it
    earlier: tuple[tuple[object, int], ...] = ()
    later: tuple[tuple[object, int], ...] = ()


@dataclass(frozen=True)
class Fused:
    """A candidate's score and how it was made."""

    key: object
    semantic: float
    keyword_raw: float | None
    keyword: float
    entity: float
    max_possible: float
    score: float
    context: float = 0.0  # what the neighbour step added, on the scale of the other parts
    context_from: object = None  # the key of the neighbour it came from


def fuse(
    candidates: Sequence[Signals],
    *,
    n_terms: int,
    keyword_active: bool,
    entity_active: bool,
    threshold: float,
    limit: int,
    semantic_active: bool = True,
    profile: Scoring = MEM0,
    n_docs: float | None = None,
    scope_size: float | None = None,
) -> list[Fused]:
    """Gate on the semantic threshold, score, sort best first and cut to ``limit``.

    Equal scores are ordered by semantic similarity (keyword scores are coarse, so ties are
    common in keyword-only searches), then keep the order of ``candidates``. With
    ``semantic_active`` false there is no threshold gate and similarity does not count.
    ``n_docs``: the searched scope's size as the keyword scale counts it (the ``"log-n"``
    keyword scoring uses it); ``scope_size``: its size as the entity weight counts it.
    """
    denominator = max_possible(keyword_active, entity_active, semantic_active, profile)
    if denominator == 0:
        return []
    # (keyword, entity, total) of every candidate: its neighbours may need them.
    parts: dict[object, tuple[float, float, float]] = {}
    normalize_keyword = profile.keyword_normalizer(n_terms, n_docs)
    # Candidates share their entity hits (the scope's common names): each boost is worked out once.
    boosts: dict[tuple[tuple[float, int], ...], float] = {}
    for c in candidates:
        keyword = normalize_keyword(c.keyword_raw) if keyword_active else 0.0
        entity = 0.0
        if entity_active and c.entity_hits:
            entity = boosts.get(c.entity_hits, -1.0)
            if entity < 0:
                entity = boosts[c.entity_hits] = profile.entity_boost(c.entity_hits, scope_size)
        semantic = profile.semantic_weight * c.semantic if semantic_active else 0.0
        parts[c.key] = (keyword, entity, semantic + profile.keyword_weight * keyword + entity)
    scored = []  # (score, semantic, candidate, context, context_from): Fused for the best only
    for c in candidates:
        if semantic_active and c.semantic < threshold:
            continue
        total = parts[c.key][2]
        context, context_from = 0.0, None
        if c.semantic >= profile.context_min_semantic:
            for neighbours, weight in (c.earlier, profile.after_weight), (
                c.later, profile.before_weight
            ):
                for key, distance in neighbours:
                    if key in parts:
                        share = weight * profile.neighbour_decay ** (distance - 1)
                        if share * parts[key][2] - total > context:
                            context, context_from = share * parts[key][2] - total, key
        scored.append(((total + context) / denominator, c.semantic, c, context, context_from))
    scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
    return [
        Fused(
            key=c.key,
            semantic=c.semantic,
            keyword_raw=c.keyword_raw,
            keyword=parts[c.key][0],
            entity=parts[c.key][1],
            max_possible=denominator,
            score=score,
            context=context,
            context_from=context_from,
        )
        for score, _, c, context, context_from in scored[:limit]
    ]
