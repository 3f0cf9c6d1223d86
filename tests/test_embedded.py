"""pgmem's embedded PostgreSQL (pgserver): start, migrate, keep data between runs, stop, and
recover from a crashed earlier run. Skipped when pgserver is not installed."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pgmem
from pgmem import cli, embedded
from pgmem.embedded import EmbeddedServer

pytest.importorskip("pgserver")
psutil = pytest.importorskip("psutil")  # a dependency of pgserver

IS_ROOT = os.geteuid() == 0


@pytest.fixture
def home() -> Iterator[Path]:
    """An empty data directory whose parents the 'pgserver' OS user can traverse as root
    (pytest's tmp_path lives under a private folder)."""
    path = Path(tempfile.mkdtemp(prefix="pgmem-embedded-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path / "home"
    pid = embedded._postmaster_pid(path / "home" / embedded.CLUSTER_DIR)
    if pid is not None:  # a failed test left its server running
        os.kill(pid, signal.SIGTERM)
        psutil.Process(pid).wait(30)
    shutil.rmtree(path, ignore_errors=True)


def postmaster(home: Path) -> int | None:
    return embedded._postmaster_pid(home / embedded.CLUSTER_DIR)


def wait_until_gone(pgdata: Path, timeout: float = 30) -> None:
    """Wait until no postgres process serves ``pgdata`` any more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [
            p for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and str(pgdata) in " ".join(p.info["cmdline"])
            and p.pid != os.getpid()
        ]
        if not alive:
            return
        time.sleep(0.2)
    raise AssertionError(f"postgres processes of {pgdata} still running")


def test_start_migrate_add_search_stop_and_find_the_data_again(
    home: Path, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    said: list[str] = []
    server = EmbeddedServer(home, announce=said.append)
    dsn = server.start()
    assert said == [
        (f"pgmem: created an embedded PostgreSQL with pgmem's data in {home} "
         "(kept between runs; set PGMEM_DSN or --dsn to use your own server)")
    ]
    assert postmaster(home) is not None
    with pgmem.Memory(dsn, embedder=embedder, nlp=analyzer) as mem:
        added = mem.add("Ben's garage reference is 88417", user_id="ben")
        hits = mem.search("88417", user_id="ben")
        assert [h.id for h in hits] == [added.id]
        assert hits[0].explain.keyword > 0
    server.stop()
    server.stop()  # idempotent
    assert postmaster(home) is None
    assert not (home / embedded.CLUSTER_DIR / "postmaster.pid").exists()

    again = EmbeddedServer(home, announce=said.append)
    with again, pgmem.Memory(again.dsn, embedder=embedder, nlp=analyzer) as mem:
        assert len(said) == 1  # told once, when the data directory was created
        assert [h.id for h in mem.search("garage", user_id="ben")] == [added.id]
        assert mem.get(added.id).text == "Ben's garage reference is 88417"
    assert postmaster(home) is None


def test_the_cli_uses_the_embedded_server_when_no_dsn_is_configured(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    for name in ("PGMEM_DSN", *cli.LIBPQ_TARGETS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGMEM_HOME", str(home))
    monkeypatch.setattr(cli, "_models", lambda: (embedder, analyzer))

    assert cli.main(["add", "Chen plays guitar in a ceilidh band", "--user", "chen"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("added ")
    assert err == (f"pgmem: created an embedded PostgreSQL with pgmem's data in {home} "
                   "(kept between runs; set PGMEM_DSN or --dsn to use your own server)\n")
    assert postmaster(home) is None  # stopped when the command ended

    assert cli.main(["search", "music", "--user", "chen"]) == 0
    out, err = capsys.readouterr()
    assert "Chen plays guitar in a ceilidh band" in out and err == ""
    assert cli.main(["doctor"]) == 0
    out, _ = capsys.readouterr()
    assert f"(embedded, data in {home})" in out
    assert "note  no iterative HNSW scans (pgvector 0.6.2 < 0.8)" in out
    assert out.endswith("no problems found\n")


def test_a_server_left_by_a_killed_process_is_taken_over_and_stopped(home: Path) -> None:
    script = textwrap.dedent(f"""
        import os, signal
        from pgmem.embedded import EmbeddedServer
        EmbeddedServer({str(home)!r}, quiet=True).start()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = subprocess.run([sys.executable, "-c", script], timeout=120, check=False)
    assert result.returncode == -signal.SIGKILL
    orphan = postmaster(home)
    assert orphan is not None  # the killed parent left its server running

    server = EmbeddedServer(home, quiet=True)
    server.start()
    assert postmaster(home) == orphan  # reused, not started twice
    server.stop()
    assert postmaster(home) is None  # and stopped, though the dead parent still counted


def test_a_stale_postmaster_pid_is_removed(
    home: Path, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    server = EmbeddedServer(home, quiet=True)
    with pgmem.Memory(server.start(), embedder=embedder, nlp=analyzer) as mem:
        mem.add("Alice is allergic to penicillin", user_id="alice")
    pgdata = home / embedded.CLUSTER_DIR
    pid_file = pgdata / "postmaster.pid"
    pid = postmaster(home)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the server crashes
    wait_until_gone(pgdata)
    server.stop()  # nothing left to stop; postmaster.pid stays behind
    assert pid_file.exists()
    # The pid in the file now belongs to another, living process (as after a reboot).
    with subprocess.Popen(["sleep", "60"]) as other:
        lines = pid_file.read_text().split("\n")
        pid_file.write_text("\n".join([str(other.pid), *lines[1:]]))
        try:
            again = EmbeddedServer(home, quiet=True)
            with again, pgmem.Memory(again.dsn, embedder=embedder, nlp=analyzer) as mem:
                assert postmaster(home) not in (None, other.pid)
                hits = mem.search("penicillin", user_id="alice")
                assert hits[0].text == "Alice is allergic to penicillin"  # crash recovery
        finally:
            other.kill()
    assert postmaster(home) is None


def test_two_users_of_one_server_stop_it_once(home: Path) -> None:
    first = EmbeddedServer(home, quiet=True)
    first.start(migrate=False)
    script = textwrap.dedent(f"""
        from pgmem.embedded import EmbeddedServer
        s = EmbeddedServer({str(home)!r}, quiet=True)
        s.start(migrate=False)
        s.stop()
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert postmaster(home) is not None  # still ours
    first.stop()
    assert postmaster(home) is None


def test_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "x"))
    assert embedded.data_home() == tmp_path / "x"
    monkeypatch.delenv("PGMEM_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(embedded, "_is_root", lambda: False)
    assert embedded.data_home() == tmp_path / "pgmem"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert embedded.data_home() == Path.home() / ".local" / "share" / "pgmem"
    monkeypatch.setattr(embedded, "_is_root", lambda: True)
    assert embedded.data_home() == Path("/var/lib/pgmem")


@pytest.mark.skipif(not IS_ROOT, reason="pgserver opens permissions only as root")
def test_as_root_a_private_parent_is_refused_not_opened(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    with pytest.raises(pgmem.ConfigurationError, match="would make .* readable by every user"):
        EmbeddedServer(private / "home", quiet=True).start()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


def test_without_pgserver_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pgserver", None)  # import fails
    with pytest.raises(pgmem.ConfigurationError, match=r"pip install 'pgmem\[embedded\]'"):
        EmbeddedServer(home, quiet=True).start()
