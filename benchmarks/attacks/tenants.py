"""The attacks of a tenant role, and of inputs an agent chooses (docs/security.md, "Threat
model"): each sets up a scratch database with two tenant roles made by ``pgmem grant-tenant``
and tries one finding of the second red team.

    python -m benchmarks.attacks --only tenant
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgmem
from benchmarks.attacks import Attack, Outcome, Target
from benchmarks.database import scratch_database
from pgmem import cli
from pgmem.embedding_space import embedder_name

BOUND = 2.0  # the victims' lock_timeout, seconds
DIM = 384


class HashEmbedder:
    """Unit vectors seeded by each text's sha256: no model to load."""

    name = "attack-hash-embedder"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).random(DIM, dtype=np.float32) + 0.01
            rows.append(vector / np.linalg.norm(vector))
        return np.stack(rows).astype(np.float32)


_ANALYZER: list[pgmem.TextAnalyzer] = []


def analyzer() -> pgmem.TextAnalyzer:
    if not _ANALYZER:
        _ANALYZER.append(pgmem.TextAnalyzer())
    return _ANALYZER[0]


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = cli.main(list(argv))
    return status, out.getvalue()


class Scene:
    """A scratch database: the owner's DSN, and two tenant roles ``a`` (the victim) and ``b``
    (the attacker) with their DSNs."""

    def __init__(self, dsn: str, a: str, b: str) -> None:
        self.dsn, self.a, self.b = dsn, a, b
        self.dsn_a, self.dsn_b = make_conninfo(dsn, user=a), make_conninfo(dsn, user=b)

    def memory(self, dsn: str | None = None, tenant: str = "default") -> pgmem.Memory:
        return pgmem.Memory(dsn or self.dsn, embedder=HashEmbedder(), nlp=analyzer(),
                            tenant=tenant, lock_timeout=BOUND)


@contextlib.contextmanager
def scene(target: Target) -> Iterator[Scene]:
    suffix = uuid.uuid4().hex[:8]
    a, b = f"attack_victim_{suffix}", f"attack_tenant_{suffix}"
    with psycopg.connect(target.dsn, autocommit=True) as admin:
        for role in (a, b):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with scratch_database(target.dsn, f"pgmem_attack_{suffix}") as dsn:
            pgmem.migrate(dsn)
            model = embedder_name(HashEmbedder())
            for role in (a, b):
                status, out = run_cli("--dsn", dsn, "grant-tenant", role, "--model", model)
                if status != 0:
                    raise RuntimeError(f"grant-tenant {role} failed: {out}")
            yield Scene(dsn, a, b)
    finally:
        with psycopg.connect(target.dsn, autocommit=True) as admin:
            for role in (a, b):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def victim_goes_on(call: Callable[[], Any], bound: float = BOUND + 20) -> str | None:
    """None if ``call()`` succeeds within the lock timeout and a margin; else what happened."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - reported
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        return "still blocked"
    return box.get("error")


def lock_table(target: Target) -> Outcome:
    """A tenant role takes a million session advisory locks (the statement fails, the ~15,000
    it took stay), then floods pgmem's own lock function; the other tenant writes meanwhile."""
    with scene(target) as s, s.memory(s.dsn_a, s.a) as victim, s.memory(s.dsn_b, s.b) as own:
        own.add("Bo likes tea.", user_id="u1")
        with psycopg.connect(s.dsn_b, autocommit=True) as attacker:
            try:
                attacker.execute("select pg_advisory_lock(g) from generate_series(1, 1000000) g")
                refused = False
            except psycopg.errors.InsufficientPrivilege:
                refused = True
            except psycopg.Error:
                refused = False
            attacker.execute("BEGIN")
            attacker.execute(
                "SELECT sum(pgmem.take_locks(%s, s.lock_salt, k.kind, ARRAY[g::text]))"
                "  FROM pgmem.tenant_secrets s,"
                "       (VALUES ('content'), ('item'), ('entity')) k(kind),"
                "       generate_series(1, 100000) g", (s.b,))
            with psycopg.connect(s.dsn, autocommit=True) as owner:
                row = owner.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                    (attacker.info.backend_pid,)).fetchone()
            held = int(row[0]) if row else -1
            failed = victim_goes_on(lambda: victim.add("Ana met Bo in Rome.", user_id="u1"))
            attacker.execute("ROLLBACK")
    if failed or not refused:
        return Outcome("broke", f"pg_advisory_lock refused: {refused}; other tenant: {failed}")
    return Outcome("refused", "pg_advisory_lock: permission denied; pgmem.take_locks x300,000 "
                   f"held {held} locks (at most 768); the other tenant's add went on")


def unsalted_owner(target: Target) -> Outcome:
    """A tenant role takes the lock keys of the owner's 'default' tenant, whose salt it cannot
    read, and of a guessable store key; the owner adds "Erin went to Paris" and puts an item."""
    from pgmem.langgraph import PgmemStore

    with scene(target) as s, s.memory() as owner, PgmemStore(owner) as store:
        took = []
        with psycopg.connect(s.dsn_b, autocommit=True) as attacker:
            attacker.execute("BEGIN")
            for statement in (
                ("SELECT pg_advisory_xact_lock(hashtext('pgmem.entity'),"
                 " hashtext(jsonb_build_array('default', NULL, 'erin')::text))"),
                "SELECT pgmem.take_locks('default', NULL, 'entity', ARRAY['erin'])",
                "SELECT pgmem.take_locks('default', NULL, 'item', ARRAY['[[\"users\"], \"me\"]'])",
            ):
                attacker.execute("SAVEPOINT s")
                try:
                    attacker.execute(statement)
                    took.append(statement)
                except psycopg.errors.InsufficientPrivilege:
                    attacker.execute("ROLLBACK TO SAVEPOINT s")
            failed = victim_goes_on(lambda: owner.add("Erin went to Paris", user_id="u1"))
            failed = failed or victim_goes_on(lambda: store.put(("users",), "me", {"n": 1}))
            attacker.execute("ROLLBACK")
    if failed:
        return Outcome("broke", f"the owner's write: {failed}")
    if took:
        return Outcome("bounded", f"took {len(took)} locks, the owner's writes went on")
    return Outcome("refused", "every lock of the owner's tenant refused; its add and put went on")


def delete_beyond_lock_table(target: Target) -> Outcome:
    """delete_all of a scope linking 3x as many entities as the server's lock table holds,
    while another scope keeps adding."""
    with scene(target) as s:
        with psycopg.connect(s.dsn) as conn:
            row = conn.execute(
                "SELECT current_setting('max_locks_per_transaction')::int"
                " * (current_setting('max_connections')::int"
                "    + current_setting('max_prepared_transactions')::int)").fetchone()
            entities = 3 * int(row[0]) if row else 0
            conn.execute(BULK, {"memories": 500, "entities": entities})
        with pgmem.Memory(s.dsn, embedder=HashEmbedder(), nlp=analyzer()) as owner:
            errors: list[str] = []
            waits: list[float] = []
            done = threading.Event()

            def bystander() -> None:
                n = 0
                while not done.is_set() or n < 2:
                    n += 1
                    started = time.monotonic()
                    failed = victim_goes_on(
                        functools.partial(owner.add, f"Ada {n} met Grace in Lisbon.",
                                          user_id="other"),
                        bound=120)
                    waits.append(time.monotonic() - started)
                    if failed:
                        errors.append(failed)
                        return

            thread = threading.Thread(target=bystander)
            thread.start()
            try:
                deleted = owner.delete_all(user_id="bulk")
            except pgmem.PgmemError as exc:
                deleted, errors = 0, [*errors, f"delete_all: {type(exc).__name__}: {exc}"]
            finally:
                done.set()
                thread.join(60)
    if errors or deleted != 500:
        return Outcome("broke", f"deleted {deleted} of 500; {errors[:2]}")
    return Outcome("bounded", f"deleted 500 memories linking {entities:,} entities (3x the lock "
                   f"table) with at most 256 entity locks; the other scope's {len(waits)} adds "
                   f"went on, the longest in {max(waits):.1f} s (they wait for the delete)")


BULK = """
WITH m AS (
    SELECT g, gen_random_uuid() AS id FROM generate_series(1, %(memories)s) g
), e AS (
    SELECT g, gen_random_uuid() AS id FROM generate_series(1, %(entities)s) g
), memories AS (
    INSERT INTO pgmem.memories (id, user_id, text, content_hash, embedding, lexemes,
                                lexeme_count)
    SELECT m.id, 'bulk', 'bulk memory ' || m.g, md5(m.g::text),
           ARRAY(SELECT random() + m.g * 0 FROM generate_series(1, 384))::real[]::vector,
           to_tsvector('english', 'bulk memory'), 2
      FROM m
), entities AS (
    INSERT INTO pgmem.entities (id, name, label, embedding)
    SELECT e.id, 'entity ' || e.g, 'PERSON',
           ARRAY(SELECT 0.5::real FROM generate_series(1, 384))::vector
      FROM e
)
INSERT INTO pgmem.memory_entities (memory_id, entity_id, user_id)
SELECT m.id, e.id, 'bulk' FROM e JOIN m ON m.g = 1 + (e.g %% %(memories)s)
"""


def planner_statistics(target: Target) -> Outcome:
    """A tenant role's EXPLAIN of the other tenant's frequent user_id: the estimate differs
    from that of an id nobody has, though it reads no row (a documented limit)."""
    with scene(target) as s:
        with psycopg.connect(s.dsn) as conn:
            conn.execute(
                "INSERT INTO pgmem.memories (tenant, user_id, text, content_hash, embedding,"
                " lexemes, lexeme_count)"
                " SELECT %s, CASE WHEN g %% 5 = 0 THEN 'frequent' ELSE 'u' || g END, 't',"
                " md5(g::text), ARRAY(SELECT 0.5::real FROM generate_series(1, 384))::vector,"
                " to_tsvector('t'), 1 FROM generate_series(1, 5000) g", (s.a,))
            conn.execute(  # the attacker's own memories
                "INSERT INTO pgmem.memories (tenant, user_id, text, content_hash, embedding,"
                " lexemes, lexeme_count)"
                " SELECT %s, 'b' || g, 't', md5(g::text),"
                " ARRAY(SELECT 0.5::real FROM generate_series(1, 384))::vector,"
                " to_tsvector('t'), 1 FROM generate_series(1, 5000) g", (s.b,))
            conn.execute("ANALYZE pgmem.memories")
        with psycopg.connect(s.dsn_b, autocommit=True) as attacker:
            def estimate(user: str) -> float:
                plan = attacker.execute(
                    "EXPLAIN (FORMAT JSON) SELECT * FROM pgmem.memories WHERE user_id = %s",
                    (user,)).fetchone()
                return float(plan[0][0]["Plan"]["Plan Rows"]) if plan else 0.0

            frequent, absent = estimate("frequent"), estimate("nobody-has-this")
            rows = attacker.execute(
                "SELECT count(*) FROM pgmem.memories WHERE tenant = %s", (s.a,)).fetchone()
    if rows and rows[0]:
        return Outcome("broke", f"read {rows[0]} rows of another tenant")
    return Outcome("bounded", f"no row read; estimates {frequent:.0f} vs {absent:.0f} rows "
                   "reveal a frequent id (documented: docs/security.md, a database per tenant)")


def store_filter(target: Target) -> Outcome:
    """An LLM-chosen filter of 20,000 keys (129 s of server CPU before)."""
    from pgmem.langgraph import PgmemStore

    with scene(target) as s, s.memory() as owner, PgmemStore(owner) as store:
        store.put(("docs",), "a", {"n": 1})
        try:
            store.search(("docs",), filter={f"k{n}": n for n in range(20_000)})
        except pgmem.FilterLimitError as exc:
            return Outcome("refused", f"FilterLimitError: {exc}")
    return Outcome("broke", "the filter ran")


def store_limit(target: Target) -> Outcome:
    """``limit=2**63``, ``offset=2**63`` and ``max_depth=2**63`` at PgmemStore."""
    from pgmem.langgraph import PgmemStore

    refused = []
    with scene(target) as s, s.memory() as owner, PgmemStore(owner) as store:
        for call in (lambda: store.search(("docs",), limit=2**63),
                     lambda: store.search(("docs",), offset=2**63),
                     lambda: store.list_namespaces(max_depth=2**63)):
            try:
                call()
            except pgmem.DatabaseError as exc:
                return Outcome("broke", f"DatabaseError: {exc}")
            except pgmem.InvalidInputError:
                refused.append(1)
    if len(refused) != 3:
        return Outcome("broke", "a bound was not checked")
    return Outcome("refused", "InvalidInputError for each, before any SQL")


def stats_terminal(target: Target) -> Outcome:
    """Scope ids and a tenant name with an OSC title, a clear-screen, an 8-bit CSI and a
    right-to-left override, shown by ``pgmem stats`` and ``--json``."""
    tenant = "t\x1b]0;owned\x07\x9b2J\u202e"
    controls = ("\x1b", "\x07", "\x9b", "\u202e")
    with scene(target) as s, s.memory(tenant=tenant) as owner:
        owner.add("Ana likes tea.", user_id="u\x1b[2J\x1b[31m", run_id="r\u202eexe")
        shown = [run_cli("--dsn", s.dsn, "--tenant", tenant, *argv)[1]
                 for argv in (["stats"], ["stats", "--json"])]
    leaked = [repr(c) for c in controls if any(c in out for out in shown)]
    if leaked:
        return Outcome("broke", f"reached the terminal: {', '.join(leaked)}")
    return Outcome("refused", "every control escaped, in the table and in --json")


ATTACKS: list[Attack] = [
    Attack("tenant: a million advisory locks", lock_table),
    Attack("tenant: the owner's unsalted lock keys", unsalted_owner),
    Attack("tenant: delete_all beyond the lock table", delete_beyond_lock_table),
    Attack("tenant: planner statistics of another tenant", planner_statistics),
    Attack("tenant: a 20,000-key store filter", store_filter),
    Attack("tenant: store limit/offset/max_depth 2**63", store_limit),
    Attack("tenant: pgmem stats to the terminal", stats_terminal),
]
