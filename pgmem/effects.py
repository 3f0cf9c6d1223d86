"""What a call yields: the effects :class:`~pgmem.operations.Operations` asks its facade to run.

A call of ``Memory`` or ``AsyncMemory`` is written once as a generator (an :data:`Operation`)
that yields :class:`Compute` (model work, run directly by ``Memory``; ``AsyncMemory`` awaits
its ``arun`` where it has one, else runs it in a worker thread), :class:`Transaction` (the
statements of one transaction, as :data:`Steps`) and :class:`Batch` (read-only statements sent
together), receives each one's result, and returns the call's. The facades only run what is
yielded, so the two cannot drift."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pgmem.store import Statement

if TYPE_CHECKING:
    from pgmem.connection import ServerCapabilities

T = TypeVar("T")

#: The statements of one transaction: yields each :class:`~pgmem.store.Statement`, receives its
#: result, and returns the transaction's result.
Steps = Generator[Statement[Any], Any, T]


@dataclass(frozen=True)
class Compute(Generic[T]):
    """Model work (NLP, embedding, reranking), outside any transaction: ``Memory`` calls
    ``run``; ``AsyncMemory`` awaits ``arun()`` when there is one (the same work, awaiting an
    embedder's async client instead of holding a thread for its network wait), else calls
    ``run`` in a worker thread."""

    run: Callable[[], T]
    arun: Callable[[], Awaitable[T]] | None = None


@dataclass(frozen=True)
class Transaction(Generic[T]):
    """Statements for one transaction on one connection: ``steps`` gets what the server can do.
    With ``pipeline`` they are sent in psycopg's pipeline mode (a statement that fetches nothing
    travels with the next one). With ``replica`` they only read, and a read replica may answer
    them (see :func:`on_replica`)."""

    steps: Callable[[ServerCapabilities], Steps[T]]
    pipeline: bool = False
    replica: bool = False


@dataclass(frozen=True)
class Batch(Generic[T]):
    """Read-only statements that do not need each other's results, sent together in one round
    trip (see :meth:`pgmem.connection.Connector.batch`): ``statements`` gets what the server can
    do and returns the statements, and how their results (in order) make the batch's."""

    statements: Callable[
        [ServerCapabilities], tuple[Sequence[Statement[Any]], Callable[[list[Any]], T]]
    ]
    replica: bool = False  # a read replica may answer it (see on_replica)


@dataclass(frozen=True)
class Stream:
    """A read too large to hold, in one snapshot: a read-only REPEATABLE READ transaction of its
    own (on a caller's connection in a transaction, a savepoint of it, in the caller's
    snapshot). ``head`` runs first and its result goes to ``start``; then the rows of each
    statement of ``rows`` are read through a server-side cursor, ``itersize`` at a time, and
    each batch (dict rows, read in binary) goes to ``take``: the facade holds one batch at a
    time. ``Memory`` calls ``start`` and ``take`` directly, ``AsyncMemory`` in a worker thread.
    Never retried, never sent to a replica: what ``take`` wrote cannot be taken back."""

    head: Statement[Any]
    start: Callable[[Any], object]
    rows: Sequence[Statement[Any]]
    take: Callable[[list[dict[str, Any]]], object]
    itersize: int


Effect = Compute[Any] | Transaction[Any] | Batch[Any] | Stream
#: A call: yields effects, receives their results, and returns the call's result.
Operation = Generator[Effect, Any, T]


def result_of(statement: Statement[T]) -> Steps[T]:
    """Yield ``statement``; its result (``yield from`` it, for the type)."""
    result: T = yield statement
    return result


def transaction(
    steps: Callable[[ServerCapabilities], Steps[T]], *, pipeline: bool = False
) -> Operation[T]:
    """Yield a :class:`Transaction`; its result."""
    result: T = yield Transaction(steps, pipeline)
    return result


def batch(
    statements: Callable[
        [ServerCapabilities], tuple[Sequence[Statement[Any]], Callable[[list[Any]], T]]
    ],
) -> Operation[T]:
    """Yield a :class:`Batch`; its result."""
    result: T = yield Batch(statements)
    return result


def stream(
    head: Statement[Any],
    start: Callable[[Any], object],
    rows: Sequence[Statement[Any]],
    take: Callable[[list[dict[str, Any]]], object],
    itersize: int,
) -> Operation[None]:
    """Yield a :class:`Stream`."""
    yield Stream(head, start, rows, take, itersize)


def compute(
    run: Callable[[], T], arun: Callable[[], Awaitable[T]] | None = None
) -> Operation[T]:
    """Yield a :class:`Compute`; its result."""
    result: T = yield Compute(run, arun)
    return result


def on_replica(operation: Operation[T], allowed: bool = True) -> Operation[T]:
    """``operation``, each of its transactions and batches marked as reads that a read replica
    may answer (``replica=True``; the facade sends them to one when it has one and the call
    needs no read of its own writes: docs/production.md, "Read replicas"); ``operation`` as it
    is when not ``allowed``."""
    if not allowed:
        return (yield from operation)
    try:
        result: Any = None
        while True:
            try:
                effect = operation.send(result)
            except StopIteration as done:
                value: T = done.value
                return value
            if isinstance(effect, (Transaction, Batch)):
                effect = dataclasses.replace(effect, replica=True)
            result = yield effect
    finally:
        operation.close()
