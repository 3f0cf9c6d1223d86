"""What pgmem's two Mem0 doors share, :mod:`pgmem.compat.mem0` and :mod:`pgmem.importers.mem0`,
besides the statements of ``sql/mem0.sql``: the metadata key of an imported memory's origin."""

from __future__ import annotations

__all__ = ["IMPORT_KEY"]

#: The metadata key where :mod:`pgmem.importers.mem0` records where a memory came from:
#: ``{"collection": "<schema>.<table>", "version": "<hash of the Mem0 row it was made from>"}``.
#: ``import --sync`` deletes only memories carrying it; :mod:`pgmem.compat.mem0` never shows it.
IMPORT_KEY = "_mem0_import"
