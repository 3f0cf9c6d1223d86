"""``pgmem.Settings``: the environment, then overrides; a bad value names its variable; and no
module but pgmem/settings.py reads a ``PGMEM_*`` variable."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import pgmem
from pgmem.errors import ConfigurationError
from pgmem.settings import CORES, DEFAULT_IDLE_TIMEOUT, Settings, variable_of

PACKAGE = Path(pgmem.__file__).resolve().parent


def test_without_variables_every_setting_is_its_default() -> None:
    assert Settings.from_env({}) == Settings()
    settings = Settings()
    assert settings.schema == "pgmem" and settings.tenant == "default"
    assert settings.model_concurrency == CORES and settings.spacy_ops is True
    assert settings.server_idle_timeout == DEFAULT_IDLE_TIMEOUT and settings.autostart is True


def test_each_variable_sets_its_setting() -> None:
    env = {
        "PGMEM_DSN": "postgresql:///x", "PGMEM_HOME": "/tmp/h", "PGMEM_TS_CONFIG": "simple",
        "PGMEM_EMBEDDING_BACKEND": "onnx-int8", "PGMEM_EMBEDDING_MODEL": "/models/m",
        "PGMEM_CACHE_DIR": "/tmp/c", "PGMEM_SPACY_MODEL": "blank", "PGMEM_NLP_PROCESS": "0",
        "PGMEM_SPACY_OPS": "off", "PGMEM_MODEL_CONCURRENCY": "none", "PGMEM_AUTOSTART": "no",
        "PGMEM_SERVER_IDLE_TIMEOUT": "60", "PGMEM_MCP_TOKEN": "secret",
    }
    assert Settings.from_env(env) == Settings(
        dsn="postgresql:///x", home="/tmp/h", ts_config="simple", embedding_backend="onnx-int8",
        embedding_model="/models/m", cache_dir="/tmp/c", spacy_model="blank", nlp_process=False,
        spacy_ops=False, model_concurrency=None, autostart=False, server_idle_timeout=60.0,
        mcp_token="secret",
    )
    assert Settings.from_env({"PGMEM_MODEL_CONCURRENCY": "3"}).model_concurrency == 3
    assert Settings.from_env({"PGMEM_NLP_PROCESS": "1"}).nlp_process is True
    assert Settings.from_env({"PGMEM_DSN": "  "}).dsn is None  # blank: unset
    pooled = Settings.from_env({"PGMEM_POOLER": "transaction", "PGMEM_PREPARED_STATEMENTS": "1"})
    assert (pooled.pooler, pooled.prepared_statements) == ("transaction", True)


def test_overrides_beat_the_environment_and_none_leaves_it() -> None:
    env = {"PGMEM_TS_CONFIG": "german", "PGMEM_DSN": "postgresql:///env"}
    settings = Settings.from_env(env, ts_config="french", tenant="t1", lock_timeout=2)
    assert (settings.ts_config, settings.tenant, settings.lock_timeout) == ("french", "t1", 2)
    assert settings.dsn == "postgresql:///env"
    assert Settings.from_env(env, ts_config=None).ts_config == "german"
    assert settings.replace(tenant="t2").tenant == "t2" and settings.tenant == "t1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.tenant = "t3"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("variable", "bad"),
    [
        ("PGMEM_EMBEDDING_BACKEND", "tensorflow"),
        ("PGMEM_NLP_PROCESS", "maybe"),
        ("PGMEM_SPACY_OPS", "2"),
        ("PGMEM_MODEL_CONCURRENCY", "0"),
        ("PGMEM_MODEL_CONCURRENCY", "two"),
        ("PGMEM_AUTOSTART", "later"),
        ("PGMEM_SERVER_IDLE_TIMEOUT", "-1"),
        ("PGMEM_SERVER_IDLE_TIMEOUT", "soon"),
        ("PGMEM_POOLER", "pgbouncer"),
        ("PGMEM_PREPARED_STATEMENTS", "sometimes"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, bad: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{variable} must be .*{bad!r}"):
        Settings.from_env({variable: bad})


def test_an_unknown_override_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no such setting: tennant"):
        Settings.from_env({}, tennant="x")


def test_memory_options_override_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_TS_CONFIG", "simple")
    memory = pgmem.Memory("postgresql:///unused", tenant="x", lock_timeout=2)
    assert memory.settings.tenant == memory.tenant == "x" and memory.settings.lock_timeout == 2
    assert memory.ts_config == "simple"  # from the environment
    given = Settings(tenant="y", ts_config="german")
    memory = pgmem.Memory("postgresql:///unused", settings=given, keyword_score="ts_rank_cd")
    assert (memory.tenant, memory.ts_config, memory.keyword_score) == (
        "y", "german", "ts_rank_cd"
    )
    with pytest.raises(ConfigurationError, match="keyword_score"):
        pgmem.Memory("postgresql:///unused", settings=given, keyword_score="bm99")
    # None given for ts_config or limits is their default; for any other option, a bad value
    memory = pgmem.Memory("postgresql:///unused", ts_config=None, limits=None)
    assert memory.ts_config == "simple" and memory.limits == pgmem.Limits()
    with pytest.raises(pgmem.InvalidInputError, match="tenant"):
        pgmem.Memory("postgresql:///unused", tenant=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no such setting: tennant"):
        pgmem.Memory("postgresql:///unused", tennant="x")  # type: ignore[call-arg]


def test_the_variable_names_are_the_settings() -> None:
    assert variable_of("model_concurrency") == "PGMEM_MODEL_CONCURRENCY"
    assert variable_of("spacy_ops") == "PGMEM_SPACY_OPS"


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines reading a ``PGMEM_*`` variable: ``os.environ[...]``, ``os.environ.get(...)``,
    ``os.getenv(...)`` or ``"PGMEM_..." in os.environ`` with a literal PGMEM_ name, or any
    read whose name is a constant holding one (a module-level ``NAME = "PGMEM_..."``)."""
    constants = {
        target.id
        for node in ast.walk(tree) if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant)
        and str(node.value.value).startswith("PGMEM_")
    }

    def pgmem_name(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.startswith("PGMEM_")
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            return isinstance(first, ast.Constant) and str(first.value).startswith("PGMEM_")
        return isinstance(node, ast.Name) and node.id in constants

    def environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and environ(node.value) and pgmem_name(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id
            owner = func.value if isinstance(func, ast.Attribute) else None
            reads = (name in ("get", "pop", "setdefault") and owner is not None
                     and environ(owner)) or name in ("getenv", "getenvb")
            if reads and node.args and pgmem_name(node.args[0]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and pgmem_name(node.left) and any(
            environ(c) for c in node.comparators
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_the_settings_module_reads_pgmem_variables() -> None:
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _environment_reads(ast.parse(path.read_text(), str(path))))
    }
    assert set(found) <= {"settings.py"}, found


def test_the_grep_sees_each_kind_of_read() -> None:
    source = """
import os
from os import environ
NAME = "PGMEM_X"
a = os.environ.get("PGMEM_A")
b = os.environ["PGMEM_B"]
c = os.getenv("PGMEM_C")
d = environ.get(NAME)
e = "PGMEM_E" in os.environ
f = os.environ.get("HOME")
"""
    assert _environment_reads(ast.parse(source)) == [5, 6, 7, 8, 9]


def test_the_memory_options_are_settings_fields_written_once() -> None:
    """``Memory`` and ``AsyncMemory`` take ``settings`` and the :class:`Options` (each a
    ``Settings`` field of the same type), nothing copied one by one."""
    import inspect

    from pgmem.settings import Options

    fields = {field.name: field.type for field in dataclasses.fields(Settings)}
    options = {  # annotations as written (TypedDict keeps them as forward references)
        name: getattr(kind, "__forward_arg__", kind)
        for name, kind in Options.__annotations__.items()
    }
    assert options == {name: fields[name] for name in options}
    assert {"schema", "tenant", "lock_timeout", "limits"} <= set(options)
    for facade in (pgmem.Memory, pgmem.AsyncMemory):
        parameters = inspect.signature(facade.__init__).parameters
        assert list(parameters) == [
            "self", "db", "settings", "embedder", "nlp", "reranker", "next_embedder", "options"
        ]
        assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
