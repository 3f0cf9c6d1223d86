"""A newcomer's first hour: the README's Quickstart with no server, ``Memory()`` /
``AsyncMemory()`` with no DSN on the embedded default, the command line starting its background
server on first use (and the server stopping when idle), and commands that need no model
loading none. Real pgserver, real models, the real ``pgmem`` command in subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgmem import cli, server_state
from tests.server_support import fresh_home, postmaster, wait_for

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# Importing any of these means a model was (about to be) loaded.
MODEL_MODULES = {"torch", "sentence_transformers", "transformers", "spacy", "thinc", "onnxruntime"}
# Runs `pgmem ARGS...` (the real command's main) and says on its last stderr line which model
# modules the process imported.
PROBE = textwrap.dedent(f"""
    import json, sys
    from pgmem.cli import main
    try:
        status = main(sys.argv[1:])
    finally:
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({sorted(MODEL_MODULES)!r}))
        print("MODELS " + json.dumps(loaded), file=sys.stderr)
    sys.exit(status)
""")


@pytest.fixture
def home() -> Iterator[Path]:
    with fresh_home() as path:
        yield path


def environment(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a process with no database configured, its data in ``home``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PGMEM_DSN", *cli.LIBPQ_TARGETS)}
    env.update(PGMEM_HOME=str(home), PYTHONPATH=str(ROOT), **extra)
    return env


class Ran:
    def __init__(self, result: subprocess.CompletedProcess[str]) -> None:
        self.status = result.returncode
        self.out = result.stdout
        *lines, last = result.stderr.rstrip("\n").split("\n")
        assert last.startswith("MODELS "), result.stderr
        self.err = "\n".join(lines)
        self.models: list[str] = json.loads(last.removeprefix("MODELS "))


def pgmem(env: dict[str, str], *argv: str) -> Ran:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )
    ran = Ran(result)
    assert "Traceback" not in ran.err, ran.err
    return ran


def python(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


def quickstart() -> str:
    """The first Python block of the README's Quickstart (the next one is for a server of
    your own)."""
    section = README.read_text().split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return str(blocks[0])


def test_the_quickstart_runs_as_written_with_no_server(home: Path) -> None:
    """Memory() and AsyncMemory() with no DSN start the embedded PostgreSQL, migrate it, say so
    once in the log, and stop it when closed."""
    code = quickstart() + textwrap.dedent("""
        import asyncio

        async def main():
            async with pgmem.AsyncMemory() as amem:
                page = await amem.get_all(user_id="u1")
                print("async", len(page), page[0].text)

        asyncio.run(main())
    """)
    assert "Memory(dsn" not in code and "pgmem.Memory()" in code
    result = python(environment(home), code)
    assert "Caroline moved to Ottawa to work at Shopify" in result.stdout
    assert "async 1 Caroline moved to Ottawa to work at Shopify" in result.stdout
    # logging's last-resort handler shows the warning: pgmem configures no handler
    said = "started a private embedded PostgreSQL (data in"
    assert result.stderr.count(said) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert postmaster(home) is None  # stopped on close


def test_the_cli_starts_its_server_on_first_use_and_model_free_commands_load_no_model(
    home: Path,
) -> None:
    env = environment(home, PGMEM_AUTOSTART="1")
    added = pgmem(env, "add", "Chen plays guitar in a ceilidh band", "--user", "chen")
    assert added.status == 0, added.err
    assert "pgmem: starting the pgmem server in the background" in added.err
    assert "it stops after 15 min without a command" in added.err
    state = server_state.running(home)
    assert state is not None  # and it stays up for the next commands
    assert added.models == []  # the server embedded and analysed the text
    memory_id = added.out.split()[-1]

    found = pgmem(env, "search", "Which band does Chen play in?", "--user", "chen")
    assert found.status == 0 and "Chen plays guitar" in found.out
    assert "starting" not in found.err and found.models == []
    assert server_state.running(home) == state

    missing = str(uuid.uuid4())
    model_free = [
        ("get", memory_id), ("list", "--user", "chen"), ("history", memory_id), ("stats",),
        ("update", missing, "--text", "Chen plays the fiddle"), ("delete", missing),
    ]

    def check_model_free(env: dict[str, str]) -> None:
        for argv in model_free:
            ran = pgmem(env, *argv)
            assert ran.models == [], (argv, ran.models)
            if missing in argv:
                assert ran.status == 2 and f"no memory {missing}" in ran.err, (argv, ran.err)
            else:
                assert ran.status == 0, (argv, ran.err)
        assert "Chen plays guitar" in pgmem(env, "get", memory_id).out

    check_model_free(env)

    # Python's Memory() with no DSN uses the running server's PostgreSQL, and says so.
    result = python(env, textwrap.dedent("""
        import logging
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
        import pgmem
        with pgmem.Memory() as mem:
            print([r.text for r in mem.get_all(user_id="chen")])
    """))
    assert "['Chen plays guitar in a ceilidh band']" in result.stdout
    assert (f"pgmem.default_database: pgmem: no database configured (PGMEM_DSN, PGHOST, "
            f"PGDATABASE, PGSERVICE); using the PostgreSQL of the running pgmem server (pid "
            f"{state.pid}, data in {home})") in result.stderr

    stopped = pgmem(env, "server", "stop")
    assert stopped.status == 0 and server_state.running(home) is None
    assert postmaster(home) is None

    # Without the server (and autostart off, by variable or option) each command starts its
    # own PostgreSQL; the model-free ones still load no model.
    check_model_free(environment(home, PGMEM_AUTOSTART="0"))
    ran = pgmem(env, "list", "--user", "chen", "--no-server")
    assert ran.status == 0 and "Chen plays guitar" in ran.out and "starting" not in ran.err
    assert server_state.running(home) is None and postmaster(home) is None


def test_the_server_stops_itself_when_idle(home: Path) -> None:
    env = environment(home)
    started = pgmem(env, "server", "start", "--idle-timeout", "3")
    assert started.status == 0 and "pgmem server started" in started.out, started.err
    wait_for(lambda: server_state.running(home) is None, timeout=120)
    wait_for(lambda: postmaster(home) is None)  # it let go of PostgreSQL, which stopped
    assert "no command for" in (home / "server.log").read_text()


def test_an_import_already_done_loads_no_model(db_dsn: str) -> None:
    """Re-importing (``pgmem demo`` re-run imports the same way) finds every text already
    stored before any model work."""
    env = {**os.environ, "PGMEM_DSN": db_dsn, "PYTHONPATH": str(ROOT)}
    first = pgmem(env, "import", "--demo")
    assert first.status == 0 and first.out == "imported 42 memories from the demo data\n"
    again = pgmem(env, "import", "--demo")
    assert again.status == 0, again.err
    assert again.out == "imported 0 memories from the demo data (42 already stored, skipped)\n"
    assert again.models == []
