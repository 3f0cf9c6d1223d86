"""pgmem's configuration in one frozen object: :class:`Settings`.

:meth:`Settings.from_env` is the one place pgmem reads its ``PGMEM_*`` environment variables;
everything else -- :class:`pgmem.Memory`, :class:`pgmem.AsyncMemory`, the ``pgmem`` command,
its background server, the MCP server -- takes a ``Settings`` (or builds one with
``from_env``). ``Memory(dsn, tenant="x")`` still works: its keyword arguments are the
:class:`Options`, which override the settings. docs/configuration.md lists every setting.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, TypeVar

from pgmem.errors import ConfigurationError
from pgmem.migrate import DEFAULT_SCHEMA
from pgmem.validate import MAX_TEXT_LENGTH, Limits

T = TypeVar("T")

#: The default embedder's backends (``PGMEM_EMBEDDING_BACKEND``, ``Memory(embedder=...)``).
EMBEDDING_BACKENDS = ("torch", "onnx", "onnx-int8")
#: How a search analyses its query (``PGMEM_QUERY_ANALYSIS``, ``Memory(query_analysis=)``; see
#: :mod:`pgmem.query_analysis`): spaCy's whole pipeline, as a memory's (``full``); spaCy's tagger
#: without its parser and recogniser, the query's proper-noun runs embedded (``tagged``, the
#: default: the same recall at a lower cost); or spaCy's lookup tables, the query's n-grams
#: looked up among the entity names the scope links (``lookup``, the fastest).
QUERY_ANALYSES = ("full", "tagged", "lookup")
#: Seconds pgmem's own pool may take to connect and fill its minimum.
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Seconds a statement on pgmem's own connections waits for a lock before LockTimeoutError:
#: set on each new connection of the pool, unless the server, role or DSN already sets one.
DEFAULT_LOCK_TIMEOUT = 5.0
#: Seconds a call waits for a free connection of pgmem's pool before PoolTimeoutError.
DEFAULT_POOL_TIMEOUT = 30.0
#: Seconds the background ``pgmem server`` waits without a command before it stops.
DEFAULT_IDLE_TIMEOUT = 900.0
#: ``model_concurrency``'s default: as many calls as this process may use cores.
CORES: Literal["cores"] = "cores"

#: Seconds after a write of a Memory during which its reads go to the primary, not the replica.
DEFAULT_READ_YOUR_WRITES = 5.0
#: Seconds a Memory sends its reads to the primary after its read replica failed.
DEFAULT_REPLICA_RETRY = 30.0
#: What a read does when the read replica fails (``PGMEM_REPLICA_FALLBACK``).
REPLICA_FALLBACKS = ("primary", "error")
#: What stands between pgmem and PostgreSQL (``PGMEM_POOLER``): nothing, or a pooler (PgBouncer,
#: Supavisor, Neon's) that gives each client a server connection for its whole session, or only
#: for each transaction (docs/production.md, "Connection poolers").
POOLERS = ("none", "session", "transaction")

#: The Memory options whose None means the setting's default (see Settings.of_memory).
_NONE_IS_DEFAULT = ("ts_config", "limits", "prepared_statements")
_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off")


class Options(TypedDict, total=False):
    """The keyword arguments ``Memory`` and ``AsyncMemory`` take beside ``db``, ``settings``
    and the model objects: each overrides the :class:`Settings` field of its name."""

    schema: str
    tenant: str
    keyword_score: str
    scoring: str
    max_text_length: int
    pool_max_size: int
    connect_timeout: float
    ts_config: str | None
    query_analysis: str
    lock_timeout: float
    pool_timeout: float
    limits: Limits | None
    # Read replicas (docs/production.md).
    read_dsn: str | None
    read_your_writes: float
    replica_fallback: str
    replica_retry: float
    # Connection poolers (docs/production.md).
    pooler: str
    prepared_statements: bool | None


@dataclass(frozen=True)
class Settings:
    """Every setting of pgmem, with its default. Build one with :meth:`from_env` (the
    environment, then overrides) or directly (the defaults, then the arguments: no environment).
    The fields are checked where they are used (a bad ``tenant`` or ``keyword_score`` raises
    :class:`~pgmem.errors.ConfigurationError` when a Memory is made)."""

    # What a Memory works on and how (Memory's keyword arguments, see Options).
    schema: str = DEFAULT_SCHEMA
    tenant: str = "default"
    keyword_score: str = "bm25"
    scoring: str = "default"
    max_text_length: int = MAX_TEXT_LENGTH
    limits: Limits | None = None
    ts_config: str | None = None  # PGMEM_TS_CONFIG; None: english
    query_analysis: str = "tagged"  # PGMEM_QUERY_ANALYSIS: one of QUERY_ANALYSES
    pool_max_size: int = 10
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    pool_timeout: float = DEFAULT_POOL_TIMEOUT
    # Where the database is.
    dsn: str | None = None  # PGMEM_DSN; None: libpq's PG* variables, else the embedded server
    home: str | None = None  # PGMEM_HOME: the embedded server's data directory
    # The models.
    embedding_backend: str | None = None  # PGMEM_EMBEDDING_BACKEND; None: onnx if installed
    embedding_model: str | None = None  # PGMEM_EMBEDDING_MODEL; None: all-MiniLM-L6-v2
    cache_dir: str | None = None  # PGMEM_CACHE_DIR; None: $XDG_CACHE_HOME/pgmem
    # Another embedder than the default (pgmem.providers, docs/embedders.md).
    embedder: str | None = None  # PGMEM_EMBEDDER: e.g. openai:text-embedding-3-small
    embedder_base_url: str | None = None  # PGMEM_EMBEDDER_BASE_URL: an OpenAI-compatible /v1
    # PGMEM_EMBEDDER_API_KEY; None: OPENAI_API_KEY (read by the client). Kept out of repr().
    embedder_api_key: str | None = dataclasses.field(default=None, repr=False)
    embedder_dimensions: int | None = None  # PGMEM_EMBEDDER_DIMENSIONS: asked of the model
    embedder_query_model: str | None = None  # PGMEM_EMBEDDER_QUERY_MODEL: queries' own model
    embedder_input_types: str | None = None  # PGMEM_EMBEDDER_INPUT_TYPES: "query,document"
    embedder_timeout: float = 30.0  # PGMEM_EMBEDDER_TIMEOUT: seconds a request may take
    spacy_model: str | None = None  # PGMEM_SPACY_MODEL; None: the first installed default
    nlp_process: bool | None = None  # PGMEM_NLP_PROCESS; None: where the embedder overlaps
    spacy_ops: bool = True  # PGMEM_SPACY_OPS: spaCy's networks on NumPy's one-thread BLAS
    model_concurrency: int | None | Literal["cores"] = CORES  # PGMEM_MODEL_CONCURRENCY
    # The command line and its servers.
    autostart: bool = True  # PGMEM_AUTOSTART
    server_idle_timeout: float = DEFAULT_IDLE_TIMEOUT  # PGMEM_SERVER_IDLE_TIMEOUT
    mcp_token: str | None = None  # PGMEM_MCP_TOKEN
    # Read replicas and tracing (docs/production.md).
    read_dsn: str | None = None  # PGMEM_READ_DSN: the replica that searches and reads go to
    read_your_writes: float = DEFAULT_READ_YOUR_WRITES  # PGMEM_READ_YOUR_WRITES
    replica_fallback: str = "primary"  # PGMEM_REPLICA_FALLBACK: "primary" (warns) or "error"
    replica_retry: float = DEFAULT_REPLICA_RETRY  # PGMEM_REPLICA_RETRY
    tracing: bool = True  # PGMEM_TRACING: a span per call when opentelemetry-api is installed
    # Connection poolers (docs/production.md).
    pooler: str = "none"  # PGMEM_POOLER: "none", "session" or "transaction"
    prepared_statements: bool | None = None  # PGMEM_PREPARED_STATEMENTS; None: see prepares

    @property
    def prepares(self) -> bool:
        """Whether pgmem's statements may be prepared on the server (the search's generic
        plan, made once per connection): ``prepared_statements``, else not behind a
        transaction-mode pooler, which hands each transaction to any server connection (one
        that keeps protocol prepared statements -- PgBouncer 1.21+ with
        ``max_prepared_statements`` -- may set ``prepared_statements=True``)."""
        if self.prepared_statements is not None:
            return self.prepared_statements
        return self.pooler != "transaction"

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> Settings:
        """The settings of the environment (``environ``, default ``os.environ``), then
        ``overrides`` (field names; an override of None leaves the field to the environment).

        Raises:
            ConfigurationError: a variable's value is not one the setting takes (the message
                names the variable), or an override names no setting.
        """
        env = os.environ if environ is None else environ
        found: dict[str, Any] = {}
        for field, (variable, parse) in _VARIABLES.items():
            raw = env.get(variable, "").strip()
            if raw:
                found[field] = parse(variable, raw)
        return dataclasses.replace(cls(), **found).replace(**overrides)

    @classmethod
    def of_memory(cls, settings: Settings | None, options: Options) -> Settings:
        """The settings of a ``Memory``: ``settings`` (None: :meth:`from_env`) with its keyword
        ``options`` over them. An option given as None stays None -- and is refused where it
        is checked, as any other bad value -- except ``ts_config``, ``limits`` and
        ``prepared_statements``, whose None is the setting's default.

        Raises:
            ConfigurationError: an option names no setting.
        """
        base = cls.from_env() if settings is None else settings
        given: dict[str, Any] = {
            name: value for name, value in options.items()
            if value is not None or name not in _NONE_IS_DEFAULT
        }
        _check_names(given)
        return dataclasses.replace(base, **given)

    def replace(self, **overrides: Any) -> Settings:
        """These settings with ``overrides`` (None values left out).

        Raises:
            ConfigurationError: an override names no setting.
        """
        _check_names(overrides)
        given = {name: value for name, value in overrides.items() if value is not None}
        return dataclasses.replace(self, **given) if given else self


def _check_names(names: Iterable[str]) -> None:
    unknown = sorted(set(names) - {f.name for f in dataclasses.fields(Settings)})
    if unknown:
        raise ConfigurationError(f"no such setting: {', '.join(unknown)}")


def _text(variable: str, raw: str) -> str:
    return raw


def _flag(variable: str, raw: str) -> bool:
    value = raw.lower()
    if value not in _YES + _NO:
        raise ConfigurationError(
            f"{variable} must be 1 (on) or 0 (off) (or true/false, yes/no), got {raw!r}"
        )
    return value in _YES


def _fallback(variable: str, raw: str) -> str:
    if raw not in REPLICA_FALLBACKS:
        raise ConfigurationError(f"{variable} must be one of {REPLICA_FALLBACKS}, got {raw!r}")
    return raw


def _pooler(variable: str, raw: str) -> str:
    if raw not in POOLERS:
        raise ConfigurationError(f"{variable} must be one of {POOLERS}, got {raw!r}")
    return raw


def _backend(variable: str, raw: str) -> str:
    if raw not in EMBEDDING_BACKENDS:
        raise ConfigurationError(f"{variable} must be one of {EMBEDDING_BACKENDS}, got {raw!r}")
    return raw


def _positive(variable: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"{variable} must be a positive integer, got {raw!r}")
    return value


def _query_analysis(variable: str, raw: str) -> str:
    if raw not in QUERY_ANALYSES:
        raise ConfigurationError(f"{variable} must be one of {QUERY_ANALYSES}, got {raw!r}")
    return raw


def _concurrency(variable: str, raw: str) -> int | None:
    if raw.lower() == "none":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"{variable} must be a positive integer or 'none', got {raw!r}")
    return value


def _seconds(variable: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigurationError(f"{variable} must be a number of seconds (0: never), got {raw!r}")
    return value


#: Each setting read from the environment: its variable, and what makes its value.
_VARIABLES: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "dsn": ("PGMEM_DSN", _text),
    "home": ("PGMEM_HOME", _text),
    "ts_config": ("PGMEM_TS_CONFIG", _text),
    "query_analysis": ("PGMEM_QUERY_ANALYSIS", _query_analysis),
    "embedding_backend": ("PGMEM_EMBEDDING_BACKEND", _backend),
    "embedding_model": ("PGMEM_EMBEDDING_MODEL", _text),
    "cache_dir": ("PGMEM_CACHE_DIR", _text),
    "embedder": ("PGMEM_EMBEDDER", _text),
    "embedder_base_url": ("PGMEM_EMBEDDER_BASE_URL", _text),
    "embedder_api_key": ("PGMEM_EMBEDDER_API_KEY", _text),
    "embedder_dimensions": ("PGMEM_EMBEDDER_DIMENSIONS", _positive),
    "embedder_query_model": ("PGMEM_EMBEDDER_QUERY_MODEL", _text),
    "embedder_input_types": ("PGMEM_EMBEDDER_INPUT_TYPES", _text),
    "embedder_timeout": ("PGMEM_EMBEDDER_TIMEOUT", _seconds),
    "spacy_model": ("PGMEM_SPACY_MODEL", _text),
    "nlp_process": ("PGMEM_NLP_PROCESS", _flag),
    "spacy_ops": ("PGMEM_SPACY_OPS", _flag),
    "model_concurrency": ("PGMEM_MODEL_CONCURRENCY", _concurrency),
    "autostart": ("PGMEM_AUTOSTART", _flag),
    "server_idle_timeout": ("PGMEM_SERVER_IDLE_TIMEOUT", _seconds),
    "mcp_token": ("PGMEM_MCP_TOKEN", _text),
    # Read replicas and tracing.
    "read_dsn": ("PGMEM_READ_DSN", _text),
    "read_your_writes": ("PGMEM_READ_YOUR_WRITES", _seconds),
    "replica_fallback": ("PGMEM_REPLICA_FALLBACK", _fallback),
    "replica_retry": ("PGMEM_REPLICA_RETRY", _seconds),
    "tracing": ("PGMEM_TRACING", _flag),
    # Connection poolers.
    "pooler": ("PGMEM_POOLER", _pooler),
    "prepared_statements": ("PGMEM_PREPARED_STATEMENTS", _flag),
}


def variable_of(field: str) -> str:
    """The environment variable of the setting ``field`` (for messages)."""
    return _VARIABLES[field][0]


def current(settings: Settings | None) -> Settings:
    """``settings``, or the environment's (:meth:`Settings.from_env`) for None."""
    return Settings.from_env() if settings is None else settings
