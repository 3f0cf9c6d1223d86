"""A private PgBouncer in front of the test server, for the connection pooler tests.

:func:`pgbouncer` writes a configuration into a temporary folder -- its own port on 127.0.0.1,
every database of the test server (``* =``), the test server's user in its ``auth_file``, the
pool mode asked for (``transaction`` or ``session``) -- and runs Debian's ``pgbouncer`` on it
(as the ``postgres`` OS user when the tests run as root: PgBouncer refuses root). Stopped and
its folder removed on leaving.

``PGMEM_TEST_POOLER=transaction`` (or ``session``) routes the tests' databases through one
(tests/conftest.py): ``db_dsn`` is then the pooler's DSN, and ``PGMEM_POOLER`` is set for
pgmem; a test marked ``not_behind_pooler(reason)`` is skipped there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.server_support import wait_for

#: The pool modes the tests run pgmem behind (PgBouncer's ``pool_mode``).
MODES = ("transaction", "session")
#: The reason a ``not_behind_pooler`` test is skipped starts so (tests/conftest.py's
#: ALLOWED_CI_SKIPS lists it).
SKIP_REASON = "needs a direct connection, not a pooler:"


def mode_from_env() -> str | None:
    """The pool mode ``PGMEM_TEST_POOLER`` asks the tests to run behind, or None."""
    mode = os.environ.get("PGMEM_TEST_POOLER", "").strip()
    if not mode:
        return None
    if mode not in MODES:
        raise pytest.UsageError(f"PGMEM_TEST_POOLER must be one of {MODES}, got {mode!r}")
    return mode


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _unavailable(reason: str) -> None:
    message = f"no PgBouncer for the connection pooler tests: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class PgBouncer:
    """A running PgBouncer: its port and pool mode."""

    port: int
    mode: str
    folder: Path

    def dsn(self, server_dsn: str) -> str:
        """``server_dsn``'s database and user, through this pooler."""
        return make_conninfo(server_dsn, host="127.0.0.1", port=str(self.port))

    def log(self) -> str:
        """What PgBouncer logged (for a failing test's message)."""
        return (self.folder / "pgbouncer.log").read_text(errors="replace")


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _config(server_dsn: str, mode: str, port: int, folder: Path, pool_size: int) -> str:
    params = conninfo_to_dict(server_dsn)
    host = str(params.get("host") or "127.0.0.1")
    server_port = str(params.get("port") or 5432)
    user = str(params.get("user") or "postgres")
    (folder / "users.txt").write_text(f"{_quoted(user)} {_quoted(str(params.get('password') or ''))}\n")
    return f"""\
[databases]
* = host={host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / 'users.txt'}
pool_mode = {mode}
default_pool_size = {pool_size}
max_client_conn = 1000
max_db_connections = 0
query_wait_timeout = 60
server_login_retry = 1
logfile = {folder / 'pgbouncer.log'}
"""


@contextlib.contextmanager
def pgbouncer(server_dsn: str, mode: str = "transaction", *, pool_size: int = 20) -> Iterator[PgBouncer]:
    """A PgBouncer in pool mode ``mode`` in front of ``server_dsn``'s server, at most
    ``pool_size`` server connections per database (see the module docstring)."""
    program = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if program is None:
        _unavailable("the pgbouncer program is not installed (apt-get install pgbouncer)")
    assert program is not None
    folder = Path(tempfile.mkdtemp(prefix="pgmem-pgbouncer-"))
    port = _free_port()
    (folder / "pgbouncer.ini").write_text(_config(server_dsn, mode, port, folder, pool_size))
    if os.geteuid() == 0:
        for path in (folder, *folder.iterdir()):
            shutil.chown(path, "postgres", "postgres")
    process = subprocess.Popen(
        _as_postgres([program, str(folder / "pgbouncer.ini")]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    bouncer = PgBouncer(port, mode, folder)
    try:
        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"pgbouncer exited: {bouncer.log()}")
            try:
                psycopg.connect(bouncer.dsn(server_dsn), connect_timeout=2).close()
            except psycopg.OperationalError:
                return False
            return True

        wait_for(answers, 30)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
