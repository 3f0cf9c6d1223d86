"""Text search configurations: the language a memory's keyword lexemes are made in, and by whom.

A configuration is a PostgreSQL text search configuration (``pg_ts_config``): ``english`` (the
default), ``simple``, ``german``, ``french``... ``Memory(ts_config=...)`` (or ``PGMEM_TS_CONFIG``)
chooses it for every call, a call's ``ts_config=`` for that call. Each memory records the
configuration its lexemes were made in (``memories.ts_config``), and a search matches its keywords
only against memories of its own configuration: lexemes of two analyzers are different strings
("häuser" is ``haus`` for one and ``häuser`` for another), so comparing them would be chance.

Who makes the lexemes of a configuration, for the memories and for the query alike:

* a spaCy pipeline, when one for its language is installed: lemmas, as for English, and entities
  from the pipeline's recogniser. English keeps :class:`~pgmem.nlp.TextAnalyzer`'s models (and
  its lookup-lemma fallback); another language uses the first installed of
  ``<code>_core_news_sm``, ``_md``, ``_lg`` (``fr_core_news_sm`` for ``french``);
* otherwise PostgreSQL itself, ``to_tsvector(config, text)``, inside the statements that store
  and search: the configuration's own dictionaries (Snowball stemmers and stop words for the
  built-in languages, none for ``simple``). No entities are extracted then: the entity signal is
  off for such a search, and its results say why.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pgmem.errors import ConfigurationError, InvalidInputError, PgmemError
from pgmem.nlp import Analysis, TextAnalyzer
from pgmem.nlp_process import make_analyzer
from pgmem.query_analysis import LookupAnalyzer
from pgmem.settings import Settings, current
from pgmem.validate import unstorable

DEFAULT_TS_CONFIG = "english"
#: The longest configuration name PostgreSQL can hold (schema-qualified: two identifiers).
MAX_NAME_LENGTH = 2 * 63 + 1

# ISO 639-1 codes of PostgreSQL's built-in configurations, to find a spaCy model by its
# package name (spaCy's are `<code>_core_news_<size>`; English is TextAnalyzer's business).
LANGUAGE_CODES = {
    "arabic": "ar", "armenian": "hy", "basque": "eu", "catalan": "ca", "danish": "da",
    "dutch": "nl", "finnish": "fi", "french": "fr", "german": "de", "greek": "el",
    "hindi": "hi", "hungarian": "hu", "indonesian": "id", "irish": "ga", "italian": "it",
    "lithuanian": "lt", "nepali": "ne", "norwegian": "nb", "portuguese": "pt",
    "romanian": "ro", "russian": "ru", "serbian": "sr", "spanish": "es", "swedish": "sv",
    "tamil": "ta", "turkish": "tr", "yiddish": "yi",
}
MODEL_SIZES = ("sm", "md", "lg")

#: ``Memory(nlp=...)``: English's analyzer (a :class:`TextAnalyzer` or a spaCy model name), or
#: an analyzer per configuration name (``{"english": ..., "french": "fr_core_news_md"}``).
Analyzers = TextAnalyzer | str | Mapping[str, TextAnalyzer | str] | None


def spacy_models(config: str) -> tuple[str, ...]:
    """The spaCy package names that can lemmatize ``config``'s language, in order of preference
    (none for ``simple`` or a configuration of the database's own)."""
    code = LANGUAGE_CODES.get(config)
    return tuple(f"{code}_core_news_{size}" for size in MODEL_SIZES) if code else ()


def installed_model(names: Iterable[str]) -> str | None:
    """The first of ``names`` installed as a Python package, without importing it."""
    for name in names:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def check_name(
    value: object, what: str = "ts_config", error: type[PgmemError] = InvalidInputError
) -> str:
    """A configuration name's form (whether the database has it is checked by
    :meth:`Languages.check`). Raises ``error``."""
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_NAME_LENGTH
        or unstorable(value) is not None
    ):
        raise error(
            f"{what} must be the name of a PostgreSQL text search configuration "
            f"(e.g. 'english', 'simple', 'german'), got {value!r:.80}"
        )
    return value


@dataclass(frozen=True)
class TextSearch:
    """How one call's keyword lexemes are made: the configuration they belong to, and the spaCy
    ``analyzer`` that makes them -- or None: PostgreSQL makes them, ``to_tsvector(config, ...)``
    in the statement (the query's too)."""

    config: str
    analyzer: TextAnalyzer | None
    #: How a query is analysed instead of by ``analyzer`` (``Settings.query_analysis`` lookup
    #: or tagged; None: full, as a memory is). See :meth:`query_analyzer`.
    lookup: LookupAnalyzer | None = None

    def query_analyzer(self) -> LookupAnalyzer | None:
        """The lookup analyzer a search's query goes to, when there is one and its language's
        table loads; None: the query is analysed as a memory is (:meth:`analyze_many_later`)."""
        return self.lookup if self.lookup is not None and self.lookup.ready() else None

    @property
    def by_postgres(self) -> bool:
        """Whether PostgreSQL makes the lexemes (no spaCy model for the language)."""
        return self.analyzer is None

    @property
    def entities_available(self) -> bool:
        """Whether entities can be recognised in this configuration's texts."""
        return self.analyzer is not None and self.analyzer.entities_available

    @property
    def entity_note(self) -> str:
        """Why the entity signal is off, when it is (see :attr:`entities_available`)."""
        if self.analyzer is None:
            return (
                f"no spaCy model for text search configuration {self.config!r} (lexemes by "
                "PostgreSQL): entity signal off"
            )
        return "no spaCy model with entity recognition: entity signal off"

    def analyze_many(self, texts: list[str]) -> list[Analysis]:
        """The analyses of ``texts``: spaCy's, or -- lexemes made by PostgreSQL -- empty ones."""
        if self.analyzer is None:
            return [Analysis(lexemes=(), entities=()) for _ in texts]
        return self.analyzer.analyze_many(texts, batch_size=max(len(texts), 1))

    def analyze(self, text: str) -> Analysis:
        """The analysis of one text (see :meth:`analyze_many`)."""
        if self.analyzer is None:
            return Analysis(lexemes=(), entities=())
        return self.analyzer.analyze(text)

    def analyze_tagged_later(self, text: str) -> Callable[[], Analysis]:
        """What returns a query's tagged analysis
        (:meth:`~pgmem.nlp.TextAnalyzer.analyze_tagged`; see :meth:`analyze_many_later`)."""
        if self.analyzer is None:
            return lambda: Analysis(lexemes=(), entities=())
        return self.analyzer.analyze_tagged_later(text)

    @property
    def runs_apart(self) -> bool:
        """Whether the analyses run in another process (see :meth:`analyze_many_later`)."""
        return self.analyzer is not None and self.analyzer.runs_apart

    def analyze_many_later(self, texts: list[str]) -> Callable[[], list[Analysis]]:
        """What returns :meth:`analyze_many`'s analyses: started now where they
        :attr:`runs_apart`, else run when it is called. It must be called."""
        if self.analyzer is None:
            return functools.partial(self.analyze_many, texts)
        return self.analyzer.analyze_many_later(texts, batch_size=max(len(texts), 1))


class Languages:
    """The :class:`TextSearch` of each configuration a ``Memory`` uses, made on first use.

    ``default`` is the Memory's configuration (None: ``settings.ts_config``, else ``english``;
    ``settings`` None: the environment's, whose ``PGMEM_TS_CONFIG`` and spaCy settings apply).
    ``analyzers`` (see :data:`Analyzers`) are English's analyzer, or one per configuration;
    a configuration without one given uses, for English, the default spaCy model, for another
    language its installed spaCy model, else PostgreSQL; those analyzers run spaCy in a process
    of their own where ``apart()`` says so (None: never), asked when one is made (it may load
    the embedder's library: torch is asked how many threads it runs;
    :func:`~pgmem.nlp_process.make_analyzer`). Nothing loads a model here.
    """

    def __init__(
        self, default: str | None, analyzers: Analyzers, *,
        apart: Callable[[], bool] | None = None, settings: Settings | None = None,
    ) -> None:
        self._settings = current(settings)
        self.default = check_name(
            default if default is not None
            else self._settings.ts_config or DEFAULT_TS_CONFIG,
            "Memory(ts_config=...)", ConfigurationError,
        )
        if analyzers is None:
            self._given: dict[str, TextAnalyzer | str] = {}
        elif isinstance(analyzers, (TextAnalyzer, str)):
            self._given = {DEFAULT_TS_CONFIG: analyzers}
        elif isinstance(analyzers, Mapping) and all(
            isinstance(k, str) and isinstance(v, (TextAnalyzer, str))
            for k, v in analyzers.items()
        ):
            self._given = dict(analyzers)
        else:
            raise ConfigurationError(
                "nlp must be a TextAnalyzer, a spaCy model name, or a dict of them by text "
                f"search configuration, got {type(analyzers).__name__}"
            )
        self._apart = apart
        self._own: list[TextAnalyzer] = []
        self._lock = threading.Lock()
        self._searches: dict[str, TextSearch] = {}
        self._lookups: dict[str, LookupAnalyzer] = {}
        self._available: frozenset[str] = frozenset()

    @property
    def english(self) -> TextAnalyzer:
        """The analyzer of English texts (the Memory's own analyzer when English is its
        configuration)."""
        analyzer = self.get(DEFAULT_TS_CONFIG).analyzer
        assert analyzer is not None  # English always has one: TextAnalyzer falls back to blank
        return analyzer

    def get(self, config: str | None = None) -> TextSearch:
        """The :class:`TextSearch` of ``config`` (None: the default). Its name must have been
        checked (:meth:`check`) for a database."""
        name = self.default if config is None else config
        with self._lock:
            if name not in self._searches:
                analyzer = self._analyzer(name)
                self._searches[name] = TextSearch(
                    name, analyzer, None if analyzer is None else self._lookup(name)
                )
            return self._searches[name]

    def known(self, config: str) -> bool:
        """Whether the database was seen to have ``config`` (see :meth:`remember`)."""
        return config in self._available

    def remember(self, available: Iterable[str]) -> None:
        """The configurations the database has (``text_search_configs``)."""
        self._available = frozenset(available)

    def check(self, config: str) -> str:
        """``config`` when the database has it; else ConfigurationError for the Memory's own
        configuration, InvalidInputError for a call's, naming those it has."""
        if config in self._available:
            return config
        problem = (
            f"PostgreSQL has no text search configuration {config!r}; it has: "
            f"{', '.join(sorted(self._available))}"
        )
        if config == self.default:
            raise ConfigurationError(f"Memory(ts_config=...): {problem}")
        raise InvalidInputError(f"ts_config: {problem}")

    def _analyzer(self, config: str) -> TextAnalyzer | None:
        given = self._given.get(config)
        if given is not None:
            return given if isinstance(given, TextAnalyzer) else self._made(given)
        if config == DEFAULT_TS_CONFIG:
            return self._made(None)
        model = installed_model(spacy_models(config))
        return None if model is None else self._made(model)

    def _lookup(self, config: str) -> LookupAnalyzer | None:
        """The lookup analyzer of ``config``'s queries (``Settings.query_analysis``), one per
        language; None for ``full`` or a configuration of no known language."""
        mode = self._settings.query_analysis
        lang = "en" if config == DEFAULT_TS_CONFIG else LANGUAGE_CODES.get(config)
        if mode == "full" or lang is None:
            return None
        if lang not in self._lookups:
            self._lookups[lang] = LookupAnalyzer(lang, tagged=mode == "tagged")
        return self._lookups[lang]

    def _made(self, model: str | None) -> TextAnalyzer:
        analyzer = make_analyzer(
            model, apart=self._apart is not None and self._apart(), settings=self._settings
        )
        self._own.append(analyzer)
        return analyzer

    def close(self) -> None:
        """Stop the spaCy processes of the analyzers made here (an analyzer passed in is the
        caller's); one used again starts another."""
        with self._lock:
            for analyzer in self._own:
                analyzer.close()
