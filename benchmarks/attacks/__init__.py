"""The attack suite: every reproduction of docs/security.md's threat model, run against a live
database, one line per attack (``python -m benchmarks.attacks``).

Each module of this package lists its attacks in ``ATTACKS``; an attack is a callable that takes
the run's :class:`Target` and returns an :class:`Outcome` (``refused``, ``bounded`` or ``broke``)
with one line of detail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

Verdict = Literal["refused", "bounded", "broke"]


@dataclasses.dataclass(frozen=True)
class Target:
    """What an attack runs against: a server DSN it may create scratch databases on."""

    dsn: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    detail: str


@dataclasses.dataclass(frozen=True)
class Attack:
    name: str
    run: Callable[[Target], Outcome]


MODULES = ("home", "tenants")
