"""The scopes a search found too large to read row by row, remembered for the next search.

A scope of up to ``builders.SCOPE_SCAN_ROWS`` memories is searched by reading its rows once;
a larger one through the HNSW and GIN indexes. The statement ``search`` holds both paths and
picks one at run time; ``search_small`` is the same statement without the large-scope path (a
third smaller plan, faster for a small scope, which is most searches), which for a larger
scope returns only the scope's size. A search cannot know the size before it runs, so it sends
``search_small`` unless :class:`LargeScopes` remembers the scope as large, and sends ``search``
after a ``search_small`` that found the scope larger. Both statements answer with the scope's
size (counted up to the limit + 1) on every row, and with one row even without candidates,
which keeps the memory current. A stale entry costs a round trip, never a result: both
statements are exact for the scopes they answer.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

#: How many large scopes one ``Memory`` remembers (the oldest is forgotten first).
CAPACITY = 4096


class LargeScopes:
    """Scope keys (any hashable: scope ids and filter) last found too large to read row by
    row. Safe to share between threads."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._keys: dict[Hashable, None] = {}
        self._lock = threading.Lock()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._keys

    def note(self, key: Hashable, size: int, scan_rows: int) -> None:
        """Remember what a search statement found: the scope's ``size``, counted up to
        ``scan_rows`` + 1 (the most memories a scope read row by row may hold)."""
        with self._lock:
            self._keys.pop(key, None)
            if size > scan_rows:
                self._keys[key] = None  # the newest last
                while len(self._keys) > self.capacity:
                    del self._keys[next(iter(self._keys))]
