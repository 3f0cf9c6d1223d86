"""Answers that cross a process boundary. pgmem's background server (:mod:`pgmem.cli.background`)
and its spaCy process (:mod:`pgmem.nlp_process`) answer each request with ``(True, value)`` or
``(False, (error class name, message))``; the caller gets the value, or the same
:class:`~pgmem.errors.PgmemError` subclass raised again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgmem import errors
from pgmem.errors import PgmemError

Answer = tuple[bool, Any]


def answer(compute: Callable[[], Any], unexpected: Callable[[Exception], str]) -> Answer:
    """``compute()``'s value as an answer; a PgmemError by its class name; any other exception
    as a PgmemError with the message ``unexpected(exc)`` (reported to the caller, not lost)."""
    try:
        return True, compute()
    except PgmemError as exc:
        return False, (type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 -- reported to the caller, not lost
        return False, ("PgmemError", unexpected(exc))


def value_of(reply: Answer) -> Any:
    """The value of an answer, or its error raised again."""
    ok, value = reply
    if ok:
        return value
    name, message = value
    error = getattr(errors, name, None)
    if not (isinstance(error, type) and issubclass(error, PgmemError)):
        error = PgmemError
    raise error(message)
