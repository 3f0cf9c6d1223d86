"""Stored texts shown to people: the characters a terminal or a page would act on instead of
showing, and how to show them (the CLI prints their escapes; the inspector marks them)."""

from __future__ import annotations

import re

# C0 and C1 control characters (ESC starts escape sequences, 0x9b is an 8-bit CSI), the line
# and paragraph separators, and the bidirectional controls that reorder what is shown.
UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_of(char: str) -> str:
    """One character of :data:`UNSHOWN` as its Python escape (``\\x1b``, ``\\n``,
    ``\\u202e``)."""
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def printable(text: str) -> str:
    """``text`` safe to print to a terminal: each control character (see :data:`UNSHOWN`)
    written as its Python escape."""
    return UNSHOWN.sub(lambda match: escape_of(match.group()), text)


# Those of UNSHOWN that JSON leaves as they are (it escapes U+0000-U+001F itself).
_UNSHOWN_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                              "\u202a-\u202e\u2066-\u2069]")


def json_printable(text: str) -> str:
    """JSON text safe to print to a terminal: the characters of :data:`UNSHOWN` that JSON
    leaves as they are written as ``\\uXXXX`` escapes, so it still reads back as the exact
    values."""
    return _UNSHOWN_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
