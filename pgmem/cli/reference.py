"""The command-line reference (docs/cli.md), made from the parser's own ``--help`` texts, and the
error reference (docs/errors.md), made from :mod:`pgmem.errors`' classes, so neither can drift:
``cog -r docs/cli.md docs/errors.md`` rewrites them and a test fails when they are stale."""

from __future__ import annotations

import argparse
import inspect
import os
import re

from pgmem import errors
from pgmem.cli.app import build_parser

#: The width the help texts are wrapped at in the docs, whatever the terminal's.
WIDTH = "100"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return parser.format_help()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def cli_reference() -> str:
    """Markdown: ``pgmem --help``, then each command's and subcommand's help, in order."""
    parser = build_parser()
    parts = [f"## pgmem\n\n```\n{_help(parser)}```\n"]
    for name, command in _subcommands(parser).items():
        parts.append(f"## pgmem {name}\n\n```\n{_help(command)}```\n")
        for sub, subcommand in _subcommands(command).items():
            parts.append(f"### pgmem {name} {sub}\n\n```\n{_help(subcommand)}```\n")
    return "\n".join(parts)


def command_options() -> dict[str, set[str]]:
    """Every command path (``""``, ``"search"``, ``"server start"``) and the options it takes,
    with the global ones: what a documented command line may use."""
    parser = build_parser()

    def options(p: argparse.ArgumentParser) -> set[str]:
        return {flag for action in p._actions for flag in action.option_strings}

    found = {"": options(parser)}
    for name, command in _subcommands(parser).items():
        found[name] = found[""] | options(command)
        for sub, subcommand in _subcommands(command).items():
            found[f"{name} {sub}"] = found[name] | options(subcommand)
    return found


def error_reference() -> str:
    """Markdown: every class of :mod:`pgmem.errors`, its bases and its docstring, in the order
    of the module."""
    classes = [
        cls for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.PgmemError) and cls.__module__ == errors.__name__
    ]
    classes.sort(key=lambda cls: inspect.getsourcelines(cls)[1])
    lines = ["| error | is a | when |", "|---|---|---|"]
    for cls in classes:
        bases = ", ".join(f"`{base.__name__}`" for base in cls.__bases__)
        doc = " ".join(inspect.cleandoc(cls.__doc__ or "").split()).replace("|", "\\|")
        doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", doc).replace("``", "`")
        lines.append(f"| `pgmem.{cls.__name__}` | {bases} | {doc} |")
    return "\n".join(lines) + "\n"
