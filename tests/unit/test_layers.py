"""The layers contract of pyproject.toml (checked by ``lint-imports``) names every module of
pgmem: one left out would be free to import anything."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

import pgmem

ROOT = Path(__file__).parents[2]
#: Packages of files, not code (sql/ and migrations/ ship as these).
RESOURCES = {"sql", "migrations"}


def test_every_module_is_in_a_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"]
                 if c["type"] == "layers"]
    named = {name for layer in layers for name in re.split(r"\s*[|:]\s*", layer.strip())}
    package = Path(pgmem.__file__).parent
    modules = {f"pgmem.{path.stem}" for path in package.glob("*.py") if path.stem != "__init__"}
    modules |= {f"pgmem.{path.parent.name}" for path in package.glob("*/__init__.py")
                if path.parent.name not in RESOURCES}
    assert modules - named == set()
    assert named - modules == set()
