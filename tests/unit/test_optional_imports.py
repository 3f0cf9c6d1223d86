"""The core install stays small: importing pgmem (its CLI and Mem0 doors included) imports
neither the MCP SDK nor mem0."""

from __future__ import annotations

import json
import subprocess
import sys


def test_pgmem_imports_no_optional_sdk() -> None:
    code = (
        "import sys, json, pgmem, pgmem.cli, pgmem.compat.mem0, pgmem.importers.mem0; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('mcp', 'mem0', 'openai', 'qdrant_client', 'posthog'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert json.loads(out.stdout) == []
