"""Answers across a process boundary (pgmem.answers): a value, or the same PgmemError class."""

from __future__ import annotations

import pytest

from pgmem import answers
from pgmem.errors import ConfigurationError, InvalidInputError, PgmemError


def test_a_value_comes_back_as_it_was() -> None:
    assert answers.value_of(answers.answer(lambda: [1, 2], str)) == [1, 2]


def test_a_pgmem_error_comes_back_as_its_own_class() -> None:
    def fail() -> None:
        raise InvalidInputError("text is empty")

    reply = answers.answer(fail, str)
    assert reply == (False, ("InvalidInputError", "text is empty"))
    with pytest.raises(InvalidInputError, match="text is empty"):
        answers.value_of(reply)


def test_any_other_failure_comes_back_as_a_pgmem_error_with_the_callers_message() -> None:
    def fail() -> None:
        raise KeyError("boom")

    reply = answers.answer(fail, lambda exc: f"the child failed: {type(exc).__name__}")
    with pytest.raises(PgmemError, match="the child failed: KeyError") as raised:
        answers.value_of(reply)
    assert type(raised.value) is PgmemError


def test_a_class_name_that_is_not_a_pgmem_error_is_not_trusted() -> None:
    for name in ("ValueError", "SystemExit", "no_such_name"):
        with pytest.raises(PgmemError, match="why") as raised:
            answers.value_of((False, (name, "why")))
        assert type(raised.value) is PgmemError
    with pytest.raises(ConfigurationError):
        answers.value_of((False, ("ConfigurationError", "why")))
