"""The tests' PgBouncer (:mod:`benchmarks.pgbouncer` starts it), and ``PGMEM_TEST_POOLER``.

``PGMEM_TEST_POOLER=transaction`` (or ``session``) routes the tests' databases through a
PgBouncer in that pool mode (tests/conftest.py): ``db_dsn`` is then the pooler's DSN, and
``PGMEM_POOLER`` is set for pgmem; a test marked ``not_behind_pooler(reason)`` is skipped there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from benchmarks import pgbouncer as bouncers
from benchmarks.pgbouncer import MODES, PgBouncer

__all__ = ["SKIP_REASON", "PgBouncer", "mode_from_env", "pgbouncer"]

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


@contextlib.contextmanager
def pgbouncer(server_dsn: str, mode: str, *, pool_size: int = 20) -> Iterator[PgBouncer]:
    """:func:`benchmarks.pgbouncer.pgbouncer`; without the program, a skip (under ``CI=true``,
    a failure: CI installs it)."""
    try:
        bouncers.program()
    except bouncers.NoPgBouncer as exc:
        message = f"no PgBouncer for the connection pooler tests: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with bouncers.pgbouncer(server_dsn, mode, pool_size=pool_size) as bouncer:
        yield bouncer
