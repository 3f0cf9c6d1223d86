"""The tenant attacks of the attack suite (``python -m benchmarks.attacks --only tenant``), run
against the test server: none breaks."""

from __future__ import annotations

import pytest

from benchmarks.attacks import Target
from benchmarks.attacks.tenants import ATTACKS


@pytest.mark.parametrize("attack", ATTACKS, ids=[attack.name for attack in ATTACKS])
def test_no_tenant_attack_breaks(attack: object, server_dsn: str) -> None:
    outcome = attack.run(Target(dsn=server_dsn))  # type: ignore[attr-defined]
    assert outcome.verdict in ("refused", "bounded"), outcome.detail
