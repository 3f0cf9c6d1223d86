"""Timers around pgmem's public seams, so that benchmarks time the real calls of ``Memory``
without reaching into it: the embedder and the analyzer (pluggable objects), and psycopg's
connection and cursor classes (``Memory`` accepts a caller's connection or pool).

All timers add to one process-wide :data:`CLOCK`; reset it before the call you measure. Not for
threads: the concurrency benchmark uses none of this.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

import pgmem
from pgmem.embedding import embed_apart, embeds_beside_analysis
from pgmem.nlp import Analysis


@dataclass(frozen=True)
class Sent:
    """A statement a :class:`TimingCursor` sent: its text (placeholders kept), its parameters,
    and the seconds ``execute`` took (for a query that is the round trip with its result)."""

    text: str
    params: Any
    seconds: float
    cursor: Any  # read after the statement's results are in (in pipeline mode, after the sync)

    @property
    def rowcount(self) -> int:
        return int(self.cursor.rowcount)

    @property
    def is_set(self) -> bool:
        """A statement of settings (``SET ...`` or ``SELECT set_config(...)``)."""
        text = self.text.lstrip()
        return text.upper().startswith("SET ") or text.startswith("SELECT set_config(")


# The parts that are model work: "models" counts the seconds during which any of them runs
# (they overlap: a text embeds while spaCy analyses it).
MODEL_PARTS = frozenset({"embedding", "nlp"})


class Clock:
    """Seconds per named part, and the statements sent, since the last :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._models_running = 0
        self._models_since = 0.0

    def reset(self) -> None:
        self.seconds = {}
        self.sent = []

    def model_started(self) -> None:
        """A model's work begins (see :data:`MODEL_PARTS`)."""
        with self._lock:
            if self._models_running == 0:
                self._models_since = time.perf_counter()
            self._models_running += 1

    def model_ended(self) -> None:
        """A model's work ends: "models" grows when none runs any more."""
        with self._lock:
            self._models_running -= 1
            if self._models_running == 0:
                self.add("models", time.perf_counter() - self._models_since)

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] = self.seconds.get(part, 0.0) + seconds

    def get(self, part: str) -> float:
        return self.seconds.get(part, 0.0)

    @contextlib.contextmanager
    def timing(self, part: str) -> Iterator[None]:
        model = part in MODEL_PARTS
        if model:
            self.model_started()
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(part, time.perf_counter() - began)
            if model:
                self.model_ended()


CLOCK = Clock()


class TimedEmbedder:
    """An embedder whose ``embed`` calls are timed as "embedding"."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def embed(self, texts: Sequence[str]) -> Any:
        with CLOCK.timing("embedding"):
            return self.inner.embed(texts)

    def embed_apart(self, texts: Sequence[str]) -> Any:
        """The inner embedder's ``embed_apart`` (pgmem.embedding.embed_apart), timed alike."""
        with CLOCK.timing("embedding"):
            return embed_apart(self.inner, texts)

    @property
    def overlaps_analysis(self) -> bool:
        """The inner embedder's answer (pgmem.embedding.embeds_beside_analysis)."""
        return embeds_beside_analysis(self.inner)


class TimedAnalyzer(pgmem.TextAnalyzer):
    """A :class:`~pgmem.TextAnalyzer` whose ``analyze`` and ``analyze_many`` are timed as
    "nlp"; it shares the inner analyzer's spaCy pipeline."""

    def __init__(self, inner: pgmem.TextAnalyzer) -> None:
        super().__init__()
        self._inner = inner

    @property
    def nlp(self) -> Any:
        return self._inner.nlp

    def analyze(self, text: str) -> Analysis:
        with CLOCK.timing("nlp"):
            return self._inner.analyze(text)

    def analyze_many(self, texts: Any, batch_size: int = 64) -> list[Analysis]:
        with CLOCK.timing("nlp"):
            return self._inner.analyze_many(texts, batch_size=batch_size)

    @property
    def runs_apart(self) -> bool:  # type: ignore[override]
        return self._inner.runs_apart

    def analyze_many_later(
        self, texts: Sequence[str], batch_size: int = 64
    ) -> Callable[[], list[Analysis]]:
        """The inner analyzer's, timed from its start until its analyses are in."""
        CLOCK.model_started()
        began = time.perf_counter()
        wait = self._inner.analyze_many_later(texts, batch_size)

        def timed() -> list[Analysis]:
            try:
                return wait()
            finally:
                CLOCK.add("nlp", time.perf_counter() - began)
                CLOCK.model_ended()

        return timed


class TimingCursor(psycopg.Cursor):  # type: ignore[type-arg]
    """A cursor that records every statement it sends (as tests/test_search.py counts them),
    timing ``execute`` as "statements"."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else query.as_string(self)
        began = time.perf_counter()
        try:
            return super().execute(query, params, **kwargs)
        finally:
            seconds = time.perf_counter() - began
            CLOCK.add("statements", seconds)
            CLOCK.sent.append(Sent(text, params, seconds, self))


class TimedConnection(psycopg.Connection):  # type: ignore[type-arg]
    """A connection whose transaction blocks are timed: "transaction" from BEGIN to COMMIT,
    and "begin" and "commit" for entering and leaving the block; and whose pipeline blocks are
    timed as "pipeline" (a search's round trip: its statements queued, sent, their results
    in)."""

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[Any]:  # type: ignore[override]
        with CLOCK.timing("pipeline"), super().pipeline() as p:
            yield p

    @contextlib.contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        began = time.perf_counter()
        try:
            with super().transaction(*args, **kwargs) as tx:
                entered = time.perf_counter()
                CLOCK.add("begin", entered - began)
                try:
                    yield tx
                finally:
                    leaving = time.perf_counter()
            CLOCK.add("commit", time.perf_counter() - leaving)
        finally:
            CLOCK.add("transaction", time.perf_counter() - began)
