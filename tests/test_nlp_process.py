"""spaCy in a process of its own (pgmem.nlp_process): the same analyses as in the calling
process; one request at a time; a child that dies is started again; a forked process starts a
child of its own; and a Memory runs spaCy so where its embedder runs beside the analysis. Real
spaCy, real PostgreSQL."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

import pgmem
from pgmem import nlp_process
from pgmem.embedding import OnnxEmbedder
from pgmem.nlp_process import ProcessAnalyzer, make_analyzer
from tests.test_nlp import questions


@pytest.fixture(scope="module")
def apart() -> Iterator[ProcessAnalyzer]:
    analyzer = ProcessAnalyzer()
    yield analyzer
    analyzer.close()


def child_pid(analyzer: ProcessAnalyzer) -> int:
    analyzer.analyze("Alice starts the child.")
    assert analyzer._child is not None
    return analyzer._child.process.pid


def test_the_child_finds_what_the_calling_process_finds(
    apart: ProcessAnalyzer, analyzer: pgmem.TextAnalyzer
) -> None:
    texts = questions()
    assert [apart.analyze(t) for t in texts] == [analyzer.analyze(t) for t in texts]
    assert apart.analyze_many(texts, batch_size=16) == analyzer.analyze_many(texts)
    assert apart.model_name == analyzer.model_name
    assert apart.entities_available is True
    assert child_pid(apart) != os.getpid()


def test_an_analysis_started_later_runs_while_the_caller_works(apart: ProcessAnalyzer) -> None:
    wait = apart.analyze_many_later(["Bob flew to Lisbon.", "Carol stayed in Oslo."])
    # Another call meanwhile is answered (it reads the first answer on the way, and keeps it).
    other = apart.analyze("Dave in Rome.")
    assert {e.name for e in other.entities} == {"dave", "rome"}
    first, second = wait()
    assert {e.name for e in first.entities} == {"bob", "lisbon"}
    assert {e.name for e in second.entities} == {"carol", "oslo"}
    with pytest.raises(RuntimeError, match="once"):
        wait()


def test_calls_from_many_threads_each_get_their_own_analysis(
    apart: ProcessAnalyzer, analyzer: pgmem.TextAnalyzer
) -> None:
    texts = questions()[:120]
    expected = {t: analyzer.analyze(t) for t in texts}
    wrong: list[str] = []

    def work(part: list[str]) -> None:
        for i, text in enumerate(part):
            if i % 3 == 0:  # some started, then waited for after the next one
                wait = apart.analyze_many_later([text])
                if apart.analyze(part[(i + 1) % len(part)]) != expected[part[(i + 1) % len(part)]]:
                    wrong.append(part[(i + 1) % len(part)])
                found = wait()[0]
            else:
                found = apart.analyze(text)
            if found != expected[text]:
                wrong.append(text)

    threads = [threading.Thread(target=work, args=(texts[k::4],)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert wrong == []


def test_a_child_that_died_is_started_again(apart: ProcessAnalyzer) -> None:
    os.kill(child_pid(apart), signal.SIGKILL)
    time.sleep(0.2)
    assert {e.name for e in apart.analyze("Erin met Frank.").entities} == {"erin", "frank"}
    # Killed while it works: that call fails, clearly; the next one starts another child.
    wait = apart.analyze_many_later(["Gina dances in Madrid with her friends."] * 500)
    os.kill(child_pid_unlocked(apart), signal.SIGKILL)
    with pytest.raises(pgmem.ConfigurationError, match="spaCy process stopped"):
        wait()
    assert apart.analyze("Hank paints.").lexemes == ("hank", "paint")


def child_pid_unlocked(analyzer: ProcessAnalyzer) -> int:
    """The running child's pid, read while a request holds the analyzer's lock."""
    assert analyzer._child is not None
    return analyzer._child.process.pid


def test_a_forked_process_starts_a_child_of_its_own(apart: ProcessAnalyzer) -> None:
    parent_child = child_pid(apart)
    pid = os.fork()
    if pid == 0:  # the forked process: its own child, the same answer
        code = 1
        try:
            ok = apart.analyze("Ivan in Paris.").lexemes == ("ivan", "paris")
            code = 0 if ok and child_pid(apart) != parent_child else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's child was left alone.
    assert child_pid(apart) == parent_child
    assert apart.analyze("Judy in Tokyo.").lexemes == ("judy", "tokyo")


def test_a_model_that_is_not_installed_is_a_clear_error() -> None:
    analyzer = ProcessAnalyzer("xx_no_such_model")
    with pytest.raises(pgmem.ConfigurationError, match="xx_no_such_model"):
        analyzer.analyze("anything")
    assert analyzer._child is None


def test_close_stops_the_child_and_a_collected_analyzer_stops_its_own() -> None:
    analyzer = ProcessAnalyzer()
    pid = child_pid(analyzer)
    analyzer.close()
    assert not pid_alive(pid)
    analyzer = ProcessAnalyzer()
    pid = child_pid(analyzer)
    del analyzer
    gc.collect()  # (an analyzer's lazily loaded pipeline refers back to it)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a child of this process that exited and was waited for is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_make_analyzer_runs_spacy_apart_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nlp_process.PROCESS_VARIABLE, raising=False)
    assert type(make_analyzer()) is ProcessAnalyzer
    assert type(make_analyzer(apart=False)) is pgmem.TextAnalyzer
    assert type(make_analyzer("blank")) is pgmem.TextAnalyzer  # nothing to gain
    monkeypatch.setenv(nlp_process.PROCESS_VARIABLE, "0")
    assert type(make_analyzer()) is pgmem.TextAnalyzer
    monkeypatch.setenv(nlp_process.PROCESS_VARIABLE, "1")
    assert type(make_analyzer(apart=False)) is ProcessAnalyzer
    monkeypatch.setenv(nlp_process.PROCESS_VARIABLE, "maybe")
    with pytest.raises(pgmem.ConfigurationError, match="PGMEM_NLP_PROCESS must be 1 .* or 0"):
        make_analyzer()


def test_where_no_python_child_can_be_started_spacy_runs_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(nlp_process.PROCESS_VARIABLE, raising=False)
    monkeypatch.setattr(nlp_process.sys, "executable", "/usr/local/bin/uwsgi")
    assert type(make_analyzer()) is pgmem.TextAnalyzer
    monkeypatch.setenv(nlp_process.PROCESS_VARIABLE, "1")  # asked for: tried
    assert type(make_analyzer()) is ProcessAnalyzer


def test_ctrl_c_reaches_the_parent_not_the_child(apart: ProcessAnalyzer) -> None:
    pid = child_pid(apart)
    os.kill(pid, signal.SIGINT)
    time.sleep(0.2)
    assert apart.analyze("Nora paints.").lexemes == ("nora", "paint")
    assert child_pid(apart) == pid


def test_a_memory_runs_spacy_apart_where_its_embedder_runs_beside_it(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(nlp_process.PROCESS_VARIABLE, raising=False)
    with pgmem.Memory(db_dsn, embedder=OnnxEmbedder()) as beside:
        assert type(beside.analyzer) is ProcessAnalyzer
    with pgmem.Memory(db_dsn, embedder=OnnxEmbedder(spinning=True)) as first:
        assert type(first.analyzer) is pgmem.TextAnalyzer
    given = pgmem.TextAnalyzer()
    with pgmem.Memory(db_dsn, embedder=OnnxEmbedder(), nlp=given) as chosen:
        assert chosen.analyzer is given


def test_a_memory_with_spacy_apart_stores_and_finds_what_one_without_it_does(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
    apart: ProcessAnalyzer,
) -> None:
    texts = [
        "Caroline went to the LGBTQ support group in Boston on Tuesday.",
        "Melanie painted a sunrise over the lake last summer.",
        "Inventory code XJ-4471 belongs to the blue storage crate in the basement.",
        "Dr. Okafor moved the team meeting to Thursday.",
    ]
    found = {}
    for user_id, nlp in (("inline", analyzer), ("apart", apart)):
        with pgmem.Memory(db_dsn, embedder=embedder, nlp=nlp) as memory:
            memory.add_many(texts[:2], user_id=user_id)
            for text in texts[2:]:
                memory.add(text, user_id=user_id)
            hits = memory.search("Where did Caroline go in Boston?", user_id=user_id, limit=4)
            found[user_id] = [(h.text, round(h.score, 6)) for h in hits]
            stored = memory.get_all(user_id=user_id).items
            assert sorted(m.text for m in stored) == sorted(texts)
    assert found["apart"] == found["inline"]
    assert found["apart"][0][0].startswith("Caroline")


def test_closing_a_memory_stops_the_spacy_process_it_started(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(nlp_process.PROCESS_VARIABLE, raising=False)
    memory = pgmem.Memory(db_dsn, embedder=OnnxEmbedder())
    analyzer = memory.analyzer
    assert isinstance(analyzer, ProcessAnalyzer)
    memory.add("Kim moved to Seoul.", user_id="u1")
    pid = child_pid_unlocked(analyzer)
    memory.close()
    assert not pid_alive(pid)
    # A process the caller passed in is the caller's to stop.
    mine = ProcessAnalyzer()
    with pgmem.Memory(db_dsn, embedder=OnnxEmbedder(), nlp=mine) as memory:
        memory.add("Lee moved to Busan.", user_id="u1")
    assert pid_alive(child_pid(mine))
    mine.close()


def test_closing_an_async_memory_stops_the_spacy_process_it_started(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(nlp_process.PROCESS_VARIABLE, raising=False)

    async def main() -> tuple[ProcessAnalyzer, int]:
        async with pgmem.AsyncMemory(db_dsn, embedder=OnnxEmbedder()) as memory:
            analyzer = memory.analyzer
            assert isinstance(analyzer, ProcessAnalyzer)
            await memory.add("Mia moved to Kyoto.", user_id="u1")
            return analyzer, child_pid_unlocked(analyzer)

    _, pid = asyncio.run(main())
    assert not pid_alive(pid)


def test_a_wait_interrupted_leaves_no_answer_for_the_next_call(apart: ProcessAnalyzer) -> None:
    """Ctrl-C while waiting: the interrupted analysis's answer must not become the next call's
    (the child that would send it is replaced)."""
    wait = apart.analyze_many_later(["Olga flew to Lima."] * 200)
    pid = child_pid_unlocked(apart)
    conn = apart._child.conn  # type: ignore[union-attr]

    def interrupted() -> object:
        raise KeyboardInterrupt

    real_recv = conn.recv
    conn.recv = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        wait()
    conn.recv = real_recv  # type: ignore[method-assign]
    assert not pid_alive(pid)
    assert apart.analyze("Pablo in Quito.").lexemes == ("pablo", "quito")
