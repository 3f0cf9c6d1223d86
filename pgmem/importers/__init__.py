"""Bring memories over from other stores, keeping their ids, timestamps and metadata.

- :mod:`pgmem.importers.mem0`: a collection written by Mem0's pgvector store.
"""
