"""A streaming replica of the test server, for the read replica tests.

``pg_basebackup -R`` copies the test server's cluster into a temporary folder (as the
``postgres`` OS user when the tests run as root: PostgreSQL refuses root), and a second
PostgreSQL of the same version runs it as a hot standby on a free port, streaming from the test
server (which must accept replication connections: ``scripts/test-postgres.sh`` sets
``wal_level`` and ``max_wal_senders``, and initdb's ``pg_hba.conf`` trusts replication from
127.0.0.1). Stopped and its folder removed on leaving.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from benchmarks.processes import as_postgres, free_port
from tests.server_support import wait_for

REPLAY_TIMEOUT = 60.0


def _unavailable(reason: str) -> None:
    message = f"no streaming replica for the read replica tests: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _bin_dir(server_dsn: str) -> Path:
    with psycopg.connect(server_dsn) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    major = int(row[0]) // 10000
    return Path(f"/usr/lib/postgresql/{major}/bin")


@dataclass
class Replica:
    """A hot standby of the test server: its folder, port and programs."""

    folder: Path
    port: int
    bin_dir: Path

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def dsn(self, primary_dsn: str) -> str:
        """The DSN of ``primary_dsn``'s database on the replica."""
        return make_conninfo(primary_dsn, host="127.0.0.1", port=str(self.port))

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            as_postgres([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), *args]),
            check=True, capture_output=True, timeout=120,
        )

    def start(self) -> None:
        """Start the standby and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} "
            "-c shared_buffers=64MB -c maintenance_work_mem=64MB -c hot_standby=on"
        )
        self._pg_ctl("-o", options, "-l", str(self.folder / "server.log"), "-w", "start")

    def stop(self) -> None:
        """Stop the standby at once (``-m immediate``: as if its machine went away)."""
        self._pg_ctl("-m", "immediate", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


@contextlib.contextmanager
def streaming_replica(server_dsn: str) -> Iterator[Replica]:
    """A streaming replica of the test server (see the module docstring)."""
    params = conninfo_to_dict(server_dsn)
    if params.get("host") not in ("127.0.0.1", "localhost", "::1"):
        _unavailable(f"the test server is not a local one ({params.get('host')!r})")
    bin_dir = _bin_dir(server_dsn)
    if not (bin_dir / "pg_ctl").exists() or shutil.which("pg_basebackup") is None:
        _unavailable(f"no PostgreSQL server programs in {bin_dir}")
    folder = Path(tempfile.mkdtemp(prefix="pgmem-replica-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    replica = Replica(folder, free_port(), bin_dir)
    try:
        subprocess.run(
            as_postgres([
                str(bin_dir / "pg_basebackup"), "-d", server_dsn,
                "-D", str(replica.data), "-R", "-X", "stream", "-c", "fast",
            ]),
            check=True, capture_output=True, timeout=300,
        )
        replica.start()
        yield replica
    finally:
        if replica.running():
            with contextlib.suppress(subprocess.SubprocessError):
                replica.stop()
        shutil.rmtree(folder, ignore_errors=True)


def replayed(primary_dsn: str, replica_dsn: str, timeout: float = REPLAY_TIMEOUT) -> None:
    """Wait until the replica has replayed everything the primary wrote until now."""
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        # With synchronous_commit = off the WAL is sent once the WAL writer flushed it (within
        # wal_writer_delay): the wait covers it.
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    target = row[0]

    def caught_up() -> bool:
        try:
            with psycopg.connect(replica_dsn, autocommit=True, connect_timeout=5) as replica:
                done = replica.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
        except psycopg.OperationalError:  # the database is not there yet
            return False
        return bool(done and done[0])

    wait_for(caught_up, timeout)


@contextlib.contextmanager
def replay_paused(replica_dsn: str) -> Iterator[None]:
    """The replica applies nothing the primary writes in the block: what is written then is on
    the primary only."""
    with psycopg.connect(replica_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")

        def paused() -> bool:
            row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
            return row is not None and row[0] == "paused"

        wait_for(paused, REPLAY_TIMEOUT)
        try:
            yield
        finally:
            conn.execute("SELECT pg_wal_replay_resume()")
