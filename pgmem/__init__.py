"""pgmem: memory and hybrid retrieval for AI agents, inside the PostgreSQL you already run."""

from pgmem.aio import AsyncMemory
from pgmem.embedding import Embedder, OnnxEmbedder, SentenceTransformerEmbedder
from pgmem.errors import (
    ConfigurationError,
    ConnectionLostError,
    DatabaseError,
    DimensionMismatchError,
    EmbeddingError,
    FilterError,
    IdTakenError,
    InvalidInputError,
    IsolationError,
    LockTimeoutError,
    MissingSchemaError,
    ModelMismatchError,
    NotFoundError,
    PgmemError,
    PgvectorError,
    QueryTimeoutError,
    SchemaError,
    ScopeError,
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
    HistoryEvent,
    MemoryRecord,
    Page,
    SearchHit,
)

__all__ = [
    "AddResult",
    "AsyncMemory",
    "ConfigurationError",
    "ConnectionLostError",
    "CrossEncoderReranker",
    "DatabaseError",
    "DimensionMismatchError",
    "Embedder",
    "EmbeddingError",
    "EntityHit",
    "Explain",
    "FilterError",
    "HistoryEvent",
    "IdTakenError",
    "InvalidInputError",
    "IsolationError",
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
    "ProcessAnalyzer",
    "QueryTimeoutError",
    "ReembedReport",
    "ReembedStatus",
    "Reranker",
    "SchemaError",
    "ScopeError",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "TextAnalyzer",
    "abort_reembed",
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
