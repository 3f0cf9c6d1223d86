"""Attacks of another local user on the pgmem home (docs/security.md, "Local users and the
pgmem home"): a second OS user, ``nobody``, prepares the home or the files around it, then the
victim (the user running this, root: ``nobody`` is reached with setuid) runs pgmem there.

Each attack needs root (to act as ``nobody``) and the embedded server (``pgmem[embedded]``);
the database of the run's target is not used. ``tests/test_security_home.py`` runs the same
reproductions in CI.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac  # noqa: F401 -- multiprocessing.connection imports it late, in nobody's child
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Listener
from pathlib import Path

from benchmarks.attacks import Attack, Outcome, Target

NOBODY = "nobody"
# The MODULE a state file's process must run, for pgmem to believe it is its server.
SERVER_MODULE = "pgmem.cli.background"


def nobody() -> pwd.struct_passwd:
    """The second OS user."""
    return pwd.getpwnam(NOBODY)


def as_nobody(action: Callable[[], object]) -> int:
    """Run ``action`` in a forked child as ``nobody`` (no supplementary groups); its pid. The
    child exits 0 when ``action`` returns, 1 when it raises. It should import nothing new: the
    interpreter's library may be unreadable to nobody."""
    user = nobody()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 1
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            action()
            code = 0
        except BaseException:  # noqa: BLE001 - reported by the exit status
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def nobody_does(action: Callable[[], object], timeout: float = 60) -> None:
    """Run ``action`` as ``nobody`` and wait for it; RuntimeError if it failed."""
    pid = as_nobody(action)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.waitstatus_to_exitcode(status) != 0:
                raise RuntimeError("nobody's action failed (see stderr)")
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise RuntimeError("nobody's action did not end")


def end(pid: int) -> None:
    """Kill a child started by :func:`as_nobody` and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A fresh folder (root's, mode 0755, under /var/tmp so that PostgreSQL's OS user can
    reach it) holding ``shared``, a world-writable sticky folder like /tmp, and ``drop``, a
    folder anyone may write to (where an attack's payload leaves its mark); removed at the end,
    with any PostgreSQL left running in it."""
    import psutil

    base = Path(tempfile.mkdtemp(prefix="pgmem-attack-", dir="/var/tmp"))
    base.chmod(0o755)
    for name, mode in (("shared", 0o1777), ("drop", 0o777)):
        (base / name).mkdir()
        (base / name).chmod(mode)
    try:
        yield base
    finally:
        for process in psutil.process_iter(["cmdline"]):
            cmdline = process.info["cmdline"] or []
            if cmdline and Path(cmdline[0]).name == "postgres" and str(base) in " ".join(cmdline):
                with contextlib.suppress(psutil.Error):
                    process.kill()
                    process.wait(30)
        shutil.rmtree(base, ignore_errors=True)


def nobodys_home(base: Path) -> Path:
    """``shared/pgmem``, made by ``nobody`` before the victim ever ran pgmem (mode 0755)."""
    home = base / "shared" / "pgmem"
    nobody_does(lambda: home.mkdir(mode=0o755))
    return home


def victim_cli(home: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``pgmem ARGV`` run by the victim with ``home`` as PGMEM_HOME and no database configured."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGMEM_DSN", "PGHOST", "PGDATABASE", "PGSERVICE")}
    import pgmem  # the victim runs the pgmem this process imported

    package_root = Path(pgmem.__file__).resolve().parents[1]
    env.update(PGMEM_HOME=str(home), PYTHONPATH=str(package_root), PGMEM_AUTOSTART="0")
    return subprocess.run(
        [sys.executable, "-m", "pgmem.cli", *argv], capture_output=True, text=True,
        timeout=timeout, env=env, check=False, cwd="/",
    )


@contextlib.contextmanager
def decoy(cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process of ``nobody`` whose command line names pgmem's server module (what an older
    pgmem took as proof that a state file's pid is its server); killed, with its children, at
    the end."""
    user = nobody()
    process = subprocess.Popen(
        ["/bin/sh", "-c", "sleep 600; :", SERVER_MODULE], user=user.pw_uid, group=user.pw_gid,
        extra_groups=[], cwd=str(cwd), stdin=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class _Payload:
    """Unpickled, it runs a shell command: what a pickling server can send its client."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def fake_server(home: Path, pid: int, mark: Path) -> int:
    """As ``nobody``: a "pgmem server" in ``home`` -- ``server.key``, ``server.json`` naming
    ``pid``, and a socket speaking ``multiprocessing.connection`` that answers every request
    with a pickle that touches ``mark``. Returns the serving child's pid (see :func:`end`)."""
    sock = home / "server.sock"

    def serve() -> None:  # imports nothing: nobody cannot read this interpreter's library
        key = os.urandom(32)
        (home / "server.key").write_bytes(key)
        (home / "server.json").write_text(json.dumps({
            "pid": pid, "dsn": "postgresql:///nowhere", "schema": "pgmem", "home": str(home),
            "socket": str(sock), "started_at": time.time(),
        }))
        with Listener(str(sock), family="AF_UNIX", authkey=key) as listener:
            while True:
                with contextlib.suppress(Exception), listener.accept() as conn:
                    conn.recv()
                    conn.send(_Payload(f"touch {mark}"))

    child = as_nobody(serve)
    deadline = time.monotonic() + 30
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return child


def injection(mark: Path) -> str:
    """A pgpass line whose "password" closes the quote of ``ALTER ROLE ... PASSWORD '...'``
    and runs a program as PostgreSQL's OS user."""
    return f"*:*:*:postgres:x'; COPY (SELECT 1) TO PROGRAM 'touch {mark}'; --\n"


def other_cluster(folder: Path) -> int:
    """As ``nobody``: a live "cluster" socket ``.s.PGSQL.5432`` and its lock file in
    ``folder`` (made by nobody, mode 0700). Returns the serving child's pid."""
    def listen() -> None:
        folder.mkdir(mode=0o700)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(folder / ".s.PGSQL.5432"))
        server.listen(8)
        (folder / ".s.PGSQL.5432.lock").write_text(f"{os.getpid()}\n{folder}\n")
        while True:
            server.accept()[0].close()

    child = as_nobody(listen)
    deadline = time.monotonic() + 30
    while not (folder / ".s.PGSQL.5432.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return child


def plant_pid_file(home: Path, socket_folder: Path) -> None:
    """A ``pg18/postmaster.pid`` in ``home`` (owned by PostgreSQL's OS user, as one left by
    a crash, or by a copy of another cluster) that names ``socket_folder`` as its socket's."""
    from pgmem import embedded_cluster

    user = embedded_cluster.server_user()
    pgdata = home / "pg18"
    pgdata.mkdir(parents=True, mode=0o700)
    stale = subprocess.Popen(["sleep", "600"])  # a living pid that is no postmaster
    pid_file = pgdata / "postmaster.pid"
    pid_file.write_text(f"{stale.pid}\n{pgdata}\n{int(time.time())}\n5432\n{socket_folder}\n"
                        "\n  5432001   0\nready\n")
    stale.kill()
    stale.wait()
    for path in (pgdata, pid_file):
        os.chown(path, user.uid, user.gid)
    if home.stat().st_uid == 0:
        home.chmod(0o755)


def old_socket_name(home: Path) -> Path:
    """Where an older pgmem put the server socket of a long ``home``: a name anyone can
    compute in the shared temporary folder."""
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pgmem-{os.getuid()}-{digest}.sock"


# -- the attacks --------------------------------------------------------------------------------


def _refused(said: str, marks: list[Path]) -> Outcome:
    hit = [str(m) for m in marks if m.exists()]
    if hit:
        return Outcome("broke", f"the payload ran: {', '.join(hit)} exists")
    if "belongs to nobody" in said or "not to root" in said or "pgmem made" in said:
        return Outcome("refused", said.strip().splitlines()[-1][:200])
    return Outcome("broke", f"no refusal: {said.strip()[-200:]!r}")


def fake_server_runs_code(target: Target) -> Outcome:
    """Issue: the CLI unpickled the reply of whatever server ``server.json`` named."""
    with scratch() as base:
        home = nobodys_home(base)
        mark = base / "drop" / "pwned"
        with decoy(base) as process:
            child = fake_server(home, process.pid, mark)
            try:
                done = victim_cli(home, "list", "--user", "alice")
            finally:
                end(child)
        return _refused(done.stderr, [mark])


def planted_pgpass_runs_sql(target: Target) -> Outcome:
    """Issue: pgpass's password went unescaped into ALTER ROLE in single-user mode."""
    from pgmem.embedded_server import EmbeddedServer
    from pgmem.errors import PgmemError

    with scratch() as base:
        home = nobodys_home(base)
        mark = base / "drop" / "pwned"

        def plant() -> None:
            (home / "pgpass").write_text(injection(mark))
            (home / "pgpass").chmod(0o600)

        nobody_does(plant)
        server = EmbeddedServer(home, quiet=True)
        try:
            server.start(migrate=False)
        except PgmemError as exc:
            return _refused(str(exc), [mark])
        finally:
            server.stop()
        return _refused("started", [mark])


def own_pgpass_is_not_sql(target: Target) -> Outcome:
    """A pgpass of the victim's own whose content is not a password pgmem made."""
    from pgmem.embedded_server import EmbeddedServer
    from pgmem.errors import PgmemError

    with scratch() as base:
        home = base / "home"
        home.mkdir(mode=0o755)
        mark = base / "drop" / "pwned"
        (home / "pgpass").write_text(injection(mark))
        (home / "pgpass").chmod(0o600)
        server = EmbeddedServer(home, quiet=True)
        try:
            server.start(migrate=False)
        except PgmemError as exc:
            return _refused(str(exc), [mark])
        finally:
            server.stop()
        return _refused("started", [mark])


def planted_mcp_token(target: Target) -> Outcome:
    """Issue: a token file of nobody's became the MCP HTTP token."""
    from pgmem import mcp_server
    from pgmem.errors import PgmemError

    with scratch() as base:
        home = nobodys_home(base)
        known = "nobody-knows-this-token-0123456789abcdef"

        def plant() -> None:
            (home / "mcp.token").write_text(known + "\n")
            (home / "mcp.token").chmod(0o600)

        nobody_does(plant)
        try:
            token, _ = mcp_server.stored_token(home)
        except PgmemError as exc:
            return _refused(str(exc), [])
        if token == known:
            return Outcome("broke", "the MCP token is the one nobody planted")
        return Outcome("broke", "a token was returned from nobody's home")


def pid_file_names_another_socket(target: Target) -> Outcome:
    """Issue: a stale postmaster.pid made start() unlink another cluster's socket and lock."""
    from pgmem.embedded_server import EmbeddedServer

    with scratch() as base:
        others = base / "shared" / "other-cluster"
        child = other_cluster(others)
        try:
            home = base / "home"
            home.mkdir(mode=0o755)
            plant_pid_file(home, others)
            with EmbeddedServer(home, quiet=True):
                pass
            gone = [p.name for p in (others / ".s.PGSQL.5432", others / ".s.PGSQL.5432.lock")
                    if not p.exists()]
        finally:
            end(child)
        if gone:
            return Outcome("broke", f"the other cluster's {', '.join(gone)} removed")
        return Outcome("refused", "the other cluster's socket and lock are untouched")


def predictable_socket_name(target: Target) -> Outcome:
    """Issue: another user who took the server socket's name first kept the server down."""
    with scratch() as base:
        home = base / "home" / ("h" * 110)
        home.parent.mkdir(mode=0o755)
        squatted = old_socket_name(home)
        nobody_does(lambda: squatted.mkdir(mode=0o755))
        try:
            started = victim_cli(home, "server", "start")
            try:
                if started.returncode != 0:
                    return Outcome("broke", f"the server did not start: {started.stderr[-200:]!r}")
                state = json.loads((home / "server.json").read_text())
                folder = Path(state["socket"]).parent
                return Outcome("refused", f"started; its socket is in the private {folder}")
            finally:
                victim_cli(home, "server", "stop")
        finally:
            shutil.rmtree(squatted, ignore_errors=True)


ATTACKS: list[Attack] = [
    Attack("home: a fake server in nobody's home answers with a pickle", fake_server_runs_code),
    Attack("home: nobody's pgpass carries SQL into single-user mode", planted_pgpass_runs_sql),
    Attack("home: the victim's own pgpass carries SQL", own_pgpass_is_not_sql),
    Attack("home: nobody's mcp.token becomes the MCP token", planted_mcp_token),
    Attack("home: a postmaster.pid names another cluster's socket folder",
           pid_file_names_another_socket),
    Attack("home: nobody squats the server socket's name in /tmp", predictable_socket_name),
]
