"""The pure parts of pgmem.routed (the writes as Citus routes them): how a batch's rows are cut
into statements, and which entity rows and links a batch writes. The statements themselves run
on the cluster in tests/test_citus.py and in the ``[citus]`` runs of the lifecycle suites."""

from __future__ import annotations

import uuid

from pgmem.routed import _chunks, _entities
from pgmem.store import MAX_PARAMETERS


def test_a_batch_is_cut_into_statements_within_the_parameter_limit() -> None:
    rows = [{f"column{c}": n for c in range(18)} for n in range(10_000)]
    chunks = list(_chunks(rows))
    assert [row for chunk in chunks for row in chunk] == rows  # every row once, in order
    assert len(chunks) == 3
    assert all(len(chunk) * 18 <= MAX_PARAMETERS for chunk in chunks)
    assert list(_chunks([])) == []


def test_entities_of_the_new_memories_once_each_in_name_order_first_variant_kept() -> None:
    first, third = uuid.uuid4(), uuid.uuid4()
    params = {
        "tenant": "acme",
        "entity_names": ["oslo", "helga norberg", "oslo"],
        "entity_labels": ["GPE", "PERSON", "PROPN"],
        "entity_embeddings": ["v-oslo-gpe", "v-helga", "v-oslo-propn"],
        # item 2 repeats a stored memory: its entities are not written
        "occurrence_items": [1, 1, 2, 3],
        "occurrence_entities": [3, 2, 1, 1],
    }
    entities, links = _entities(params, {1: first, 3: third})
    assert [(e["name"], e["label"], e["embedding"]) for e in entities] == [
        ("helga norberg", "PERSON", "v-helga"),
        ("oslo", "PROPN", "v-oslo-propn"),  # item 1's variant: the first occurrence in a new one
    ]
    assert links == [(first, "oslo"), (first, "helga norberg"), (third, "oslo")]
