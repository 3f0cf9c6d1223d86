"""Time in queries and memories, by pattern."""

from __future__ import annotations

import pytest

from pgmem import temporal


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did Caroline go to the LGBTQ support group?", True),
        ("What year did Melanie start painting?", True),
        ("How long ago was the trip?", True),
        ("where does Caroline work?", False),
        ("What did Melanie paint?", False),
    ],
)
def test_asks_when(query: str, expected: bool) -> None:
    assert temporal.asks_when(query) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Caroline: I went to a support group yesterday.", True),
        ("We went camping last week", True),
        ("I painted that in 2022.", True),
        ("The wedding is on 2 August", True),
        ("She moved here in May", True),
        ("See you on Friday!", True),
        ("It was a few years ago", True),
        ("You may be right about the painting.", False),
        ("Melanie paints landscapes", False),
    ],
)
def test_mentions_time(text: str, expected: bool) -> None:
    assert temporal.mentions_time(text) is expected
