"""spaCy in a process of its own: :class:`ProcessAnalyzer`.

A query is embedded while spaCy analyses it. In one process the two take turns for the GIL:
spaCy's networks run layer by layer in Python, and so does the model's forward pass between its
kernels, so each waits for the other and both take longer than alone (docs/benchmarks.md,
"Figures behind the code's choices"). In a child process spaCy has a GIL of its own: the same
pair takes as long as the embedding alone.

The child is a Python running :func:`main` with ``FD MODEL``, started on first use and talking
over a socket pair (``multiprocessing.connection``: pickled messages). It loads a
:class:`~pgmem.nlp.TextAnalyzer` of ``MODEL``, says what it loaded (or why it could not), then
answers requests in the order they came until its end of the pair closes -- when the analyzer is
collected or closed (``Memory.close`` closes those pgmem made), at exit, or when the parent
dies. It ignores Ctrl-C (the parent decides) and writes nothing on the application's stdout. A
child that dies is started again by the next call, which raises
:class:`~pgmem.errors.ConfigurationError` if it cannot be.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

from pgmem.answers import answer, value_of
from pgmem.errors import ConfigurationError
from pgmem.nlp import BLANK, Analysis, TextAnalyzer
from pgmem.settings import Settings, current, variable_of

logger = logging.getLogger("pgmem.nlp")

MODULE = "pgmem.nlp_process"
#: ``PGMEM_NLP_PROCESS=1`` / ``0``: the analyzers pgmem makes run spaCy in a process of their
#: own / in the calling process, whatever the embedder (see :func:`make_analyzer`).
PROCESS_VARIABLE = variable_of("nlp_process")


def make_analyzer(
    model: str | None = None, *, apart: bool = True, settings: Settings | None = None
) -> TextAnalyzer:
    """The analyzer pgmem makes for a spaCy model name (None: ``settings.spacy_model``, else
    the default model): a :class:`ProcessAnalyzer` where ``apart`` (pgmem asks for one when its
    embedder runs beside the analysis: :func:`~pgmem.embedding.embeds_beside_analysis`), else a
    :class:`~pgmem.nlp.TextAnalyzer`. ``settings.nlp_process`` (``PGMEM_NLP_PROCESS=1`` or
    ``0``) decides instead. The blank fallback (lookup tables) always runs here: it has
    nothing to gain. ``settings`` None: the environment's."""
    settings = current(settings)
    chosen = model or settings.spacy_model or None
    if settings.nlp_process is not None:
        apart = settings.nlp_process
    elif not can_start_children():
        apart = False
    if chosen == BLANK or not apart:
        return TextAnalyzer(model, settings=settings)
    return ProcessAnalyzer(model, settings=settings)


def can_start_children() -> bool:
    """Whether this process can start a Python child the way :class:`ProcessAnalyzer` does: a
    POSIX system (file descriptors passed on), and ``sys.executable`` a Python -- not, say, the
    uWSGI binary embedding this interpreter."""
    name = os.path.basename(sys.executable or "").lower()
    return os.name == "posix" and name.startswith("python")


class ProcessAnalyzer(TextAnalyzer):
    """A :class:`~pgmem.nlp.TextAnalyzer` whose analyses run in a child process (see the
    module docstring): the same lemmas and entities, without taking the GIL from the embedder
    or the application. Threads may each have a request in flight (answered in order);
    :attr:`nlp` loads the pipeline here too (only for callers that want the
    ``spacy.Language``)."""

    def __init__(self, model: str | None = None, *, settings: Settings | None = None) -> None:
        super().__init__(model, settings=settings)
        self._lock = threading.Lock()
        self._child: _Child | None = None

    @property
    def entities_available(self) -> bool:
        return bool(self._running().info["entities_available"])

    @property
    def model_name(self) -> str:
        return str(self._running().info["model_name"])

    runs_apart = True

    def analyze(self, text: str) -> Analysis:
        result: Analysis = self._request("analyze", text)()
        return result

    def analyze_many(self, texts: Iterable[str], batch_size: int = 64) -> list[Analysis]:
        return self.analyze_many_later(list(texts), batch_size)()

    def analyze_tagged_later(self, text: str) -> Callable[[], Analysis]:
        """Send ``text`` to the child now; the returned function waits for its
        :meth:`~pgmem.nlp.TextAnalyzer.analyze_tagged` analysis."""
        wait: Callable[[], Analysis] = self._request("analyze_tagged", text)
        return wait

    def analyze_tagged(self, text: str) -> Analysis:
        return self.analyze_tagged_later(text)()

    def analyze_many_later(
        self, texts: Sequence[str], batch_size: int = 64
    ) -> Callable[[], list[Analysis]]:
        """Send ``texts`` to the child now; the returned function waits for their analyses
        (other calls may send theirs meanwhile)."""
        wait: Callable[[], list[Analysis]] = self._request("analyze_many", list(texts), batch_size)
        return wait

    def close(self) -> None:
        """Stop the child process (the next call starts another)."""
        with self._lock:
            if self._child is not None:
                self._child.stop()
                self._child = None

    def _running(self) -> _Child:
        with self._lock:
            return self._started()

    def _started(self) -> _Child:
        """The child, started if there is none, it died, or it is another process's (this one
        was forked from the process that started it: their requests would mix)."""
        if self._child is not None and self._child.owner != os.getpid():
            self._child.abandon()
            self._child = None
        if self._child is None or not self._child.alive():
            self._child = _Child.start(self._model, spacy_ops=self._spacy_ops)
        return self._child

    def _request(self, op: str, *arguments: Any) -> Callable[[], Any]:
        """Send a request to the child (started if need be); the function that waits for its
        answer, once. Requests are answered in the order they were sent, so calls from several
        threads may each have one in flight: whichever waits first reads the answers that came
        before its own and keeps them for their callers."""
        with self._lock:
            child = self._started()
            try:
                ticket = child.send((op, arguments))
            except (EOFError, OSError) as exc:
                raise self._lost(child, op) from exc
            except BaseException:  # interrupted mid-message: a new child for the next call
                child.break_off("a request was interrupted while it was sent")
                raise
        answered = False

        def wait() -> Any:
            nonlocal answered
            if answered:
                raise RuntimeError("an analysis is waited for once")
            answered = True
            try:
                reply = child.reply(ticket)
            except (EOFError, OSError) as exc:
                with self._lock:
                    raise self._lost(child, op) from exc
            return value_of(reply)

        return wait

    def _lost(self, child: _Child, op: str) -> ConfigurationError:
        """The error of a child that stopped during ``op`` (the lock held); it is let go of,
        and the next call starts another."""
        code = child.stop()
        if self._child is child:
            self._child = None
        return ConfigurationError(f"the spaCy process stopped (exit code {code}) during {op}")


class _Child:
    """A running child process and the parent's end of its socket pair."""

    def __init__(self, process: subprocess.Popen[bytes], conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.owner = os.getpid()
        self.info: dict[str, Any] = {}
        # Requests sent and answers read, in order; answers read for other callers, by ticket.
        self._sent = 0
        self._read = 0
        self._answers: dict[int, Any] = {}
        self._arrived = threading.Condition()
        self._reader = False  # a caller is reading the next answer
        self._broken: str | None = None
        # Collected or not, the analyzer stops its child at exit.
        self._finalizer = weakref.finalize(self, _stop, process, conn)

    @classmethod
    def start(cls, model: str | None, *, spacy_ops: bool = True) -> _Child:
        parent, child = Pipe()
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", f"import {MODULE} as m; m.main(m.sys.argv[1:])",
                 str(child.fileno()), model or "", "1" if spacy_ops else "0"],
                # stdout is the application's (an MCP server speaks on it), not the child's
                pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            )
        except OSError as exc:
            parent.close()
            raise ConfigurationError(f"cannot start the spaCy process: {exc}") from exc
        finally:
            child.close()
        started = cls(process, parent)
        try:
            ok, loaded = parent.recv()
        except (EOFError, OSError) as exc:
            code = started.stop()
            raise ConfigurationError(
                f"the spaCy process stopped (exit code {code}) while loading its model"
            ) from exc
        if not ok:
            started.stop()
            raise ConfigurationError(loaded[1])
        for level, message in loaded.pop("log"):
            logger.log(level, "%s", message)
        started.info = loaded
        return started

    def alive(self) -> bool:
        return self._broken is None and self.process.poll() is None

    def send(self, request: Any) -> int:
        """Send a request (the analyzer's lock held); its ticket."""
        self.conn.send(request)
        self._sent += 1
        return self._sent - 1

    def reply(self, ticket: int) -> Any:
        """The answer to request ``ticket``. One caller at a time reads the next answer off
        the pair (keeping it for its caller, if another's); the others wait for it."""
        with self._arrived:
            while ticket not in self._answers:
                if self._broken is not None:
                    raise ConfigurationError(f"the spaCy process was stopped: {self._broken}")
                if self._reader:
                    self._arrived.wait()
                    continue
                self._reader = True
                self._arrived.release()
                try:
                    answer_read = self.conn.recv()
                except (EOFError, OSError):
                    if self._broken is not None:
                        raise ConfigurationError(
                            f"the spaCy process was stopped: {self._broken}"
                        ) from None
                    raise
                except BaseException:  # interrupted (Ctrl-C): its answer would go astray
                    self.break_off("a wait for its answer was interrupted")
                    raise
                finally:
                    self._arrived.acquire()
                    self._reader = False
                    self._arrived.notify_all()
                self._answers[self._read] = answer_read
                self._read += 1
            return self._answers.pop(ticket)

    def break_off(self, why: str) -> None:
        """Kill the child: what it would still send belongs to no call (requests in flight get
        a ConfigurationError saying ``why``)."""
        self._broken = why
        self.kill()

    def stop(self) -> int | None:
        self._finalizer.detach()
        return _stop(self.process, self.conn)

    def kill(self) -> None:
        self._finalizer.detach()
        with contextlib.suppress(OSError):
            self.conn.close()
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()

    def abandon(self) -> None:
        """Let go of a child this (forked) process did not start: close this process's copy
        of the pair, and leave the child to the process that started it."""
        self._finalizer.detach()
        with contextlib.suppress(OSError):
            self.conn.close()


def _stop(process: subprocess.Popen[bytes], conn: Connection) -> int | None:
    """Close the pair (the child's loop ends on it) and wait a moment for the child; kill it
    if it lingers. Its exit code."""
    with contextlib.suppress(OSError):
        conn.close()
    try:
        return process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


# -- the child ---------------------------------------------------------------------------------


def _failed(exc: Exception) -> str:
    return f"the spaCy process failed: {type(exc).__name__}: {exc}"


class _Collected(logging.Handler):
    """What the model's loading logged, for the parent to log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.getMessage()))


def _loaded(model: str | None, spacy_ops: bool) -> TextAnalyzer:
    # The parent's settings, as it passed them: not the environment's.
    analyzer = TextAnalyzer(model, settings=Settings(spacy_ops=spacy_ops))
    analyzer.analyze("pgmem loads its model.")
    return analyzer


def _serve(conn: Connection, model: str | None, spacy_ops: bool = True) -> None:
    collected = _Collected()
    pgmem_logger = logging.getLogger("pgmem")
    pgmem_logger.addHandler(collected)
    pgmem_logger.propagate = False
    try:
        ok, loaded = answer(functools.partial(_loaded, model, spacy_ops), _failed)
    finally:
        pgmem_logger.removeHandler(collected)
        pgmem_logger.propagate = True
    if not ok:
        conn.send((False, loaded))
        return
    analyzer = loaded
    conn.send((True, {"entities_available": analyzer.entities_available,
                      "model_name": analyzer.model_name, "log": collected.records}))
    while True:
        try:
            op, arguments = conn.recv()
        except (EOFError, OSError):
            return
        run = {"analyze": analyzer.analyze, "analyze_many": analyzer.analyze_many,
               "analyze_tagged": analyzer.analyze_tagged}[op]
        conn.send(answer(functools.partial(run, *arguments), _failed))


def main(argv: list[str]) -> None:
    """The child: serve analyses on file descriptor ``argv[0]`` with the spaCy model
    ``argv[1]`` (empty: the default), spaCy's networks on NumPy's BLAS unless ``argv[2]`` is
    ``0`` (:mod:`pgmem.spacy_ops`). Ctrl-C in a terminal reaches the whole process group: the
    parent decides, and the child ends when its end of the pair closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd, model = int(argv[0]), argv[1] or None
    spacy_ops = len(argv) < 3 or argv[2] != "0"
    with Connection(fd) as conn:
        _serve(conn, model, spacy_ops)

