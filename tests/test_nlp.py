"""The analysis against the full spaCy pipeline as spaCy loads it: the fast paths (the pipeline
called on one text, its facts read once; the networks multiplying with NumPy on one OpenBLAS
thread) find the same lemmas and entities, alone and in batches, on LoCoMo's questions when
``$PGMEM_LOCOMO`` names its file (benchmarks.dialogues) and on questions written here."""

from __future__ import annotations

import pytest

import pgmem
from benchmarks import dialogues
from pgmem.nlp import DEFAULT_MODELS, Analysis, _entities, lexemes
from pgmem.spacy_ops import _openblas_threads

SAMPLE = 1000  # dev questions compared (of ~1,000): all of them

WRITTEN = [
    "When did Caroline go to the LGBTQ support group?",
    "What advice does Caroline give for getting started with adoption?",
    "Where did Melanie and her kids go camping in July 2023?",
    "What did Jon say about \"The Old Man and the Sea\"?",
    "Which books did the Johnson family read at the Boston Public Library?",
    "How was the trip to São Paulo with Dr. Martínez last week?",
    "dogs running in the park",
    "Did John's sister move to New York City for a job at Google, or stay in Oslo?",
    "What's the name of Gina's dance studio? Is it open on Sundays?",
    "",
]


def questions() -> list[str]:
    found = list(WRITTEN)
    if dialogues.DEFAULT_DATA and dialogues.DEFAULT_DATA.is_file():
        dev = [
            q["question"]
            for c in dialogues.load_conversations(dialogues.DEFAULT_DATA)
            for q in c["questions"]
        ]
        found += dev[:: max(1, len(dev) // SAMPLE)]
    return found


def full_pipeline_analyses(texts: list[str]) -> list[Analysis]:
    """What the analysis was before it was made fast: every component of the model loaded
    (nothing excluded), thinc's own matrix product, the texts through ``nlp.pipe``."""
    spacy = pytest.importorskip("spacy")
    for name in DEFAULT_MODELS:
        try:
            nlp = spacy.load(name)
        except OSError:
            continue
        stop_words = frozenset(nlp.Defaults.stop_words)
        return [
            Analysis(lexemes=lexemes(doc, stop_words), entities=_entities(doc, True))
            for doc in nlp.pipe(texts)
        ]
    pytest.skip("no spaCy model installed")


def test_the_query_analysis_matches_the_full_pipeline(analyzer: pgmem.TextAnalyzer) -> None:
    texts = questions()
    expected = full_pipeline_analyses(texts)
    assert analyzer.entities_available
    fast = [analyzer.analyze(text) for text in texts]
    different = [(t, e, f) for t, e, f in zip(texts, expected, fast) if e != f]
    assert different == []
    assert analyzer.analyze_many(texts) == expected
    # the comparison has something to compare
    assert sum(bool(a.entities) for a in expected) > len(texts) // 4
    assert all(a.lexemes for text, a in zip(texts, expected) if text)


def network_ops(analyzer: pgmem.TextAnalyzer) -> set[str]:
    return {
        type(layer.ops).__name__
        for _name, component in analyzer.nlp.pipeline
        if hasattr(getattr(component, "model", None), "walk")
        for layer in component.model.walk()
    }


def test_the_networks_multiply_with_numpy(analyzer: pgmem.TextAnalyzer) -> None:
    assert network_ops(analyzer) == ({"MatmulOps"} if _openblas_threads() else {"NumpyOps"})


def test_spacy_ops_off_keeps_thincs_networks_and_the_same_analyses(
    analyzer: pgmem.TextAnalyzer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PGMEM_SPACY_OPS=0``: thinc's own products and BLAS threads, the same lemmas and
    entities."""
    monkeypatch.setenv("PGMEM_SPACY_OPS", "0")
    plain = pgmem.TextAnalyzer()
    assert network_ops(plain) == {"NumpyOps"}
    texts = questions()[:40]
    assert [plain.analyze(text) for text in texts] == [analyzer.analyze(t) for t in texts]
    assert plain.analyze_many(texts) == analyzer.analyze_many(texts)
