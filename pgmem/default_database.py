"""Where pgmem's database is when the caller names none -- one choice for the command line and
for :class:`pgmem.Memory` / :class:`pgmem.AsyncMemory`:

1. a DSN given (``--dsn``, ``Memory(dsn)``), else ``PGMEM_DSN``, else libpq's ``PG*`` variables
   when ``PGHOST``, ``PGDATABASE`` or ``PGSERVICE`` is set (:func:`configured_dsn`);
2. else the embedded default (:class:`DefaultDatabase`): the PostgreSQL of the running
   ``pgmem server`` when there is one, else a private one that :class:`~pgmem.embedded_server.
   EmbeddedServer` starts in pgmem's data directory and stops when the last user lets go.

Both are the same cluster (the data directory's), so memories written through one are there
for the other.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TypeVar

from pgmem import server_state
from pgmem.embedded_server import EmbeddedServer, data_home
from pgmem.migrate import DEFAULT_SCHEMA
from pgmem.settings import Settings, current

LIBPQ_TARGETS = ("PGHOST", "PGDATABASE", "PGSERVICE")

T = TypeVar("T")

logger = logging.getLogger(__name__)

# What this process was told about the embedded default: each kind once.
_told: set[str] = set()
_told_lock = threading.Lock()


def configured_dsn(dsn: str | None, settings: Settings | None = None) -> str | None:
    """The DSN to use: ``dsn``, else the settings' (``PGMEM_DSN``; ``settings`` None: the
    environment's), else '' (libpq's PG* variables) when PGHOST, PGDATABASE or PGSERVICE is
    set; None when nothing is configured (the embedded default)."""
    if dsn:
        return dsn
    configured = current(settings).dsn
    if configured:
        return configured
    if any(os.environ.get(name) for name in LIBPQ_TARGETS):
        return ""
    return None


def source(db: T, settings: Settings) -> T | str | DefaultDatabase:
    """What a facade connects to: ``db``; when it is None, the settings' DSN (see
    :func:`configured_dsn`), or when nothing is configured the embedded default for the
    settings' schema."""
    if db is not None:
        return db
    dsn = configured_dsn(None, settings)
    if dsn is None:
        return DefaultDatabase(settings.schema, home=data_home(settings))
    return dsn


def running_server(home: Path | None = None) -> server_state.ServerState | None:
    """The running ``pgmem server`` of ``home`` (None: pgmem's data directory), if any."""
    return server_state.running(data_home() if home is None else home)


def _tell(state: server_state.ServerState | None, home: object) -> None:
    """Say in the log, once a process, which embedded default a Memory uses."""
    kind = "private" if state is None else "server"
    with _told_lock:
        if kind in _told:
            return
        _told.add(kind)
    unset = "no database configured (PGMEM_DSN, PGHOST, PGDATABASE, PGSERVICE)"
    if state is None:
        logger.warning(
            "pgmem: %s; started a private embedded PostgreSQL (data in %s), stopped when the "
            "Memory closes", unset, home,
        )
    else:
        logger.info(
            "pgmem: %s; using the PostgreSQL of the running pgmem server (pid %d, data in %s)",
            unset, state.pid, home,
        )


class DefaultDatabase:
    """The embedded default, started on first use: :meth:`dsn` joins the PostgreSQL of the
    running ``pgmem server`` (so that it stays up while this object holds it, even if the
    server stops), or else starts a private one in pgmem's data directory; either way it
    migrates ``schema`` and says once in the log which it used (unless not ``log``: the
    command line says it its own way). :meth:`close` lets go (the
    private server stops when no other process uses it); a later :meth:`dsn` starts again.

    Raises (from :meth:`dsn`):
        ConfigurationError: the embedded server is not installed (``pgmem[embedded]``), or
            the data directory is unusable.
        DatabaseError: the server did not start.
    """

    def __init__(
        self, schema: str = DEFAULT_SCHEMA, *, log: bool = True, home: Path | None = None
    ) -> None:
        self.schema = schema
        self._log = log
        self.home = data_home() if home is None else home
        self._server: EmbeddedServer | None = None
        self._migrated = False
        self._lock = threading.Lock()

    def dsn(self, *, migrate: bool = True) -> str:
        """The DSN of the embedded default's ``pgmem`` database (with ``migrate``, the schema
        migrated), starting or joining the server on first use."""
        with self._lock:
            if self._server is None:
                state = running_server(self.home)
                server = EmbeddedServer(self.home, schema=self.schema)
                server.start(migrate=False)
                self._server = server
                if self._log:
                    _tell(state, self.home)
            if migrate and not self._migrated:
                self._server.migrate()
                self._migrated = True
            return self._server.dsn

    def close(self) -> None:
        """Let go of the server (a private one stops when no other process uses it)."""
        with self._lock:
            server, self._server = self._server, None
            self._migrated = False
        if server is not None:
            server.stop()
