"""Test fixtures: one PostgreSQL server per session, a migrated template database, and a fresh
clone of it per test (``CREATE DATABASE ... TEMPLATE``, a few ms).

The server comes from ``PGMEM_TEST_DSN`` (``scripts/test-postgres.sh start`` prints one), else
from testcontainers' ``pgvector/pgvector`` image. With neither, database tests are skipped —
except under ``CI=true``, where that is an error.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from docker.errors import DockerException
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgmem
from tests import citus_support, pooler_support

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# A command run by a test starts no background `pgmem server` unless the test asks for one.
os.environ.setdefault("PGMEM_AUTOSTART", "0")

#: Skips that may happen under ``CI=true`` (the start of their reason): the ones that are the
#: design, not a missing part. Any other skip fails a CI run, so an extra that failed to install
#: cannot hide its tests.
ALLOWED_CI_SKIPS = (
    "not on Citus:",  # a test marked also_on_citus that names why one half does not apply
    "a German spaCy model would lemmatize instead",  # runs when no German model is installed
    "this server has no JIT",  # a PostgreSQL built without LLVM
    pooler_support.SKIP_REASON,  # a not_behind_pooler test, when PGMEM_TEST_POOLER is set
)

#: The pool mode of the PgBouncer the tests' databases are reached through
#: (``PGMEM_TEST_POOLER``, tests/pooler_support.py), or None: directly. pgmem is told so.
POOLER_MODE = pooler_support.mode_from_env()
if POOLER_MODE is not None:
    os.environ["PGMEM_POOLER"] = POOLER_MODE


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Behind the tests' PgBouncer, skip a test marked ``not_behind_pooler(reason)``."""
    marker = item.get_closest_marker("not_behind_pooler")
    if POOLER_MODE is not None and marker is not None:
        pytest.skip(f"{pooler_support.SKIP_REASON} {marker.args[0]}")


def _fail_unlisted_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under ``CI=true``, a skip whose reason is not on :data:`ALLOWED_CI_SKIPS` is a failure."""
    if not report.skipped or os.environ.get("CI") != "true" or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not reason.startswith(ALLOWED_CI_SKIPS):
        report.outcome = "failed"
        report.longrepr = (f"skipped under CI=true, and {reason!r} is not on "
                           "tests/conftest.py's ALLOWED_CI_SKIPS: install what the test needs")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _fail_unlisted_skip(outcome.get_result())  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _fail_unlisted_skip(outcome.get_result())  # type: ignore[attr-defined]


HOW_TO_GET_A_SERVER = (
    "no PostgreSQL for tests: run `eval \"$(scripts/test-postgres.sh start)\"` (sets "
    "PGMEM_TEST_DSN) or start a Docker engine for testcontainers"
)


def _container_dsn() -> tuple[str, object]:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        from testcontainers.postgres import PostgresContainer

    container = PostgresContainer("pgvector/pgvector:pg17", driver=None)
    container.start()
    return container.get_connection_url(), container


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """A DSN for a database on the test server, with rights to create databases."""
    dsn = os.environ.get("PGMEM_TEST_DSN")
    container = None
    if not dsn:
        try:
            dsn, container = _container_dsn()
        except DockerException as exc:  # raised at construction when no engine answers
            message = f"{HOW_TO_GET_A_SERVER} ({type(exc).__name__}: {exc})"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    try:
        psycopg.connect(dsn, connect_timeout=10).close()
    except psycopg.Error as exc:
        message = f"the test server at {dsn} does not answer: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    yield dsn
    if container is not None:
        container.stop()  # type: ignore[attr-defined]


def database_dsn(server_dsn: str, name: str) -> str:
    """The DSN of database ``name`` on the test server."""
    return make_conninfo(server_dsn, dbname=name)


def create_database(server_dsn: str, name: str, template: str | None = None) -> str:
    """Create database ``name`` (from ``template``) and return its DSN."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(query)
    return database_dsn(server_dsn, name)


def drop_database(server_dsn: str, name: str) -> None:
    """Drop database ``name``, disconnecting whoever is still on it."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def template_database(server_dsn: str) -> Iterator[str]:
    """A database migrated once per session, cloned by :func:`db_dsn`."""
    name = f"pgmem_template_{os.getpid()}"
    drop_database(server_dsn, name)
    pgmem.migrate(create_database(server_dsn, name))
    yield name
    drop_database(server_dsn, name)


@pytest.fixture
def empty_db_dsn(server_dsn: str) -> Iterator[str]:
    """A new database with nothing in it."""
    name = f"pgmem_test_{uuid.uuid4().hex[:12]}"
    yield create_database(server_dsn, name)
    drop_database(server_dsn, name)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``also_on_citus`` that takes ``db_dsn`` (or a fixture built on it) runs
    twice: ``[server]`` on one server, ``[citus]`` on the cluster's distributed ``pgmem``
    schema, marked ``citus``; ``not_on_citus(reason)`` skips the second run, saying why."""
    if "db_dsn" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "also_on_citus"
    ) and POOLER_MODE is None:  # behind the tests' PgBouncer, the server's run only
        marks = [pytest.mark.citus]
        exempt = metafunc.definition.get_closest_marker("not_on_citus")
        if exempt is not None:
            marks.append(pytest.mark.skip(reason=f"not on Citus: {exempt.args[0]}"))
        metafunc.parametrize(
            "db_dsn",
            [
                pytest.param("server", id="server"),
                pytest.param("citus", id="citus", marks=marks),
            ],
            indirect=True,
        )


@pytest.fixture(scope="session")
def tests_pooler(server_dsn: str) -> Iterator[pooler_support.PgBouncer | None]:
    """The PgBouncer ``PGMEM_TEST_POOLER`` asks for, in front of the test server (None
    without the variable)."""
    if POOLER_MODE is None:
        yield None
        return
    with pooler_support.pgbouncer(server_dsn, POOLER_MODE) as bouncer:
        yield bouncer


@pytest.fixture
def db_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, migrated database for one test (through the tests' PgBouncer when
    ``PGMEM_TEST_POOLER`` is set); for a test's ``[citus]`` run, the cluster's distributed
    ``pgmem`` schema, emptied (tests/citus_support.py)."""
    if getattr(request, "param", "server") == "citus":
        dsn, facts = request.getfixturevalue("citus_default_schema")
        citus_support.empty_schema(dsn, facts)
        yield dsn
        return
    server_dsn: str = request.getfixturevalue("server_dsn")
    template_database: str = request.getfixturevalue("template_database")
    bouncer: pooler_support.PgBouncer | None = request.getfixturevalue("tests_pooler")
    name = f"pgmem_test_{uuid.uuid4().hex[:12]}"
    dsn = create_database(server_dsn, name, template=template_database)
    yield dsn if bouncer is None else bouncer.dsn(dsn)
    drop_database(server_dsn, name)


@pytest.fixture(scope="session")
def embedder() -> pgmem.SentenceTransformerEmbedder:
    """The real MiniLM embedder, loaded once."""
    return pgmem.SentenceTransformerEmbedder()


@pytest.fixture(scope="session")
def analyzer() -> pgmem.TextAnalyzer:
    """The real spaCy pipeline, loaded once."""
    return pgmem.TextAnalyzer()


@pytest.fixture
def memory(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> Iterator[pgmem.Memory]:
    """A Memory on a fresh database with the real models."""
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        yield mem


@pytest.fixture(scope="session")
def citus_dsn() -> str:
    """The DSN of the test Citus cluster's coordinator (tests/citus_support.py)."""
    return citus_support.cluster_dsn()


@pytest.fixture(scope="session")
def citus_default_schema(citus_dsn: str) -> Iterator[tuple[str, str]]:
    """The cluster's DSN, its ``pgmem`` schema migrated and distributed once per session (for
    the ``[citus]`` runs of tests that name ``pgmem.<table>`` in their SQL), and the schema's
    reference rows (citus_support.schema_facts); dropped at the end."""
    citus_support.drop_schema(citus_dsn, "pgmem")
    pgmem.migrate(citus_dsn)
    citus_support.distribute(citus_dsn)
    yield citus_dsn, citus_support.schema_facts(citus_dsn)
    citus_support.drop_schema(citus_dsn, "pgmem")


@pytest.fixture
def citus_schema(citus_dsn: str) -> Iterator[str]:
    """A pgmem schema migrated and distributed on the cluster, for one test."""
    schema = citus_support.distributed_schema(citus_dsn)
    yield schema
    citus_support.drop_schema(citus_dsn, schema)


@pytest.fixture
def citus_memory(
    citus_dsn: str,
    citus_schema: str,
    embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> Iterator[pgmem.Memory]:
    """A Memory of tenant ``acme`` on a distributed schema of the cluster, real models."""
    with pgmem.Memory(citus_dsn, embedder=embedder, nlp=analyzer, schema=citus_schema,
                      tenant="acme") as mem:
        yield mem
