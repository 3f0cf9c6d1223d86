"""Hybrid search against real PostgreSQL and the real models: what each leg brings in, the
spread attenuation, the explain breakdown, and one round trip per search."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg.pq import Trace

import pgmem
from pgmem import scoring

pytestmark = pytest.mark.also_on_citus

if TYPE_CHECKING:
    from typing_extensions import Self

# Seventy memories about a router: semantically closer to the queries below than the targets.
ROUTER_NOTES = [
    f"The office router was rebooted again on day {i} of the network outage" for i in range(70)
]


def add_all(mem: pgmem.Memory, texts: list[str], user_id: str = "u1") -> None:
    for text in texts:
        mem.add(text, user_id=user_id)


def test_search_finds_what_was_added(memory: pgmem.Memory) -> None:
    rec = memory.add(
        "Caroline moved to Ottawa to work at Shopify", user_id="u1", metadata={"k": "v"}
    )
    memory.add("Melanie paints landscapes on weekends", user_id="u1")
    hits = memory.search("where does Caroline work?", user_id="u1", limit=10)
    assert hits[0].id == rec.id
    assert hits[0].text == "Caroline moved to Ottawa to work at Shopify"
    assert hits[0].metadata == {"k": "v"}
    assert hits[0].explain.signals == ("semantic", "keyword", "entity")
    assert set(hits[0].explain.legs) == {"semantic", "keyword", "entity"}
    assert hits[0].explain.entity_hits[0].name == "caroline"


def test_a_memory_only_the_keyword_leg_finds_is_returned(memory: pgmem.Memory) -> None:
    add_all(memory, ROUTER_NOTES)
    target = memory.add("The garage door code is zq7781, written on the fridge", user_id="u1")
    query = "router outage reboot zq7781"

    semantic = memory.search(query, user_id="u1", limit=60, mode="semantic")
    assert target.id not in {h.id for h in semantic}, (
        "the target must be out of the semantic top 60")

    hits = memory.search(query, user_id="u1", limit=10)
    found = {h.id: h for h in hits}
    assert target.id in found
    assert "keyword" in found[target.id].explain.legs
    assert "semantic" not in found[target.id].explain.legs
    assert found[target.id].explain.keyword_raw is not None and found[target.id].explain.keyword > 0


def test_a_memory_only_an_entity_links_is_returned(memory: pgmem.Memory) -> None:
    add_all(memory, ROUTER_NOTES)
    target = memory.add("We bought bagels at a deli in New York City", user_id="u1")
    query = "network trouble in NYC"

    semantic = memory.search(query, user_id="u1", limit=60, mode="semantic")
    assert target.id not in {h.id for h in semantic}
    keyword = memory.search(query, user_id="u1", limit=60, mode="keyword")
    assert target.id not in {h.id for h in keyword}

    hits = memory.search(query, user_id="u1", limit=10)
    found = {h.id: h for h in hits}
    assert target.id in found
    assert found[target.id].explain.legs == ("entity",)
    (hit,) = found[target.id].explain.entity_hits
    assert hit.name == "new york city" and hit.similarity >= 0.5


def test_a_common_entity_boosts_less_than_a_rare_one(memory: pgmem.Memory) -> None:
    common = [f"Paris had a street market on Saturday number {i}" for i in range(100)]
    add_all(memory, common)
    rare = memory.add("Oslo had a street market on Saturday", user_id="u1")
    hits = memory.search("street markets in Paris and Oslo", user_id="u1", limit=100)
    by_text = {h.text: h for h in hits}
    rare_hit = by_text[rare.text]
    common_hit = by_text[common[0]]
    assert rare_hit.explain.entity_hits[0].spread == 1
    assert common_hit.explain.entity_hits[0].spread == 100
    assert rare_hit.explain.scope_size == common_hit.explain.scope_size == 101
    assert rare_hit.explain.entity_hits[0].weight == 1.0
    assert rare_hit.explain.entity == pytest.approx(
        rare_hit.explain.entity_hits[0].similarity * 0.5
    )
    # 'paris' reaches every memory but one: no weight left (the seed keeps its spread's)
    weight = common_hit.explain.entity_hits[0].weight
    assert weight == pytest.approx(scoring.DEFAULT.spread_weight(100, 101)) == pytest.approx(
        scoring.spread_attenuation(100) * scoring.share_attenuation(100, 101, 0.5))
    assert common_hit.explain.entity == pytest.approx(
        common_hit.explain.entity_hits[0].similarity * 0.5 * weight
    )
    assert rare_hit.explain.entity > 4 * common_hit.explain.entity


# A user's own memories: every one names him (the demo case: "what pet does Omar have?"
# gave every hit entity 0.492, 'omar' reaching 5 memories).
OMAR = [
    "Omar works night shifts as a nurse at the Royal Infirmary.",
    "Omar is learning Portuguese for a trip to Lisbon in June.",
    "Omar plays five-a-side football with colleagues on Wednesdays.",
    "Omar's sister Leila is getting married in Manchester in August.",
]
OMAR_PET = "Omar adopted a rescue greyhound called Biscuit last spring."
PET_QUERY = "what pet does Omar have?"


def test_a_name_every_memory_of_a_small_scope_holds_lifts_none(
    memory: pgmem.Memory, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    memory.add_many([*OMAR, OMAR_PET], user_id="omar")
    hits = memory.search(PET_QUERY, user_id="omar", limit=10, threshold=0.0)
    assert len(hits) == 5 and hits[0].text == OMAR_PET
    for hit in hits:
        e = hit.explain
        (omar,) = e.entity_hits
        assert (omar.name, omar.spread, e.scope_size) == ("omar", 5, 5)
        assert omar.weight == 0.0 and e.entity == 0.0
        assert hit.score == pytest.approx((e.semantic + e.keyword + e.context) / 2.5)

    # The seed's formula is unchanged: every hit lifted alike by the spread's weight alone.
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, scoring="mem0") as seed:
        seed_hits = seed.search(PET_QUERY, user_id="omar", limit=10, threshold=0.0)
    assert len(seed_hits) == 5
    for hit in seed_hits:
        (omar,) = hit.explain.entity_hits
        assert omar.weight == pytest.approx(scoring.spread_attenuation(5))
        assert hit.explain.entity == pytest.approx(
            omar.similarity * 0.5 * scoring.spread_attenuation(5)
        )
        assert hit.explain.entity == pytest.approx(0.492, abs=1e-3)


def test_a_name_most_memories_hold_no_longer_outranks_what_the_query_asks(
    memory: pgmem.Memory, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    pet = "His pet greyhound Biscuit sleeps on the sofa all day."
    memory.add_many([*OMAR, "Omar has a flat near the park.", pet], user_id="omar")
    hits = memory.search(PET_QUERY, user_id="omar", limit=10, threshold=0.0)
    # 'omar' reaches 5 of 6 memories: 4 of the 5 others, past half of them, so 0.4 of its
    # weight (the spread's alone gave the other five 0.49 each, and "Omar has a flat near the
    # park" came first)
    assert hits[0].text == pet and not hits[0].explain.entity_hits
    for hit in hits[1:]:
        (omar,) = hit.explain.entity_hits
        assert omar.spread == 5 and hit.explain.scope_size == 6
        assert omar.weight == pytest.approx(scoring.spread_attenuation(5) * 0.4)
        assert hit.explain.entity == pytest.approx(omar.similarity * 0.5 * omar.weight)

    # Fewer than half the scope's memories: the name weighs as before.
    memory.add_many([f"Chore number {i}: water the plants on the balcony." for i in range(6)],
                    user_id="omar")
    hits = memory.search(PET_QUERY, user_id="omar", limit=20, threshold=0.0)
    named = [h for h in hits if h.explain.entity_hits]
    assert len(named) == 5 and all(h.explain.scope_size == 12 for h in hits)
    assert all(h.explain.entity_hits[0].weight == pytest.approx(scoring.spread_attenuation(5))
               for h in named)


def test_spread_is_counted_within_the_searched_scope(memory: pgmem.Memory) -> None:
    add_all(memory, [f"Paris trip day {i}" for i in range(30)], user_id="other")
    mine = memory.add("Paris trip with the kids", user_id="me")
    (hit,) = memory.search("Paris", user_id="me", limit=5, threshold=0.0)
    assert hit.id == mine.id
    assert hit.explain.entity_hits[0].spread == 1


def test_explain_parts_add_up_to_the_score(memory: pgmem.Memory) -> None:
    add_all(memory, ROUTER_NOTES[:10] + ["Caroline went to the LGBTQ support group in Boston"])
    hits = memory.search("Did Caroline go to a support group in Boston?", user_id="u1", limit=20)
    assert hits and hits[0].explain.entity > 0
    for hit in hits:
        e = hit.explain
        assert e.signals == ("semantic", "keyword", "entity")
        assert e.max_possible == 2.5
        assert hit.score == pytest.approx(
            (e.semantic + e.keyword + e.entity + e.context) / e.max_possible
        )
        assert (e.context > 0) == (e.context_from is not None)
        assert e.score == hit.score
        if e.keyword_raw is None:
            assert e.keyword == 0.0
        else:
            # the default profile: BM25 stretched for a scope of 11 memories, then the table
            assert e.keyword == pytest.approx(
                scoring.DEFAULT.normalize_keyword(e.keyword_raw, 4, 11)
            )
        assert e.entity == pytest.approx(
            scoring.DEFAULT.entity_boost(
                ((h.similarity, h.spread) for h in e.entity_hits), e.scope_size
            )
        )
        assert e.scope_size == 11
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_threshold_drops_semantically_unrelated_memories(memory: pgmem.Memory) -> None:
    memory.add("Quarterly tax filing zz91 is due", user_id="u1")
    assert memory.search("zz91", user_id="u1", threshold=1.0) == []
    assert memory.search("zz91", user_id="u1", threshold=0.0)


class Traced:
    """libpq's protocol trace of one connection while the block runs: the messages it sent
    (``F``) and received (``B``)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.lines: list[str] = []

    def __enter__(self) -> Self:
        self.file = tempfile.TemporaryFile("w+")
        self.conn.pgconn.trace(self.file.fileno())
        self.conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.pgconn.untrace()
        self.file.seek(0)
        self.lines = self.file.read().splitlines()
        self.file.close()

    @property
    def round_trips(self) -> int:
        """How many times the client sent and then waited for the server: each run of sent
        messages followed by received ones."""
        directions = [line.split("\t", 1)[0] for line in self.lines]
        return sum(1 for a, b in itertools.pairwise(directions) if (a, b) == ("F", "B"))

    def sent(self, message: str) -> list[str]:
        """The sent messages of a type (Parse, Bind, Query...), their trace lines."""
        return [line for line in self.lines if line.split("\t")[:3:2] == ["F", message]]


def test_a_search_is_one_round_trip_on_pgmems_pool(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    """The settings travel with the statement; no connection check, no BEGIN or COMMIT (on
    Citus a BEGIN and COMMIT in the same round trip, around SET LOCAL commands Citus copies to
    the worker)."""
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, pool_max_size=1) as mem:
        mem.add("Caroline moved to Ottawa to work at Shopify", user_id="u1")
        mem.search("where does Caroline live?", user_id="u1")  # prepares the statement
        pool = mem._connector._pool
        assert pool is not None
        with pool.connection() as conn:  # the pool's only connection
            citus = mem._connector._capabilities_of(conn).citus
        with Traced(conn) as trace:
            hits = mem.search("where does Caroline work?", user_id="u1")
    assert hits
    assert trace.round_trips == 1, trace.lines
    assert trace.sent("Query") == []  # no simple-protocol statement: BEGIN, COMMIT, SET, ""
    # the settings, then the search statement; on Citus BEGIN, six SET LOCAL, search, COMMIT
    assert len(trace.sent("Bind")) == (9 if citus else 2), trace.lines
    # prepared once: the second search of the same shape is not parsed again
    assert not any("semantic AS MATERIALIZED" in line for line in trace.sent("Parse"))


def test_a_search_on_the_callers_connection_is_one_round_trip(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        mem = pgmem.Memory(conn, embedder=embedder, nlp=analyzer)
        mem.add("Caroline moved to Ottawa to work at Shopify", user_id="u1")
        mem.search("warm up", user_id="u1")  # first use reads the server's capabilities
        with Traced(conn) as trace:
            hits = mem.search("where does Caroline work?", user_id="u1")
        assert hits
        assert trace.round_trips == 1, trace.lines
        # The connection is the caller's: still open, no transaction left behind, and the
        # search's settings did not outlive its round trip.
        assert not conn.closed
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        row = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()
        assert row == ("auto",)


def test_a_search_in_the_callers_transaction_is_one_round_trip(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with psycopg.connect(db_dsn) as conn:
        mem = pgmem.Memory(conn, embedder=embedder, nlp=analyzer)
        mem.add("Caroline moved to Ottawa to work at Shopify", user_id="u1")  # begins it
        with Traced(conn) as trace:
            hits = mem.search("where does Caroline work?", user_id="u1")
        assert hits
        assert trace.round_trips == 1, trace.lines
        assert "SAVEPOINT pgmem_batch" in trace.sent("Parse")[0]
        # still the caller's transaction, with the memory it added
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
        assert mem.search("where does Caroline work?", user_id="u1") == []


def test_without_an_entity_model_the_result_says_so(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp="blank") as mem:
        mem.add("Dogs running in the park", user_id="u1")
        (hit,) = mem.search("dog runs", user_id="u1")
    assert hit.explain.signals == ("semantic", "keyword")
    assert hit.explain.max_possible == 2.0
    assert any("entity" in note for note in hit.explain.notes)
    assert hit.explain.keyword_raw is not None


def test_ts_rank_cd_scoring_is_selectable(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, keyword_score="ts_rank_cd") as mem:
        mem.add("Dogs running in the park", user_id="u1")
        (hit,) = mem.search("dog runs", user_id="u1")
    assert hit.explain.keyword_score == "ts_rank_cd"
    assert hit.explain.keyword_raw is not None and hit.explain.keyword > 0
    with pytest.raises(pgmem.ConfigurationError, match="keyword_score"):
        pgmem.Memory(db_dsn, keyword_score="tfidf")


class FailingReranker:
    def rerank(self, query, hits, limit):  # type: ignore[no-untyped-def]
        raise RuntimeError("model crashed")


class ReversingReranker:
    def rerank(self, query, hits, limit):  # type: ignore[no-untyped-def]
        return list(reversed(hits))[:limit]


def test_a_failing_reranker_returns_the_fused_order(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, reranker=FailingReranker()) as mem:
        add_all(mem, ROUTER_NOTES[:5])
        fused = mem.search("router reboot", user_id="u1", limit=3)
        reranked = mem.search("router reboot", user_id="u1", limit=3, rerank=True)
    assert [h.id for h in reranked] == [h.id for h in fused]
    assert "reranker failed" in caplog.text
    # Each hit says why it is in the fused order.
    assert all(h.explain.notes[-1].startswith("the reranker failed (RuntimeError: model crashed)")
               for h in reranked)
    assert not any("reranker" in note for h in fused for note in h.explain.notes)


def test_a_reranker_reorders_the_fused_results(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, reranker=ReversingReranker()) as mem:
        add_all(mem, ROUTER_NOTES[:5])
        reranked = mem.search("router reboot", user_id="u1", limit=3, rerank=True)
        fused = mem.search("router reboot", user_id="u1", limit=5)
    assert [h.id for h in reranked] == [h.id for h in reversed(fused)][:3]
    with (
        pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem,
        pytest.raises(pgmem.ConfigurationError, match="reranker"),
    ):
        mem.search("router", user_id="u1", rerank=True)


def test_near_duplicate_entity_names_share_one_spread(memory: pgmem.Memory) -> None:
    add_all(memory, [f"Melanie said hello on day {i}" for i in range(40)])
    variant = memory.add("Mel went to the lake with the kids", user_id="u1")
    hits = memory.search("What did Melanie do at the lake?", user_id="u1", limit=50)
    (hit,) = [h for h in hits if h.id == variant.id]
    # "mel" is a rarer name than "melanie", but the query entity reaches 41 memories through
    # names at least as similar as "mel": the variant is not boosted as a rare entity.
    assert hit.explain.entity_hits and all(e.spread >= 40 for e in hit.explain.entity_hits)


def test_a_weaker_match_does_not_make_an_exact_entity_common(memory: pgmem.Memory) -> None:
    add_all(memory, [f"Paris was sunny on day {i}" for i in range(60)])
    berlin = memory.add("Berlin was rainy", user_id="u1")
    hits = memory.search("weather in Berlin", user_id="u1", limit=70)
    (hit,) = [h for h in hits if h.id == berlin.id]
    assert hit.explain.entity_hits[0].name == "berlin"
    assert hit.explain.entity_hits[0].spread == 1
    assert hit.explain.entity == pytest.approx(0.5)


def test_old_pgvector_gets_the_same_results_by_exact_scans(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    query = "Who went to Boston for a support group?"
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        add_all(mem, ROUTER_NOTES[:20] + [
            "Caroline went to the LGBTQ support group in Boston",
            "Melanie painted a sunrise over the lake in Boston",
        ])
        iterative = mem.search(query, user_id="u1", limit=10)
    # pgvector before 0.8 has no iterative scans: every leg scans the scope exactly.
    monkeypatch.setattr(pgmem.connection, "ITERATIVE_SCAN_VERSION", (99, 0))
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as old:
        exact = old.search(query, user_id="u1", limit=10)
    assert [h.id for h in exact] == [h.id for h in iterative]
    assert [h.score for h in exact] == pytest.approx([h.score for h in iterative])
    assert any(h.explain.entity > 0 for h in exact)


def test_a_search_is_not_jit_compiled(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    """The generic plan's cost counts the branches for large scopes, so on a large table it
    passes jit_above_cost; compiling would take longer than the search (60 ms at 1M rows)."""
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT pg_jit_available()").fetchone()
        if not (row and row[0]):
            pytest.skip("this server has no JIT")
        conn.execute("SET jit_above_cost = 0")  # what a large table's plan cost does
        jit = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) SELECT 1").fetchone()
        assert jit is not None and "JIT" in jit[0][0], "JIT is on for this session"
        memory = pgmem.Memory(conn, embedder=embedder, nlp=analyzer)
        memory.add("Caroline moved to Ottawa", user_id="u1")
        plan = memory.explain_search("Where did Caroline move?", user_id="u1", analyze=True)
        conn.rollback()
    assert "JIT" not in plan


# A small scope of near-identical notes and one memory holding the query's rare, exact token.
READING_GROUP_NOTES = [
    f"Note {i}: we talked about the schedule for the Wednesday reading group and snacks."
    for i in range(80)
]
INVENTORY = "Inventory code XJ-4471 belongs to the blue storage crate in the basement."


def test_the_only_memory_holding_a_rare_exact_token_comes_first(
    memory: pgmem.Memory, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    memory.add_many(READING_GROUP_NOTES, user_id="u1")
    target = memory.add(INVENTORY, user_id="u1")
    query = "reading group schedule XJ-4471"

    hits = memory.search(query, user_id="u1", limit=10, threshold=0.0)
    assert hits[0].id == target.id
    explain = hits[0].explain
    assert explain.scoring == "default"
    assert explain.keyword > 0.4  # the seed's table gives it 0.14
    assert all(h.explain.keyword < 0.05 for h in hits[1:])  # the words every note holds

    # The seed's sigmoid table, fitted to large collections, squashes the same match: the
    # memory ranks below every note (the bug this default fixes).
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, scoring="mem0") as seed:
        seed_hits = seed.search(query, user_id="u1", limit=81, threshold=0.0)
    assert [h.id for h in seed_hits].index(target.id) == 80
    assert seed_hits[-1].explain.scoring == "mem0"
    assert seed_hits[-1].explain.keyword < 0.2


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


@pytest.mark.not_on_citus("a generic plan's shape on one server; on Citus a search runs with "
                          "custom plans and the worker's plan is not in the coordinator's")
def test_before_the_first_analyze_the_entity_leg_does_not_loop_over_the_scope(
    memory: pgmem.Memory, db_dsn: str
) -> None:
    """A generic plan made before autovacuum has analysed new tables (an app that loads and
    searches at once) once ran the entity leg's filter as a nested loop over the scope's rows:
    14 ms of a 24 ms statement at 419 memories."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for table in ("memories", "memory_entities", "entities"):
            conn.execute(f"ALTER TABLE pgmem.{table} SET (autovacuum_enabled = false)")
    memory.add_many([f"Caroline met Melanie in Paris on day {i} of the trip." for i in range(80)],
                    user_id="u1")
    plan = memory.explain_search("Where did Caroline meet Melanie?", user_id="u1", analyze=True)
    (links,) = [n for n in _nodes(plan["Plan"]) if n.get("Subplan Name") == "CTE scope_links"]
    assert not [n for n in _nodes(links) if n["Node Type"] == "Nested Loop"
                and n["Actual Loops"] > 0], "the filter must not be a join the planner can loop"


def test_vectors_travel_in_binary_on_writes_too(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    """An insert's vector arrays are sent at four bytes a dimension, not as text (psycopg
    writes a list of vectors as text unless the placeholder asks for binary: ~12 bytes a
    dimension)."""
    texts = [f"note number {n} about the garden and the weather" for n in range(10)]
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        mem = pgmem.Memory(conn, embedder=embedder, nlp=analyzer)
        mem.add("warm up", user_id="u1")
        with Traced(conn) as trace:
            added = mem.add_many(texts, user_id="u1")
    assert len(added) == 10
    binds = [int(line.split("\t")[1]) for line in trace.sent("Bind")]
    vectors_bytes = 10 * 384 * 4
    # the insert's Bind carries the ten vectors (and texts, lexemes, ...): binary fits in 2x
    assert any(vectors_bytes < size < 2 * vectors_bytes for size in binds), binds
