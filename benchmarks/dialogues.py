"""LoCoMo's conversations as retrieval tasks. Pure: no pgmem.

The data: LoCoMo ("Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL 2024,
CC BY-NC 4.0), the file ``data/locomo10.json`` of its public repository (snap-research/LoCoMo),
read as published: download it and pass ``--data PATH`` or set ``PGMEM_LOCOMO``. A file of the
same conversations in the development shape (``{"conversations": [{"id", "speakers", "turns",
"observations", "questions"}]}``) reads the same. ``--conversations`` chooses among them: all
(the default), ``dev`` (the five that docs/ was measured on, :data:`DEV_CONVERSATIONS`), the
first N, or a comma-separated list of ids. Each conversation gives, per task, the memories to
store and the questions to ask:

- ``turns``: one memory per dialogue turn, ``"{speaker}: {text}"`` plus
  ``" [shares a photo of {image_caption}]"`` when the turn has a caption;
- ``observations``: one memory per observation, carrying all of its dialogue ids.

Questions of categories 1-4 with evidence are kept; category 5 (adversarial) has no usable
evidence. Evidence strings may hold several ids separated by ``;`` or whitespace.
"""

from __future__ import annotations

import argparse
import json
import os
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


#: Where the benchmarks read LoCoMo from when no ``--data`` is given: ``$PGMEM_LOCOMO``.
DEFAULT_DATA: Path | None = (
    Path(os.environ["PGMEM_LOCOMO"]) if os.environ.get("PGMEM_LOCOMO") else None
)

#: The five conversations the figures in docs/ were measured on (``--conversations dev``); the
#: scoring was tuned on the first three of them.
DEV_CONVERSATIONS = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")


def data_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data`` and ``--conversations``, as every benchmark on LoCoMo takes them."""
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, metavar="PATH",
                        help="LoCoMo's data/locomo10.json (default: $PGMEM_LOCOMO)")
    parser.add_argument("--conversations", metavar="WHICH",
                        help="all (default), dev (the five docs/ was measured on), the first N, "
                        "or comma-separated ids")


def timing_arguments(parser: argparse.ArgumentParser, questions: int) -> None:
    """``--questions`` (default ``questions``), ``--rounds`` and ``--dsn``, as the benchmarks
    that time questions in a scratch database take them."""
    parser.add_argument("--questions", type=int, default=questions, metavar="N",
                        help=f"questions timed per round (default: {questions})")
    parser.add_argument("--rounds", type=int, default=3, metavar="N",
                        help="timed passes over the questions (default: 3)")
    parser.add_argument("--dsn", help="the server of the scratch database (default: "
                        "$PGMEM_BENCH_DSN, then $PGMEM_TEST_DSN)")


def numbers(text: str) -> list[int]:
    """A comma-separated list of whole numbers, as options such as ``--sizes 100,200`` take it
    (argparse's ``type``: a bad one is a usage error)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated whole numbers: {text!r}") from None
    if any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"negative number in {text!r}")
    return values


def timed_questions(args: argparse.Namespace) -> tuple[list[Conversation], list[tuple[str, str]]]:
    """The dialogue-turn conversations ``args`` chooses (``--data``, ``--conversations``) and
    their first ``--questions`` questions, each with its conversation's id."""
    conversations = task_conversations(load_conversations(args.data, args.conversations), "turns")
    asked = [(q.text, c.id) for c in conversations for q in c.questions][: args.questions]
    return conversations, asked


def load_conversations(path: Path | None, which: str | None = None) -> list[RawConversation]:
    """The conversations of a LoCoMo file (``locomo10.json`` as published, or the development
    shape) that ``which`` chooses (see the module's docstring). A missing file is a SystemExit
    that says where to get it."""
    if path is None or not path.is_file():
        raise SystemExit(
            f"no LoCoMo data{f' at {path}' if path else ''}: download data/locomo10.json from "
            "LoCoMo's repository (https://github.com/snap-research/LoCoMo) and pass --data PATH "
            "or set PGMEM_LOCOMO"
        )
    with path.open(encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, list):  # locomo10.json: a list of samples
        return choose([from_locomo_sample(sample) for sample in data], which)
    conversations: list[RawConversation] = data["conversations"]
    return choose(conversations, which)


def choose(raw: Sequence[RawConversation], which: str | None) -> list[RawConversation]:
    """The conversations of ``raw`` that ``which`` names: None or ``all``, ``dev``, a number N
    (the first N) or comma-separated ids, in the order ``which`` gives them."""
    if which is None or which == "all":
        return list(raw)
    if which.isdigit():
        return list(raw[: int(which)])
    wanted = DEV_CONVERSATIONS if which == "dev" else tuple(i for i in which.split(",") if i)
    by_id = {c["id"]: c for c in raw}
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise SystemExit(f"--conversations {which}: the data has no {', '.join(missing)} "
                         f"(it has {', '.join(by_id)})")
    return [by_id[i] for i in wanted]


def from_locomo_sample(sample: Mapping[str, Any]) -> RawConversation:
    """One sample of ``locomo10.json`` in the development shape: its sessions' turns (with
    their BLIP caption as ``image_caption``), its observations with their dialogue ids, its
    questions."""
    talk = sample["conversation"]
    sessions = sorted(
        int(key.removeprefix("session_")) for key in talk
        if re.fullmatch(r"session_\d+", key) and isinstance(talk[key], list)
    )
    turns = []
    for number in sessions:
        for turn in talk[f"session_{number}"]:
            row = {"dia_id": turn["dia_id"], "session": number,
                   "date": talk.get(f"session_{number}_date_time"),
                   "speaker": turn["speaker"], "text": turn["text"]}
            if turn.get("blip_caption"):
                row["image_caption"] = turn["blip_caption"]
            turns.append(row)
    observations = []
    for key, by_speaker in (sample.get("observation") or {}).items():
        number = int(re.sub(r"\D", "", key) or 0)
        for speaker, facts in by_speaker.items():
            for text, ids in facts:
                dia_ids = sorted(parse_evidence([ids] if isinstance(ids, str) else ids))
                observations.append({"session": number, "speaker": speaker, "text": text,
                                     "dia_ids": dia_ids})
    return {
        "id": sample["sample_id"],
        "speakers": [talk["speaker_a"], talk["speaker_b"]],
        "turns": turns,
        "observations": observations,
        "questions": [
            {"question": q["question"], "answer": q.get("answer"), "category": q["category"],
             "evidence": list(q.get("evidence") or ())}
            for q in sample["qa"]
        ],
    }


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
