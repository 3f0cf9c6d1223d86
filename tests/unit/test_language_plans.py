"""The pure parts of text search configurations: the search plan and write parameters when
PostgreSQL makes the lexemes, and the checks on configuration names."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from pgmem import builders, validate
from pgmem.errors import ConfigurationError, InvalidInputError
from pgmem.filters import compile_filters
from pgmem.languages import Languages, TextSearch, check_name, installed_model, spacy_models
from pgmem.nlp import Analysis, TextAnalyzer

GERMAN = TextSearch("german", None)
HAS_GERMAN_MODEL = installed_model(spacy_models("german")) is not None
ENGLISH = TextSearch("english", TextAnalyzer("blank"))


def request(query: str, signals: tuple[str, ...] = builders.LEGS) -> builders.SearchRequest:
    condition, params = compile_filters(None)
    return builders.SearchRequest(
        scope=validate.scope("t", "u1", None, None), query=query, limit=10, threshold=0.1,
        condition=condition, filter_params=params, signals=signals,
    )


def plan(text_search: TextSearch, analysis: Analysis, **kwargs: object) -> builders.SearchPlan:
    return builders.search_plan(
        builders.SearchInputs(
            request("Häuser am Fluss", **kwargs),  # type: ignore[arg-type]
            analysis, np.zeros((1, 3), np.float32), keyword_score="bm25", text_search=text_search,
        ),
        exact_scan=False,
    )


def test_postgresql_makes_the_query_terms_in_the_statement() -> None:
    p = plan(GERMAN, Analysis((), ()))
    assert p.params.lexemes is None and p.params.tsquery is None
    assert p.params.keyword_text == "Häuser am Fluss"
    assert p.params.ts_config == "german"
    assert p.n_terms is None and p.keyword_active
    assert p.signals == ("semantic", "keyword")  # no entities without a spaCy model
    assert any("'german'" in note and "entity signal off" in note for note in p.notes)

    # The rows say how many terms there were; none turns the keyword signal off.
    row = {"query_terms": 2}
    assert builders.with_query_terms(p, [row]).n_terms == 2
    none = builders.with_query_terms(p, [{"query_terms": 0}])
    assert none.n_terms == 0 and not none.keyword_active
    assert builders.NO_KEYWORD_TERMS in none.notes


def test_a_search_without_the_keyword_signal_asks_postgresql_for_nothing() -> None:
    p = plan(GERMAN, Analysis((), ()), signals=("semantic",))
    assert p.params.keyword_text is None and p.params.lexemes == ()
    assert p.n_terms == 0 and not p.keyword_active


def test_spacy_lemmas_travel_as_before() -> None:
    p = plan(ENGLISH, Analysis(("house", "river"), ()))
    assert p.params.lexemes == ("house", "river")
    assert p.params.tsquery == "'house' | 'river'"
    assert p.params.keyword_text is None and p.params.ts_config == "english"
    assert p.n_terms == 2 and builders.with_query_terms(p, []) is p


def test_writes_leave_the_lexemes_to_postgresql() -> None:
    items = [validate.new_memory("t", "Die Häuser", None, "u1", None, None)]
    analyses = GERMAN.analyze_many(["Die Häuser"])
    entities = builders.batch_entities(analyses)
    vectors = np.zeros((1, 3), np.float32)
    params = builders.insert_params(
        "t", items, analyses, entities, vectors, dedupe=True, text_search=GERMAN
    )
    assert params["lexemes"] == [None] and params["lexeme_counts"] == [None]
    assert params["ts_config"] == "german" and params["entity_names"] == []
    update = builders.update_params(
        "t", uuid.uuid4(), text="Das Haus", analysis=analyses[0], vectors=vectors,
        text_search=GERMAN,
    )
    assert update["lexemes"] is None and update["postgres_text"] == "Das Haus"
    assert update["ts_config"] == "german"
    metadata_only = builders.update_params("t", uuid.uuid4(), metadata={"k": 1})
    assert metadata_only["ts_config"] is None and metadata_only["postgres_text"] is None


def test_configuration_names() -> None:
    assert check_name("german") == "german"
    for bad in ("", "  ", 7, None, "x" * 200, "a\x00b"):
        with pytest.raises(InvalidInputError, match="text search configuration"):
            check_name(bad)
    with pytest.raises(ConfigurationError):
        Languages("", None)
    languages = Languages("german", None)
    languages.remember(["english", "german", "simple"])
    assert languages.check("simple") == "simple"
    with pytest.raises(InvalidInputError, match="'klingon'.*english, german, simple"):
        languages.check("klingon")
    with pytest.raises(ConfigurationError):
        Languages("klingon", None).check("klingon")


def test_the_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_TS_CONFIG", "simple")
    assert Languages(None, None).default == "simple"
    assert Languages("french", None).default == "french"
    monkeypatch.delenv("PGMEM_TS_CONFIG")
    assert Languages(None, None).default == "english"


def test_nlp_names_english_or_each_configuration() -> None:
    english = TextAnalyzer("blank")
    assert Languages("german", english).english is english  # a plain analyzer is English's
    assert Languages("german", english).get().by_postgres is not HAS_GERMAN_MODEL
    french = TextAnalyzer("blank")
    chosen = Languages("french", {"french": french, "english": "blank"})
    assert chosen.get().analyzer is french
    assert chosen.english is not english and chosen.english.model_name == "blank"
    with pytest.raises(ConfigurationError, match="nlp"):
        Languages(None, {"french": 3})  # type: ignore[dict-item]
