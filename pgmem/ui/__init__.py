"""The memory inspector in the browser (``pgmem ui``): what a tenant's agents remember, and why
a search answered what it did.

:func:`app` returns it as an ASGI application over a :class:`pgmem.Memory`, to serve or to
mount in a Starlette or FastAPI application; see docs/ui.md. Pages: the tenant's scopes, a
scope's memories (filter, text search), a memory (history, entities, neighbours), a search with
each hit's score drawn as its parts, and plots of a scope. Read-only unless ``write=True``.

Needs the ``ui`` extra: ``pip install 'pgmem[ui]'``.
"""

from __future__ import annotations

from pgmem.ui.web import app

__all__ = ["app"]
