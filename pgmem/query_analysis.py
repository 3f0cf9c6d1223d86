"""A search query's analysis at less than spaCy's full cost (``Settings.query_analysis``).

The entity boost can only reach entities already stored, and names enter the store through a
memory's full analysis (spaCy's tagger, parser and recogniser: ~6 ms a question on one core).
So a query need not be recognised the same way. Three modes (``PGMEM_QUERY_ANALYSIS``):

* ``full``: the query goes through the configuration's spaCy pipeline, as a memory does; its
  recognised entities and proper-noun runs are embedded and matched by similarity with the
  entities the scope links.
* ``tagged`` (the default): the pipeline without its parser and recogniser (about a third of
  the cost), beside the query's embedding as the full analysis runs: the same lemmas (the
  tagger's parts of speech), and its proper-noun runs (and quoted strings) embedded and matched
  by similarity, so that a name written another way ("NYC") still reaches the stored one
  ("new york city"); a capitalised word the tagger calls a common noun (a name alone, as in
  the query "Kowalski") is looked up by name, as the lookup's n-grams are. Its recall on the dev
  file is the full analysis's (docs/retrieval.md).
* ``lookup``: no spaCy model at all: spaCy's tokenizer and its lookup lemmatizer (tables from
  spacy-lookups-data; ~0.1 ms), whose lemmas differ from the tagger's for words such as
  "camping" (``camp``); and the query's word n-grams (1 to 3 words, normalised as entity names
  are) as candidate names, which the search statement looks up by name (``entities_name_key``)
  among the entities the scope links: a name found counts as similarity 1. Nothing is embedded
  but the query, so "NYC" no longer reaches "new york city".

The tagged analysis does not add the lookup: on the LoCoMo dev turns, words that are also
stored entity names ("support group") cost it 0.8 points of recall@10. A memory's analysis
(add, update) is always the full one. The lookup is made per language: a text search configuration
whose language has no lookup table (or without spacy-lookups-data) has its queries analysed in
full.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pgmem.lazy import Lazy
from pgmem.nlp import Analysis, lexemes, lookup_pipeline, normalize_entity_name

logger = logging.getLogger("pgmem.nlp")

#: The longest word n-gram looked up as an entity name.
MAX_NAME_WORDS = 3
#: At most this many candidate names per query (a long query's first ones).
MAX_QUERY_NAMES = 64
# Punctuation inside a name ("jay-z", "at&t", "st. louis"); any other ends the word run.
_INNER_PUNCTUATION = frozenset({"-", "&", "."})


class LookupAnalyzer:
    """A query's lookup analysis in the language ``lang`` (an ISO 639-1 code spaCy knows);
    ``tagged``: the query is analysed by the tagger instead, and this object only says so. The
    lookup pipeline loads on first use, once per process and language (every ``Memory`` shares
    it: ~0.3 s and its tables' memory); :meth:`ready` says whether it could (spaCy and the
    language's lookup table installed)."""

    def __init__(self, lang: str = "en", *, tagged: bool = True) -> None:
        self.lang = lang
        self.tagged = tagged

    def ready(self) -> bool:
        """Whether queries take this analysis (False: analyse them in full): always for the
        tagged one, which needs no lookup table; for the lookup, whether the pipeline of
        :attr:`lang` loads."""
        return self.tagged or _lookup_pipeline(self.lang).get() is not False

    def analyze(self, text: str) -> Analysis:
        """The query's lookup lemmas and its candidate names (:attr:`Analysis.names`); no
        entities to embed."""
        nlp = _lookup_pipeline(self.lang).get()
        if nlp is False:
            raise RuntimeError(f"no lookup table for {self.lang!r}: check ready() first")
        with _LOOKUP_LOCK:
            doc = nlp(text)
            stop_words = nlp.Defaults.stop_words
            return Analysis(
                lexemes=lexemes(doc, stop_words), entities=(),
                names=candidate_names(doc, stop_words),
            )


# The lookup pipelines of this process, by language, made on first use. spaCy's vocabulary is
# not safe to grow from two threads at once: one lock for every call (~0.1 ms each).
_LOOKUP_PIPELINES: dict[str, Lazy[Any]] = {}
_LOOKUP_LOCK = threading.Lock()


def _lookup_pipeline(lang: str) -> Lazy[Any]:
    """The process's lookup pipeline of ``lang`` (False once it failed to load)."""
    with _LOOKUP_LOCK:
        pipeline = _LOOKUP_PIPELINES.get(lang)
        if pipeline is None:
            pipeline = _LOOKUP_PIPELINES[lang] = Lazy(lambda: _load(lang))
        return pipeline


def _load(lang: str) -> Any:
    try:
        import spacy

        return lookup_pipeline(spacy, lang)
    except (ValueError, ImportError, OSError) as exc:
        logger.warning(
            "no spaCy lookup table for %r (%s): its queries are analysed in full", lang, exc,
        )
        return False  # not None: Lazy would try again on every call


def _word_runs(doc: Any) -> list[list[Any]]:
    """The doc's tokens in runs that no punctuation breaks (but a name's own: see
    :data:`_INNER_PUNCTUATION`, with no space before it)."""
    runs: list[list[Any]] = [[]]
    for token in doc:
        inner = token.text in _INNER_PUNCTUATION and not token.whitespace_ and token.i > 0 \
            and not doc[token.i - 1].whitespace_
        if token.is_space or (token.is_punct and not inner):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(token)
    return [run for run in runs if run]


def candidate_names(doc: Any, stop_words: frozenset[str] | set[str]) -> tuple[str, ...]:
    """The doc's word n-grams (1 to :data:`MAX_NAME_WORDS` words within a run of words, neither
    first nor last a stop word or punctuation), normalised as stored entity names are
    (:func:`~pgmem.nlp.normalize_entity_name`), in text order, without numbers alone; at most
    :data:`MAX_QUERY_NAMES`."""

    def edge(token: Any) -> bool:
        return bool(token.is_punct or token.is_stop or token.lower_ in stop_words)

    found: dict[str, None] = {}
    for run in _word_runs(doc):
        for start, first in enumerate(run):
            if edge(first):
                continue
            words = 0
            for last in run[start:]:
                words += not last.is_punct
                if words > MAX_NAME_WORDS:
                    break
                if edge(last):
                    continue
                name = normalize_entity_name(doc[first.i : last.i + 1].text)
                if name and not name.isdigit():
                    found.setdefault(name)
                    if len(found) >= MAX_QUERY_NAMES:
                        return tuple(found)
    return tuple(found)
