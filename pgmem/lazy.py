"""Load-once values: models load on first use, once, even when threads race for them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """``load()`` runs on the first :meth:`get` (or never, when a value is given)."""

    def __init__(self, load: Callable[[], T], value: T | None = None) -> None:
        self._load = load
        self._value = value
        self._lock = threading.Lock()

    def get(self) -> T:
        """The value, loading it if needed."""
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._load()
        return self._value


def sentence_transformers() -> object:
    """The sentence_transformers module, or ConfigurationError saying how to install it."""
    from pgmem.errors import ConfigurationError

    try:
        import sentence_transformers as module
    except ImportError as exc:
        raise ConfigurationError(
            "sentence-transformers is not installed: pip install 'pgmem[embeddings]' "
            "(install a CPU torch first)"
        ) from exc
    return module
