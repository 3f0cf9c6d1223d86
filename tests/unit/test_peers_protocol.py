"""Unit tests of the peer benchmark's protocol-trace counting. No database, no models."""

from __future__ import annotations

from benchmarks.peers import ProtocolCounts, protocol_counts

# A libpq trace (PQtrace with suppressed timestamps) of: BEGIN as a simple query, one
# extended-protocol statement, then two statements sent together in pipeline mode and the
# pipeline's closing Sync, then COMMIT.
TRACE = """\
F\t10\tQuery\t "BEGIN"
B\t10\tCommandComplete\t "BEGIN"
B\t5\tReadyForQuery\t T
F\t26\tParse\t "" "select $1::int" 1 NNNN
F\t22\tBind\t "" "" 1 1 1 2 '\\x00\\x02' 1 0
F\t6\tDescribe\t P ""
F\t9\tExecute\t "" 0
F\t4\tSync
B\t4\tParseComplete
B\t29\tRowDescription\t 1 "int4" NNNN 0 NNNN 4 -1 0
B\t11\tDataRow\t 1 1 '2'
B\t13\tCommandComplete\t "SELECT 1"
B\t5\tReadyForQuery\t T
F\t9\tExecute\t "" 0
F\t9\tExecute\t "" 0
F\t4\tFlush
B\t13\tCommandComplete\t "SELECT 1"
B\t13\tCommandComplete\t "SELECT 1"
F\t4\tSync
B\t5\tReadyForQuery\t T
F\t11\tQuery\t "COMMIT"
B\t11\tCommandComplete\t "COMMIT"
B\t5\tReadyForQuery\t I
"""


def test_statements_are_queries_and_executes_and_round_trips_are_answered_flights() -> None:
    assert protocol_counts(TRACE.splitlines()) == ProtocolCounts(statements=5, round_trips=5)


def test_an_empty_trace_counts_nothing() -> None:
    assert protocol_counts([]) == ProtocolCounts(0, 0)


def test_messages_sent_without_an_answer_yet_are_not_a_round_trip() -> None:
    assert protocol_counts(["F\t10\tQuery\t \"SELECT 1\""]) == ProtocolCounts(1, 0)
