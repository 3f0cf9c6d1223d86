"""Wall and CPU time of ``pgmem`` commands on the embedded default, each a fresh process, with
the command starting its own server ("own server") and with ``pgmem server`` running.

    python -m benchmarks.cli_commands [--rounds 5] [--home /var/tmp/pgmem-cli-bench]

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
from pathlib import Path

COMMANDS = {
    "add": ["add", "Round {i}: Chen plays guitar in a ceilidh band in Lisbon", "--user", "bench"],
    "search": ["search", "Which band does Chen play in?", "--user", "bench"],
    "list": ["list", "--user", "bench", "--limit", "5"],
}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``pgmem`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pgmem.cli", *argv], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--home", default="/var/tmp/pgmem-cli-bench")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGMEM_DSN", "PGHOST", "PGDATABASE", "PGSERVICE")}
    env["PGMEM_HOME"] = str(Path(args.home).absolute())
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    subprocess.run([sys.executable, "-m", "pgmem.cli", "server", "stop"], env=env, check=True)
    for i in range(args.rounds):
        for mode in ("own server", "pgmem server"):
            if mode == "pgmem server":
                subprocess.run([sys.executable, "-m", "pgmem.cli", "server", "start"], env=env,
                               check=True, stdout=subprocess.DEVNULL)
            for name, argv in COMMANDS.items():
                argv = [a.format(i=f"{i}-{mode}") for a in argv]
                results.setdefault((mode, name), []).append(timed(argv, env))
            if mode == "pgmem server":
                subprocess.run([sys.executable, "-m", "pgmem.cli", "server", "stop"], env=env,
                               check=True, stdout=subprocess.DEVNULL)
        print(f"round {i + 1} of {args.rounds} done (load {os.getloadavg()[0]:.1f})",
              file=sys.stderr)
    print(f"median of {args.rounds} rounds, seconds per command (wall / CPU)\n")
    print("| command | own server | pgmem server running | ratio (wall) |")
    print("|---|---|---|---|")
    for name in COMMANDS:
        own = results[("own server", name)]
        kept = results[("pgmem server", name)]
        ow, oc = statistics.median(w for w, _ in own), statistics.median(c for _, c in own)
        kw, kc = statistics.median(w for w, _ in kept), statistics.median(c for _, c in kept)
        print(f"| {name} | {ow:.2f} / {oc:.2f} | {kw:.2f} / {kc:.2f} | {ow / kw:.1f}x |")


if __name__ == "__main__":
    main()
