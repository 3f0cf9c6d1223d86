"""The soak's own PostgreSQL, and the faults it injects into it (see :mod:`benchmarks.soak`).

The cluster is made by ``scripts/test-postgres.sh start`` in a folder and on a port of the
soak's own; restarts and stops go through ``pg_ctl`` directly (the script's ``start`` would
make a new, empty cluster when the old one is stopped).
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.processes import as_postgres

ADMIN_APPLICATION = "pgmem-soak-admin"  # the soak's own sessions, which no fault kills
# The longest a resumed reembed may run (at least; half the fault period if longer) before the
# soak kills and aborts it: under heavy write load on a small machine it may never catch up.
REEMBED_SECONDS = 600.0
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "test-postgres.sh"


def _pg_bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not found:
        raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql")
    return found[-1]


@dataclass
class Server:
    """A private cluster in ``directory`` on ``port``."""

    directory: str
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PGMEM_PG_DIR": self.directory, "PGMEM_PG_PORT": str(self.port)}

    def start(self) -> None:
        """A fresh cluster (or the one already running there)."""
        subprocess.run(["bash", str(SCRIPT), "start"], env=self._env(), check=True,
                       stdout=subprocess.DEVNULL)

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=self._env(), check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def pg_ctl(self, *args: str) -> None:
        command = [f"{_pg_bin()}/pg_ctl", "-D", f"{self.directory}/data", *args]
        subprocess.run(as_postgres(command), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def postmaster_pid(self) -> int | None:
        try:
            return int(Path(self.directory, "data", "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


def rss_kib(pid: int) -> int | None:
    """A process's resident set, KiB (None when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.split("/")[2]))
    return found


@dataclass
class FaultLog:
    """What was injected, when (seconds from the start)."""

    started: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, what: str) -> None:
        with self.lock:
            self.events.append((time.monotonic() - self.started, what))
        print(f"soak: +{time.monotonic() - self.started:.0f}s {what}", file=sys.stderr, flush=True)


def _admin(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=5,
                           application_name=ADMIN_APPLICATION)


def kill_backends(dsn: str, dbname: str, count: int) -> int:
    """pg_terminate_backend on ``count`` random client backends of ``dbname``; how many."""
    with _admin(dsn) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend' AND application_name <> %s",
            (dbname, ADMIN_APPLICATION),
        )]
        chosen = random.sample(pids, min(count, len(pids)))
        for pid in chosen:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return len(chosen)


def set_statement_timeout(dsn: str, value: str | None) -> None:
    """ALTER SYSTEM statement_timeout (None: reset) and reload: every session takes it."""
    with _admin(dsn) as conn:
        if value is None:
            conn.execute("ALTER SYSTEM RESET statement_timeout")
        else:
            conn.execute(f"ALTER SYSTEM SET statement_timeout = '{int(value)}ms'")
        conn.execute("SELECT pg_reload_conf()")


@contextlib.contextmanager
def reembed_process(dsn: str, name: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m benchmarks.soak_server reembed DSN NAME``: prints ``progress DONE TOTAL``
    after each batch and ``done`` at the end."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.soak_server", "reembed", dsn, name],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


class Faults:
    """The fault schedule, repeated every ``period`` seconds until ``stop`` is set: backend
    kills all along; a fast restart at 20% of the period; the server down for 20 s at 35%; a
    statement_timeout storm at 55%; at 70% a reembed to the other model name, killed after its
    first batch, then resumed to the end -- or, still running after REEMBED_SECONDS (or half the
    period), killed and aborted. A step runs after the one before it has ended."""

    def __init__(self, server: Server, dsn: str, dbname: str, period: float, log: FaultLog,
                 models: tuple[str, str], on_reembed: Callable[[str], None]) -> None:
        self.server, self.dsn, self.dbname, self.period, self.log = (
            server, dsn, dbname, period, log)
        self.models = models
        self.current = models[0]
        self.on_reembed = on_reembed
        self.stop = threading.Event()
        self.down = threading.Event()
        self.reembed_pids: list[int] = []

    def run(self) -> None:
        cycle_start = time.monotonic()
        steps: list[tuple[float, Callable[[], None]]] = [
            (0.20, self.restart), (0.35, self.down_20s), (0.55, self.storm), (0.70, self.reembed)
        ]
        done: set[int] = set()
        next_kill = cycle_start + self.period * 0.05
        while not self.stop.is_set():
            now = time.monotonic()
            elapsed = now - cycle_start
            if elapsed >= self.period:
                cycle_start, done = now, set()
                next_kill = now + self.period * 0.05
                continue
            for index, (at, step) in enumerate(steps):
                if index not in done and elapsed >= at * self.period:
                    done.add(index)
                    self._safely(step)
            if now >= next_kill:
                next_kill = now + max(5.0, self.period / 15)
                self._safely(self.kill_some)
            self.stop.wait(0.5)

    def _safely(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a fault that failed is logged, not fatal
            self.log.note(f"fault {step.__name__} failed: {type(exc).__name__}: {exc}")

    def kill_some(self) -> None:
        if not self.down.is_set():
            self.log.note(f"killed {kill_backends(self.dsn, self.dbname, 3)} backends")

    def restart(self) -> None:
        self.log.note("fast restart")
        self.server.pg_ctl("-m", "fast", "-w", "restart", "-l",
                           f"{self.server.directory}/server.log")
        self.log.note("restarted")

    def down_20s(self) -> None:
        self.down.set()
        self.log.note("server stopped for 20 s")
        self.server.pg_ctl("-m", "fast", "-w", "stop")
        self.stop.wait(20)
        self.server.pg_ctl("-w", "start", "-l", f"{self.server.directory}/server.log")
        self.down.clear()
        self.log.note("server started again")

    def storm(self) -> None:
        seconds = max(10.0, self.period * 0.08)
        self.log.note(f"statement_timeout 30ms for {seconds:.0f} s")
        set_statement_timeout(self.dsn, "30")
        try:
            self.stop.wait(seconds)
        finally:
            set_statement_timeout(self.dsn, None)
        self.log.note("statement_timeout reset")

    def reembed(self) -> None:
        target = self.models[1] if self.current == self.models[0] else self.models[0]
        self.log.note(f"reembed to {target} started")
        with reembed_process(self.dsn, target) as process:
            self.reembed_pids = [process.pid]
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith("progress"):
                    process.kill()
                    self.log.note(f"reembed killed after {line.split()[1]} rows")
                    break
        self.reembed_pids = []
        bound = max(REEMBED_SECONDS, self.period * 0.5)
        for attempt in range(3):
            with reembed_process(self.dsn, target) as process:
                self.reembed_pids = [process.pid]
                try:
                    out, _ = process.communicate(timeout=bound)
                except subprocess.TimeoutExpired:
                    process.kill()
                    self.reembed_pids = []
                    self.log.note(f"resumed reembed still running after {bound:.0f} s: killed")
                    break
            self.reembed_pids = []
            lines = out.splitlines()
            if process.returncode == 0 and lines and lines[-1].startswith("done"):
                self.current = target
                self.on_reembed(target)
                self.log.note(f"reembed to {target} resumed and finished ({lines[-1].strip()})")
                return
            self.log.note(f"resumed reembed exited {process.returncode} (attempt {attempt + 1})")
        self.log.note("reembed did not finish: aborted")
        import pgmem

        pgmem.abort_reembed(self.dsn)


class Named:
    """An embedder under another name: the soak's two "models" are MiniLM under two names,
    so that a reembed between them is real work while searches keep their quality."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner, self.name = inner, name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.inner, attribute)


def _reembed_main(dsn: str, name: str) -> None:
    import pgmem

    embedder = Named(pgmem.SentenceTransformerEmbedder(), name)

    def progress(done: int, total: int) -> None:
        print(f"progress {done} {total}", flush=True)

    report = pgmem.reembed(dsn, embedder, batch_size=64, progress=progress, lock_timeout=2.0,
                           switch_attempts=40)
    print(f"done {report}", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["reembed"]:
    _reembed_main(sys.argv[2], sys.argv[3])
