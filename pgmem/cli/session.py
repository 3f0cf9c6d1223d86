"""Where a command's database is (``--dsn``, ``PGMEM_DSN``, libpq's ``PG*``, else the embedded
default: :mod:`pgmem.default_database`), and the :class:`~pgmem.Memory` over it, opened on first
use. With the embedded default, a command that works on memories starts the background
``pgmem server`` when none runs (unless ``--no-server`` or ``PGMEM_AUTOSTART=0``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from pgmem import server_state
from pgmem.cli import background
from pgmem.cli.background import ServerClient
from pgmem.default_database import DefaultDatabase, configured_dsn
from pgmem.embedded_server import data_home
from pgmem.errors import PgmemError, UnsafePathError
from pgmem.settings import Settings, variable_of

if TYPE_CHECKING:
    from pgmem.memory import Memory
    from pgmem.model_work import ModelWork

AUTOSTART_ENV = variable_of("autostart")


def settings_of(args: argparse.Namespace) -> Settings:
    """A command's settings: the environment's, with ``--dsn``, ``--read-dsn``, ``--schema``
    and ``--tenant`` (those given) over them."""
    return Settings.from_env(
        dsn=getattr(args, "dsn", None) or None, schema=getattr(args, "schema", None),
        tenant=getattr(args, "tenant", None),
        read_dsn=getattr(args, "read_dsn", None) or None,
    )


def autostart_off(args: argparse.Namespace, settings: Settings) -> bool:
    """Whether ``--no-server`` or ``PGMEM_AUTOSTART=0`` (or false, no, off) turned the
    background server's autostart off."""
    return bool(args.no_server) or not settings.autostart


def autostart(args: argparse.Namespace, settings: Settings) -> bool:
    """Whether this command starts the background server when none runs: a command that
    works on memories (``autostart`` in its parser's defaults), unless :func:`autostart_off`."""
    return bool(getattr(args, "autostart", False)) and not autostart_off(args, settings)


class Session:
    """The database and the :class:`Memory` of one command, opened on first use.

    With no database configured it uses the background ``pgmem server`` when one runs (its
    PostgreSQL and its loaded models) -- starting it first when :func:`autostart` says so --
    else starts the embedded server for this command alone.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        #: The command's settings, one for everything it does (:func:`settings_of`).
        self.settings = settings_of(args)
        self.schema: str = self.settings.schema
        self._dsn = configured_dsn(None, self.settings)
        self._autostart = autostart(args, self.settings)
        self._embedded: DefaultDatabase | None = None
        self._background: ServerClient | None = None
        self._server_models: dict[str, Any] = {}  # what the running server said of its models
        self._looked_for_background = False
        self._memory: Memory | None = None
        self._models: ModelWork | None = None
        self._migrated = False

    @property
    def tenant(self) -> str:
        """The tenant the command works on (its settings')."""
        return self.settings.tenant

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

    def _find_background(self) -> server_state.ServerState | None:
        home = data_home(self.settings)
        state = server_state.running(home)
        if state is None and self._autostart:
            idle = self.settings.server_idle_timeout
            print(f"pgmem: starting the pgmem server in the background (PostgreSQL and the "
                  f"models, kept for the next commands; {_lifetime(idle)}; "
                  f"--no-server or {AUTOSTART_ENV}=0: each command on its own)", file=sys.stderr)
            state = background.start(home, self.schema, idle)
        return state

    @property
    def background(self) -> ServerClient | None:
        """The running ``pgmem server`` this session uses, if any (embedded sessions only)."""
        if self._dsn is None and not self._looked_for_background:
            self._looked_for_background = True
            state = self._find_background()
            if state is not None:
                client = ServerClient(state)
                try:
                    self._server_models = client.info()  # it answers, its PostgreSQL runs
                except UnsafePathError:  # another user's files: say so, never work around
                    client.close()
                    raise
                except PgmemError:
                    client.close()
                else:
                    self._background = client
        return self._background

    def _server_models_differ(self) -> str | None:
        """How the running server's models differ from those this command's settings make
        (the server was started with the settings of the command that started it), or None."""
        from pgmem.embedding_space import embedder_name
        from pgmem.providers import embedder_from

        info = self._server_models
        here = embedder_name(embedder_from(None, self.settings))  # loads nothing
        if info.get("embedder") != here:
            return f"its embedder is {info.get('embedder')!r}, this command's {here!r}"
        if info.get("spacy_config") != self.settings.spacy_model:
            return (f"its spaCy model setting is {info.get('spacy_config')!r}, this command's "
                    f"{self.settings.spacy_model!r}")
        return None

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
            self._embedded = DefaultDatabase(
                self.schema, log=False, home=data_home(self.settings)
            )
        return self._embedded.dsn(migrate=migrate)

    def models(self) -> tuple[Any, Any]:
        """The embedder and spaCy pipeline: the running ``pgmem server``'s when they are the
        models this command's settings make (say, not under another
        ``PGMEM_EMBEDDING_BACKEND`` than the server started with), else those
        ``pgmem.cli._models()`` returns (the one place tests replace them), else this
        command's :class:`~pgmem.model_work.ModelWork`, made from its settings as ``Memory()``
        makes its own."""
        server = self.background
        if server is not None:
            differ = self._server_models_differ()
            if differ is None:
                return background.RemoteEmbedder(server), background.remote_analyzer(server)
            print(f"pgmem: the running pgmem server's models are not this command's ({differ}):"
                  f" this command loads its own", file=sys.stderr)
        from pgmem import cli

        given = cli._models()
        if given is not None:
            return given
        if self._models is None:
            from pgmem.model_work import ModelWork

            self._models = ModelWork(self.settings)
        return self._models.embedder, self._models.analyzer

    def memory(self, *, migrate: bool = True) -> Memory:
        """The Memory for this command's settings (schema, tenant, models)."""
        if self._memory is None:
            from pgmem.memory import Memory

            dsn = self.dsn(migrate=migrate)
            embedder, analyzer = self.models()
            self._memory = Memory(dsn, settings=self.settings, embedder=embedder, nlp=analyzer)
        return self._memory

    def close(self) -> None:
        """Close the pool, then let go of the embedded server (or the background one)."""
        try:
            if self._memory is not None:
                self._memory.close()
            if self._models is not None:
                self._models.close()
        finally:
            if self._background is not None:
                self._background.close()
            if self._embedded is not None:
                self._embedded.close()


def _lifetime(idle: float) -> str:
    if idle <= 0:
        return "it runs until `pgmem server stop`"
    after = f"{idle / 60:g} min" if idle >= 60 else f"{idle:g} s"
    return f"it stops after {after} without a command"
