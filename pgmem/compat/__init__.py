"""Other memory libraries' APIs over pgmem, so that an app can switch with an import change.

- :mod:`pgmem.compat.mem0`: Mem0 OSS's ``Memory`` (mem0ai 2.2.1), its LLM-free path.

Nothing here imports the library it imitates.
"""
