"""Text search configurations other than English (pgmem.languages): German stemmed by PostgreSQL,
French lemmatized by spaCy's French model (or stemmed by PostgreSQL where it is not installed),
memories of several languages in one scope, the configuration stored with each memory, and the
errors for a configuration the database lacks."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator

import psycopg
import pytest

import pgmem
from pgmem import languages
from pgmem.errors import ConfigurationError, InvalidInputError

HAS_FRENCH_MODEL = importlib.util.find_spec("fr_core_news_sm") is not None
HAS_GERMAN_MODEL = languages.installed_model(languages.spacy_models("german")) is not None

# Distractors in each language, so that a keyword match stands out of a scope of several.
GERMAN = [
    "Die alten Häuser am Fluss wurden im letzten Sommer renoviert.",
    "Mein Bruder arbeitet seit drei Jahren bei einer Bank in Frankfurt.",
    "Der Hund schläft am liebsten unter dem Küchentisch.",
    "Wir haben gestern Abend einen Film über Vulkane gesehen.",
]
FRENCH = [
    "Les chevaux mangeaient du foin dans l'écurie près de la rivière.",
    "Ma sœur travaille depuis trois ans dans une banque à Lyon.",
    "Le chat dort toujours sous la table de la cuisine.",
    "Nous avons regardé un film sur les volcans hier soir.",
]


def keyword_hits(mem: pgmem.Memory, query: str, **kwargs: object) -> list[pgmem.SearchHit]:
    """The keyword leg's hits alone (no semantic threshold), best first."""
    hits: list[pgmem.SearchHit] = mem.search(
        query, user_id="u1", legs=["keyword"], threshold=0.0, **kwargs  # type: ignore[arg-type]
    )
    return hits


def stored(dsn: str) -> dict[str, tuple[str, int, str]]:
    """Each memory's text: its configuration, lexeme count and lexemes."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT text, ts_config, lexeme_count, lexemes::text FROM pgmem.memories"
        ).fetchall()
    return {text: (config, count, lexemes) for text, config, count, lexemes in rows}


@pytest.fixture
def german(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder
) -> Iterator[pgmem.Memory]:
    with pgmem.Memory(db_dsn, embedder=embedder, ts_config="german") as mem:
        mem.add_many(GERMAN, user_id="u1")
        yield mem


@pytest.mark.skipif(HAS_GERMAN_MODEL, reason="a German spaCy model would lemmatize instead")
def test_german_inflected_forms_match_through_postgresql(
    german: pgmem.Memory, db_dsn: str
) -> None:
    # "Haus" and "Häuser": one stem in PostgreSQL's german configuration; and a query's
    # stop words ("die", "am") are no terms.
    (hit,) = keyword_hits(german, "Haus am Fluss")
    assert hit.text == GERMAN[0]
    assert hit.explain.keyword_raw is not None and hit.explain.keyword_raw > 0
    (hit,) = keyword_hits(german, "renovierte Häuser")
    assert hit.text == GERMAN[0]
    (hit,) = keyword_hits(german, "Banken")
    assert hit.text == GERMAN[1]

    # The stored lexemes are PostgreSQL's own, counted by position for BM25.
    with psycopg.connect(db_dsn) as conn:
        expected = conn.execute(
            "SELECT to_tsvector('german', %s)::text, length(to_tsvector('german', %s))",
            (GERMAN[0], GERMAN[0]),
        ).fetchone()
    assert expected is not None
    config, count, lexemes = stored(db_dsn)[GERMAN[0]]
    assert (config, lexemes) == ("german", expected[0])
    assert count == expected[1] == 7  # seven words, each once, none a stop word

    # The whole search: hybrid, entity signal off -- and the result says why.
    hits = german.search("Wo stehen die Häuser?", user_id="u1", limit=3)
    assert hits[0].text == GERMAN[0]
    assert hits[0].explain.signals == ("semantic", "keyword")
    assert "keyword" in hits[0].explain.legs
    assert any("german" in note and "entity signal off" in note for note in hits[0].explain.notes)


def test_simple_configuration_does_not_stem(german: pgmem.Memory) -> None:
    german.add("Die Häuser sind alt", user_id="u2", ts_config="simple")
    hits = german.search("Haus", user_id="u2", legs=["keyword"], threshold=0.0, ts_config="simple")
    assert hits == []
    (hit,) = german.search(
        "HÄUSER", user_id="u2", legs=["keyword"], threshold=0.0, ts_config="simple"
    )
    assert hit.text == "Die Häuser sind alt"


def test_french_inflected_forms_match(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, ts_config="french") as mem:
        mem.add_many(FRENCH, user_id="u1")
        # "chevaux" -> cheval, "mangeaient" -> manger (spaCy) or mang (Snowball).
        (hit,) = keyword_hits(mem, "un cheval")
        assert hit.text == FRENCH[0]
        (hit,) = keyword_hits(mem, "manger")
        assert hit.text == FRENCH[0]
        (hit,) = keyword_hits(mem, "les banques")
        assert hit.text == FRENCH[1]
        assert keyword_hits(mem, "les et de la") == []  # stop words only: no terms
    config, _, lexemes = stored(db_dsn)[FRENCH[0]]
    assert config == "french"
    assert "'cheval'" in lexemes and "'chevaux'" not in lexemes


@pytest.mark.skipif(not HAS_FRENCH_MODEL, reason="fr_core_news_sm is not installed")
def test_french_with_its_spacy_model_lemmatizes_and_finds_entities(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, ts_config="french") as mem:
        assert mem.analyzer.model_name == "fr_core_news_sm"
        mem.add_many(FRENCH, user_id="u1")
        (hit,) = keyword_hits(mem, "manger")
        assert hit.text == FRENCH[0]
        hits = mem.search("Qui travaille à Lyon ?", user_id="u1", limit=3)
    assert hits[0].text == FRENCH[1]
    assert hits[0].explain.signals == ("semantic", "keyword", "entity")
    assert [h.name for h in hits[0].explain.entity_hits] == ["lyon"]
    _, _, lexemes = stored(db_dsn)[FRENCH[0]]
    assert "'manger'" in lexemes  # spaCy's lemma, not the Snowball stem "mang"


def test_english_and_german_memories_in_one_scope(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    english = "The old houses by the river were renovated last summer."
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        assert mem.ts_config == "english"
        mem.add(english, user_id="u1")
        mem.add("Caroline moved to Ottawa to work at Shopify", user_id="u1")
        mem.add_many(GERMAN, user_id="u1", ts_config="german")

        (hit,) = keyword_hits(mem, "house renovation")
        assert hit.text == english  # the German memories' lexemes are not English lemmas
        (hit,) = keyword_hits(mem, "Häuser", ts_config="german")
        assert hit.text == GERMAN[0]  # nor the English one's German stems

        # Whole searches in either language: sane results, each with its own signals.
        hits = mem.search("where does Caroline work?", user_id="u1", limit=3)
        assert hits[0].text.startswith("Caroline")
        assert hits[0].explain.signals == ("semantic", "keyword", "entity")
        hits = mem.search("alte Häuser am Fluss", user_id="u1", limit=3, ts_config="german")
        assert GERMAN[0] in [h.text for h in hits]
        assert all(h.explain.signals == ("semantic", "keyword") for h in hits)
        german_hit = next(h for h in hits if h.text == GERMAN[0])
        assert "keyword" in german_hit.explain.legs

        # An English memory re-written in German takes the German configuration.
        memory_id = mem.search("houses river", user_id="u1", limit=1)[0].id
        mem.update(memory_id, text="Die Häuser am Fluss", ts_config="german")
        mem.update(memory_id, metadata={"k": 1})  # no new text: the configuration stays
        (hit,) = keyword_hits(mem, "Haus", ts_config="german", filters={"k": 1})
        assert hit.id == memory_id
    rows = stored(db_dsn)
    assert rows["Die Häuser am Fluss"][:2] == ("german", 2)
    assert rows["Caroline moved to Ottawa to work at Shopify"][0] == "english"


def test_a_configuration_the_database_lacks_is_refused_with_those_it_has(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        with pytest.raises(InvalidInputError, match="klingon.*german.*simple"):
            mem.add("Qapla'", user_id="u1", ts_config="klingon")
        with pytest.raises(InvalidInputError, match="klingon.*french"):
            mem.search("Qapla'", user_id="u1", ts_config="klingon")
        with pytest.raises(InvalidInputError, match="ts_config"):
            mem.search("Qapla'", user_id="u1", ts_config=7)  # type: ignore[arg-type]
        assert mem.get_all(user_id="u1").items == ()  # nothing was written
    with (
        pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, ts_config="klingon") as mem,
        pytest.raises(ConfigurationError, match="klingon.*english"),
    ):
        mem.search("Qapla'", user_id="u1")
    with pytest.raises(ConfigurationError, match="ts_config"):
        pgmem.Memory(db_dsn, ts_config="")


def test_a_configuration_created_later_is_found(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        mem.add("warm up", user_id="u1")  # the list of configurations is read
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute("CREATE TEXT SEARCH CONFIGURATION my_simple (COPY = simple)")
        mem.add("Zebras graze", user_id="u1", ts_config="my_simple")
        (hit,) = keyword_hits(mem, "zebras", ts_config="my_simple")
        assert hit.text == "Zebras graze"


def test_async_memory_takes_the_configuration_per_call(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    async def main() -> list[pgmem.SearchHit]:
        async with pgmem.AsyncMemory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
            await mem.add(GERMAN[0], user_id="u1", ts_config="german")
            return await mem.search(
                "Haus", user_id="u1", legs=["keyword"], threshold=0.0, ts_config="german"
            )

    (hit,) = asyncio.run(main())
    assert hit.text == GERMAN[0]


def test_the_search_statement_names_the_configuration(german: pgmem.Memory) -> None:
    text = german.search_sql("Häuser", user_id="u1")
    assert "'german'" in text and "Häuser" in text
    plan = german.explain_search("Häuser", user_id="u1", analyze=True)
    assert plan["Plan"]


def test_memories_stored_before_the_migration_are_english(empty_db_dsn: str) -> None:
    pgmem.migrate(empty_db_dsn)
    pgmem.downgrade(empty_db_dsn, "0002")
    with psycopg.connect(empty_db_dsn) as conn:
        conn.execute(
            "INSERT INTO pgmem.memories (user_id, text, content_hash, embedding, lexemes,"
            " lexeme_count) VALUES ('u1', 'dogs', 'h', array_fill(0.1, ARRAY[384])::vector,"
            " 'dog:1', 1)"
        )
    pgmem.migrate(empty_db_dsn)
    assert stored(empty_db_dsn)["dogs"][0] == "english"


def test_spacy_models_are_found_by_language() -> None:
    assert languages.spacy_models("french") == (
        "fr_core_news_sm", "fr_core_news_md", "fr_core_news_lg"
    )
    assert languages.spacy_models("simple") == ()
    assert languages.installed_model(["no_such_model_pkg", "json"]) == "json"
    search = languages.Languages("german", None).get()
    assert search.config == "german"
    assert search.by_postgres is not HAS_GERMAN_MODEL
