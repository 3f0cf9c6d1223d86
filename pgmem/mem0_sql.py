"""What pgmem's two Mem0 doors share, :mod:`pgmem.compat.mem0` and :mod:`pgmem.importers.mem0`:
the statements of ``sql/mem0.sql`` and the metadata key of an imported memory's origin."""

from __future__ import annotations

import functools
from importlib.resources import files

from pgmem.queries import named_blocks

__all__ = ["IMPORT_KEY", "mem0_queries"]

#: The metadata key where :mod:`pgmem.importers.mem0` records where a memory came from:
#: ``{"collection": "<schema>.<table>", "version": "<hash of the Mem0 row it was made from>"}``.
#: ``import --sync`` deletes only memories carrying it; :mod:`pgmem.compat.mem0` never shows it.
IMPORT_KEY = "_mem0_import"


@functools.cache
def mem0_queries() -> dict[str, str]:
    """The named blocks of ``sql/mem0.sql``."""
    return named_blocks(files("pgmem.sql").joinpath("mem0.sql").read_text(encoding="utf-8"))
