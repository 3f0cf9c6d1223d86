"""pgmem: memory and hybrid retrieval for AI agents, inside the PostgreSQL you already run."""

from pgmem.embedding import Embedder, SentenceTransformerEmbedder
from pgmem.errors import (
    ConfigurationError,
    DatabaseError,
    DimensionMismatchError,
    EmbeddingError,
    FilterError,
    InvalidInputError,
    NotFoundError,
    PgmemError,
    PgvectorError,
    SchemaError,
    ScopeError,
)
from pgmem.memory import Memory
from pgmem.migrate import downgrade, migrate
from pgmem.nlp import TextAnalyzer
from pgmem.rerank import CrossEncoderReranker, Reranker
from pgmem.results import EntityHit, Explain, MemoryRecord, SearchHit

__all__ = [
    "ConfigurationError",
    "CrossEncoderReranker",
    "DatabaseError",
    "DimensionMismatchError",
    "Embedder",
    "EmbeddingError",
    "EntityHit",
    "Explain",
    "FilterError",
    "InvalidInputError",
    "Memory",
    "MemoryRecord",
    "NotFoundError",
    "PgmemError",
    "PgvectorError",
    "Reranker",
    "SchemaError",
    "ScopeError",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "TextAnalyzer",
    "downgrade",
    "migrate",
]
