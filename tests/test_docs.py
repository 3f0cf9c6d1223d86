"""The docs cannot drift from the code: the generated references are current, the settings table
lists every setting, every `pgmem` command line in README.md and docs/ uses only commands and
options its `--help` has, and so does every `python -m benchmarks.…` command line. Pure: no
database."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
import shlex
from pathlib import Path

import pytest

import pgmem
from pgmem.cli.app import build_parser
from pgmem.cli.reference import command_options

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = ["docs/cli.md", "docs/errors.md"]


@pytest.mark.parametrize("page", GENERATED)
def test_generated_reference_is_current(page: str) -> None:
    cogapp = pytest.importorskip("cogapp")
    status = cogapp.Cog().main(["cog", "--check", "--verbosity=0", str(ROOT / page)])
    assert status == 0, f"{page} is stale: run `cog -r {page}`"


def test_the_settings_table_lists_every_setting() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)` \|", text, re.MULTILINE))
    fields = {field.name for field in dataclasses.fields(pgmem.Settings)}
    assert documented - fields == set(), "documented settings that do not exist"
    assert fields - documented == set(), "settings missing from docs/configuration.md"


def _command_lines(text: str) -> list[str]:
    """The `pgmem …` command lines of a page: in fenced shell blocks and in inline code."""
    lines: list[str] = []
    for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.DOTALL):
        lines.extend(block.replace("\\\n", " ").splitlines())
    lines.extend(re.findall(r"(?<!`)`(pgmem [^`]+)`(?!`)", text))
    found = []
    for line in lines:
        for part in re.split(r"&&|\|\||;|\|", line):
            # a command, after a prompt and variable assignments: `$ PGMEM_X=1 pgmem …`
            match = re.fullmatch(r"(?:\$\s+)?(?:\w+=\S*\s+)*(pgmem\s.*)", part.strip())
            if match:
                found.append(match.group(1).strip())
    return found


def _value_options() -> set[str]:
    return {flag for action in build_parser()._actions if action.nargs != 0
            for flag in action.option_strings}


def _problems(command: str, known: dict[str, set[str]], takes_value: set[str]) -> list[str]:
    try:
        words = shlex.split(command, comments=True)[1:]
    except ValueError:
        return []  # a line cut inside quotes: prose, not a command
    path, options, skip = "", [], False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-"):
            options.append(word.split("=", 1)[0])
            skip = not path and word in takes_value
        elif not path:
            if word not in known:
                if word.isupper() or "<" in word or "…" in word or word == "...":
                    return []  # a placeholder: `pgmem COMMAND --help`
                return [f"{command!r}: no command {word!r}"]
            path = word
        elif f"{path} {word}" in known and " " not in path:
            path = f"{path} {word}"
    allowed = known[path]
    return [f"{command!r}: `pgmem {path}` has no option {option}"
            for option in options if option not in allowed and option not in ("-h", "--help")]


def test_every_documented_command_line_exists() -> None:
    known, takes_value = command_options(), _value_options()
    problems = []
    for page in DOCS:
        if not page.exists() or page.name == "cli.md":
            continue
        for command in _command_lines(page.read_text(encoding="utf-8")):
            problems += [f"{page.relative_to(ROOT)}: {p}"
                         for p in _problems(command, known, takes_value)]
    assert problems == []


def test_the_check_finds_a_wrong_option() -> None:
    known, takes_value = command_options(), _value_options()
    assert _problems("pgmem search 'x' --user a --no-such-flag", known, takes_value)
    assert _problems("pgmem nonsense", known, takes_value)
    assert not _problems("pgmem --dsn postgresql://x search 'hi there' --user a --limit 3",
                         known, takes_value)


def test_every_relative_link_reaches_a_file() -> None:
    broken = []
    for page in DOCS:
        if not page.exists():
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


# -- the benchmarks' command lines ----------------------------------------------------------------


class _Parsed(Exception):
    """Raised instead of parsing: carries the parser a benchmark's ``main`` built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _benchmark_parser(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The argument parser of ``python -m <module>``, caught as its ``main`` parses."""
    found = importlib.import_module(module)
    if not hasattr(found, "main"):  # a package: its __main__
        found = importlib.import_module(f"{module}.__main__")

    def catch(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> object:
        raise _Parsed(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", catch)
        patch.setattr(argparse.ArgumentParser, "parse_known_args", catch)
        try:
            found.main(*([[]] if inspect.signature(found.main).parameters else []))
        except _Parsed as parsed:
            return parsed.parser
    raise AssertionError(f"{module}'s main parsed no arguments")


def _benchmark_commands(text: str) -> list[str]:
    """The `python -m benchmarks.…` command lines of a page: in code blocks and inline code."""
    lines: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL):
        lines.extend(block.replace("\\\n", " ").splitlines())
    lines.extend(re.findall(r"(?<!`)`([^`\n]*python -m benchmarks\.[^`]+)`(?!`)", text))
    return [match.group(0) for line in lines for part in re.split(r"&&|\|\||;|\|", line)
            if (match := re.search(r"python -m benchmarks\.\S+.*", part))]


def test_every_documented_benchmark_command_has_its_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsers: dict[str, argparse.ArgumentParser] = {}
    problems = []
    for page in DOCS:
        for command in _benchmark_commands(page.read_text(encoding="utf-8")):
            try:
                words = shlex.split(command, comments=True)
            except ValueError:
                continue  # a line cut inside quotes: prose, not a command
            module, options = words[2], [w.split("=", 1)[0] for w in words[3:] if w[0] == "-"]
            if not options:
                continue
            if module not in parsers:
                parsers[module] = _benchmark_parser(module, monkeypatch)
            known = parsers[module]._option_string_actions
            problems += [f"{page.relative_to(ROOT)}: {command!r}: {module} has no option {option}"
                         for option in options if option not in known]
    assert problems == []
    assert {"benchmarks.retrieval", "benchmarks.latency", "benchmarks.report"} <= set(parsers)


def test_the_benchmark_check_reads_the_real_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    options = _benchmark_parser("benchmarks.retrieval", monkeypatch)._option_string_actions
    assert "--conversations" in options and "--no-such-flag" not in options
    assert _benchmark_commands("run `python -m benchmarks.latency --sizes 10` then") == [
        "python -m benchmarks.latency --sizes 10"]


def test_the_schema_page_describes_every_migration() -> None:
    revisions = {path.name[:4] for path in (ROOT / "migrations" / "versions").glob("[0-9]*.py")}
    text = (ROOT / "docs" / "schema.md").read_text(encoding="utf-8")
    assert {r for r in revisions if f"`{r}`" not in text} == set()
