"""A soak: a mixed load for a long time while faults hit the server, then a check of the database.

    python -m benchmarks.soak --minutes M --clients C [--faults] [--out report.md]
                              [--reembed [--reembed-alone] [--reembed-at SECONDS]]
                              [--pg-dir /tmp/pg-soak] [--port 54355] [--keep-server]

It starts a PostgreSQL of its own (``scripts/test-postgres.sh`` in ``--pg-dir`` on ``--port``),
migrates a fresh database and runs C client threads for M minutes over three tenants, each
client the only writer of two scopes (a user; an agent and run) -- the same user and agent ids
recur in every tenant. A client calls, at random: add (sometimes a text its scope already holds:
it must be told ``duplicate``), add_many, update (sometimes to another memory's text: it must be
refused with ``DuplicateError``), delete, search, get_all and history, and checks what each
returns against what it was told before (a hit or record of another scope is a wrong answer).
With ``--faults`` the server meanwhile gets (:class:`benchmarks.soak_server.Faults`, every 10
minutes, or once in a run of under 10): backend kills all along, a fast restart, 20 s down, a
statement_timeout storm, and a reembed to the other model name that is killed and resumed
(and aborted if it has not caught up with the writes after 10 minutes).

With ``--reembed`` (and no ``--faults``), a reembed to the other model name starts at a third of
the run (``--reembed-at``: that many seconds in) (:class:`Reembedding`) while the clients go on:
the clients' Memories are given the other model as ``next_embedder``, so their writes store both
vectors (``--reembed-alone``: they are not, and the reembed alone embeds their rows). The report
shows the backlog (rows still without a vector of the new model) every 10 s, the reembed's rows
per second and when it switched; the clients then move to the new model name.

Then it checks the database (:func:`benchmarks.soak_check.check`): nothing the clients were told
was stored is lost, nothing they were not told of is there, every history chain replays to its
memory's text, every memory has its ADD event and entity links, no orphan entity or link, no
memory visible from another scope (``get_all`` of every scope against the database). The report
has throughput and latency percentiles per minute, connections and resident memory of each
process over time, and every error by type. Exit status 1 when the check fails (or a call
raised anything but a ``PgmemError``); the latency and memory goals are reported, not enforced.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

import pgmem
from benchmarks import report
from benchmarks.soak_check import Finding, Ledger, check
from benchmarks.soak_server import (
    ADMIN_APPLICATION,
    FaultLog,
    Faults,
    Named,
    Server,
    children,
    reembed_process,
    rss_kib,
)
from pgmem.nlp_process import make_analyzer

DBNAME = "pgmem_soak"
TENANTS = ("t0", "t1", "t2")
MODELS = ("soak-minilm-a", "soak-minilm-b")
WEIGHTS = {"add": 22, "add_many": 5, "update": 10, "delete": 5, "search": 35, "get_all": 13,
           "history": 10}
PEOPLE = ("Alice Martin", "Bob Chen", "Carla Diaz", "Dmitri Volkov", "Emma Stone", "Farid Khan",
          "Grace Hopper", "Hiro Tanaka")
PLACES = ("Paris", "Berlin", "Lisbon", "Osaka", "Toronto", "Nairobi", "Lima", "Oslo")
TOPICS = ("the budget", "a hiking trip", "the new kitchen", "jazz records", "a chess match",
          "the garden", "a job offer", "the quarterly report")
SAMPLE_SECONDS = 10.0
# old model just after a reembed's switch.



class NothingToDo(Exception):
    """A call skipped for want of a memory to act on: not counted."""


@dataclass
class Calls:
    """Every call's end time, kind, seconds and error type (None: it succeeded)."""

    started: float = field(default_factory=time.monotonic)
    rows: list[tuple[float, str, float, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    unexpected: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)  # the first of each error type

    @contextlib.contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        t0 = time.monotonic()
        error: str | None = None
        skipped = False
        try:
            yield
        except NothingToDo:
            skipped = True
        except pgmem.PgmemError as exc:
            error = type(exc).__name__
            self.messages.setdefault(error, f"{kind}: {exc}"[:200])
            raise
        except Exception as exc:
            error = f"not a PgmemError: {type(exc).__name__}"
            with self.lock:
                self.unexpected.append(f"{kind}: {type(exc).__name__}: {exc}"[:300])
            raise
        finally:
            t1 = time.monotonic()
            if not skipped:
                with self.lock:
                    self.rows.append((t1 - self.started, kind, t1 - t0, error))


class Fleet:
    """One ``Memory`` per tenant on the schema's current model name, sharing one embedder model
    and one spaCy process; after a reembed, new ones on the other name (the old ones are closed
    a minute later, once their calls in flight are over)."""

    def __init__(self, dsn: str, pool_size: int, helping: bool = False) -> None:
        self.dsn, self.pool_size, self.helping = dsn, pool_size, helping
        self.model = pgmem.SentenceTransformerEmbedder()
        self.analyzer = make_analyzer()
        self.lock = threading.Lock()
        self.retired: list[tuple[float, list[pgmem.Memory]]] = []
        self.memories = self._open(MODELS[0])

    def _open(self, name: str) -> dict[str, pgmem.Memory]:
        embedder = Named(self.model, name)
        # with helping, writes during a reembed to the other name store its vectors too
        other = Named(self.model, MODELS[1] if name == MODELS[0] else MODELS[0])
        return {
            tenant: pgmem.Memory(self.dsn, tenant=tenant, embedder=embedder, nlp=self.analyzer,
                                 pool_max_size=self.pool_size,
                                 next_embedder=other if self.helping else None)
            for tenant in TENANTS
        }

    def of(self, tenant: str) -> pgmem.Memory:
        with self.lock:
            return self.memories[tenant]

    def switch(self, name: str) -> None:
        fresh = self._open(name)
        with self.lock:
            self.retired.append((time.monotonic() + 60, list(self.memories.values())))
            self.memories = fresh

    def close_retired(self, everything: bool = False) -> None:
        with self.lock:
            due = [m for at, ms in self.retired if everything or at < time.monotonic() for m in ms]
            self.retired = [(at, ms) for at, ms in self.retired
                            if not everything and at >= time.monotonic()]
            if everything:
                due += list(self.memories.values())
        for memory in due:
            memory.close()
        if everything:
            self.analyzer.close()


class Client:
    """One client thread: the only writer of two scopes, which it keeps a ledger of."""

    def __init__(self, number: int, fleet: Fleet, calls: Calls, stop: threading.Event) -> None:
        self.number, self.fleet, self.calls, self.stop = number, fleet, calls, stop
        self.rng = random.Random(number)
        tenant = TENANTS[number % len(TENANTS)]
        person = number // len(TENANTS)
        self.ledgers = [
            Ledger((tenant, f"u{person}", None, None), f"[{tenant}/u{person}]"),
            Ledger((tenant, None, f"a{person}", f"r{person}"), f"[{tenant}/a{person}/r{person}]"),
        ]
        self.seq = 0

    def run(self) -> None:
        kinds = list(WEIGHTS)
        weights = list(WEIGHTS.values())
        while not self.stop.is_set():
            ledger = self.rng.choice(self.ledgers)
            kind = self.rng.choices(kinds, weights)[0]
            try:
                with self.calls.timed(kind):
                    getattr(self, kind)(ledger, self.fleet.of(ledger.key[0]))
            except pgmem.DatabaseError:
                self.stop.wait(0.2)  # the server may be down: do not spin
            except Exception:  # noqa: BLE001, S110 - recorded by Calls.timed
                pass

    # -- helpers ----------------------------------------------------------------------------

    def _scope(self, ledger: Ledger) -> dict[str, str | None]:
        _, user_id, agent_id, run_id = ledger.key
        return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}

    def _text(self, ledger: Ledger) -> str:
        self.seq += 1
        rng = self.rng
        return (f"{ledger.tag} note {self.number}-{self.seq}: {rng.choice(PEOPLE)} met "
                f"{rng.choice(PEOPLE)} in {rng.choice(PLACES)} to talk about {rng.choice(TOPICS)}"
                f" for \"Project {rng.randrange(1000)}\".")

    def _settled(self, ledger: Ledger) -> uuid.UUID:
        ids = [i for i in ledger.confirmed if ledger.settled(i)]
        if not ids:
            raise NothingToDo
        return self.rng.choice(ids)

    def _seen(self, ledger: Ledger, record: Any, what: str) -> None:
        scope = (record.user_id, record.agent_id, record.run_id)
        if scope != ledger.key[1:] or ledger.tag not in record.text:
            ledger.wrong(f"{what} of {ledger.tag} returned {record.id} of {scope}")

    # -- the calls --------------------------------------------------------------------------

    def add(self, ledger: Ledger, memory: pgmem.Memory) -> None:
        again = bool(ledger.confirmed) and self.rng.random() < 0.1
        existing = self._settled(ledger) if again else None
        text = ledger.confirmed[existing] if existing else self._text(ledger)
        try:
            result = memory.add(text, metadata={"client": self.number, "seq": self.seq},
                                **self._scope(ledger))
        except pgmem.ConnectionLostError:
            if not again:
                ledger.maybe_added.add(text)
            raise
        if again:
            if not result.duplicate or result.id != existing:
                ledger.wrong(f"re-add of {existing} was not reported as its duplicate")
        elif result.duplicate:
            ledger.wrong(f"a new text was reported as a duplicate of {result.id}")
        else:
            ledger.added(result.id, text)

    def add_many(self, ledger: Ledger, memory: pgmem.Memory) -> None:
        texts = [self._text(ledger) for _ in range(5)]
        try:
            results = memory.add_many(texts, **self._scope(ledger))
        except pgmem.ConnectionLostError:
            ledger.maybe_added.update(texts)
            raise
        for text, result in zip(texts, results, strict=True):
            if result.duplicate or result.text != text:
                ledger.wrong(f"add_many returned {result.id} for another text")
            else:
                ledger.added(result.id, text)

    def update(self, ledger: Ledger, memory: pgmem.Memory) -> None:
        target = self._settled(ledger)
        other = self._settled(ledger)
        duplicate = other != target and self.rng.random() < 0.1
        text = ledger.confirmed[other] if duplicate else self._text(ledger)
        try:
            record = memory.update(target, text=text, **self._scope(ledger))
        except pgmem.DuplicateError:
            if not duplicate:
                ledger.wrong(f"update of {target} to a new text refused as a duplicate")
            return
        except pgmem.ConnectionLostError:
            if not duplicate:
                ledger.update_uncertain(target, text)
            raise
        if duplicate:
            ledger.wrong(f"update of {target} to {other}'s text was not refused")
        if record.text != text:
            ledger.wrong(f"update of {target} returned another text")
        ledger.updated(target, text)

    def delete(self, ledger: Ledger, memory: pgmem.Memory) -> None:
        if len(ledger.confirmed) < 20:
            raise NothingToDo
        target = self._settled(ledger)
        try:
            memory.delete(target, **self._scope(ledger))
        except pgmem.ConnectionLostError:
            ledger.maybe_deleted.add(target)
            raise
        ledger.removed(target)

    def search(self, ledger: Ledger, memory: pgmem.Memory) -> None:
        rng = self.rng
        query = f"{rng.choice(PEOPLE)} in {rng.choice(PLACES)} about {rng.choice(TOPICS)}"
        for hit in memory.search(query, limit=10, **self._scope(ledger)):
            self._seen(ledger, hit, "search")

    def get_all(self, ledger: Ledger, memory: pgmem.Memory) -> None:
        filters = {"client": self.number} if self.rng.random() < 0.5 else None
        page = memory.get_all(limit=50, filters=filters, **self._scope(ledger))
        for record in page.items:
            self._seen(ledger, record, "get_all")

    def history(self, ledger: Ledger, memory: pgmem.Memory) -> None:
        target = self._settled(ledger)
        expected = ledger.confirmed[target]
        events = memory.history(target, **self._scope(ledger))
        if not events or events[-1].new_text != expected:
            ledger.wrong(f"history of {target} does not end with its text")


class Reembedding:
    """``--reembed``: at ``start_at`` (seconds into the run) a reembed to the other model name in
    a process of its own (:func:`benchmarks.soak_server.reembed_process`), while the clients
    write; every SAMPLE_SECONDS the backlog (``reembed_status``) and the memories' count; when
    it switches, the fleet moves to the new name."""

    def __init__(self, dsn: str, fleet: Fleet, started: float, start_at: float,
                 log: FaultLog) -> None:
        self.dsn, self.fleet, self.started, self.start_at, self.log = (
            dsn, fleet, started, start_at, log)
        self.pids: list[int] = []
        self.began: float | None = None
        self.switched: float | None = None
        self.embedded = 0  # rows the reembed process embedded (its last progress line)
        self.backlog: list[tuple[float, int, int, int]] = []  # at, memories, entities, total
        self.stop = threading.Event()

    def run(self) -> None:
        if self.stop.wait(max(0.0, self.started + self.start_at - time.monotonic())):
            return
        target = MODELS[1]
        self.began = time.monotonic()
        self.log.note(f"reembed to {target} started")
        sampling = threading.Thread(target=self._sample, daemon=True)
        sampling.start()
        with reembed_process(self.dsn, target) as process:
            self.pids = [process.pid]
            assert process.stdout is not None
            last = ""
            for line in process.stdout:
                last = line
                if line.startswith("progress"):
                    self.embedded = int(line.split()[1])
            process.wait()
        self.pids = []
        if process.returncode == 0 and last.startswith("done"):
            self.switched = time.monotonic()
            self.fleet.switch(target)
            self.log.note(f"reembed to {target} switched ({self.embedded} rows embedded by it)")
        else:
            self.log.note(f"reembed exited {process.returncode}")
        self.stop.set()
        sampling.join()

    def _sample(self) -> None:
        while True:
            self._backlog()
            if self.stop.wait(SAMPLE_SECONDS):
                self._backlog()
                return

    def _backlog(self) -> None:
        try:
            status = pgmem.reembed_status(self.dsn)
            with psycopg.connect(self.dsn, autocommit=True,
                                 application_name=ADMIN_APPLICATION) as conn:
                (total,) = conn.execute("SELECT count(*) FROM pgmem.memories").fetchone() or (0,)
        except pgmem.PgmemError:
            return
        self.backlog.append((time.monotonic() - self.started, status.memories_todo,
                             status.entities_todo, int(total)))

    def report(self, calls: Calls, helping: bool, clients_stopped: float) -> list[str]:
        if self.began is None:
            return []
        began = self.began - self.started
        end = (self.switched or time.monotonic()) - self.started
        after = (f" ({end - clients_stopped:.0f} s after the clients stopped)"
                 if end > clients_stopped else " (the clients writing all along)")
        writes = sum(1 for t, kind, _, e in calls.rows
                     if began <= t < end and e is None and kind in ("add", "update"))
        writes += 5 * sum(1 for t, kind, _, e in calls.rows
                          if began <= t < end and e is None and kind == "add_many")
        seconds = max(end - began, 1e-9)
        lines = ["## Re-embedding under load", "",
                 ("- writes "
                  f"{'also store the new model' if helping else 'store the old model only'}"
                  f" (`--reembed{'' if helping else ' --reembed-alone'}`)"),
                 f"- started at {began / 60:.1f} min; "
                 + (f"switched at {end / 60:.1f} min, after {seconds:.0f} s{after}"
                    if self.switched else f"not switched ({seconds:.0f} s)"),
                 (f"- rows embedded by the reembed: {self.embedded} "
                  f"({self.embedded / seconds:.1f} rows/s); memories written by the clients "
                  f"meanwhile: {writes} ({writes / seconds:.1f}/s)"), "",
                 report.table(["s", "memories to do", "entities to do", "memories"],
                              [[f"{at - began:.0f}", m, e, n]
                               for at, m, e, n in self.backlog]), ""]
        return lines


@dataclass
class Sample:
    """Connections and resident memory (KiB) at one moment."""

    at: float
    connections: dict[str, int]
    rss: dict[str, int]


class Sampler:
    """Every SAMPLE_SECONDS: the database's connections by state, and the RSS of the soak
    process, its spaCy child, a running reembed and the PostgreSQL server (all processes)."""

    def __init__(self, server: Server, dsn: str, faults: Faults | None, started: float,
                 reembedding: Reembedding | None = None) -> None:
        self.server, self.dsn, self.faults, self.started = server, dsn, faults, started
        self.reembedding = reembedding
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_SECONDS):
            self.samples.append(Sample(time.monotonic() - self.started, self._connections(),
                                       self._rss()))

    def _connections(self) -> dict[str, int]:
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=3,
                                 application_name=ADMIN_APPLICATION) as conn:
                return {state or "none": n for state, n in conn.execute(
                    "SELECT state, count(*) FROM pg_stat_activity WHERE datname = %s "
                    "AND application_name <> %s GROUP BY 1", (DBNAME, ADMIN_APPLICATION))}
        except psycopg.Error:
            return {}

    def _rss(self) -> dict[str, int]:
        me = os.getpid()
        reembed = set(self.faults.reembed_pids) if self.faults else set()
        reembed |= set(self.reembedding.pids) if self.reembedding else set()
        rss = {"soak": rss_kib(me) or 0}
        rss["spacy child"] = sum(rss_kib(p) or 0 for p in children(me) if p not in reembed)
        rss["reembed"] = sum(rss_kib(p) or 0 for p in reembed)
        postmaster = self.server.postmaster_pid()
        if postmaster:
            rss["postgres"] = (rss_kib(postmaster) or 0) + sum(
                rss_kib(p) or 0 for p in children(postmaster))
        return rss


def fresh_database(server_dsn: str) -> str:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(DBNAME)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
    return server_dsn.rsplit("/", 1)[0] + f"/{DBNAME}"


def visible_elsewhere(fleet: Fleet, ledgers: list[Ledger], dsn: str) -> Finding:
    """Every scope's memories through get_all (all pages) against the database's."""
    finding = Finding()
    with psycopg.connect(dsn, autocommit=True, application_name=ADMIN_APPLICATION) as conn:
        for ledger in ledgers:
            tenant, user_id, agent_id, run_id = ledger.key
            stored = {row[0] for row in conn.execute(
                "SELECT id FROM pgmem.memories WHERE tenant = %s AND user_id IS NOT DISTINCT "
                "FROM %s AND agent_id IS NOT DISTINCT FROM %s AND run_id IS NOT DISTINCT FROM %s",
                (tenant, user_id, agent_id, run_id))}
            seen: set[uuid.UUID] = set()
            cursor = None
            memory = fleet.of(tenant)
            while True:
                page = memory.get_all(user_id=user_id, agent_id=agent_id, run_id=run_id,
                                      limit=1000, cursor=cursor)
                for record in page.items:
                    seen.add(record.id)
                    if record.id not in stored:
                        finding.add("visible from another scope", f"{record.id} in {ledger.tag}")
                cursor = page.next_cursor
                if cursor is None:
                    break
            if stored - seen:
                finding.add("not visible in its scope", ledger.tag, len(stored - seen))
    return finding


def per_minute(calls: Calls, minutes: int) -> list[list[object]]:
    rows = []
    by_minute: dict[int, list[tuple[float, str, float, str | None]]] = defaultdict(list)
    for row in calls.rows:
        by_minute[min(int(row[0] // 60), minutes - 1)].append(row)
    for minute in range(minutes):
        done = by_minute.get(minute, [])
        ok = [seconds for _, _, seconds, error in done if error is None]
        errors = len(done) - len(ok)
        rows.append([minute + 1, f"{len(ok) / 60:.1f}", errors,
                     *(report.ms(report.percentile(ok, q)) if ok else "-" for q in (50, 95, 99))])
    return rows


def p99_of(calls: Calls, start: float, end: float) -> float:
    ok = [s for t, _, s, e in calls.rows if e is None and start <= t < end]
    return report.percentile(ok, 99) if ok else float("nan")


def samples_table(samples: list[Sample], every: float) -> list[list[object]]:
    rows, next_at = [], 0.0
    for sample in samples:
        if sample.at < next_at and sample is not samples[-1]:
            continue
        next_at = sample.at + every
        rss = sample.rss
        rows.append([f"{sample.at / 60:.0f}", sum(sample.connections.values()),
                     sample.connections.get("active", 0),
                     sample.connections.get("idle in transaction", 0),
                     *(f"{rss.get(k, 0) / 1024:.0f}" for k in
                       ("soak", "spacy child", "reembed", "postgres"))])
    return rows


def mean_rss(samples: list[Sample], start: float, end: float, key: str) -> float:
    values = [s.rss.get(key, 0) for s in samples if start <= s.at < end and s.rss.get(key)]
    return sum(values) / len(values) if values else float("nan")


def write_report(args: argparse.Namespace, calls: Calls, samples: list[Sample],
                 log: FaultLog, finding: Finding, wall: float,
                 reembedding: Reembedding | None = None) -> tuple[str, bool]:
    minutes = args.minutes
    flags = (" --faults" if args.faults else "") + (" --reembed" if args.reembed else "") + (
        " --reembed-alone" if args.reembed_alone else "") + (
        f" --reembed-at {args.reembed_at:g}" if args.reembed_at is not None else "")
    lines = [(f"# Soak: {minutes} min, {args.clients} clients, faults "
             f"{'on' if args.faults else 'off'}"), "",
             (f"`python -m benchmarks.soak --minutes {minutes} --clients {args.clients}"
             f"{flags}` ({wall / 60:.1f} min wall, "
             f"{len(calls.rows)} calls)"), ""]
    lines += ["## Per minute (latency of successful calls)", "",
              report.table(["min", "calls/s", "errors", "p50", "p95", "p99"],
                           per_minute(calls, minutes)), ""]
    kinds = Counter(kind for _, kind, _, e in calls.rows if e is None)
    lines += ["## Calls by kind", "", report.table(
        ["kind", "ok", "p50", "p99"],
        [[k, kinds[k], *(report.ms(report.percentile(
            [s for _, kk, s, e in calls.rows if kk == k and e is None], q)) if kinds[k] else "-"
            for q in (50, 99))] for k in WEIGHTS]), ""]
    errors = Counter((e, kind) for _, kind, _, e in calls.rows if e is not None)
    lines += ["## Errors by type", "", report.table(
        ["error", "call", "count"], [[e, k, n] for (e, k), n in errors.most_common()]
    ) if errors else "none", "", *(f"- {e}, first: {m}" for e, m in calls.messages.items()), ""]
    every = max(SAMPLE_SECONDS, minutes * 60 / 20)
    lines += ["## Connections and resident memory (MiB) over time", "", report.table(
        ["min", "connections", "active", "idle in tx", "soak", "spaCy child", "reembed",
         "postgres (all)"], samples_table(samples, every)), ""]
    if reembedding is not None:
        lines += reembedding.report(calls, helping=not args.reembed_alone, clients_stopped=wall)
    if log.events:
        lines += ["## Faults", "", *(f"- +{t:.0f}s {what}" for t, what in log.events), ""]
    window = min(10.0, minutes / 3) * 60
    first, last = p99_of(calls, 0, window), p99_of(calls, minutes * 60 - window, minutes * 60)
    rss_first = mean_rss(samples, 0, window, "soak")
    rss_last = mean_rss(samples, minutes * 60 - window, minutes * 60 + 60, "soak")
    growth = rss_last / rss_first - 1 if rss_first else float("nan")
    passed = not finding.counts and not calls.unexpected
    lines += ["## Check", "",
              (f"- lost: {finding.lost}, leaked: {finding.leaked}, "
              f"inconsistent: {finding.inconsistent}"),
              *(f"  - {kind}: {n} (e.g. {'; '.join(finding.examples.get(kind, []))})"
                for kind, n in finding.counts.items()),
              f"- errors that are not a PgmemError: {len(calls.unexpected)}",
              *(f"  - {u}" for u in calls.unexpected[:5]),
              (f"- p99 of the last {window / 60:.0f} min / first {window / 60:.0f} min: "
              f"{report.ms(last)} / {report.ms(first)} = {last / first:.2f} (goal <= 1.5)"),
              (f"- soak process RSS, mean of the last {window / 60:.0f} min / first: "
              f"{rss_last / 1024:.0f} / {rss_first / 1024:.0f} MiB = {growth:+.1%} (goal < +10%)"),
              f"- check: {'PASSED' if passed else 'FAILED'}", ""]
    return "\n".join(lines), passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--faults", action="store_true")
    parser.add_argument("--reembed", action="store_true",
                        help="a reembed to the other model name at a third of the run")
    parser.add_argument("--reembed-at", type=float,
                        help="with --reembed: seconds into the run (default: a third of it)")
    parser.add_argument("--reembed-alone", action="store_true",
                        help="with --reembed: the clients' writes do not help it")
    parser.add_argument("--out", help="write the report (markdown) there too")
    parser.add_argument("--pg-dir", default=os.environ.get("PGMEM_SOAK_PG_DIR", "/tmp/pg-soak"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PGMEM_SOAK_PG_PORT",
                                                                       "54355")))
    parser.add_argument("--keep-server", action="store_true")
    args = parser.parse_args(argv)
    if args.reembed and args.faults:
        parser.error("--reembed and --faults both start a reembed: choose one")
    if args.reembed_alone and not args.reembed:
        parser.error("--reembed-alone goes with --reembed")

    server = Server(args.pg_dir, args.port)
    server.start()
    try:
        return _soak(args, server)
    finally:
        if not args.keep_server:
            server.stop()


def _soak(args: argparse.Namespace, server: Server) -> int:
    dsn = fresh_database(server.dsn)
    pgmem.migrate(dsn)
    fleet = Fleet(dsn, pool_size=max(2, args.clients // len(TENANTS) + 2),
                  helping=args.reembed and not args.reembed_alone)
    for tenant in TENANTS:  # load the models and open the pools before the clock starts
        warm = fleet.of(tenant)
        warm.search("warm up", user_id="warm-up")
        warm.get_all(user_id="warm-up")
    calls = Calls()
    log = FaultLog(started=calls.started)
    stop = threading.Event()
    faults = (Faults(server, dsn, DBNAME, period=min(args.minutes, 10) * 60, log=log,
                     models=MODELS, on_reembed=fleet.switch) if args.faults else None)
    start_at = args.minutes * 60 / 3 if args.reembed_at is None else args.reembed_at
    reembedding = (Reembedding(dsn, fleet, calls.started, start_at, log)
                   if args.reembed else None)
    sampler = Sampler(server, dsn, faults, calls.started, reembedding)
    clients = [Client(n, fleet, calls, stop) for n in range(args.clients)]
    threads = [threading.Thread(target=c.run, name=f"client-{c.number}", daemon=True)
               for c in clients]
    extra = [threading.Thread(target=sampler.run, daemon=True)]
    if faults:
        extra.append(threading.Thread(target=faults.run, daemon=True))
    if reembedding:
        extra.append(threading.Thread(target=reembedding.run, daemon=True))
    for thread in threads + extra:
        thread.start()
    deadline = calls.started + args.minutes * 60
    while time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        fleet.close_retired()
    stop.set()
    wall = time.monotonic() - calls.started
    if faults:
        faults.stop.set()
        extra[1].join(timeout=900)  # a reembed in progress finishes first
    sampler.stop.set()
    for thread in threads:
        thread.join(timeout=120)
    if reembedding:  # a reembed in progress finishes, now without writers
        extra[1].join(timeout=900)
    _ensure_up(server, dsn, log)
    ledgers = [ledger for client in clients for ledger in client.ledgers]
    finding = check(dsn, ledgers)
    for kind, n in visible_elsewhere(fleet, ledgers, dsn).counts.items():
        finding.counts[kind] += n
    fleet.close_retired(everything=True)
    text, passed = write_report(args, calls, sampler.samples, log, finding, wall, reembedding)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text)
    return 0 if passed else 1


def _ensure_up(server: Server, dsn: str, log: FaultLog) -> None:
    """The server running and statement_timeout reset, whatever a fault left."""
    for attempt in range(3):
        try:
            from benchmarks.soak_server import set_statement_timeout

            set_statement_timeout(dsn, None)
            return
        except psycopg.Error:
            log.note(f"server not answering after the run (attempt {attempt + 1}): starting it")
            with contextlib.suppress(Exception):
                server.pg_ctl("-w", "start", "-l", f"{server.directory}/server.log")
            time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
