"""PGMEM_MODEL_CONCURRENCY: how many calls of one Memory run model work at once."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

import pgmem
from pgmem import model_work
from pgmem.errors import ConfigurationError
from pgmem.model_work import ModelWork
from pgmem.nlp import Analysis
from pgmem.settings import Settings, variable_of

VARIABLE = variable_of("model_concurrency")


class NoModels(pgmem.TextAnalyzer):
    def analyze(self, text: str) -> Analysis:
        return Analysis(lexemes=(text,), entities=())


class CountingEmbedder:
    """Records how many embed calls overlap. A call stays until three are in (or WAIT seconds
    have passed): calls that may overlap do, however slowly the machine starts the threads."""

    WAIT = 0.25

    def __init__(self) -> None:
        self.inside = threading.Condition()
        self.running = 0
        self.most = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self.inside:
            self.running += 1
            self.most = max(self.most, self.running)
            self.inside.notify_all()
            self.inside.wait_for(lambda: self.running >= 3, timeout=self.WAIT)
            self.running -= 1
        return np.ones((len(texts), 4), dtype=np.float32)


def most_at_once(monkeypatch: pytest.MonkeyPatch, setting: str | None) -> int:
    if setting is None:
        monkeypatch.delenv(VARIABLE, raising=False)
    else:
        monkeypatch.setenv(VARIABLE, setting)
    embedder = CountingEmbedder()
    models = ModelWork(Settings.from_env(), embedder=embedder, nlp=NoModels())
    threads = [
        threading.Thread(target=models.analyze, args=(f"q{i}", 4, models.languages.get()))
        for i in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    models.close()
    return embedder.most


def test_a_limit_makes_calls_take_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    assert most_at_once(monkeypatch, "1") == 1
    assert most_at_once(monkeypatch, "2") <= 2
    assert most_at_once(monkeypatch, "none") > 2


def test_by_default_as_many_calls_as_cores_run_model_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_work, "usable_cores", lambda: 3)
    assert 1 < most_at_once(monkeypatch, None) <= 3  # six threads, three at a time


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", "no"])
def test_a_bad_limit_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(VARIABLE, bad)
    with pytest.raises(ConfigurationError, match=VARIABLE):
        Settings.from_env()
    with pytest.raises(ConfigurationError, match=VARIABLE):
        pgmem.Memory("postgresql:///unused")
