"""The LoCoMo dev data (``../shared/data/locomo_dev.json``) as retrieval tasks. Pure: no pgmem.

See ``/work/shared/data/README.md`` for the file's shape. Each conversation gives, per task, the
memories to store and the questions to ask:

- ``turns``: one memory per dialogue turn, ``"{speaker}: {text}"`` plus
  ``" [shares a photo of {image_caption}]"`` when the turn has a caption;
- ``observations``: one memory per observation, carrying all of its dialogue ids.

Questions of categories 1-4 with evidence are kept; category 5 (adversarial) has no usable
evidence. Evidence strings may hold several ids separated by ``;`` or whitespace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.metrics import is_relevant

TASKS = ("turns", "observations")
CATEGORIES = frozenset({1, 2, 3, 4})

_EVIDENCE_SEPARATOR = re.compile(r"[;\s]+")

RawConversation = Mapping[str, Any]


@dataclass(frozen=True)
class Item:
    """A memory to store: its text and the dialogue ids it was made from."""

    text: str
    dia_ids: tuple[str, ...]


@dataclass(frozen=True)
class Question:
    """A question, its distinct evidence ids, and how many corpus memories are relevant."""

    text: str
    category: int
    evidence: frozenset[str]
    n_relevant: int


@dataclass(frozen=True)
class Conversation:
    """One conversation as seen by one task: the memories of its scope and its questions."""

    id: str
    memories: tuple[Item, ...]
    questions: tuple[Question, ...]


def load_conversations(path: Path) -> list[RawConversation]:
    """The raw conversations of the data file."""
    with path.open(encoding="utf-8") as f:
        data = json.load(f)
    conversations: list[RawConversation] = data["conversations"]
    return conversations


def parse_evidence(strings: Iterable[str]) -> frozenset[str]:
    """The distinct evidence ids in ``strings``, split on ``;`` and whitespace."""
    return frozenset(
        part for s in strings for part in _EVIDENCE_SEPARATOR.split(s.strip()) if part
    )


def turn_text(turn: Mapping[str, Any]) -> str:
    """The memory text of a dialogue turn."""
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("image_caption")
    return f"{text} [shares a photo of {caption}]" if caption else text


def task_memories(conversation: RawConversation, task: str) -> tuple[Item, ...]:
    """The memories ``task`` stores for a conversation."""
    if task == "turns":
        return tuple(Item(turn_text(t), (t["dia_id"],)) for t in conversation["turns"])
    if task == "observations":
        return tuple(Item(o["text"], tuple(o["dia_ids"])) for o in conversation["observations"])
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")


def task_questions(
    conversation: RawConversation, memories: Sequence[Item]
) -> tuple[Question, ...]:
    """The conversation's answerable questions, relevance counted over ``memories``."""
    questions = []
    for q in conversation["questions"]:
        evidence = parse_evidence(q.get("evidence") or ())
        if q["category"] not in CATEGORIES or not evidence:
            continue
        n_relevant = sum(is_relevant(m.dia_ids, evidence) for m in memories)
        questions.append(Question(q["question"], q["category"], evidence, n_relevant))
    return tuple(questions)


def task_conversations(raw: Sequence[RawConversation], task: str) -> list[Conversation]:
    """Every conversation of ``raw`` as seen by ``task``."""
    conversations = []
    for conversation in raw:
        memories = task_memories(conversation, task)
        questions = task_questions(conversation, memories)
        conversations.append(Conversation(conversation["id"], memories, questions))
    return conversations
