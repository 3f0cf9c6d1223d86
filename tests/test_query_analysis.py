"""The query analyses (``Settings.query_analysis``): each finds what it should on a small real
corpus with the real models -- the full and the tagged (default) analyses keep the semantic
entity match ("NYC" reaches "new york city"), the lookup finds a stored name however the query
writes its case -- and the setting is checked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import pgmem
from pgmem import query_analysis
from pgmem.embedding import DOCUMENT, QUERY, embed_kind
from pgmem.embedding_space import embedder_name
from pgmem.nlp import TextAnalyzer, lookup_pipeline
from pgmem.nlp_process import ProcessAnalyzer
from pgmem.query_analysis import LookupAnalyzer, _lookup_pipeline, candidate_names
from pgmem.scoring import stretch
from pgmem.settings import Settings

pytestmark = pytest.mark.also_on_citus

ROUTER_NOTES = [f"The office router was rebooted again on day {i} of the network outage"
                for i in range(30)]
DELI = "We bought bagels at a deli in New York City"
CAROLINE = "Caroline moved to Ottawa to work at Shopify"
CAMPING = "Melanie went camping in the mountains with her kids"


@pytest.fixture
def stored(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> str:
    """A database holding the corpus, added with the full analysis."""
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
        memory.add_many([{"text": t} for t in [*ROUTER_NOTES, DELI, CAROLINE, CAMPING]],
                        user_id="u1")
    return db_dsn


@pytest.fixture(params=["full", "tagged", "lookup"])
def searcher(
    request: pytest.FixtureRequest, stored: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> Iterator[pgmem.Memory]:
    """A Memory on the corpus whose queries are analysed by each mode."""
    settings = Settings(query_analysis=request.param)
    with pgmem.Memory(stored, embedder=embedder, nlp=analyzer, settings=settings) as memory:
        yield memory


def entity_hits(hit: pgmem.SearchHit) -> dict[str, float]:
    return {e.name: e.similarity for e in hit.explain.entity_hits}


def test_every_mode_finds_a_named_memory_with_its_entity(searcher: pgmem.Memory) -> None:
    hits = searcher.search("where does Caroline work?", user_id="u1", limit=5)
    assert hits[0].text == CAROLINE
    assert entity_hits(hits[0])["caroline"] == pytest.approx(1.0, abs=1e-3)
    assert hits[0].explain.signals == ("semantic", "keyword", "entity")
    assert {"keyword", "entity"} <= set(hits[0].explain.legs)


def test_the_lemmas_are_the_stored_ones_but_for_the_lookup_tables(searcher: pgmem.Memory) -> None:
    hits = searcher.search("camping trips", user_id="u1", limit=1, mode="keyword")
    if searcher.settings.query_analysis == "lookup":  # its lemma is 'camp', the memory's 'camping'
        assert CAMPING not in {h.text for h in hits}
        return
    (hit,) = hits
    assert hit.text == CAMPING and hit.explain.keyword_raw is not None


def test_nyc_reaches_new_york_city_but_by_lookup_alone(searcher: pgmem.Memory) -> None:
    hits = searcher.search("network trouble in NYC", user_id="u1", limit=10)
    found = {h.text: h for h in hits}
    if searcher.settings.query_analysis == "lookup":  # no embedded name: the lookup's trade
        assert DELI not in found
        assert "entity" not in hits[0].explain.signals
        return
    assert found[DELI].explain.legs == ("entity",)
    assert entity_hits(found[DELI])["new york city"] >= 0.9
    assert hits[0].explain.signals == ("semantic", "keyword", "entity")


class ScaledMiniLM:
    """The test's MiniLM (its name and vectors, so the stored ones match) with a semantic
    scale, as another model would have."""

    def __init__(self, inner: pgmem.SentenceTransformerEmbedder, scale: tuple[float, float]):
        self.inner, self.semantic_scale, self.name = inner, scale, embedder_name(inner)

    def embed_query(self, texts: list[str]) -> Any:
        return embed_kind(self.inner, texts, QUERY)

    def embed_documents(self, texts: list[str]) -> Any:
        return embed_kind(self.inner, texts, DOCUMENT)


def test_entity_similarities_are_on_the_models_scale(
    stored: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    query = "network trouble in NYC"
    with pgmem.Memory(stored, embedder=embedder, nlp=analyzer) as plain:
        found = {h.text: h for h in plain.search(query, user_id="u1", limit=10)}
    raw = entity_hits(found[DELI])["new york city"]
    assert 0.85 < raw < 0.99
    # stretched by the scale, the match stays above the minimum (0.5) ...
    near = (0.5, 1.0)
    with pgmem.Memory(stored, embedder=ScaledMiniLM(embedder, near), nlp=analyzer) as scaled:
        hits = scaled.search(query, user_id="u1", limit=10, threshold=0.0)
    (deli,) = [h for h in hits if h.text == DELI]
    assert entity_hits(deli)["new york city"] == pytest.approx(stretch(raw, near), abs=1e-4)
    assert deli.explain.legs == ("entity",)
    # ... or falls below it: the minimum means the same on any model's scale
    far = (2 * raw - 1 + 0.05, 1.0)
    assert stretch(raw, far) < 0.5 <= raw
    with pgmem.Memory(stored, embedder=ScaledMiniLM(embedder, far), nlp=analyzer) as scaled:
        hits = scaled.search(query, user_id="u1", limit=40, threshold=0.0)
    assert all("new york city" not in entity_hits(h) for h in hits)


def test_a_name_alone_reaches_its_entity_in_the_tagged_analysis(
    stored: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    # the tagger calls a lone capitalised word a common noun; the recogniser knew it for a name
    tagged = analyzer.analyze_tagged("Caroline")
    assert tagged.entities == () and tagged.names == ("caroline",)
    assert analyzer.analyze_tagged("Books about cats").names == ("books",)
    assert analyzer.analyze_tagged("where does Caroline work?").names == ()  # a proper noun
    settings = Settings(query_analysis="tagged")
    with pgmem.Memory(stored, embedder=embedder, nlp=analyzer, settings=settings) as memory:
        (hit,) = memory.search("Caroline", user_id="u1", limit=1, mode="entity")
    assert hit.text == CAROLINE and entity_hits(hit) == {"caroline": 1.0}


def test_the_default_is_tagged_and_finds_nyc(
    stored: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(stored, embedder=embedder, nlp=analyzer, settings=Settings()) as memory:
        assert memory.settings.query_analysis == "tagged"
        assert memory._ops.models.languages.get().query_analyzer() is not None
        hits = memory.search("network trouble in NYC", user_id="u1", limit=10)
    assert DELI in {h.text for h in hits}


def test_the_lookup_finds_a_name_the_query_does_not_capitalise(
    stored: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    settings = Settings(query_analysis="lookup")
    with pgmem.Memory(stored, embedder=embedder, nlp=analyzer, settings=settings) as memory:
        hits = memory.search("a job at shopify", user_id="u1", limit=3)
    assert hits[0].text == CAROLINE
    assert entity_hits(hits[0]) == {"shopify": 1.0}
    assert hits[0].explain.entity_hits[0].spread == 1


def test_a_bad_query_analysis_is_a_configuration_error() -> None:
    with pytest.raises(pgmem.ConfigurationError, match="PGMEM_QUERY_ANALYSIS must be one of"):
        Settings.from_env({"PGMEM_QUERY_ANALYSIS": "spacy"})
    with pytest.raises(pgmem.ConfigurationError, match="query_analysis must be one of .*'fast'"):
        pgmem.Memory("postgresql:///unused", settings=Settings(query_analysis="fast"))
    assert Settings.from_env({"PGMEM_QUERY_ANALYSIS": "lookup"}).query_analysis == "lookup"


QUESTIONS = [
    "When did Melanie go camping in June?",
    "What is Caroline excited about in the adoption process?",
    "Would Caroline still want to pursue counseling as a career?",
    "When did Caroline go to the LGBTQ support group in NYC?",
]


def test_the_tagged_analysis_has_the_full_lemmas_and_proper_nouns(
    analyzer: pgmem.TextAnalyzer,
) -> None:
    for question in QUESTIONS:
        full, tagged = analyzer.analyze(question), analyzer.analyze_tagged(question)
        assert tagged.lexemes == full.lexemes
        assert {e.label for e in tagged.entities} <= {"PROPN", "QUOTED"}
    tagged = analyzer.analyze_tagged(QUESTIONS[3])
    assert {e.name for e in tagged.entities} >= {"caroline", "nyc"}
    # the lookup tables' lemma of a gerund is its verb: not what a memory stores
    assert "camp" in LookupAnalyzer(tagged=False).analyze(QUESTIONS[0]).lexemes
    assert "camping" in analyzer.analyze(QUESTIONS[0]).lexemes


def test_the_spacy_process_answers_a_tagged_analysis() -> None:
    process = ProcessAnalyzer(settings=Settings())
    try:
        assert process.analyze_tagged(QUESTIONS[3]) == TextAnalyzer().analyze_tagged(QUESTIONS[3])
    finally:
        process.close()


def test_candidate_names_are_the_word_ngrams_without_edge_stop_words() -> None:
    lookup = LookupAnalyzer(tagged=False)
    analysis = lookup.analyze("How long has Gina been in New York City? Bank of America.")
    assert {"gina", "new york city", "new york", "york city", "bank of america"} <= set(
        analysis.names
    )
    assert not {"how long has", "in new york", "has gina", "of america"} & set(analysis.names)
    assert analysis.entities == ()


def test_the_ngrams_are_bounded() -> None:
    doc = _lookup_pipeline("en").get()(" ".join(f"word{i}" for i in range(200)))
    assert len(candidate_names(doc, set())) == 64


def test_one_lookup_pipeline_a_process_and_none_for_the_tagged_analysis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a Memory per tenant or request must not load its own tables (~0.3 s each)
    loads: list[str] = []

    def counted(spacy: Any, lang: str) -> Any:
        loads.append(lang)
        return lookup_pipeline(spacy, lang)

    monkeypatch.setattr(query_analysis, "lookup_pipeline", counted)
    monkeypatch.setattr(query_analysis, "_LOOKUP_PIPELINES", {})
    assert LookupAnalyzer("de", tagged=True).ready()  # the tagger needs no lookup table
    assert loads == []
    first, second = LookupAnalyzer("de", tagged=False), LookupAnalyzer("de", tagged=False)
    assert first.ready() and second.ready()
    assert first.analyze("Wir gingen gestern in Berlin spazieren") == second.analyze(
        "Wir gingen gestern in Berlin spazieren")
    assert loads == ["de"]
