"""The fused token-to-vector forward (pgmem.spacy_tok2vec) gives the vectors thinc's layers give,
to the bit, for one text and for batches, and steps aside where it does not apply."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pgmem
from pgmem.nlp import DEFAULT_MODELS
from pgmem.spacy_ops import use_numpy_matmul
from pgmem.spacy_tok2vec import use_fused_tok2vec

TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "Melanie: I made something to catch the eye, with colors and patterns from the lake!",
    "How was the trip to São Paulo with Dr. Martínez last week?",
    "ok",
    "Inventory code XJ-4471 belongs to the blue storage crate in the basement.",
]


@pytest.fixture(scope="module")
def pipelines() -> tuple[Any, Any]:
    """(thinc's layers, the fused forward): the same model as spaCy loads it (with NumPy's
    product, as pgmem's) and as pgmem's analyzer loads it."""
    spacy = pytest.importorskip("spacy")
    for name in DEFAULT_MODELS:
        try:
            thinc = spacy.load(name, exclude=["senter"])
        except OSError:
            continue
        use_numpy_matmul(thinc)
        fused = pgmem.TextAnalyzer(name).nlp
        # pgmem's loading fused both: the shared network and the recogniser's own
        assert all(hasattr(network._func, "thinc_forward") for network in networks(fused))
        return thinc, fused
    pytest.skip("no spaCy model installed")


def networks(nlp: Any) -> list[Any]:
    """The pipeline's token-to-vector networks: the shared one and the recogniser's."""
    ner_tok2vec = nlp.get_pipe("ner").model.get_ref("tok2vec").layers[0]
    return [nlp.get_pipe("tok2vec").model, ner_tok2vec]


def same_vectors(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_the_fused_forward_gives_thinc_s_vectors(pipelines: tuple[Any, Any]) -> None:
    thinc, fused = pipelines
    docs = [thinc.make_doc(text) for text in TEXTS]
    for slow, fast in zip(networks(thinc), networks(fused)):
        assert fast._func is not slow._func
        for doc in docs:
            assert same_vectors(slow.predict([doc]), fast.predict([doc]))
        # a batch: the texts laid out with thinc's padding between them
        assert same_vectors(slow.predict(docs), fast.predict(docs))


def test_it_steps_aside_for_empty_texts_and_training(pipelines: tuple[Any, Any]) -> None:
    thinc, fused = pipelines
    docs = [thinc.make_doc(text) for text in ("", TEXTS[0], "")]
    for slow, fast in zip(networks(thinc), networks(fused)):
        assert same_vectors(slow.predict(docs), fast.predict(docs))
        vectors, backprop = fast.begin_update([thinc.make_doc(TEXTS[1])])
        assert backprop([np.ones_like(v) for v in vectors]) == []  # thinc's own backward ran


def test_only_networks_of_the_standard_layout_are_changed(pipelines: tuple[Any, Any]) -> None:
    _thinc, fused = pipelines
    changed = [
        (name, layer.name)
        for name, component in fused.pipeline
        if hasattr(getattr(component, "model", None), "walk")
        for layer in component.model.walk()
        if getattr(layer._func, "__qualname__", "").startswith("_fused_forward")
    ]
    assert [name for name, _ in changed] == ["tok2vec", "ner"]
    assert use_fused_tok2vec(fused) == 2  # pgmem fused them on loading: not wrapped twice
    assert all(not getattr(layer._func, "thinc_forward", None).__qualname__.startswith(
        "_fused_forward") for layer in networks(fused))
