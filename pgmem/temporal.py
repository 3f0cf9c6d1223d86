"""Time in queries and memories, by pattern: whether a query asks *when*, and whether a memory
mentions a time ("yesterday", "last week", "in May", "2023"). Pure: no database, no models.

A memory answering "When did Caroline go to the support group?" usually says so in words
relative to when it was written ("I went yesterday"), which neither the embedding nor the
keyword leg weighs; :class:`pgmem.scoring.Scoring` can give such memories a small bonus for
*when* questions (``time_weight``).
"""

from __future__ import annotations

import functools
import re

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_UNITS = "day|days|week|weeks|weekend|weekends|month|months|year|years|night|summer|winter|spring|fall|autumn"

_ASKS_WHEN = re.compile(
    r"\b(when|what\s+(year|month|day|date|time|week)|which\s+(year|month|day|week)"
    r"|how\s+long\s+ago|since\s+when)\b",
    re.IGNORECASE,
)

# "May" alone is a verb too often to count; a month counts next to a number or "in"/"last"/...
_MENTIONS_TIME = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|recently|lately|ago"
    rf"|{_WEEKDAYS}"
    rf"|(last|next|this|past|previous|coming|few|couple\s+of)\s+({_UNITS})"
    rf"|(in|last|next|this|early|late|mid|since|of)\s+({_MONTHS})"
    rf"|({_MONTHS})\s+\d{{1,2}}|\d{{1,2}}\s+({_MONTHS})"
    r"|(19|20)\d{2})\b",
    re.IGNORECASE,
)


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time ("When did ...", "What year ...")."""
    return _ASKS_WHEN.search(query) is not None


@functools.lru_cache(maxsize=4096)
def mentions_time(text: str) -> bool:
    """Whether ``text`` mentions a time: a relative day or period, a weekday, a date, a year."""
    return _MENTIONS_TIME.search(text) is not None
