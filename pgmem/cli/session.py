"""Where a command's database is (``--dsn``, ``PGMEM_DSN``, libpq's ``PG*``, else the embedded
server), and the :class:`~pgmem.Memory` over it, opened on first use."""

from __future__ import annotations

import argparse
import functools
import os
from typing import TYPE_CHECKING, Any

from pgmem.cli import background
from pgmem.cli.background import ServerClient
from pgmem.embedding import SentenceTransformerEmbedder
from pgmem.errors import PgmemError
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
    """The database and the :class:`Memory` of one command, opened on first use.

    With no database configured it uses the background server of ``pgmem server start`` when
    one runs (its PostgreSQL and its loaded models), else starts the embedded server for this
    command alone.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.schema: str = args.schema
        self.tenant: str = "default" if args.tenant is None else args.tenant
        self._dsn = configured_dsn(args.dsn)
        self._embedded: Any = None
        self._background: ServerClient | None = None
        self._looked_for_background = False
        self._memory: Memory | None = None
        self._migrated = False

    @property
    def embedded(self) -> bool:
        """Whether this session runs on pgmem's embedded server."""
        return self._dsn is None

    @property
    def embedded_home(self) -> str | None:
        """The embedded server's data directory, once started (or found running)."""
        if self._background is not None:
            return self._background.state.home
        return None if self._embedded is None else str(self._embedded.home)

    @property
    def background(self) -> ServerClient | None:
        """The running ``pgmem server`` this session uses, if any (embedded sessions only)."""
        if self._dsn is None and not self._looked_for_background:
            self._looked_for_background = True
            from pgmem.embedded import data_home

            state = background.running(data_home())
            if state is not None:
                client = ServerClient(state)
                try:
                    client.info()  # it answers, and its PostgreSQL runs
                except PgmemError:
                    client.close()
                else:
                    self._background = client
        return self._background

    def dsn(self, *, migrate: bool = True) -> str:
        """The DSN. With none configured, the running ``pgmem server``'s, else starts the
        embedded server; either way (by default, once) migrates the schema."""
        if self._dsn is not None:
            return self._dsn
        server = self.background
        if server is not None:
            # The server migrated its own schema when it started.
            if migrate and not self._migrated and self.schema != server.state.schema:
                from pgmem.cli.catalog import schema_dim
                from pgmem.migrate import DEFAULT_DIM
                from pgmem.migrate import migrate as migrate_schema

                dim = schema_dim(server.state.dsn, self.schema) or DEFAULT_DIM
                migrate_schema(server.state.dsn, dim=dim, schema=self.schema)
            self._migrated = True
            return server.state.dsn
        if self._embedded is None:
            from pgmem.embedded import EmbeddedServer

            self._embedded = EmbeddedServer(schema=self.schema)
            self._embedded.start(migrate=False)
        if migrate and not self._migrated:
            self._embedded.migrate()
            self._migrated = True
        dsn: str = self._embedded.dsn
        return dsn

    def models(self) -> tuple[Any, TextAnalyzer]:
        """The embedder and spaCy pipeline: the running ``pgmem server``'s, else this process's
        (``pgmem.cli._models()``, the one place tests replace them)."""
        server = self.background
        if server is not None:
            return background.RemoteEmbedder(server), background.remote_analyzer(server)
        from pgmem import cli

        return cli._models()

    def memory(self, *, migrate: bool = True) -> Memory:
        """The Memory for this command's schema and tenant."""
        if self._memory is None:
            from pgmem.memory import Memory

            dsn = self.dsn(migrate=migrate)
            embedder, analyzer = self.models()
            self._memory = Memory(
                dsn, embedder=embedder, nlp=analyzer, schema=self.schema, tenant=self.tenant,
            )
        return self._memory

    def close(self) -> None:
        """Close the pool, then let go of the embedded server (or the background one)."""
        try:
            if self._memory is not None:
                self._memory.close()
        finally:
            if self._background is not None:
                self._background.close()
            if self._embedded is not None:
                self._embedded.stop()
