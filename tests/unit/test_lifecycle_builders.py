"""The lifecycle's pure parts: batch entity tables, insert parameters, cursors, item checks."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from pgmem import builders, validate
from pgmem.errors import InvalidInputError, ScopeError
from pgmem.languages import TextSearch
from pgmem.nlp import Analysis, Entity, TextAnalyzer

PARIS = Entity("paris", "Paris", "GPE")
PARIS_LOWER = Entity("paris", "paris", "PROPN")
JON = Entity("jon", "Jon", "PERSON")


def test_batch_entities_keeps_variants_and_embeds_each_surface_once() -> None:
    analyses = [
        Analysis(("a",), (PARIS, JON)),
        Analysis((), ()),
        Analysis(("b",), (PARIS_LOWER, PARIS)),
    ]
    entities = builders.batch_entities(analyses)
    assert entities.variants == (PARIS, JON, PARIS_LOWER)
    assert entities.occurrences == ((1, 1), (1, 2), (3, 3), (3, 1))
    assert entities.surfaces == ("Paris", "Jon", "paris")


def test_insert_params_line_up_items_and_vectors() -> None:
    items = [
        validate.new_memory("t", "Jon in Paris", {"k": 1}, "u1", None, None),
        validate.new_memory("t", "paris", None, None, "a1", "r1"),
    ]
    analyses = [Analysis(("jon", "paris"), (JON, PARIS)), Analysis(("paris",), (PARIS_LOWER,))]
    entities = builders.batch_entities(analyses)
    # the vectors as embedded for a batch: the texts, then the surface forms
    inputs = ["Jon in Paris", "paris", *entities.surfaces]
    assert inputs == ["Jon in Paris", "paris", "Jon", "Paris", "paris"]
    vectors = np.arange(len(inputs), dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    params = builders.insert_params(
        "t", items, analyses, entities, vectors, dedupe=True,
        text_search=TextSearch("english", TextAnalyzer("blank")),
    )
    assert params["ts_config"] == "english"
    assert params["user_ids"] == ["u1", None] and params["run_ids"] == [None, "r1"]
    assert params["lexemes"] == ["'jon':1 'paris':2", "'paris':1"]
    assert params["lexeme_counts"] == [2, 1]
    assert [v[0] for v in params["embeddings"]] == [0, 1]
    assert params["entity_names"] == ["jon", "paris", "paris"]
    # Each variant's vector is its own surface form's; "paris" the text is row 1, the surface 4.
    assert [v[0] for v in params["entity_embeddings"]] == [2, 3, 4]
    assert params["occurrence_items"] == [1, 1, 2]
    assert params["occurrence_entities"] == [1, 2, 3]
    assert params["content_hashes"][0] == builders.content_hash("Jon in Paris")


def test_cursors_round_trip_and_reject_anything_else() -> None:
    at = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    memory_id = uuid.uuid4()
    cursor = builders.encode_cursor(at, memory_id)
    assert cursor.isascii() and "=" not in cursor
    assert builders.decode_cursor(cursor) == (at, memory_id)
    for bad in (None, 3, "", "%%%", cursor[:-3], "W10", "WyJ4Il0"):
        with pytest.raises(InvalidInputError, match="cursor"):
            builders.decode_cursor(bad)


def test_items_are_checked_with_their_index() -> None:
    checked = validate.items(
        ["a", {"text": "b", "user_id": None, "run_id": "r"}], tenant="t", user_id="u"
    )
    assert [(c.text, c.scope.user_id, c.scope.run_id) for c in checked] == [
        ("a", "u", None), ("b", None, "r")
    ]
    with pytest.raises(ScopeError, match=r"items\[1\]"):
        validate.items(["a", {"text": "b", "user_id": None}], tenant="t", user_id="u")
    with pytest.raises(InvalidInputError, match=r"items\[0\].*'txt'"):
        validate.items([{"txt": "b"}], tenant="t", user_id="u")
    with pytest.raises(InvalidInputError, match="list of texts"):
        validate.items({"text": "a"}, tenant="t", user_id="u")
