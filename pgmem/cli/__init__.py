"""The ``pgmem`` command: a thin layer over :class:`pgmem.Memory`, one module per group of
commands.

The database is ``--dsn``, else ``PGMEM_DSN``, else libpq's ``PG*`` variables when PGHOST,
PGDATABASE or PGSERVICE is set, else pgmem's embedded server (:mod:`pgmem.default_database`),
started and migrated on demand: by the background ``pgmem server`` (:mod:`pgmem.cli.background`),
which the first command that works on memories starts, unless ``--no-server`` or
``PGMEM_AUTOSTART=0``. Errors print ``pgmem: error: <message>`` and exit with status 2;
``doctor`` exits with 1 when it finds a problem.

Modules: :mod:`~pgmem.cli.app` (the parser and :func:`main`), :mod:`~pgmem.cli.session`
(where the database is), :mod:`~pgmem.cli.options` (the command registry and shared helpers),
:mod:`~pgmem.cli.catalog` (catalogue reads, SQL in ``sql/catalog.sql``), and one module per
group: :mod:`~pgmem.cli.schema` (migrate), :mod:`~pgmem.cli.memories` (add, search, get, list,
delete, update, history), :mod:`~pgmem.cli.importing`, :mod:`~pgmem.cli.stats`,
:mod:`~pgmem.cli.doctor`, :mod:`~pgmem.cli.demo`. A new group is a module with a
``register(commands)`` function, listed in :data:`pgmem.cli.app.GROUPS`.
"""

from __future__ import annotations

from typing import Any

from pgmem.cli.app import build_parser, main
from pgmem.cli.session import Session
from pgmem.default_database import LIBPQ_TARGETS, configured_dsn


def _models() -> tuple[Any, Any] | None:
    """The embedder and spaCy pipeline the commands' Memory is given (:meth:`Session.models`
    asks here, so that a test can hand the commands models it already loaded); None: the
    Memory makes them from the command's settings, as ``Memory()`` does."""
    return None


__all__ = ["LIBPQ_TARGETS", "Session", "build_parser", "configured_dsn", "main"]
