"""Wall and CPU time of ``pgmem`` commands on the embedded default, each a fresh process: the
first command, which starts the background ``pgmem server`` (autostart); later commands with
that server running; and the same commands with no server (``--no-server``: each starts its own
PostgreSQL and, if it needs them, loads the models).

    python -m benchmarks.cli_commands [--rounds 3] [--home /var/tmp/pgmem-cli-bench]

Rounds interleave the two modes, so that the machine's load falls on both alike; the table
gives medians. CPU is the user + system time of the command's process tree (the server's own
processes excluded: PostgreSQL and the background process are not the command's children).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

MISSING = str(uuid.UUID(int=1))
# name -> arguments; {id} is a memory the setup added.
COMMANDS = {
    "add": ["add", "Round {i}: Chen plays guitar in a ceilidh band in Lisbon", "--user", "bench"],
    "search": ["search", "Which band does Chen play in?", "--user", "bench"],
    "list": ["list", "--user", "bench", "--limit", "5"],
    "get": ["get", "{id}"],
    "update (missing id)": ["update", MISSING, "--text", "Chen plays the fiddle"],
    "demo (re-run)": ["demo"],
}
FIRST = ("search", "Which band does Chen play in?", "--user", "bench")


def pgmem(argv: list[str], env: dict[str, str], *, check: bool = True) -> str:
    """Run ``pgmem argv``; its stdout."""
    result = subprocess.run([sys.executable, "-m", "pgmem.cli", *argv], env=env, check=False,
                            capture_output=True, text=True)
    if check and result.returncode != 0:
        raise SystemExit(f"pgmem {' '.join(argv)} failed: {result.stderr}")
    return result.stdout


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``pgmem`` process (its exit status ignored: an
    update of a missing id fails by design)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pgmem.cli", *argv], env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--home", default="/var/tmp/pgmem-cli-bench")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGMEM_DSN", "PGHOST", "PGDATABASE", "PGSERVICE", "PGMEM_AUTOSTART")}
    env["PGMEM_HOME"] = str(Path(args.home).absolute())
    pgmem(["server", "stop"], env)
    # The demo data and one memory to read, so that every timed command finds what it needs.
    pgmem(["demo", "--no-server"], env)
    memory_id = pgmem(["add", "Chen has a memory to read", "--user", "bench", "--no-server"],
                      env).split()[-1]
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for i in range(args.rounds):
        pgmem(["server", "stop"], env)
        results.setdefault(("first", "search"), []).append(timed(list(FIRST), env))
        for mode in ("pgmem server", "no server"):
            if mode == "no server":
                pgmem(["server", "stop"], env)
            for name, argv in COMMANDS.items():
                argv = [a.format(i=f"{i}-{mode}", id=memory_id) for a in argv]
                if mode == "no server":
                    argv.append("--no-server")
                results.setdefault((mode, name), []).append(timed(argv, env))
        print(f"round {i + 1} of {args.rounds} done (load {os.getloadavg()[0]:.1f})",
              file=sys.stderr)
    pgmem(["server", "stop"], env)

    def median(mode: str, name: str) -> str:
        runs = results[(mode, name)]
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        return f"{wall:.2f} / {cpu:.2f}"

    print(f"median of {args.rounds} rounds, seconds per command (wall / CPU)\n")
    print("| command | `pgmem server` running | no server (`--no-server`) |")
    print("|---|---|---|")
    print(f"| first command: `pgmem {' '.join(FIRST[:1])}`, starting the server | "
          f"{median('first', 'search')} | — |")
    for name in COMMANDS:
        print(f"| `pgmem {name}` | {median('pgmem server', name)} | {median('no server', name)} |")


if __name__ == "__main__":
    main()
