"""The command line's progress bar, on a terminal and off one (no database, no models)."""

from __future__ import annotations

import io
import re

from pgmem.cli.options import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_is_redrawn_in_place() -> None:
    stream = Terminal()
    bar = ProgressBar("importing", 4, stream=stream)
    bar(2, 4)
    bar(4, 4)
    bar.finish()
    out = stream.getvalue()
    assert "\r" in out and out.endswith("\n")
    assert out.startswith("\rimporting [" + "-" * 30 + "] 0/4")  # drawn at once
    assert re.search(r"importing \[#{30}\] 4/4 \(\s*[\d.?]+ memories/s\)\n\Z", out), out


def test_elsewhere_one_line_when_done_and_none_when_interrupted() -> None:
    stream = io.StringIO()
    bar = ProgressBar("importing", 4, stream=stream)
    bar(2, 4)
    assert stream.getvalue() == ""
    bar(4, 4)
    bar.finish()
    assert re.fullmatch(r"importing \[#{30}\] 4/4 \(\s*[\d.]+ memories/s\)\n", stream.getvalue())
    stopped = io.StringIO()
    bar = ProgressBar("importing", 4, stream=stopped)
    bar(2, 4)
    bar.finish()  # add_many raised: no line claims a finished import
    assert stopped.getvalue() == ""
