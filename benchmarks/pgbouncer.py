"""A private PgBouncer in front of a PostgreSQL server, for the pooler benchmark and tests.

:func:`pgbouncer` writes a configuration into a temporary folder -- its own port on 127.0.0.1,
every database of the server (``* =``), the server DSN's user in its ``auth_file``, the pool
mode asked for (``transaction`` or ``session``) -- and runs Debian's ``pgbouncer`` on it (as the
``postgres`` OS user when run as root: PgBouncer refuses root). Stopped and its folder removed
on leaving.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from benchmarks.processes import as_postgres, free_port

#: PgBouncer's pool modes pgmem is run behind.
MODES = ("transaction", "session")
START_TIMEOUT = 30.0


class NoPgBouncer(RuntimeError):
    """The ``pgbouncer`` program is not installed."""


@dataclass(frozen=True)
class PgBouncer:
    """A running PgBouncer: its port, pool mode and folder."""

    port: int
    mode: str
    folder: Path

    def dsn(self, server_dsn: str) -> str:
        """``server_dsn``'s database and user, through this pooler."""
        return make_conninfo(server_dsn, host="127.0.0.1", port=str(self.port))

    def log(self) -> str:
        """What PgBouncer logged."""
        return (self.folder / "pgbouncer.log").read_text(errors="replace")


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _config(server_dsn: str, mode: str, port: int, folder: Path, pool_size: int) -> str:
    params = conninfo_to_dict(server_dsn)
    user, password = str(params.get("user") or "postgres"), str(params.get("password") or "")
    (folder / "users.txt").write_text(f"{_quoted(user)} {_quoted(password)}\n")
    return f"""\
[databases]
* = host={params.get("host") or "127.0.0.1"} port={params.get("port") or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = {mode}
default_pool_size = {pool_size}
max_client_conn = 1000
query_wait_timeout = 60
server_login_retry = 1
logfile = {folder / "pgbouncer.log"}
"""


def program() -> str:
    """The ``pgbouncer`` program; :class:`NoPgBouncer` without one."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found is None:
        raise NoPgBouncer("the pgbouncer program is not installed (apt-get install pgbouncer)")
    return found


@contextlib.contextmanager
def pgbouncer(
    server_dsn: str, mode: str = "transaction", *, pool_size: int = 20
) -> Iterator[PgBouncer]:
    """A PgBouncer in pool mode ``mode`` in front of ``server_dsn``'s server, with at most
    ``pool_size`` server connections per database (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    command = program()
    folder = Path(tempfile.mkdtemp(prefix="pgmem-pgbouncer-"))
    bouncer = PgBouncer(free_port(), mode, folder)
    (folder / "pgbouncer.ini").write_text(
        _config(server_dsn, mode, bouncer.port, folder, pool_size)
    )
    if os.geteuid() == 0:
        for path in (folder, *folder.iterdir()):
            shutil.chown(path, "postgres", "postgres")
    process = subprocess.Popen(
        as_postgres([command, str(folder / "pgbouncer.ini")]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_it_answers(bouncer, process, bouncer.dsn(server_dsn))
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_until_it_answers(bouncer: PgBouncer, process: subprocess.Popen[bytes], dsn: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited ({process.returncode}): {bouncer.log()}")
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
