"""Run every attack of :mod:`benchmarks.attacks` and print one line each; exit 1 if one broke.

    python -m benchmarks.attacks [--dsn DSN] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import importlib
import sys

from benchmarks.attacks import MODULES, Attack, Outcome, Target
from benchmarks.database import server_dsn


def all_attacks() -> list[Attack]:
    attacks: list[Attack] = []
    for name in MODULES:
        module = f"benchmarks.attacks.{name}"
        try:
            attacks.extend(importlib.import_module(module).ATTACKS)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            print(f"(no {module} in this checkout)", file=sys.stderr)
    return attacks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.attacks", description=__doc__)
    parser.add_argument("--dsn",
                        help="a server to attack (default: PGMEM_BENCH_DSN / PGMEM_TEST_DSN)")
    parser.add_argument("--only", help="run the attacks whose name contains this")
    args = parser.parse_args(argv)
    target = Target(dsn=server_dsn(args.dsn))
    broke = 0
    for attack in all_attacks():
        if args.only and args.only not in attack.name:
            continue
        try:
            outcome = attack.run(target)
        except Exception as exc:  # noqa: BLE001 -- an attack that crashes is a finding, not a pass
            outcome = Outcome("broke", f"{type(exc).__name__}: {exc}")
        broke += outcome.verdict == "broke"
        print(f"{outcome.verdict:8} {attack.name}: {outcome.detail}", flush=True)
    return 1 if broke else 0


if __name__ == "__main__":
    sys.exit(main())
