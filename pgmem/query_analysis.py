"""A search query's analysis without spaCy's networks (``Settings.query_analysis``).

The entity boost can only reach entities already stored, and names enter the store through a
memory's full analysis (spaCy's tagger, parser and recogniser: ~6 ms a question on one core). So a
query need not be recognised the same way. Three modes (``PGMEM_QUERY_ANALYSIS``):

* ``full``: the query goes through the configuration's spaCy pipeline, as a memory does; its
  recognised entities are embedded and matched by similarity with those the scope links.
* ``lookup``: spaCy's tokenizer and its lookup lemmatizer only (tables from
  spacy-lookups-data; ~0.03 ms). The keyword terms are the tables' lemmas; the query's word
  n-grams (1 to 3 words, normalised as entity names are) are candidate names, which the search
  statement looks up exactly among the entities the scope links (``entities_name_key``); a
  name found counts as similarity 1.
* ``tagged`` (the default): the lookup, and the query's name-like spans (runs of capitalised
  words, acronyms) embedded with the query and matched by similarity like the full analysis's
  entities -- so a name written another way ("NYC") still reaches the stored one
  ("new york city"), which a lookup alone would miss.

A memory's analysis (add, update) is always the full one. The lookup is made per language: a
text search configuration whose language has no lookup table (or with spacy-lookups-data not
installed) has its queries analysed in full.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pgmem.lazy import Lazy
from pgmem.nlp import Analysis, Entity, lexemes, normalize_entity_name

logger = logging.getLogger("pgmem.nlp")

#: The longest word n-gram looked up as an entity name.
MAX_NAME_WORDS = 3
#: At most this many candidate names per query (a long query's first ones).
MAX_QUERY_NAMES = 64
#: At most this many name-like spans are embedded per query (``tagged``).
MAX_NAME_SPANS = 8
# Punctuation inside a name ("jay-z", "at&t", "st. louis"); any other ends the word run.
_INNER_PUNCTUATION = frozenset({"-", "&", "."})
_SENTENCE_END = frozenset({".", "!", "?", ":", ";", '"', "“", "”"})


class LookupAnalyzer:
    """The ``lookup`` (or, with ``tagged``, the ``tagged``) analysis of a query in the language
    ``lang`` (an ISO 639-1 code spaCy knows). The pipeline loads on first use; :meth:`ready`
    says whether it could (spaCy and the language's lookup table installed)."""

    def __init__(self, lang: str = "en", *, tagged: bool = True) -> None:
        self.lang = lang
        self.tagged = tagged
        self._nlp: Lazy[Any] = Lazy(self._load)
        # spaCy's vocabulary is not safe to grow from two threads at once; a call is ~30 us.
        self._lock = threading.Lock()

    def ready(self) -> bool:
        """Whether the lookup pipeline of :attr:`lang` loads (False: analyse queries in full)."""
        return self._nlp.get() is not False

    def analyze(self, text: str) -> Analysis:
        """The query's lookup lemmas, its candidate names (:attr:`Analysis.names`) and, with
        :attr:`tagged`, its name-like spans as entities (label ``NAME``) to embed."""
        nlp = self._nlp.get()
        if nlp is False:
            raise RuntimeError(f"no lookup table for {self.lang!r}: check ready() first")
        with self._lock:
            doc = nlp(text)
            stop_words = nlp.Defaults.stop_words
            spans = name_spans(doc) if self.tagged else ()
            embedded = {entity.name for entity in spans}
            names = tuple(n for n in candidate_names(doc, stop_words) if n not in embedded)
            return Analysis(lexemes=lexemes(doc, stop_words), entities=spans, names=names)

    def _load(self) -> Any:
        try:
            import spacy

            from pgmem.nlp import lookup_pipeline

            return lookup_pipeline(spacy, self.lang)
        except (ValueError, ImportError, OSError) as exc:
            logger.warning(
                "no spaCy lookup table for %r (%s): its queries are analysed in full",
                self.lang, exc,
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


def _name_like(token: Any) -> bool:
    """A capitalised word or an acronym, not a stop word ("What", "I")."""
    text = token.text
    return (
        text[:1].isupper() and any(c.isalpha() for c in text) and not token.is_stop
        and not token.like_num
    )


def name_spans(doc: Any) -> tuple[Entity, ...]:
    """The doc's name-like spans: runs of capitalised words or acronyms -- a sentence's first
    word only when written in capitals (``NYC``), since any first word is capitalised -- each
    normalised as entity names are; at most :data:`MAX_NAME_SPANS`."""
    found: dict[str, Entity] = {}
    run: list[Any] = []
    previous = None
    for token in [*doc, None]:
        first = previous is None or previous.text in _SENTENCE_END
        if token is not None and _name_like(token) and (
            not first or token.is_upper and len(token.text) > 1 or run
        ):
            run.append(token)
        else:
            if run:
                surface = doc[run[0].i : run[-1].i + 1].text
                name = normalize_entity_name(surface)
                if len(name) > 1 and name not in found:
                    found[name] = Entity(name=name, surface=surface, label="NAME")
            run = []
        previous = token
    return tuple(found.values())[:MAX_NAME_SPANS]
