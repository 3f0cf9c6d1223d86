"""A private PostgreSQL for users without a server, from the PyPI package ``pgserver``.

``pgserver`` ships PostgreSQL 16 with pgvector 0.6.2: no iterative index scans, so pgmem's
exact-scan path serves every search there (chosen automatically from the pgvector version).

:class:`EmbeddedServer` starts a cluster in pgmem's data directory (:func:`data_home`), creates
a ``pgmem`` database and migrates it, and stops the cluster when the last process using it
stops (several processes may share it; pgserver counts them in ``.handle_pids.json``). Data
stays between runs. It recovers from a crash of an earlier run:

- a ``postmaster.pid`` left by a killed server, or naming a pid the system has since given to
  another process, is removed before starting (pgserver would take the reused pid for a
  running server);
- a server left running by a killed parent is reused, and that parent's pid is dropped from
  pgserver's handle list so that the server is still stopped at the end.

As root, pgserver runs PostgreSQL as an OS user ``pgserver`` (created with ``useradd``) and
makes every directory above the data directory readable and traversable by all users. So as
root the default data directory is ``/var/lib/pgmem``, whose parents already are; a
``PGMEM_HOME`` with a private parent (e.g. under ``/root``) is refused rather than opened.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from pgmem.errors import ConfigurationError, DatabaseError, wrap_db_errors
from pgmem.migrate import (
    DEFAULT_DIM,
    DEFAULT_SCHEMA,
    _wrap_sqlalchemy_errors,
    engine_for,
    migrate,
    schema_dimension,
)

if TYPE_CHECKING:
    from typing_extensions import Self

DATABASE = "pgmem"
# The cluster's folder inside the data directory; a cluster is tied to its major version.
CLUSTER_DIR = "pg16"
ROOT_HOME = Path("/var/lib/pgmem")
INSTALL_HINT = (
    "pip install 'pgmem[embedded]' (or pgserver), or point pgmem at your own server with "
    "--dsn / PGMEM_DSN / libpq PG* variables"
)


def data_home() -> Path:
    """Where the embedded server keeps its data: ``$PGMEM_HOME``; as root ``/var/lib/pgmem``;
    else ``$XDG_DATA_HOME/pgmem``, else ``~/.local/share/pgmem``."""
    configured = os.environ.get("PGMEM_HOME")
    if configured:
        return Path(configured).expanduser().absolute()
    if _is_root():
        return ROOT_HOME
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return (base / "pgmem").absolute()


class EmbeddedServer:
    """pgmem's private PostgreSQL in ``home`` (default :func:`data_home`).

    Nothing starts in the constructor. :meth:`start` starts the server (or joins one already
    running on the same data), migrates the ``pgmem`` database unless ``migrate=False``, and
    returns its DSN; :meth:`stop`, also registered with :mod:`atexit`, lets go of it and stops
    it when no other process uses it. When it creates the cluster, it says once where the data
    lives: to ``announce`` (default: printed on stderr), or not at all with ``quiet``.

    Raises (from :meth:`start`):
        ConfigurationError: pgserver is not installed, or the data directory is unusable.
        DatabaseError: the server did not start (the message names its log).
    """

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        schema: str = DEFAULT_SCHEMA,
        announce: Callable[[str], object] | None = None,
        quiet: bool = False,
    ) -> None:
        self.home = Path(home).expanduser().absolute() if home is not None else data_home()
        self.pgdata = (self.home / CLUSTER_DIR).resolve()
        self.schema = schema
        self._announce = None if quiet else (announce or _print_stderr)
        self._server: Any = None
        self._dsn: str | None = None
        self._lock = threading.RLock()

    @property
    def dsn(self) -> str:
        """The DSN of the ``pgmem`` database; :meth:`start` first."""
        if self._dsn is None:
            raise ConfigurationError("the embedded server is not started: call start() first")
        return self._dsn

    @property
    def running(self) -> bool:
        """Whether this object holds the server (started and not stopped)."""
        return self._server is not None

    def start(self, *, migrate: bool = True, dim: int | None = None) -> str:
        """Start (or join) the server, create and migrate its database; return the DSN.

        ``dim`` is the embedding dimension for a schema created now (default 384); an existing
        schema keeps its own.
        """
        with self._lock:
            if self._server is None:
                with _holders_lock:
                    if _holders.get(self.pgdata, 0) == 0:
                        server = self._start_server()
                    else:  # another object of this process holds it: share pgserver's handle
                        server = _import_pgserver().get_server(self.pgdata, cleanup_mode=None)
                    _holders[self.pgdata] = _holders.get(self.pgdata, 0) + 1
                self._server = server
                atexit.register(self.stop)
                self._dsn = server.get_uri(database=DATABASE)
        if migrate:
            self.migrate(dim=dim)
        return self.dsn

    def migrate(self, *, dim: int | None = None) -> None:
        """Bring the schema to the newest revision, keeping an existing schema's dimension."""
        if dim is None:
            engine = engine_for(self.dsn)
            try:
                with _wrap_sqlalchemy_errors(), engine.connect() as connection:
                    dim = schema_dimension(connection, self.schema) or DEFAULT_DIM
            finally:
                engine.dispose()
        migrate(self.dsn, dim=dim, schema=self.schema)

    def stop(self) -> None:
        """Let go of the server; stop it (fast shutdown) when no other live process uses it."""
        with self._lock:
            server, self._server = self._server, None
            if server is None:
                return
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)
            with _holders_lock:
                _holders[self.pgdata] -= 1
                if _holders[self.pgdata] > 0:
                    return
                del _holders[self.pgdata]
                self._release(server)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------

    def _release(self, server: Any) -> None:
        """Drop this process from pgserver's handle list; stop the server if no one is left."""
        pgserver = _import_pgserver()
        with _pgserver_lock(pgserver):
            server.global_process_id_list.get_and_remove(os.getpid())
            others = _prune_dead(server.global_process_id_list)
            # pgserver caches one handle per data directory; drop it so that a later start()
            # in this process starts the server again.
            pgserver.PostgresServer._instances.pop(self.pgdata, None)
            if others or _postmaster_pid(self.pgdata) is None:
                return
            try:
                pgserver.pg_ctl(
                    ["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=server.system_user,
                    timeout=60,
                )
            except (subprocess.SubprocessError, OSError) as exc:
                raise DatabaseError(
                    f"the embedded PostgreSQL in {self.pgdata} did not stop: {exc}"
                ) from exc

    def _start_server(self) -> Any:
        pgserver = _import_pgserver()
        created = not (self.pgdata / "PG_VERSION").exists()
        self._prepare_home()
        with _pgserver_lock(pgserver):
            _prune_dead(_handle_list(pgserver, self.pgdata))
            _remove_stale_pid_file(self.pgdata)
            pgserver.PostgresServer._instances.pop(self.pgdata, None)  # a handle of a dead server
        try:
            server = pgserver.get_server(self.pgdata, cleanup_mode=None)
        except (subprocess.SubprocessError, OSError, AssertionError, RuntimeError) as exc:
            log = self.pgdata / "log"
            raise DatabaseError(
                f"the embedded PostgreSQL in {self.pgdata} did not start ({exc}); "
                f"see its log {log}"
            ) from exc
        try:
            self._create_database(server.get_uri())
        except BaseException:
            self._release(server)
            raise
        if created and self._announce is not None:
            self._announce(
                f"pgmem: created an embedded PostgreSQL with pgmem's data in {self.home} "
                "(kept between runs; set PGMEM_DSN or --dsn to use your own server)"
            )
        return server

    def _prepare_home(self) -> None:
        if self.home.exists() and not self.home.is_dir():
            raise ConfigurationError(f"pgmem's data directory {self.home} is not a directory")
        try:
            created = not self.home.exists()
            self.home.mkdir(parents=True, exist_ok=True)
            if created and _is_root():  # the folder above the cluster must be open to 'pgserver'
                self.home.chmod(self.home.stat().st_mode | _OTHERS_RX)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create pgmem's data directory {self.home}: {exc}; set PGMEM_HOME"
            ) from exc
        if _is_root():
            private = [p for p in (self.home, *self.home.parents) if not _open_to_others(p)]
            if private:
                raise ConfigurationError(
                    f"as root, pgserver runs PostgreSQL as the OS user 'pgserver' and would make "
                    f"{private[0]} readable by every user to reach {self.pgdata}; choose a "
                    f"PGMEM_HOME whose parent folders are already world-readable (the default "
                    f"as root is {ROOT_HOME})"
                )

    @staticmethod
    def _create_database(admin_uri: str) -> None:
        with wrap_db_errors(), psycopg.connect(admin_uri, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if exists is None:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))


# How many EmbeddedServer objects of this process hold each cluster: one stop() must not stop
# a server that another object still uses.
_holders: dict[Path, int] = {}
_holders_lock = threading.Lock()

_OTHERS_RX = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _open_to_others(path: Path) -> bool:
    return (path.stat().st_mode & _OTHERS_RX) == _OTHERS_RX


def _print_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _import_pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (as for root); pgserver then
            # keeps its lock file in /tmp/runtime-<uid>, which is fine.
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:
        raise ConfigurationError(
            f"no database configured and the embedded server is not installed: {INSTALL_HINT}"
        ) from exc
    return pgserver


@contextlib.contextmanager
def _pgserver_lock(pgserver: Any) -> Iterator[None]:
    """pgserver's own inter-process lock, held while it starts or stops a server."""
    with pgserver.PostgresServer._lock:
        yield


def _handle_list(pgserver: Any, pgdata: Path) -> Any:
    return pgserver.utils.DiskList(pgdata / ".handle_pids.json")


def _prune_dead(handles: Any) -> list[int]:
    """Drop the pids of processes that died from pgserver's handle list; the live ones."""
    import psutil

    def living(pid: int) -> bool:  # a zombie (dead, not yet reaped by its parent) is dead
        try:
            return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    pids = handles.get()
    alive = [pid for pid in pids if living(pid)]
    if alive != pids:
        handles.put(alive)
    return alive


def _postmaster_pid(pgdata: Path) -> int | None:
    """The pid of the postmaster serving ``pgdata``, or None when none is running."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pid if _is_postmaster_of(pid, pgdata) else None


def _is_postmaster_of(pid: int, pgdata: Path) -> bool:
    """Whether ``pid`` is a living (not zombie) postgres serving ``pgdata``."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = process.cmdline()
    except psutil.Error:
        return False
    return bool(cmdline) and Path(cmdline[0]).name == "postgres" and str(pgdata) in cmdline


def _remove_stale_pid_file(pgdata: Path) -> None:
    """Remove ``postmaster.pid``, and the lock file of its socket, when no postmaster of
    ``pgdata`` runs under their pid. PostgreSQL removes them itself only when their pid is
    free: not when the system gave it to another process, nor while the dead server is a
    zombie not yet reaped."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().split("\n")
    except OSError:
        return
    if _postmaster_pid(pgdata) is not None:
        return
    # Lines 4 and 5 of postmaster.pid: the port and the socket directory.
    if len(lines) > 4 and lines[3].strip().isdigit() and lines[4].strip():
        lock = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}.lock"
        try:
            owner = int(lock.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            owner = None
        if owner is not None and not _is_postmaster_of(owner, pgdata):
            lock.unlink(missing_ok=True)
    pid_file.unlink(missing_ok=True)
