"""``pgmem server``'s background process: it holds the embedded PostgreSQL and the models, so
that a command neither starts a server nor loads a model.

``python -m pgmem.cli.background HOME SCHEMA IDLE`` (started by :func:`start`: by ``pgmem
server start``, or by the first command that needs it, in a session of its own) starts or
joins the embedded server of ``HOME`` and migrates ``SCHEMA``, loads the embedder and the spaCy
pipeline, then answers commands on a Unix socket until SIGTERM, or until no command has been
connected for IDLE seconds (0: never), when it lets go of the server (which stops, unless
another process still uses it).


Its state file ``HOME/server.json`` says where it is (pid, DSN, socket). A command that finds
it — and finds its process alive — uses that DSN and asks the process for embeddings and text
analyses (:class:`RemoteEmbedder`, :class:`RemoteAnalyzer`) instead of loading models.
Stale state is recovered: a state file whose process died is removed by the next reader; a
PostgreSQL that died under a living background process is started again on the next
command's ``ping``; a PostgreSQL left by a killed background process is stopped by the next
command that starts its own (:mod:`pgmem.embedded_server`).

The socket (mode 0600 from its creation: in ``HOME``, or for a long ``HOME`` in a fresh
private folder of the temporary directory) speaks :mod:`pgmem.cli.wire`'s protocol: JSON
frames of bounded size, never pickle, after a handshake in which each side proves it knows the
random key in ``HOME/server.key`` (mode 0600). A command talks only to a server whose state
file, key and socket belong to its user (:mod:`pgmem.safe_paths`) and whose process runs as
that user. Each client is handled in a thread of its own (:class:`SocketServer`): one that
fails the handshake, sends garbage or nothing is dropped within :data:`HANDSHAKE_TIMEOUT` and
never stops the server.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pgmem import safe_paths
from pgmem.answers import answer, value_of
from pgmem.cli import wire
from pgmem.errors import ConfigurationError, DatabaseError, PgmemError, UnsafePathError
from pgmem.server_state import (
    MODULE,
    ServerState,
    make_socket_path,
    own_socket,
    remove_state,
    running,
    state_file,
)
from pgmem.settings import Settings, variable_of

KEY_FILE = "server.key"
LOG_FILE = "server.log"
LOCK_FILE = "server.lock"
ERROR_PREFIX = "pgmem server: error: "
#: Seconds with no command connected after which the server stops itself (0: never).
IDLE_ENV = variable_of("server_idle_timeout")
# Starting loads the models; on a busy machine that takes a while.
START_TIMEOUT = 300.0
#: Seconds a client has to pass the handshake, each read or write of it.
HANDSHAKE_TIMEOUT = 5.0
#: Clients in their handshake at once; more are closed at once (a flood cannot pile up threads).
MAX_HANDSHAKES = 64
#: Seconds a command waits for each answer (a batch of embeddings included).
REPLY_TIMEOUT = 600.0
#: Seconds the server waits for the rest of a request once it has begun.
REQUEST_TIMEOUT = 60.0

logger = logging.getLogger(__name__)


class ServerClient:
    """A connection to the background server, opened on the first call, kept until
    :meth:`close`. Calls from several threads take turns (a search embeds its query while it
    analyses it): one request and its answer at a time on the connection."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._conn: wire.Channel | None = None
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
                    self._conn = self._connect()
                self._conn.send({"op": op, "args": arguments})
                reply = self._conn.recv(idle=REPLY_TIMEOUT, within=REPLY_TIMEOUT)
            if not (isinstance(reply, dict) and isinstance(reply.get("ok"), bool)
                    and "value" in reply):
                raise wire.WireError("an answer that is not pgmem's")
        except (OSError, EOFError, ValueError) as exc:
            self.close()
            raise ConfigurationError(
                f"the pgmem server (pid {self.state.pid}) does not answer: {exc}; "
                "`pgmem server stop` and start it again"
            ) from exc
        return value_of((reply["ok"], reply["value"]))

    def _connect(self) -> wire.Channel:
        """The channel to the server, once its key and socket pass the owner checks."""
        home, socket_file = Path(self.state.home), Path(self.state.socket)
        if not own_socket(home, socket_file):
            raise UnsafePathError(
                f"{state_file(home)} names the socket {socket_file}, which is not where pgmem "
                f"puts the socket of {home}'s server: `pgmem server stop`, or remove the file"
            )
        key_path = home / KEY_FILE
        if safe_paths.check(key_path, secret=True) is None:
            raise ConfigurationError(f"the pgmem server's key {key_path} is gone")
        return wire.connect(
            socket_file, key_path.read_bytes(), pid=self.state.pid,
            timeout=HANDSHAKE_TIMEOUT,
        )

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
    """The background server's embedder: ``embed`` sends the texts over its socket. Its
    ``name`` is the one the server's embedder records its vectors under."""

    def __init__(self, client: ServerClient) -> None:
        self._client = client
        info = client.info()
        self.name: str = info["embedder"]
        self.model_name: str = info.get("embedder_model", self.name)

    def embed_query(self, texts: Sequence[str]) -> Any:
        """The server's embeddings of the queries ``texts`` (a float32 array)."""
        return _array_of(self._client.call("embed", texts=list(texts), kind="query"))

    def embed_documents(self, texts: Sequence[str]) -> Any:
        """The server's embeddings of the stored texts ``texts`` (a float32 array)."""
        return _array_of(self._client.call("embed", texts=list(texts), kind="document"))

    embed = embed_documents


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
            return [_analysis_of(item) for item in client.call("analyze", texts=list(texts))]

        def analyze_tagged(self, text: str) -> Analysis:  # a query's (the default analysis)
            (item,) = client.call("analyze", texts=[text], tagged=True)
            analysis: Analysis = _analysis_of(item)
            return analysis

    return RemoteAnalyzer(info["spacy_config"])


def _array_json(array: Any) -> dict[str, Any]:
    """A float32 array as JSON: its shape and its bytes (little-endian, base64)."""
    import numpy as np

    values = np.ascontiguousarray(array, dtype="<f4")
    return {"shape": list(values.shape), "f4": base64.b64encode(values.tobytes()).decode()}


def _array_of(message: Any) -> Any:
    """The float32 array of :func:`_array_json`'s message.

    Raises:
        WireError: the message is not one.
    """
    import numpy as np

    try:
        shape = tuple(int(n) for n in message["shape"])
        return np.frombuffer(base64.b64decode(message["f4"], validate=True), dtype="<f4") \
            .reshape(shape).astype(np.float32)
    except (TypeError, KeyError, ValueError) as exc:
        raise wire.WireError(f"an embedding answer that is not an array: {exc}") from exc


def _analysis_json(analysis: Any) -> dict[str, Any]:
    return {"lexemes": list(analysis.lexemes),
            "entities": [[e.name, e.surface, e.label] for e in analysis.entities],
            "names": list(analysis.names)}


def _analysis_of(message: Any) -> Any:
    from pgmem.nlp import Analysis, Entity

    try:
        return Analysis(
            lexemes=tuple(str(x) for x in message["lexemes"]),
            entities=tuple(Entity(str(n), str(s), str(label))
                           for n, s, label in message["entities"]),
            names=tuple(str(name) for name in message.get("names", ())),
        )
    except (TypeError, KeyError, ValueError) as exc:
        raise wire.WireError(f"an analysis answer that is not one: {exc}") from exc


# -- the background process ------------------------------------------------------------------


def start(home: Path, schema: str, idle: float) -> ServerState:
    """Start the background server of ``home`` (unless one runs) and wait until it answers,
    models loaded; its state. Two commands starting it at once start one (a lock file).

    Raises:
        ConfigurationError: the data directory cannot be written.
        DatabaseError: the server did not start (the message names its log).
    """
    try:
        created = not home.exists()
        home.mkdir(parents=True, exist_ok=True)
        if created:  # as root the folder above the cluster must be open to its OS user
            home.chmod(0o755 if os.geteuid() == 0 else 0o700)
        safe_paths.check_home(home)
        safe_paths.check(home / LOCK_FILE)
        safe_paths.check(home / LOG_FILE)
        lock = open(home / LOCK_FILE, "ab")  # noqa: SIM115 -- closed below
    except OSError as exc:
        raise ConfigurationError(f"cannot write to pgmem's data directory {home}: {exc}") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        state = running(home)
        if state is not None:
            return state
        with open(home / LOG_FILE, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", MODULE, str(home), schema, repr(idle)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            state = running(home)
            if state is not None and state.pid == process.pid:
                return state
            if process.poll() is not None:
                raise DatabaseError(
                    f"the pgmem server did not start (exit status {process.returncode})"
                    f"{_logged_error(home)}; see {home / LOG_FILE}"
                )
            time.sleep(0.1)
        process.terminate()
        raise DatabaseError(f"the pgmem server did not start within {START_TIMEOUT:.0f} s; "
                            f"see {home / LOG_FILE}")


def _logged_error(home: Path) -> str:
    """': <the error>' the background process last wrote to its log, if any."""
    try:
        lines = (home / LOG_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
    return f": {errors[-1].removeprefix(ERROR_PREFIX)}" if errors else ""


# -- the background process ------------------------------------------------------------------


class SocketServer:
    """The background server's Unix socket: made with mode 0600, each client handled in a
    thread of its own by ``serve(channel)`` once it has passed :mod:`pgmem.cli.wire`'s
    handshake with ``key`` (each side proves it knows it). A client that fails it -- another
    user, a wrong key, garbage, a frame too large, silence (:data:`HANDSHAKE_TIMEOUT`) -- is
    closed; nothing a client does stops :meth:`run`, only :meth:`stop`."""

    def __init__(self, path: Path, key: bytes, serve: Callable[[wire.Channel], None]) -> None:
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
                threading.Thread(target=self._client, args=(client,), daemon=True).start()

    def stop(self) -> None:
        """Make :meth:`run` return (within half a second)."""
        self._stopping.set()

    def _client(self, client: socket.socket) -> None:
        channel = wire.Channel(client)
        try:
            try:
                wire.serve_handshake(channel, self._key, HANDSHAKE_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - any failed handshake only drops it
                logger.debug("pgmem server: a client failed the handshake: %r", exc)
                channel.close()
                return
        finally:
            self._slots.release()
        self._serve(channel)


def _failed(op: str, exc: Exception) -> str:
    """A request's unexpected failure: logged here, reported to the command."""
    logger.exception("pgmem server: %s failed", op)
    return f"the pgmem server failed: {exc}"


class _Background:
    def __init__(self, home: Path, schema: str, idle: float, settings: Settings) -> None:
        from pgmem.embedded_server import EmbeddedServer
        from pgmem.model_work import ModelWork

        self.home = home
        self.schema = schema
        self.settings = settings
        self.server = EmbeddedServer(home, schema=schema, quiet=True)
        # The models as Memory() makes them from these settings (the commands' Memory records
        # its vectors under this embedder's name) -- spaCy in this process unless the settings
        # say otherwise: the server answers one request at a time, and ping reads the pipeline.
        if settings.nlp_process is None:
            settings = settings.replace(nlp_process=False)
        self.models = ModelWork(settings)
        self.embedder, self.analyzer = self.models.embedder, self.models.analyzer
        self.models_lock = threading.Lock()
        self.server_lock = threading.Lock()
        self.idle = idle
        self.clients = 0  # connections open now
        self.last_seen = time.monotonic()  # when one last opened, asked or closed
        self.clients_lock = threading.Lock()

    def run(self) -> None:
        dsn = self.server.start()
        from pgmem.embedding import embed_kind

        embed_kind(self.embedder, ["pgmem loads its models"])  # load both now, not on a command
        self.analyzer.analyze("Alice from Lisbon loads the models.")
        key = secrets.token_bytes(32)
        key_path = self.home / KEY_FILE
        key_path.unlink(missing_ok=True)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        sock = make_socket_path(self.home)
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
        if self.idle > 0:
            self._seen()  # idle from now on: not while the models loaded
            threading.Thread(target=self._stop_when_idle, args=(listener,), daemon=True).start()
        try:
            listener.run()
        finally:
            remove_state(self.home, state)
            self.models.close()
            self.server.stop()

    def _stop_when_idle(self, listener: SocketServer) -> None:
        """Stop once no command has been connected for ``idle`` seconds."""
        while True:
            time.sleep(min(self.idle / 4, 5.0))
            with self.clients_lock:
                idle_for = 0.0 if self.clients else time.monotonic() - self.last_seen
            if idle_for >= self.idle:
                logger.info("pgmem server: no command for %.0f s; stopping", idle_for)
                listener.stop()
                return

    def _seen(self, opened: int = 0) -> None:
        with self.clients_lock:
            self.clients += opened
            self.last_seen = time.monotonic()

    def _serve(self, channel: wire.Channel) -> None:
        self._seen(+1)
        try:
            self._requests(channel)
        finally:
            self._seen(-1)

    def _requests(self, channel: wire.Channel) -> None:
        with channel:
            while True:
                try:
                    request = channel.recv(within=REQUEST_TIMEOUT)  # a command may stay idle
                    op, arguments = request["op"], request["args"]
                    if not isinstance(op, str) or not isinstance(arguments, dict):
                        return
                except Exception:  # noqa: BLE001 - gone, or not a request: drop the client
                    return
                self._seen()
                # the command raises a PgmemError again, by class name
                ok, value = answer(
                    functools.partial(self._answer, op, arguments), functools.partial(_failed, op)
                )
                try:
                    channel.send({"ok": ok, "value": value})
                except (OSError, TypeError, ValueError):
                    return

    def _answer(self, op: str, arguments: dict[str, Any]) -> Any:
        if op == "ping":
            self._ensure_postgres()
            nlp = self.analyzer.nlp
            return {
                "embedder": self.models.embedder_name,
                "embedder_model": getattr(self.embedder, "model_name", self.models.embedder_name),
                "spacy_model": self.analyzer.model_name,
                "spacy_config": self.settings.spacy_model,
                "pipe_names": list(nlp.pipe_names),
                "entities_available": self.analyzer.entities_available,
            }
        if op in ("embed", "analyze"):
            texts = arguments.get("texts")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise PgmemError(f"the pgmem server's {op} takes a list of texts")
            with self.models_lock:
                if op == "embed":
                    from pgmem.embedding import DOCUMENT, KINDS, embed_kind

                    kind = arguments.get("kind", DOCUMENT)
                    if kind not in KINDS:
                        raise PgmemError(f"the pgmem server embeds no {kind!r}: one of {KINDS}")
                    return _array_json(embed_kind(self.embedder, texts, kind))
                if arguments.get("tagged") is True:  # a query's tagged analysis
                    return [_analysis_json(self.analyzer.analyze_tagged(t)) for t in texts]
                return [_analysis_json(a) for a in self.analyzer.analyze_many(texts)]
        raise PgmemError(f"the pgmem server has no operation {op!r}")

    def _ensure_postgres(self) -> None:
        """Start PostgreSQL again if it died (killed, OOM) while this process held it."""
        from pgmem.embedded_server import postmaster_pid

        with self.server_lock:
            if postmaster_pid(self.server.pgdata) is None:
                logger.warning("pgmem server: PostgreSQL was not running; starting it again")
                self.server.stop()
                self.server.start()


def main(argv: Sequence[str]) -> int:
    """Run the background server of ``argv[0]`` (HOME) for schema ``argv[1]``, stopping after
    ``argv[2]`` idle seconds (0: never; default: the settings' ``server_idle_timeout``)."""
    # Its log (server.log): what this process says, and the warnings of the libraries.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logger.setLevel(logging.INFO)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    home, schema = Path(argv[0]), argv[1]
    logger.info("pgmem server starting: data in %s, schema %s", home, schema)
    try:
        settings = Settings.from_env(schema=schema)
        idle = float(argv[2]) if len(argv) > 2 else settings.server_idle_timeout
        _Background(home, schema, idle, settings).run()
    except PgmemError as exc:
        print(f"{ERROR_PREFIX}{exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
