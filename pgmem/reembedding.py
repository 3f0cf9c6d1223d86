"""Move a schema's vectors to another embedding model, online: :func:`reembed`.

Every memory and entity gets a vector of the new model in a new column while applications go
on searching and writing with the old one; then one short transaction switches the columns.
The steps, and what a kill at each leaves, are described at the top of ``sql/reembed.sql``;
running :func:`reembed` again with the same embedder resumes, :func:`abort_reembed` undoes.

Writes made meanwhile by an application on the old model are not lost. Where the writing
process can embed with the new model (:mod:`pgmem.next_model`), each write stores the new
model's vectors of its rows in its own transaction, so that the backlog only shrinks. Else a
memory added during the copy has no new vector yet, and a memory whose text changes loses its
new one (a trigger); the catch-up and then the switch -- which first waits for pgmem's writes
in flight -- embed them. The copy skips rows a write holds (a later pass takes them) and never
overwrites a new vector a write stored. After the switch, a ``Memory`` still open on the old
model refuses to write (each vector write checks the model on record in its transaction) and
re-reads the model within :data:`~pgmem.embedding_space.RECHECK_SECONDS` before searching.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.rows import dict_row

from pgmem import validate
from pgmem.citus import is_distributed
from pgmem.connection import direct_connection
from pgmem.embedding import SentenceTransformerEmbedder, checked_embeddings, embed_kind
from pgmem.embedding_space import EmbeddingSpace, embedder_name, space_of_rows
from pgmem.errors import (
    ConfigurationError,
    EmbeddingError,
    ModelMismatchError,
    PgmemError,
    PgvectorError,
    QueryTimeoutError,
    SchemaError,
)
from pgmem.migrate import (
    DEFAULT_SCHEMA,
    HALFVEC_PGVECTOR,
    check_schema_name,
    check_storage,
    parse_version,
)
from pgmem.queries import sql_blocks
from pgmem.settings import Settings

logger = logging.getLogger(__name__)

#: What ``progress`` may be: True for a tqdm bar on stderr, or a callable getting
#: ``(done, total)`` rows after each batch.
Progress = bool | Callable[[int, int], object]

_NO_ROW = ("", uuid.UUID(int=0))  # before every (tenant, id): tenants are never empty
_TABLES = ("memories", "entities")


@dataclass(frozen=True)
class ReembedReport:
    """What a :func:`reembed` call did.

    ``old`` and ``new``: the model before and after. ``memories`` and ``entities``: the rows
    this call embedded (a resumed call counts only its own). ``at_switch``: rows embedded inside
    the switch (written by applications after the catch-up). ``switch_seconds``: how long the
    switch held its locks. ``switched`` is False when there was nothing to do (the schema was
    already on the embedder's model).
    """

    old: EmbeddingSpace
    new: EmbeddingSpace
    memories: int
    entities: int
    at_switch: int
    switch_seconds: float
    seconds: float
    switched: bool


@dataclass(frozen=True)
class ReembedStatus:
    """The schema's model (with ``space.next`` during a re-embedding) and the rows still
    without a vector of the next model (0 when none is in progress)."""

    space: EmbeddingSpace
    memories_todo: int
    entities_todo: int


class _TooManyLeft(Exception):
    """More rows than a batch came in since the catch-up: catch up again before switching."""


def reembed(
    dsn: str = "",
    embedder: Any = None,
    *,
    schema: str = DEFAULT_SCHEMA,
    storage: str | None = None,
    batch_size: int = 256,
    progress: Progress = False,
    lock_timeout: float = 2.0,
    switch_attempts: int = 20,
) -> ReembedReport:
    """Move every memory and entity of the schema to ``embedder``'s model, online.

    Searches and writes go on with the old model until the switch, one short transaction at
    the end (it waits at most ``lock_timeout`` seconds for its locks, and tries again up to
    ``switch_attempts`` times). A killed call leaves the schema working on the old model; call
    again with the same embedder to resume, or :func:`abort_reembed`. The embedder's name (see
    :func:`pgmem.embedding_space.embedder_name`) and dimension are recorded; ``storage``
    (``vector`` / ``halfvec``; None: by the dimension, ``halfvec`` above 2,000) may change too.
    Rows are embedded ``batch_size`` at a time; ``progress`` shows a tqdm bar (True) or calls
    ``progress(done, total)``.

    Afterwards open ``Memory`` objects with the new embedder: one still on the old model
    raises :class:`~pgmem.errors.ModelMismatchError` instead of writing.

    Raises:
        ModelMismatchError: a re-embedding to another model is in progress.
        ConfigurationError: bad arguments, or another reembed of the schema is running.
        EmbeddingError: the embedder failed or returned unusable vectors.
        PgvectorError: halfvec needs pgvector 0.7.
        SchemaError: the schema is missing or older than revision 0004 (run pgmem.migrate).
        QueryTimeoutError: the switch found no moment to take its locks.
        DatabaseError: the database failed.
    """
    check_schema_name(schema)
    size = validate.batch_size(batch_size)
    if not lock_timeout > 0 or isinstance(switch_attempts, bool) or switch_attempts < 1:
        raise ConfigurationError("lock_timeout must be positive and switch_attempts at least 1")
    model = embedder if embedder is not None else SentenceTransformerEmbedder()
    with _connect(dsn) as conn:
        run = _Run(conn, schema, model, size, progress, lock_timeout, switch_attempts)
        with run.exclusive():
            return run.go(storage)


def abort_reembed(dsn: str = "", *, schema: str = DEFAULT_SCHEMA) -> bool:
    """Undo a re-embedding that has not switched: drop the new column, its indexes and
    trigger and the next model's record. The schema stays on its model. True if one was in
    progress.

    Raises:
        ConfigurationError: a reembed of the schema is running (stop it first).
        DatabaseError: the database failed.
    """
    check_schema_name(schema)
    with _connect(dsn) as conn:
        run = _Run(conn, schema, None, 1, False, 2.0, 1)
        with run.exclusive():
            space = run.space()
            with conn.transaction():
                if run.citus:
                    run.execute("reembed_citus_sequential")
                run.execute("reembed_abort")
            return space.next is not None


def reembed_status(dsn: str = "", *, schema: str = DEFAULT_SCHEMA) -> ReembedStatus:
    """The schema's model, and how far a re-embedding in progress has come.

    Raises:
        SchemaError: the schema is missing or older than revision 0004.
        DatabaseError: the database failed.
    """
    check_schema_name(schema)
    with _connect(dsn) as conn:
        run = _Run(conn, schema, None, 1, False, 2.0, 1)
        space = run.space()
        if not run.columns()["memories_next"]:
            return ReembedStatus(space, 0, 0)
        counts = run.fetch("reembed_counts")[0]
        return ReembedStatus(space, int(counts["memories"]), int(counts["entities"]))


@contextlib.contextmanager
def _connect(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection (CREATE INDEX CONCURRENTLY needs one) with pgvector's types;
    every driver error leaves as a :class:`~pgmem.errors.PgmemError`."""
    with direct_connection(dsn) as conn:
        try:
            register_vector(conn)
        except psycopg.ProgrammingError as exc:  # the vector type is missing
            raise SchemaError(
                "pgvector is not installed in this database: run pgmem.migrate(dsn) first"
            ) from exc
        yield conn


class _Run:
    """One reembed call on one connection."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        schema: str,
        embedder: Any,
        batch_size: int,
        progress: Progress,
        lock_timeout: float,
        switch_attempts: int,
    ) -> None:
        self.conn = conn
        self.schema = schema
        self.citus = is_distributed(conn, schema)
        if self.citus:
            # the re-embedding's trigger touches only the row it fires for, on its shard
            conn.execute("SET citus.enable_unsafe_triggers = on")
        self.embedder = embedder
        self.batch_size = batch_size
        self.progress = progress
        self.lock_timeout = lock_timeout
        self.switch_attempts = switch_attempts
        self.done = {"memories": 0, "entities": 0}
        self._bar: Any = None
        self._total = 0

    # -- statements

    def compose(self, name: str, /, **parts: sql.Composable) -> sql.Composed:
        return sql.SQL(sql_blocks("reembed.sql")[name]).format(
            schema=sql.Identifier(self.schema), **parts)

    def execute(
        self, name: str, params: dict[str, Any] | None = None, /, **parts: sql.Composable
    ) -> None:
        """Run block ``name``; on Citus one statement at a time (a statement of the block ends
        its line with ``;``): Citus sends some DDL's whole query text on to the shards, where
        a text of several statements is refused."""
        if not self.citus:
            self.conn.execute(self.compose(name, **parts), params)
            return
        text = sql_blocks("reembed.sql")[name]
        for statement in text.split(";\n"):
            query = sql.SQL(statement).format(schema=sql.Identifier(self.schema), **parts)
            self.conn.execute(query, params)

    def fetch(
        self, name: str, params: dict[str, Any] | None = None, /, **parts: sql.Composable
    ) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self.compose(name, **parts), params)
            return cur.fetchall()

    def _names(self) -> dict[str, str]:
        return {table: f'"{self.schema}".{table}' for table in _TABLES}

    # -- state

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the schema's re-embedding lock (a session lock: a killed run frees it). Not
        behind a transaction-mode pooler (``PGMEM_POOLER=transaction``): the lock would stay
        on whichever server connection took it."""
        if Settings.from_env().pooler == "transaction":
            raise ConfigurationError(
                "reembed holds a session lock and builds indexes concurrently: give it a direct "
                "connection to the server (or a session-mode pooler's), not a transaction-mode "
                "pooler's, and run it with PGMEM_POOLER unset"
            )
        (row,) = self.fetch("reembed_session_lock", {"schema": self.schema})
        if not row["locked"]:
            raise ConfigurationError(
                f"another pgmem reembed is running on schema {self.schema!r}: wait for it, "
                "or stop it (a stopped run resumes when called again)"
            )
        try:
            yield
        finally:
            if not self.conn.closed and not self.conn.broken:
                with contextlib.suppress(psycopg.Error):
                    self.execute("reembed_session_unlock", {"schema": self.schema})

    def space(self) -> EmbeddingSpace:
        (found,) = self.fetch(
            "reembed_models_table", {"table": f'"{self.schema}".embedding_models'}
        )
        if not found["found"]:
            raise SchemaError(
                f"schema {self.schema!r} has no embedding model on record (missing, or older "
                "than revision 0004): run pgmem.migrate(dsn) or `pgmem migrate` first"
            )
        space = space_of_rows(self.fetch("reembed_models"))
        if space is None:
            raise SchemaError(f"schema {self.schema!r} has no current embedding model row")
        return space

    def columns(self) -> dict[str, Any]:
        return self.fetch("reembed_columns", self._names())[0]

    # -- the steps

    def go(self, storage: str | None) -> ReembedReport:
        started = time.monotonic()
        self.finish()  # what a run killed after its switch left
        old = self.space()
        name = embedder_name(self.embedder)
        if old.next is not None:
            target = old.next
            if target.model != name:
                raise ModelMismatchError(
                    f"a re-embedding of schema {self.schema!r} to {target.describe()} is in "
                    f"progress; the embedder given is {name!r}: resume it with that model, or "
                    "undo it with pgmem.abort_reembed (`pgmem reembed --abort`)"
                )
            if storage is not None and storage != target.storage:
                raise ConfigurationError(
                    f"the re-embedding in progress stores {target.storage}, not {storage}"
                )
        else:
            dim = self.probe_dimension()
            dim, chosen = check_storage(dim, storage)
            target = EmbeddingSpace(name, dim, chosen)
            if old.same_vectors(target):
                return ReembedReport(old, old, 0, 0, 0, 0.0, time.monotonic() - started, False)
            self.check_pgvector(target)
            self.with_lock_retries(lambda: self.begin(target))
        for index in self.fetch("reembed_invalid_indexes", {"schema": self.schema}):
            self.execute("reembed_drop_index", index=sql.Identifier(index["name"]))
        counts = self.fetch("reembed_counts")[0]
        self._total = int(counts["memories"]) + int(counts["entities"])
        with self.progress_bar():
            self.copy(target)
            self.execute("reembed_memories_todo_index")
            self.execute("reembed_entities_todo_index")
            self.execute("reembed_hnsw_index", cosine_ops=sql.SQL(f"{target.storage}_cosine_ops"))
            self.copy(target)  # catch up with writes made meanwhile
            at_switch, switch_seconds = self.switch(target)
        self.finish()
        return ReembedReport(
            old=EmbeddingSpace(old.model, old.dim, old.storage),
            new=EmbeddingSpace(target.model, target.dim, target.storage),
            memories=self.done["memories"],
            entities=self.done["entities"],
            at_switch=at_switch,
            switch_seconds=switch_seconds,
            seconds=time.monotonic() - started,
            switched=True,
        )

    def probe_dimension(self) -> int:
        """The embedder's dimension, from one embedded text."""
        try:
            output = np.asarray(
                embed_kind(self.embedder, ["pgmem dimension probe"]), dtype=np.float32
            )
        except PgmemError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"the embedder failed: {type(exc).__name__}: {exc}") from exc
        if output.ndim != 2 or output.shape[0] != 1:
            raise EmbeddingError(f"the embedder returned shape {output.shape} for 1 text")
        return int(output.shape[1])

    def check_pgvector(self, target: EmbeddingSpace) -> None:
        if target.storage != "halfvec":
            return
        rows = self.fetch("reembed_pgvector_version")
        version = rows[0]["extversion"] if rows else None
        if version is None or parse_version(version) < HALFVEC_PGVECTOR:
            raise PgvectorError(
                f"halfvec storage needs pgvector 0.7 or newer; the server has {version}"
            )

    def begin(self, target: EmbeddingSpace) -> None:
        """Step 1, in one transaction: the next model on record, the columns, the trigger."""
        vector_type = sql.SQL("{}({})").format(sql.SQL(target.storage), sql.Literal(target.dim))
        with self.conn.transaction():
            self.set_lock_timeout()
            self.execute(
                "reembed_begin",
                {"model": target.model, "dim": target.dim, "storage": target.storage},
            )
            self.execute("reembed_add_columns", vector_type=vector_type)
            if not self.citus:
                self.execute("reembed_column_storage")
            self.execute("reembed_add_trigger")

    def set_lock_timeout(self) -> None:
        """The transaction's settings: its lock timeout; on Citus, one connection per worker
        (DDL and function commands after a multi-shard statement need it)."""
        milliseconds = f"{max(1, round(self.lock_timeout * 1000))}ms"
        self.execute("reembed_lock_timeout", {"lock_timeout": milliseconds})
        if self.citus:
            self.execute("reembed_citus_sequential")

    def with_lock_retries(self, step: Callable[[], None]) -> None:
        """Run ``step``; when its locks time out, wait a little and try again."""
        for attempt in range(1, self.switch_attempts + 1):
            try:
                step()
                return
            except QueryTimeoutError:
                if attempt == self.switch_attempts:
                    raise
                logger.info("reembed: locks not granted (attempt %d), trying again", attempt)
                time.sleep(min(0.1 * attempt, 2.0))

    def copy(self, target: EmbeddingSpace) -> None:
        """Steps 2 and 4: embed every row without a new vector, in key order, batch by batch."""
        for table in _TABLES:
            after: tuple[str, uuid.UUID] = _NO_ROW
            while True:
                rows = self.todo(table, after, self.batch_size)
                if not rows:
                    break
                self.write(table, rows, target)
                after = (rows[-1]["tenant"], rows[-1]["id"])

    def todo(self, table: str, after: tuple[str, uuid.UUID], limit: int) -> list[dict[str, Any]]:
        return self.fetch(
            f"reembed_{table}_todo",
            {"after_tenant": after[0], "after_id": after[1], "limit": limit},
        )

    def write(self, table: str, rows: Sequence[dict[str, Any]], target: EmbeddingSpace) -> None:
        vectors = checked_embeddings(self.embedder, [row["text"] for row in rows], target.dim)
        self.execute(
            f"reembed_{table}_write" + ("_citus" if self.citus else ""),
            {
                "tenants": [row["tenant"] for row in rows],
                "ids": [row["id"] for row in rows],
                "hashes": [row["content_hash"] for row in rows],
                "embeddings": list(vectors),
            },
        )
        self.done[table] += len(rows)
        self.advance(len(rows))

    def switch(self, target: EmbeddingSpace) -> tuple[int, float]:
        """Step 5: the rows written since the catch-up, then the swap, in one transaction.
        Returns how many rows it embedded and how long it held its locks."""
        for attempt in range(1, self.switch_attempts + 1):
            started = time.monotonic()
            try:
                with self.conn.transaction():
                    self.set_lock_timeout()
                    self.execute("reembed_lock_tables")
                    left = {
                        table: self.todo(table, _NO_ROW, self.batch_size + 1) for table in _TABLES
                    }
                    if any(len(rows) > self.batch_size for rows in left.values()):
                        raise _TooManyLeft
                    for table, rows in left.items():
                        if rows:
                            self.write(table, rows, target)
                    self.execute("reembed_swap")
                return sum(len(rows) for rows in left.values()), time.monotonic() - started
            except _TooManyLeft:
                self.copy(target)
            except QueryTimeoutError:
                if attempt == self.switch_attempts:
                    raise QueryTimeoutError(
                        f"the re-embedding's switch could not take its locks in "
                        f"{self.switch_attempts} attempts of {self.lock_timeout} s (long "
                        "transactions on pgmem's tables?): call reembed again to retry"
                    ) from None
                logger.info("reembed: switch locks not granted (attempt %d)", attempt)
                time.sleep(min(0.1 * attempt, 2.0))
                self.copy(target)
        raise QueryTimeoutError("the re-embedding's switch found more writes than it could catch")

    def finish(self) -> None:
        """Step 6: NOT NULL on the switched columns, without blocking writes for a scan."""
        checks = self.columns()["not_null_checks"]
        for check in checks:
            table = check.removesuffix("_embedding_not_null")
            parts: dict[str, sql.Composable] = {
                "table": sql.Identifier(table), "check": sql.Identifier(check),
            }
            self.execute("reembed_validate", **parts)
            self.with_lock_retries(functools.partial(self._set_not_null, parts))
        if checks:
            self.execute("reembed_analyze")

    def _set_not_null(self, parts: dict[str, sql.Composable]) -> None:
        with self.conn.transaction():
            self.set_lock_timeout()
            self.execute("reembed_set_not_null", **parts)

    # -- progress

    @contextlib.contextmanager
    def progress_bar(self) -> Iterator[None]:
        if self.progress is True:
            from tqdm import tqdm

            with tqdm(total=self._total, unit="row", desc="reembed") as bar:
                self._bar = bar
                try:
                    yield
                finally:
                    self._bar = None
        else:
            yield

    def advance(self, n: int) -> None:
        done = sum(self.done.values())
        self._total = max(self._total, done)
        if self._bar is not None:
            self._bar.total = max(self._bar.total, self._total)
            self._bar.update(n)
        elif callable(self.progress):
            self.progress(done, self._total)
