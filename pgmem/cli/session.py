"""Where a command's database is (``--dsn``, ``PGMEM_DSN``, libpq's ``PG*``, else the embedded
server), and the :class:`~pgmem.Memory` over it, opened on first use."""

from __future__ import annotations

import argparse
import functools
import os
from typing import TYPE_CHECKING, Any

from pgmem.embedding import SentenceTransformerEmbedder
from pgmem.nlp import TextAnalyzer

if TYPE_CHECKING:
    from pgmem.memory import Memory

LIBPQ_TARGETS = ("PGHOST", "PGDATABASE", "PGSERVICE")


@functools.cache
def load_models() -> tuple[SentenceTransformerEmbedder, TextAnalyzer]:
    """One embedder and one spaCy pipeline per process (each loads on first use)."""
    return SentenceTransformerEmbedder(), TextAnalyzer()


def configured_dsn(dsn: str | None) -> str | None:
    """The DSN to use: ``dsn``, else PGMEM_DSN, else '' (libpq's PG* variables) when PGHOST,
    PGDATABASE or PGSERVICE is set; None when nothing is configured (the embedded server)."""
    if dsn:
        return dsn
    if os.environ.get("PGMEM_DSN"):
        return os.environ["PGMEM_DSN"]
    if any(os.environ.get(name) for name in LIBPQ_TARGETS):
        return ""
    return None


class Session:
    """The database and the :class:`Memory` of one command, opened on first use."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.schema: str = args.schema
        self.tenant: str = args.tenant
        self._dsn = configured_dsn(args.dsn)
        self._embedded: Any = None
        self._memory: Memory | None = None
        self._migrated = False

    @property
    def embedded(self) -> bool:
        """Whether this session runs on pgmem's embedded server."""
        return self._dsn is None

    @property
    def embedded_home(self) -> str | None:
        """The embedded server's data directory, once started."""
        return None if self._embedded is None else str(self._embedded.home)

    def dsn(self, *, migrate: bool = True) -> str:
        """The DSN. With none configured, starts the embedded server and (by default, once)
        migrates it."""
        if self._dsn is not None:
            return self._dsn
        if self._embedded is None:
            from pgmem.embedded import EmbeddedServer

            self._embedded = EmbeddedServer(schema=self.schema)
            self._embedded.start(migrate=False)
        if migrate and not self._migrated:
            self._embedded.migrate()
            self._migrated = True
        dsn: str = self._embedded.dsn
        return dsn

    @staticmethod
    def models() -> tuple[SentenceTransformerEmbedder, TextAnalyzer]:
        """The process's embedder and spaCy pipeline: ``pgmem.cli._models()``, the one place
        tests replace them."""
        from pgmem import cli

        return cli._models()

    def memory(self, *, migrate: bool = True) -> Memory:
        """The Memory for this command's schema and tenant."""
        if self._memory is None:
            from pgmem.memory import Memory

            embedder, analyzer = self.models()
            self._memory = Memory(
                self.dsn(migrate=migrate), embedder=embedder, nlp=analyzer,
                schema=self.schema, tenant=self.tenant,
            )
        return self._memory

    def close(self) -> None:
        """Close the pool, then let go of the embedded server."""
        try:
            if self._memory is not None:
                self._memory.close()
        finally:
            if self._embedded is not None:
                self._embedded.stop()
