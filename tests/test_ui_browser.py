"""The memory inspector (``pgmem.ui``) served by uvicorn on a free port and driven by a real
Chromium through Playwright: pages load, the search bars are the explain parts, switching a
signal off ranks as the search's own scoring does, 10,000 memories page through, an edit is
confirmed, hostile texts stay text, and requests without the token, from another Host or
Origin, or without the CSRF token are refused.

``PGMEM_UI_SCREENSHOTS=docs/images`` writes the screenshots docs/ui.md shows."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

if not os.environ.get("CI"):  # CI installs the ui extra, playwright and chromium
    pytest.importorskip("uvicorn")
    pytest.importorskip("playwright")

import httpx
import uvicorn
from playwright.sync_api import Browser, Page, sync_playwright

import pgmem
from pgmem import ui
from pgmem.ui import ranking
from pgmem.ui.data import Reads

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "t" * 43
SHOTS = os.environ.get("PGMEM_UI_SCREENSHOTS")

FACTS = [
    "Ana moved to Lisbon in March and works at Siemens as a data engineer.",
    "Ana is allergic to penicillin.",
    "Ana's sister Marta lives in Porto and teaches piano.",
    "The team offsite is planned for Lisbon in June.",
    "Ana prefers tea over coffee in the morning.",
    "Siemens asked Ana to lead the migration to PostgreSQL.",
    "Marta visited Ana in Lisbon last weekend.",
    "Ana runs 10 km every Sunday along the river.",
]
HOSTILE = [
    "<script>alert('xss-script')</script>",
    '<img src="http://evil.example/x.png" onerror="alert(\'xss-img\')">',
    '<a href="javascript:alert(\'xss-link\')">click me</a>',
    "red \x1b[31mALERT\x1b[0m and a bell \x07",
    "invoice \u202egnp.exe and \u2066isolate\u2069",
]


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free port of 127.0.0.1; its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip("no chromium (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Watch:
    """What a page did that it must not: dialogs, requests to another origin."""

    def __init__(self, page: Page, base: str) -> None:
        self.dialogs: list[str] = []
        self.foreign: list[str] = []

        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        def on_route(route: Any) -> None:
            if route.request.url.startswith(base):
                route.continue_()
            else:
                self.foreign.append(route.request.url)
                route.abort()

        page.on("dialog", on_dialog)
        page.route("**/*", on_route)


def open_page(browser: Browser, base: str) -> tuple[Page, Watch]:
    page = browser.new_page()
    watch = Watch(page, base)
    page.goto(f"{base}/?token={TOKEN}")
    assert page.url == f"{base}/", "the token URL redirects to the page without it"
    return page, watch


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1100, "height": 760})
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"))


def test_pages_load_and_the_bars_are_the_explain_parts(
    memory: pgmem.Memory, browser: Browser
) -> None:
    added = memory.add_many(FACTS, user_id="ana")
    memory.update(added[1].id, text="Ana is allergic to penicillin and to aspirin.")
    with serving(ui.app(memory, token=TOKEN)) as base:
        page, watch = open_page(browser, base)
        assert "ana" in page.locator("#scopes").inner_text()
        shot(page, "scopes")
        page.click("a.scope-link")
        page.wait_for_selector("tr.memory-row")
        assert page.locator("tr.memory-row").count() == len(FACTS)
        shot(page, "scope")
        page.goto(f"{base}/memory/{added[1].id}")
        history = page.locator("#history").inner_text()
        assert "ADD" in history and "UPDATE" in history and "aspirin" in history
        assert "Lisbon" in page.locator("#neighbours").inner_text()
        shot(page, "memory")
        page.goto(f"{base}/search?q=Where+does+Ana+live%3F&kind=user&id=ana&limit=5")
        hits = memory.search("Where does Ana live?", user_id="ana", limit=5)
        items = page.locator("li.hit")
        assert items.count() == len(hits)
        for n, hit in enumerate(hits):
            item = items.nth(n)
            assert item.get_attribute("data-id") == str(hit.id)
            mp = hit.explain.max_possible
            expected = {"semantic": hit.explain.semantic / mp, "keyword": hit.explain.keyword / mp,
                        "entity": hit.explain.entity / mp, "neighbour": hit.explain.context / mp}
            total = 0.0
            for signal, share in expected.items():
                box = item.locator(f"rect.part.{signal}").bounding_box()
                assert box is not None
                assert abs(box["width"] / 400 - share) < 0.002, (signal, box, share)
                total += box["width"] / 400
            assert abs(total - hit.score) < 0.005
        shot(page, "search")
        page.goto(f"{base}/plots?kind=user&id=ana")
        assert page.locator("#timeline svg").count() == 1
        assert page.locator("#fanout svg polyline.curve").count() == 1
        shot(page, "plots")
        assert watch.dialogs == [] and watch.foreign == []


def test_switching_a_signal_off_ranks_as_the_search_does(
    db_dsn: str, embedder: Any, analyzer: Any, browser: Browser
) -> None:
    # The seed scoring has no neighbour step: a memory's score is its own, so the search with
    # the keyword signal off (mode) is the oracle of the recomputed ranking.
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, scoring="seed") as memory:
        memory.add_many(FACTS, user_id="ana")
        query = "Ana Lisbon Siemens"
        with serving(ui.app(memory, token=TOKEN)) as base:
            page, _ = open_page(browser, base)
            page.goto(f"{base}/search?q=Ana+Lisbon+Siemens&kind=user&id=ana&limit=8"
                      "&threshold=0.1&off=keyword")
            shown = {
                li.get_attribute("data-id"): float(li.get_attribute("data-score") or 0)
                for li in page.locator("#reranked li").all()
            }
        oracle = memory.search(query, user_id="ana", limit=8, mode="semantic+entity")
        assert shown
        for hit in oracle:
            if str(hit.id) in shown:
                assert abs(shown[str(hit.id)] - hit.score) < 1e-4, hit.text
        assert next(iter(shown)) == str(oracle[0].id)


def test_ranking_with_nothing_off_is_the_search_itself(memory: pgmem.Memory) -> None:
    memory.add_many(FACTS, user_id="ana")
    hits = memory.search("Who is Marta?", user_id="ana", limit=8, threshold=-1)
    near = Reads(memory).neighbours("user", "ana", [h.id for h in hits])
    again = ranking.rerank(hits, off=[], threshold=-1, limit=8,
                           neighbours={k: (v["before"], v["after"]) for k, v in near.items()},
                           searched=[h.id for h in hits])
    assert [r.id for r in again] == [h.id for h in hits]
    assert [round(r.score, 9) for r in again] == [round(h.score, 9) for h in hits]


def _insert_bulk(dsn: str, n: int, user_id: str, scopes: int) -> None:
    """``n`` memories of ``user_id`` and one each of ``scopes`` other users, by SQL (random
    vectors: paging reads no vector)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO pgmem.memories (user_id, text, content_hash, embedding, lexemes,"
            " lexeme_count, created_at)"
            " SELECT %s, 'bulk memory ' || i, md5(i::text),"
            "  (SELECT array_agg(random())::vector(384) FROM generate_series(1, 384) WHERE i > 0),"
            "  to_tsvector('english', 'bulk memory ' || i), 2,"
            "  now() + i * interval '1 millisecond'"
            " FROM generate_series(1, %s) AS i", (user_id, n))
        conn.execute(
            "INSERT INTO pgmem.memories (user_id, text, content_hash, embedding, lexemes,"
            " lexeme_count)"
            " SELECT 'user-' || lpad(i::text, 4, '0'), 'one memory', md5('one' || i),"
            "  (SELECT array_agg(random())::vector(384) FROM generate_series(1, 384) WHERE i > 0),"
            "  to_tsvector('english', 'one memory'), 2"
            " FROM generate_series(1, %s) AS i", (scopes,))


def test_paging_through_10000_memories_and_the_scopes(
    db_dsn: str, memory: pgmem.Memory, browser: Browser
) -> None:
    _insert_bulk(db_dsn, 10_000, "bulk", 130)
    with serving(ui.app(memory, token=TOKEN)) as base:
        page, _ = open_page(browser, base)
        page.goto(f"{base}/scope?kind=user&id=bulk&size=200")
        seen: list[str] = []
        while True:
            seen += page.locator("a.memory-link").all_inner_texts()
            nxt = page.locator("#next")
            if nxt.count() == 0:
                break
            nxt.click()
            page.wait_for_load_state()
        assert len(seen) == 10_000
        assert seen == [f"bulk memory {i}" for i in range(1, 10_001)]
        page.goto(f"{base}/?kind=user&size=50")
        scopes: list[str] = []
        while True:
            scopes += page.locator("a.scope-link").all_inner_texts()
            if page.locator("#next").count() == 0:
                break
            page.click("#next")
            page.wait_for_load_state()
        assert scopes == sorted(["bulk", *(f"user-{i:04d}" for i in range(1, 131))])
        page.click("#prev")
        page.wait_for_load_state()
        assert page.locator("a.scope-link").all_inner_texts() == scopes[50:100]


def test_an_edit_is_confirmed_then_written(memory: pgmem.Memory, browser: Browser) -> None:
    added = memory.add("Ana likes green tea.", user_id="ana")
    with serving(ui.app(memory, token=TOKEN)) as base:
        page, _ = open_page(browser, base)
        page.goto(f"{base}/memory/{added.id}")
        assert page.locator("#edit").count() == 0  # read-only: no edit link
        assert page.goto(f"{base}/memory/{added.id}/edit").status == 404
    with serving(ui.app(memory, token=TOKEN, write=True)) as base:
        page, _ = open_page(browser, base)
        page.goto(f"{base}/memory/{added.id}")
        page.click("#edit")
        page.fill("textarea[name=text]", "Ana likes jasmine tea.")
        page.click("#review")
        assert "jasmine" in page.locator("#new-text").inner_text()
        assert memory.get(added.id).text == "Ana likes green tea."  # not before confirming
        page.click("#confirm")
        page.wait_for_selector("#history")  # the memory's page, after the redirect
        assert memory.get(added.id).text == "Ana likes jasmine tea."
        assert "UPDATE" in page.locator("#history").inner_text()
        shot(page, "edit")
        page.click("#delete")
        page.click("#confirm")
        page.wait_for_selector("#deleted")
        with pytest.raises(pgmem.NotFoundError):
            memory.get(added.id)


def test_a_scope_is_deleted_only_after_confirming(
    memory: pgmem.Memory, browser: Browser
) -> None:
    for i in range(3):
        memory.add(f"Bo keeps bees, hive {i}.", user_id="bo")
    kept = memory.add("Cy keeps goats.", user_id="cy")
    with serving(ui.app(memory, token=TOKEN)) as base:
        page, _ = open_page(browser, base)
        page.goto(f"{base}/scope?kind=user&id=bo")
        assert page.locator("a.danger").count() == 0  # read-only: no delete link
        assert page.goto(f"{base}/scope/delete?kind=user&id=bo").status == 404
    with serving(ui.app(memory, token=TOKEN, write=True)) as base:
        page, _ = open_page(browser, base)
        page.goto(f"{base}/scope?kind=user&id=bo")
        page.click("text=Delete this scope")
        assert "3 memories" in page.locator("main").inner_text()
        assert len(memory.get_all(user_id="bo")) == 3  # not before confirming
        page.click("#confirm")
        assert page.locator("#deleted-count").inner_text().startswith("3 memories")
        assert len(memory.get_all(user_id="bo")) == 0
        assert memory.get(kept.id).text == "Cy keeps goats."  # another scope is untouched


def test_refusals(memory: pgmem.Memory) -> None:
    added = memory.add("Ana likes green tea.", user_id="ana")
    with serving(ui.app(memory, token=TOKEN, write=True)) as base, \
            httpx.Client(base_url=base) as client:
            assert client.get("/").status_code == 403  # no token
            assert client.get("/?token=" + "x" * 43).status_code == 403  # a wrong one
            login = client.get(f"/?token={TOKEN}")
            assert login.status_code == 303 and "pgmem_ui_session" in login.headers["set-cookie"]
            assert client.get("/").status_code == 200  # the cookie
            with httpx.Client(base_url=base) as other:
                assert other.get(f"/?token={TOKEN}").status_code == 403  # it worked once
            assert client.get("/", headers={"host": "evil.example"}).status_code == 421
            assert client.get("/", headers={"origin": "http://evil.example"}).status_code == 403
            page = client.get(f"/memory/{added.id}/edit")
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp
            no_csrf = client.post(f"/memory/{added.id}/delete", data={})
            assert no_csrf.status_code == 403
            wrong = client.post(f"/memory/{added.id}/delete", data={"csrf": "y" * 43})
            assert wrong.status_code == 403
            assert memory.get(added.id).text == "Ana likes green tea."
            csrf = client.cookies["pgmem_ui_csrf"]
            done = client.post(f"/memory/{added.id}/delete", data={"csrf": csrf})
            assert done.status_code == 303
    with pytest.raises(pgmem.NotFoundError):
        memory.get(added.id)


def test_hostile_texts_stay_text(memory: pgmem.Memory, browser: Browser) -> None:
    scope = "<b>bold</b>\u202eevil"
    added = [memory.add(text, user_id=scope, metadata={"note": text}) for text in HOSTILE]
    with serving(ui.app(memory, token=TOKEN, write=True)) as base:
        page, watch = open_page(browser, base)
        urls = [
            "/", f"/scope?kind=user&id={uuid_quote(scope)}",
            f"/search?q={uuid_quote('alert xss')}&kind=user&id={uuid_quote(scope)}&threshold=-1",
            f"/plots?kind=user&id={uuid_quote(scope)}",
            *(f"/memory/{a.id}" for a in added), *(f"/memory/{a.id}/edit" for a in added),
        ]
        for url in urls:
            page.goto(base + url)
            page.wait_for_load_state("networkidle")
            assert page.locator("script").count() == 0, url
            assert page.locator("main img").count() == 0, url
            assert page.locator("main a[href^='javascript']").count() == 0, url
        page.goto(f"{base}/scope?kind=user&id={uuid_quote(scope)}")
        shown = page.locator("#memories").inner_text()
        assert "<script>alert('xss-script')</script>" in shown
        assert 'onerror="alert(' in shown
        assert "\\x1b" in shown and "\\u202e" in shown and "\x1b" not in shown
        shot(page, "hostile")
        assert watch.dialogs == []
        assert watch.foreign == []


def uuid_quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")

