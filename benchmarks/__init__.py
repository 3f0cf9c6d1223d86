"""Benchmarks of pgmem on public data. Not part of the package; run them as modules, e.g.
``python -m benchmarks.retrieval --help``."""
