"""The lines of an export and how an import reads them back (pure: no database)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest

from pgmem import exporting
from pgmem.errors import InvalidInputError

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
ROW = {
    "id": uuid.UUID(int=1), "text": "Ana \u202e moved", "user_id": "ana", "agent_id": None,
    "run_id": None, "metadata": {"k": [1, 2.5]}, "created_at": AT, "updated_at": AT,
    "ts_config": "english", "expires_at": None, "origin": None,
    "embedding": "[0.1,-2e-05,3]", "events": ["ADD", "UPDATE"], "old_texts": [None, "a"],
    "new_texts": ["a", "Ana \u202e moved"], "event_times": [AT, AT],
}
HEAD = {"memories": 1, "model": "m", "dim": 3, "storage": "vector"}


def test_a_line_is_an_add_many_item_with_the_vector_as_the_server_wrote_it() -> None:
    line = json.loads(exporting.encoded_line(ROW, vectors=True, history=True))
    assert line == {
        "id": str(uuid.UUID(int=1)), "text": ROW["text"], "user_id": "ana", "agent_id": None,
        "run_id": None, "metadata": {"k": [1, 2.5]}, "created_at": AT.isoformat(),
        "updated_at": AT.isoformat(), "ts_config": "english", "embedding": [0.1, -2e-05, 3],
        "history": [
            {"event": "ADD", "old_text": None, "new_text": "a", "created_at": AT.isoformat()},
            {"event": "UPDATE", "old_text": "a", "new_text": ROW["text"],
             "created_at": AT.isoformat()},
        ],
    }
    plain = exporting.encoded_line(ROW, vectors=False, history=False)
    assert plain.endswith("}\n") and plain.count("\n") == 1
    assert "embedding" not in json.loads(plain) and "history" not in json.loads(plain)


def test_expiry_and_origin_appear_when_set() -> None:
    row = {**ROW, "expires_at": AT, "origin": {"importer": "mem0"}}
    line = json.loads(exporting.encoded_line(row, vectors=False, history=False))
    assert line["expires_at"] == AT.isoformat() and line["origin"] == {"importer": "mem0"}


def header(**changes: object) -> dict[str, object]:
    return {**exporting.header(HEAD, tenant="t", scope=None, vectors=True, history=False),
            **changes}


def test_an_import_leaves_out_the_first_line_and_checks_the_model() -> None:
    item = {"text": "a", "embedding": [1.0, 2.0, 3.0]}
    rows = [(1, header()), (2, dict(item))]
    assert exporting.checked_rows(rows, "f", lambda: "m") == rows[1:]
    with pytest.raises(InvalidInputError, match="vectors of model 'm', but .* is 'other'"):
        exporting.checked_rows(rows, "f", lambda: "other")
    no_vectors = [(1, header()), (2, {"text": "a"})]
    assert exporting.checked_rows(no_vectors, "f", lambda: "other") == no_vectors[1:]
    with pytest.raises(InvalidInputError, match="format 2"):
        exporting.checked_rows([(1, header(pgmem_export=2))], "f", lambda: "m")
    with pytest.raises(InvalidInputError, match="f, line 3: an export's first line"):
        exporting.checked_rows([*rows, (3, header())], "f", lambda: "m")
    plain = [(1, {"text": "a"})]
    assert exporting.checked_rows(plain, "f", lambda: "m") == plain


def test_lines_are_added_in_runs_of_one_text_search_configuration() -> None:
    rows = [(1, {"text": "a", "ts_config": "simple"}), (2, {"text": "b", "ts_config": "simple"}),
            (3, {"text": "c"}), (4, {"text": "d", "ts_config": "simple"})]
    assert exporting.by_ts_config(rows) == [
        ("simple", [(1, {"text": "a"}), (2, {"text": "b"})]),
        (None, [(3, {"text": "c"})]),
        ("simple", [(4, {"text": "d"})]),
    ]


def test_deleted_memories_lines_are_set_apart_and_checked() -> None:
    deleted = {"id": str(uuid.UUID(int=2)), "deleted": True, "history": []}
    rows = [(2, {"text": "a"}), (3, deleted)]
    assert exporting.deleted_rows(rows, "f") == ([(2, {"text": "a"})], [(3, deleted)])
    for bad in ({**deleted, "text": "b"}, {**deleted, "deleted": "yes"}):
        with pytest.raises(InvalidInputError, match="f, line 3: a deleted memory's line"):
            exporting.deleted_rows([(3, bad)], "f")
