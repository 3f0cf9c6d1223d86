"""An empty pgmem data directory for tests of the embedded server and ``pgmem server``, and
the cleanup of whatever a test left running in it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pgmem import embedded, server_state


@contextlib.contextmanager
def fresh_home() -> Iterator[Path]:
    """A data directory ``HOME`` that does not exist yet, whose parents the 'pgserver' OS user
    can traverse as root (pytest's tmp_path lives under a private folder). On leaving, a
    background server and a PostgreSQL still running there are killed, and the folder goes."""
    path = Path(tempfile.mkdtemp(prefix="pgmem-home-", dir="/var/tmp"))
    path.chmod(0o755)
    home = path / "home"
    try:
        yield home
    finally:
        state = server_state.running(home)
        if state is not None:
            os.kill(state.pid, signal.SIGKILL)
        pid = postmaster(home)
        if pid is not None:
            import psutil  # installed with pgserver, as the embedded server is

            os.kill(pid, signal.SIGTERM)
            psutil.Process(pid).wait(30)
        shutil.rmtree(path, ignore_errors=True)


def postmaster(home: Path) -> int | None:
    """The pid of the PostgreSQL serving ``home``'s cluster, if one runs."""
    return embedded._postmaster_pid(home / embedded.CLUSTER_DIR)


def wait_for(condition: Callable[[], object], timeout: float = 60) -> None:
    """Wait until ``condition()`` is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")
