"""pgmem: memory and hybrid retrieval for AI agents, inside the PostgreSQL you already run."""

from pgmem.aio import AsyncMemory
from pgmem.citus import distribute
from pgmem.embedding import Embedder, OnnxEmbedder, SentenceTransformerEmbedder
from pgmem.errors import (
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    DatabaseError,
    DimensionMismatchError,
    DuplicateError,
    EmbeddingError,
    FilterError,
    FilterLimitError,
    IdTakenError,
    InvalidInputError,
    IsolationError,
    LimitError,
    LockTimeoutError,
    MissingSchemaError,
    ModelMismatchError,
    NotFoundError,
    PgmemError,
    PgvectorError,
    PoolTimeoutError,
    QueryTimeoutError,
    ReplicaUnavailableError,
    SchemaError,
    ScopeError,
    StatementRefusedError,
    UnsafePathError,
)
from pgmem.memory import Memory
from pgmem.migrate import downgrade, migrate
from pgmem.nlp import TextAnalyzer
from pgmem.nlp_process import ProcessAnalyzer
from pgmem.reembedding import ReembedReport, ReembedStatus, abort_reembed, reembed, reembed_status
from pgmem.rerank import CrossEncoderReranker, Reranker
from pgmem.results import (
    AddResult,
    EntityHit,
    Explain,
    Exported,
    HistoryEvent,
    MemoryRecord,
    Page,
    SearchHit,
)
from pgmem.settings import Settings
from pgmem.validate import Limits

__all__ = [
    "AddResult",
    "AsyncMemory",
    "ConfigurationError",
    "ConnectError",
    "ConnectionLostError",
    "CrossEncoderReranker",
    "DatabaseError",
    "DimensionMismatchError",
    "DuplicateError",
    "Embedder",
    "EmbeddingError",
    "EntityHit",
    "Explain",
    "Exported",
    "FilterError",
    "FilterLimitError",
    "HistoryEvent",
    "IdTakenError",
    "InvalidInputError",
    "IsolationError",
    "LimitError",
    "Limits",
    "LockTimeoutError",
    "Memory",
    "MemoryRecord",
    "MissingSchemaError",
    "ModelMismatchError",
    "NotFoundError",
    "OnnxEmbedder",
    "Page",
    "PgmemError",
    "PgvectorError",
    "PoolTimeoutError",
    "ProcessAnalyzer",
    "QueryTimeoutError",
    "ReembedReport",
    "ReembedStatus",
    "ReplicaUnavailableError",
    "Reranker",
    "SchemaError",
    "ScopeError",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "Settings",
    "StatementRefusedError",
    "TextAnalyzer",
    "UnsafePathError",
    "abort_reembed",
    "distribute",
    "downgrade",
    "migrate",
    "reembed",
    "reembed_status",
]


def __getattr__(name: str) -> object:
    """``pgmem.tables`` (SQLAlchemy Core tables of the schema), imported on first use: SQLAlchemy
    is not loaded by ``import pgmem``."""
    if name == "tables":
        import importlib

        return importlib.import_module("pgmem.tables")
    raise AttributeError(f"module 'pgmem' has no attribute {name!r}")
