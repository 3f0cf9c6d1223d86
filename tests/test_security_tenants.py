"""Tenant roles (issue 25, item 4): ``pgmem grant-tenant`` makes two real login roles tenants
of one schema, and each attacks the other the ways docs/security.md names -- pgmem's advisory
lock keys as the attacker can compute them, an entity-name lock, a duplicate lock, an UPDATE of
embedding_models, a table lock. The victim's calls never wait beyond its ``lock_timeout``, and
only the table lock (which any role allowed to DELETE may take) makes them fail, with a typed,
retryable LockTimeoutError."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from security_support import PgmemCli, pgmem_cli  # noqa: F401 - a fixture

import pgmem
from pgmem.embedding_space import embedder_name

BOUND = 1.0  # the victims' lock_timeout, seconds


@pytest.fixture
def roles(server_dsn: str) -> Iterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    names = (f"pgmem_tenant_a_{suffix}", f"pgmem_tenant_b_{suffix}")
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for role in names:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield names
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for role in names:
            admin.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(
                r=sql.Identifier(role)))


@pytest.fixture
def tenants(
    roles: tuple[str, str], db_dsn: str, pgmem_cli: PgmemCli,  # noqa: F811 - the fixture
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> Iterator[tuple[pgmem.Memory, pgmem.Memory, str, str]]:
    """Memories of tenants a and b, each connected as its own tenant role."""
    a, b = roles
    status, out, err = pgmem_cli("grant-tenant", a, "--model", embedder_name(embedder))
    assert status == 0 and f"role {a} is a tenant role" in out, err
    assert pgmem_cli("grant-tenant", b)[0] == 0  # the model is on record now
    dsn_a, dsn_b = make_conninfo(db_dsn, user=a), make_conninfo(db_dsn, user=b)
    with pgmem.Memory(dsn_a, embedder=embedder, nlp=analyzer, tenant=a,
                      lock_timeout=BOUND) as mem_a, \
            pgmem.Memory(dsn_b, embedder=embedder, nlp=analyzer, tenant=b,
                         lock_timeout=BOUND) as mem_b:
        yield mem_a, mem_b, dsn_a, dsn_b


def within_bound(call: Callable[[], Any], bound: float = BOUND + 2.0) -> Any:
    """``call()``'s result, failing the test if it takes longer than ``bound`` seconds."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back
            box["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(bound + 30)
    assert not thread.is_alive(), "the call is still blocked"
    assert time.monotonic() - started < bound, time.monotonic() - started
    if "error" in box:
        raise box["error"]
    return box["value"]


def entity_key(tenant: str, salt: str | None, name: str) -> str:
    """pgmem's entity-lock key as SQL (sql/queries.sql), with the salt the attacker knows."""
    return f"hashtext(jsonb_build_array({quote(tenant)}, {quote(salt)}, {quote(name)})::text)"


def quote(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


def test_a_tenant_role_cannot_hold_another_tenants_locks(
    tenants: tuple[pgmem.Memory, pgmem.Memory, str, str],
) -> None:
    mem_a, mem_b, _, dsn_b = tenants
    a, b = mem_a.tenant, mem_b.tenant
    mem_a.add("John moved to Paris.", user_id="u1")  # a's entities and salt exist
    with psycopg.connect(dsn_b, autocommit=True) as attacker:
        # b reads only its own salt: a's row is invisible to it
        salts = attacker.execute("SELECT tenant FROM pgmem.tenant_secrets").fetchall()
        assert salts == [(b,)]
        text = "Marie met John in Paris."
        content = hashlib.sha256(text.encode()).hexdigest()
        for key in (
            # every key pgmem's SQL would give for a's writes, with what b can know of the salt
            f"hashtext('pgmem.entity'), {entity_key(a, None, 'john')}",
            f"hashtext('pgmem.entity'), {entity_key(a, None, 'marie')}",
            f"hashtext('pgmem.entity'), {entity_key(a, None, 'paris')}",
            ("hashtext('pgmem.content'), hashtext(jsonb_build_array("
             f"{quote(a)}, NULL, 'u1', NULL, NULL, {quote(content)})::text)"),
            ("hashtext('pgmem.content'), hashtext(jsonb_build_array("  # the unsalted layout
             f"{quote(a)}, 'u1', NULL, NULL, {quote(content)})::text)"),
            f"hashtext('pgmem.entity'), hashtext(jsonb_build_array({quote(a)}, 'john')::text)",
            "hashtext('pgmem.embedding_model'), hashtext('pgmem')",  # the old model lock
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                attacker.execute(f"SELECT pg_advisory_xact_lock({key})")
        attacker.execute("BEGIN")
        # pgmem's own lock function takes a's locks only with a's salt, which b cannot read
        for salt in ("NULL", "(SELECT lock_salt FROM pgmem.tenant_secrets)", "''"):
            attacker.execute("SAVEPOINT s")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                attacker.execute(
                    f"SELECT pgmem.take_locks({quote(a)}, {salt}, 'entity', ARRAY['john'])")
            attacker.execute("ROLLBACK TO SAVEPOINT s")
        # b's own locks, as many as it likes: held, bounded, and not a's
        taken = attacker.execute(
            f"SELECT pgmem.take_locks({quote(b)}, s.lock_salt, k.kind, ARRAY['john', 'marie',"
            " 'paris', 'u1'])"
            " FROM pgmem.tenant_secrets s, (VALUES ('content'), ('item'), ('entity')) k(kind)"
        ).fetchall()
        assert sum(n for n, in taken) >= 3
        # a's calls go on, and are not broken
        added = within_bound(lambda: mem_a.add(text, user_id="u1"))
        assert not added.duplicate
        again = within_bound(lambda: mem_a.add(text, user_id="u1"))
        assert again.duplicate and again.id == added.id
        within_bound(lambda: mem_a.update(added.id, text="Marie met John in Lyon."))
        within_bound(lambda: mem_a.delete(added.id))
        hits = within_bound(lambda: mem_a.search("John in Paris", user_id="u1"))
        assert [h.text for h in hits] == ["John moved to Paris."]
        attacker.execute("ROLLBACK")


def test_a_tenant_role_cannot_change_the_model_on_record(
    tenants: tuple[pgmem.Memory, pgmem.Memory, str, str],
) -> None:
    mem_a, mem_b, _, dsn_b = tenants
    with psycopg.connect(dsn_b, autocommit=True) as attacker:
        for statement in (
            "UPDATE pgmem.embedding_models SET model = 'evil'",
            "SELECT * FROM pgmem.embedding_models FOR UPDATE",
            "DELETE FROM pgmem.embedding_models",
            "INSERT INTO pgmem.tenant_secrets (tenant) VALUES ('x')",
            f"UPDATE pgmem.tenant_secrets SET lock_salt = '' WHERE tenant = {quote(mem_a.tenant)}",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                attacker.execute(statement)
    assert within_bound(lambda: mem_a.add("Ana likes tea.", user_id="u1")).text == "Ana likes tea."
    assert within_bound(lambda: mem_b.add("Bo likes tea.", user_id="u1")).text == "Bo likes tea."


def test_a_table_lock_only_delays_the_other_tenant_within_the_bound(
    tenants: tuple[pgmem.Memory, pgmem.Memory, str, str],
) -> None:
    """A role that may DELETE may LOCK its table (PostgreSQL's rule): the other tenant's calls
    then fail after lock_timeout, typed and retryable, and succeed once the lock is gone."""
    mem_a, _, _, dsn_b = tenants
    mem_a.add("Ana likes tea.", user_id="u1")
    with psycopg.connect(dsn_b, autocommit=True) as attacker:
        attacker.execute("BEGIN")
        attacker.execute("LOCK TABLE pgmem.memories IN ACCESS EXCLUSIVE MODE")
        for call in (lambda: mem_a.add("Ana likes coffee.", user_id="u1"),
                     lambda: mem_a.search("tea", user_id="u1"),
                     lambda: mem_a.get_all(user_id="u1")):
            with pytest.raises(pgmem.LockTimeoutError, match="lock"):
                within_bound(call)
        attacker.execute("ROLLBACK")
    assert within_bound(lambda: mem_a.add("Ana likes coffee.", user_id="u1")).duplicate is False
    assert len(mem_a.get_all(user_id="u1").items) == 2


def test_grant_tenant_needs_a_model_on_record(
    roles: tuple[str, str], pgmem_cli: PgmemCli, db_dsn: str,  # noqa: F811 - the fixture
) -> None:
    status, _, err = pgmem_cli("grant-tenant", roles[0])
    assert status == 2 and "no embedding model is on record" in err
    with psycopg.connect(db_dsn) as conn:  # nothing was changed
        assert conn.execute(
            "SELECT count(*) FROM pgmem.tenant_secrets WHERE tenant <> ''").fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM pg_policies WHERE policyname = 'pgmem_tenant'"
        ).fetchone() == (0,)
    status, _, err = pgmem_cli("grant-tenant", "no_such_role_here", "--model", "m")
    assert status == 2 and "does not exist" in err


ADVISORY_FUNCTIONS = """
    SELECT p.oid::regprocedure::text FROM pg_proc p
     WHERE p.proname ~ '^pg_(try_)?advisory_(xact_)?lock(_shared)?$'"""


def held_advisory_locks(conn: psycopg.Connection[Any], pid: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s", (pid,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_tenant_role_cannot_fill_the_lock_table(
    tenants: tuple[pgmem.Memory, pgmem.Memory, str, str], db_dsn: str,
) -> None:
    """The red team's attack: a tenant role takes a million session advisory locks; the
    statement failed, the ~15,000 it held stopped every other tenant's writes (and new
    connections) until it disconnected. Now it may take none of its own choosing, and pgmem's
    lock function gives it at most 256 per kind, whatever it asks for."""
    mem_a, mem_b, _, dsn_b = tenants
    b = mem_b.tenant
    mem_b.add("Bo likes tea.", user_id="u1")  # b's salt exists
    with psycopg.connect(db_dsn, autocommit=True) as owner:
        functions = [row[0] for row in owner.execute(ADVISORY_FUNCTIONS)]
    assert len(functions) == 16
    with psycopg.connect(dsn_b, autocommit=True) as attacker:
        pid = attacker.info.backend_pid
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            attacker.execute("select pg_advisory_lock(g) from generate_series(1, 1000000) g")
        for function in functions:  # every one of them, with any key
            arguments = "1" if function.endswith("(bigint)") else "1, 2"
            name = function.split("(")[0]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                attacker.execute(f"SELECT {name}({arguments})")
        attacker.execute("BEGIN")
        taken = attacker.execute(
            "SELECT sum(pgmem.take_locks(%s, s.lock_salt, k.kind, ARRAY[g::text]))"
            "  FROM pgmem.tenant_secrets s, (VALUES ('content'), ('item'), ('entity')) k(kind),"
            "       generate_series(1, 20000) g",
            (b,),
        ).fetchone()
        assert taken is not None and taken[0] == 3 * 20000  # each call takes its one bucket
        with psycopg.connect(db_dsn, autocommit=True) as owner:
            assert held_advisory_locks(owner, pid) == 3 * 256
            # another tenant's writes, and new connections, go on
            added = within_bound(lambda: mem_a.add("Ana met Bo in Rome.", user_id="u1"))
            within_bound(lambda: mem_a.delete(added.id))
        attacker.execute("ROLLBACK")


def test_the_owners_tenants_have_salts_no_tenant_role_can_use(
    tenants: tuple[pgmem.Memory, pgmem.Memory, str, str], db_dsn: str,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    """The owner's 'default' tenant had no salt: a tenant role computed and held the lock of
    its entity "erin", and of a store item's guessable key, and the owner's add of "Erin went
    to Paris" and PgmemStore.put failed after the lock timeout. Now every tenant's salt derives
    from the schema's secret, and a tenant role can take no lock of its own choosing."""
    from pgmem.langgraph import PgmemStore

    dsn_b = tenants[3]
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, lock_timeout=BOUND) as owner, \
            PgmemStore(owner) as store:
        with psycopg.connect(dsn_b, autocommit=True) as attacker:
            for key in (  # the unsalted keys of the red team's attack
                f"hashtext('pgmem.entity'), {entity_key('default', None, 'erin')}",
                f"hashtext('pgmem.entity'), {entity_key('default', None, 'paris')}",
                ("hashtext('pgmem.item'), hashtext(jsonb_build_array('default', NULL,"
                 " '[\"users\"]'::jsonb, 'profile')::text)"),
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    attacker.execute(f"SELECT pg_advisory_xact_lock({key})")
            attacker.execute("BEGIN")
            for kind, key in (("entity", "erin"), ("item", '[["users"], "profile"]')):
                attacker.execute("SAVEPOINT s")
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    attacker.execute(
                        "SELECT pgmem.take_locks('default', NULL, %s, ARRAY[%s])", (kind, key))
                attacker.execute("ROLLBACK TO SAVEPOINT s")
            added = within_bound(lambda: owner.add("Erin went to Paris", user_id="u1"))
            assert not added.duplicate
            within_bound(lambda: store.put(("users",), "profile", {"name": "Erin"}))
            attacker.execute("ROLLBACK")
        item = store.get(("users",), "profile")
        assert item is not None and item.value == {"name": "Erin"}
