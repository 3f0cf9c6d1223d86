"""What every command group shares: the command registry, option helpers, argument parsing
and output formatting."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO, TypedDict

from pgmem import shown
from pgmem.errors import InvalidInputError, ScopeError
from pgmem.results import MemoryRecord, SearchHit, jsonable

if TYPE_CHECKING:
    from pgmem.cli.session import Session

Handler = Callable[[argparse.Namespace, "Session"], int]


class Commands:
    """Where a group of commands adds its subcommands (each group's ``register(commands)``).

    :meth:`add` gives a subcommand the global options (``--dsn``, ``--read-dsn``, ``--schema``,
    ``--tenant``, ``--no-server``, accepted after the command too) and its handler, ``handler(args,
    session)
    -> status``; with ``autostart``, the command starts the background server on the embedded
    default when none runs (:func:`pgmem.cli.session.autostart`).
    """

    def __init__(
        self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
        common: argparse.ArgumentParser,
    ) -> None:
        self._subparsers = subparsers
        self._common = common

    def add(
        self, name: str, handler: Handler, help_text: str, *, autostart: bool = False
    ) -> argparse.ArgumentParser:
        """A new subcommand ``name`` running ``handler``; add its own options to the result."""
        parser = self._subparsers.add_parser(
            name, parents=[self._common], help=help_text, description=help_text
        )
        parser.set_defaults(handler=handler, autostart=autostart)
        return parser


def scope_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--user``, ``--agent``, ``--run``; ``what`` ends each help text."""
    parser.add_argument("--user", dest="user_id", metavar="ID", help=f"user id {what}")
    parser.add_argument("--agent", dest="agent_id", metavar="ID", help=f"agent id {what}")
    parser.add_argument("--run", dest="run_id", metavar="ID", help=f"run id {what}")


class ScopeArgs(TypedDict):
    """The scope options of a command, as Memory's keyword arguments."""

    user_id: str | None
    agent_id: str | None
    run_id: str | None


NO_SCOPE = ScopeArgs(user_id=None, agent_id=None, run_id=None)


def scope(args: argparse.Namespace, *, required: bool = True) -> ScopeArgs:
    """The scope a command was given; ScopeError when ``required`` and none was."""
    given = ScopeArgs(user_id=args.user_id, agent_id=args.agent_id, run_id=args.run_id)
    if required and all(value is None for value in given.values()):
        raise ScopeError("give at least one of --user, --agent or --run")
    return given


def json_arg(value: str | None, what: str, error: type[InvalidInputError]) -> Any:
    """``value`` parsed as a JSON object (None stays None); ``error`` naming ``what`` if not."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError) as exc:  # too deep for Python's parser
        raise error(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise error(f"{what} must be a JSON object, got {type(parsed).__name__}")
    return parsed


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON, whose strings hold no character a terminal would act
    on: JSON escapes the C0 controls itself; the others of :data:`pgmem.shown.UNSHOWN` (DEL,
    the C1 controls such as the 8-bit CSI U+009B, the bidirectional controls such as U+202E)
    are written as ``\\uXXXX`` escapes too. The JSON still reads back as the exact values."""
    print(shown.json_printable(json.dumps(jsonable(value), indent=2, ensure_ascii=False)))


def printable(text: str) -> str:
    """``text`` safe to print to a terminal: each control character (see
    :data:`pgmem.shown.UNSHOWN`) written as its Python escape (``\\x1b``, ``\\n``,
    ``\\u202e``). For the human output of stored texts and ids; ``--json`` prints them
    exactly."""
    return shown.printable(text)


def clip(text: str, used: int) -> str:
    """``text`` on one line, control characters escaped (:func:`printable`); on a terminal, cut
    to the columns left after ``used``."""
    text = printable(" ".join(text.split()))
    if not sys.stdout.isatty():
        return text
    width = max(shutil.get_terminal_size().columns - used, 20)
    return text if len(text) <= width else text[: width - 1] + "…"


def scope_label(record: MemoryRecord | SearchHit) -> str:
    """``user=alice,agent=a1``: the scope ids a memory has."""
    parts = [
        f"{name}={value}"
        for name, value in (("user", record.user_id), ("agent", record.agent_id),
                            ("run", record.run_id))
        if value is not None
    ]
    return printable(",".join(parts))


def size(n: int) -> str:
    """A byte count for people: ``8192`` → ``8.0 kB``."""
    value = float(n)
    for unit in ("B", "kB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


class ProgressBar:
    """``on_progress`` for :meth:`Memory.add_many`: tqdm's bar on stderr, redrawn in place on a
    terminal; elsewhere (a log, a pipe) one line, printed when the work is done. ``total`` may
    be left for the first call to tell (an import learns it as it reads)."""

    FORMAT = "{desc} [{bar:30}] {n}/{total} ({rate_noinv_fmt})"

    def __init__(self, label: str, total: int = 0, stream: TextIO | None = None) -> None:
        from tqdm import tqdm

        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._tqdm = tqdm
        self._bar = tqdm(
            total=total, desc=label, file=self.stream, bar_format=self.FORMAT, ascii="-#",
            unit=" memories", disable=not self.tty,
        )

    def __call__(self, done: int, total: int) -> None:
        if total != self.total:
            self.total = self._bar.total = total
        if self.tty:
            self._bar.update(done - self.done)
        self.done = done

    def finish(self) -> None:
        """End the bar: on a terminal, its line; elsewhere, print it once if the work is done."""
        if self.tty:
            self._bar.close()
        elif self.done >= self.total:
            line = self._tqdm.format_meter(
                self.done, self.total, time.monotonic() - self.started, prefix=self.label,
                bar_format=self.FORMAT, ascii="-#", unit=" memories",
            )
            self.stream.write(line + "\n")
            self.stream.flush()
