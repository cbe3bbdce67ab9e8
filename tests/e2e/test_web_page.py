"""The web chat page in a real browser (Debian's headless Chromium, driven by Playwright).

The page signs in with an API key: a `#key=<key>` link (the key moves to localStorage and leaves
the address bar) or the sign-in box; every /api/* call then carries `Authorization: Bearer <key>`."""
from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragmesh.store.sqlite import SqliteStore
from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.books import FILENAME, LENS, book_bytes
from tests.fakes.gemini import chunk, grounding, text
from tests.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.browser]

KEY_NAME = "ragmesh.key"  # where the page keeps the key (localStorage)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if not os.path.exists(CHROMIUM):
        pytest.fail("chromium is not installed: `make test` installs it with apt-get")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


def opened(browser, url: str, key: str = ""):  # type: ignore[no-untyped-def]
    """A new page (its own context, so its own localStorage), signed in through a `#key=` link when
    given a key, and waited on until /api/meta has filled in the options."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(f"{url}/#key={key}" if key else f"{url}/")
    if key:
        page.wait_for_selector("#data-sources input", timeout=15_000)
    return page


def stored_key(page) -> str | None:  # type: ignore[no-untyped-def]
    return page.evaluate(f"() => localStorage.getItem({KEY_NAME!r})")


def ask_and_wait(page, question: str, state: str = "done", timeout: float = 60_000):  # type: ignore[no-untyped-def]
    before = page.locator(".msg.assistant").count()
    page.fill("#question", question)
    page.click("#send")
    message = page.locator(".msg.assistant").nth(before)
    message.wait_for()
    page.wait_for_function(
        "([n, state]) => { const m = document.querySelectorAll('.msg.assistant')[n];"
        " return m && m.getAttribute('data-state') === state; }", arg=[before, state], timeout=timeout)
    return message


@pytest.fixture(scope="module")
def page(browser, stack: Stack) -> Iterator:
    page = opened(browser, stack.http_url, stack.admin_key)
    yield page
    page.close()


def test_a_key_link_signs_in_and_leaves_the_address_bar(page, stack: Stack) -> None:
    assert "key=" not in page.url and stack.admin_key not in page.url, page.url
    assert page.url == stack.http_url + "/"
    assert stored_key(page) == stack.admin_key
    assert page.locator("#signin").is_hidden()
    assert page.locator("#app").is_visible()
    assert page.locator("#sign-out").is_visible()
    who = page.locator("#who")  # /api/meta names the caller
    assert who.get_attribute("data-user") == "admin" and who.get_attribute("data-tenant") == "demo"
    assert "admin" in who.inner_text()


def test_asking_streams_a_cited_answer(page, stack: Stack, tmp_path: Path) -> None:
    page.fill("#question", "What did Kestrel do with its Brazil exposure in March 2024?")
    page.click("#send")
    message = page.locator(".msg.assistant").last
    message.wait_for()
    page.wait_for_selector(".msg.assistant[data-state=done]", timeout=60_000)
    answer = message.locator(".answer").inner_text()
    assert "12% to 4%" in answer
    sources = message.locator(".sources li")
    assert sources.count() >= 1
    assert "Kestrel" in sources.first.inner_text()
    assert "RAG_NEW_QUERY" in message.locator(".strategy").inner_text()
    assert "rewrite: skipped (" in message.locator(".strategy").text_content()  # folded away until opened
    assert "no model configured" in message.locator(".strategy").text_content()
    page.screenshot(path=os.environ.get("SCREENSHOT", str(tmp_path / "answer.png")), full_page=True)


def test_stop_button_keeps_the_partial_answer(page, stack: Stack) -> None:
    backend = stack.app("generator").service.backends["extractive"]
    backend.delay, saved = 0.3, backend.delay
    cancelled = stack.app("generator").service.cancelled
    try:
        page.fill("#question", "How did Harborview change its net exposure in June 2024?")
        page.click("#send")
        message = page.locator(".msg.assistant").last
        page.wait_for_function(
            "() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();"
            " return m && m.querySelector('.answer').innerText.trim().length > 10; }", timeout=30_000)
        page.click("#stop")
        page.wait_for_selector(".msg.assistant[data-state=stopped]", timeout=15_000)
        assert "Response stopped by user" in message.inner_text()
        for _ in range(200):  # the stop reaches the generator within ~10 s
            if stack.app("generator").service.cancelled > cancelled:
                break
            page.wait_for_timeout(50)
        assert stack.app("generator").service.cancelled > cancelled, "the generator never saw the stop"
    finally:
        backend.delay = saved


def test_bad_input_shows_the_servers_message(page) -> None:
    page.fill("#start-date", "2024-05-01")
    page.fill("#end-date", "2024-01-01")
    page.fill("#question", "Anything in this range?")
    page.click("#send")
    page.wait_for_selector(".msg.assistant[data-state=error]", timeout=15_000)
    assert "end_date" in page.locator(".msg.assistant").last.inner_text()
    page.fill("#start-date", "")
    page.fill("#end-date", "")


def test_without_a_key_the_page_asks_for_one(browser, stack: Stack) -> None:
    page = opened(browser, stack.http_url)
    try:
        page.wait_for_selector("#signin", state="visible")
        assert page.locator("#app").is_hidden()
        assert page.locator("#sign-out").is_hidden()
        assert page.locator("#api-key").get_attribute("type") == "password"
        assert stored_key(page) is None

        page.fill("#api-key", "rmk_0123456789abcdef_" + "x" * 43)
        page.click("#sign-in")
        page.wait_for_selector("#signin-error", state="visible")
        assert "That key was not accepted" in page.locator("#signin-error").inner_text()
        assert page.locator("#app").is_hidden()
        assert stored_key(page) is None

        page.fill("#api-key", stack.admin_key)
        page.click("#sign-in")
        page.wait_for_selector("#data-sources input", timeout=15_000)
        assert page.locator("#signin").is_hidden()
        assert stored_key(page) == stack.admin_key
        message = ask_and_wait(page, "What did Kestrel do with its Brazil exposure in March 2024?")
        assert "12% to 4%" in message.locator(".answer").inner_text()

        page.click("#sign-out")
        page.wait_for_selector("#signin", state="visible")
        assert page.locator("#app").is_hidden()
        assert stored_key(page) is None
        assert page.locator("#signin-error").is_hidden()
    finally:
        page.close()


def test_a_rejected_key_link_shows_the_sign_in_box(browser, stack: Stack) -> None:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    try:
        page.goto(f"{stack.http_url}/#key=not-a-key")
        page.wait_for_selector("#signin-error", state="visible", timeout=15_000)
        assert "That key was not accepted" in page.locator("#signin-error").inner_text()
        assert "key=" not in page.url
        assert page.locator("#app").is_hidden()
        assert stored_key(page) is None
    finally:
        page.close()


def test_a_key_revoked_while_signed_in_signs_the_page_out(browser, stack: Stack) -> None:
    key = stack.key("demo", "web-revoked")
    page = opened(browser, stack.http_url, key)
    try:
        ask_and_wait(page, "What did Kestrel do with its Brazil exposure in March 2024?")
        page.wait_for_load_state("networkidle")  # the sidebar's refresh after the answer, before the revocation
        store = SqliteStore(stack.settings.sqlite_path)
        try:
            assert store.revoke_api_key(key.split("_")[1])
        finally:
            store.close()
        page.fill("#question", "And in June 2024?")
        page.click("#send")
        page.wait_for_selector("#signin", state="visible", timeout=15_000)
        assert "not accepted" in page.locator("#signin-error").inner_text()
        assert stored_key(page) is None
        assert page.locator(".msg.assistant").last.get_attribute("data-state") == "error"
    finally:
        page.close()


def test_web_search_shows_the_searches_and_linked_pages(browser, stack: Stack, gemini_gateway) -> None:
    """With the Web Search source on, the model's Google searches and the pages it used
    appear under the answer (the Gemini-backed gateway on the fake Gemini server)."""
    url, fake, _ = gemini_gateway
    fake.stream(text("Kestrel cut Brazil [1]. Rates rose on the web."),
                chunk({"text": ""}, grounding=grounding([("Rates news", "https://example.org/rates")],
                                                        ["kestrel brazil rates"])))
    page = opened(browser, url, stack.admin_key)
    try:
        page.wait_for_selector("#data-sources input[value='Web Search']")
        page.check("#data-sources input[value='Web Search']")
        page.fill("#question", "What did Kestrel do with its Brazil exposure?")
        page.click("#send")
        page.wait_for_selector(".msg.assistant[data-state=done]", timeout=60_000)
        message = page.locator(".msg.assistant").last
        assert message.locator(".web-queries").inner_text() == "Searched the web for: kestrel brazil rates"
        link = message.locator(".sources a", has_text="Rates news")
        assert link.get_attribute("href") == "https://example.org/rates"
    finally:
        page.close()


def status_is(page, text: str, timeout: float = 30_000) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function("(t) => { const s = document.getElementById('status');"
                           " return s.textContent === t && s.classList.contains('busy'); }", arg=text, timeout=timeout)


def test_the_status_line_says_searching_then_generating(browser, stack: Stack, gemini_gateway,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the search is held the page says it is finding information; while the model has said nothing
    citable yet (its stream held open) it says it is generating; both busy. Stopped, it is no longer busy."""
    url, fake, address = gemini_gateway
    planner = next(h for h in stack.extra if h.address == address).app.pipeline.planner
    monkeypatch.setattr(planner, "settings", planner.settings.replace(retrieval_timeout_s=120.0))
    engine, release = stack.app("retriever").engine, threading.Event()
    search = engine.search

    async def held(query):  # type: ignore[no-untyped-def]
        await asyncio.to_thread(release.wait, 120)
        return await search(query)

    monkeypatch.setattr(engine, "search", held)
    fake.stream(text("Kestrel cut its Brazil exposure "), text("to 4% [1]."), hold_after=1)
    page = opened(browser, url, stack.admin_key)
    try:
        page.fill("#question", "What did Kestrel do with its Brazil exposure in March 2024?")
        page.click("#send")
        status_is(page, "Finding relevant information...")
        release.set()
        status_is(page, "Generating response...")
        assert page.locator(".msg.assistant").last.get_attribute("data-state") != "done"
        page.click("#stop")
        page.wait_for_function("() => document.getElementById('status').textContent.startsWith('Stopped')",
                               timeout=15_000)
        assert "busy" not in (page.get_attribute("#status", "class") or "")
    finally:
        release.set()
        page.close()


@pytest.mark.parametrize("path,ready", [("/#key={key}", "#data-sources input"), ("/docs", ".opblock")])
def test_the_pages_run_under_their_content_security_policy(browser, stack: Stack, path: str, ready: str) -> None:
    """The chat page (signed in) and the API page load only this origin's files, with no inline code:
    nothing is refused by their policy, and no other site may frame them."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    try:
        reply = page.goto(stack.http_url + path.format(key=stack.admin_key))
        assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]
        assert reply.headers["x-frame-options"] == "DENY"
        page.wait_for_selector(ready, timeout=30_000)
        page.wait_for_load_state("networkidle")
    finally:
        page.close()
    assert not refused, refused


def test_a_member_uploads_a_document_only_it_sees_and_shares_it(browser, page, stack: Stack) -> None:
    """The upload panel sets who sees a file (everyone in the tenant is offered to admins only); the
    documents list shows each document's access and owner, and its owner changes who sees it."""
    admins = page.evaluate("() => document.querySelector('#upload-access option[value=tenant]').hidden")
    assert admins is False, "an admin may share with the whole tenant"
    key = stack.key("demo", "web-sharer")
    member = opened(browser, stack.http_url, key)
    try:
        member.click("#upload-box summary")
        assert member.evaluate("() => document.querySelector('#upload-access option[value=tenant]').hidden")
        member.set_input_files("#upload-files", files=[{"name": "web-memo.txt", "mimeType": "text/plain",
                                                        "buffer": b"The lynx-heron budget is 31 thousand."}])
        member.select_option("#upload-access .access-mode", "me")
        member.click("#upload-send")
        member.wait_for_selector("#upload-results li[data-state=done]", timeout=60_000)
        member.click("#documents-box summary")
        row = member.locator('#documents .doc[data-doc="documents/web-sharer:web-memo.txt"]')
        row.wait_for(timeout=15_000)
        assert row.locator(".da").inner_text() == "Only me" and row.locator(".do").inner_text() == "owner: me"
        row.locator(".access-edit").click()
        row.locator(".access-mode").select_option("named")
        row.locator(".access-users").fill("ben, cy")
        row.locator(".access-save").click()
        member.wait_for_function("() => { const r = document.querySelector("
                                 "'#documents .doc[data-doc=\"documents/web-sharer:web-memo.txt\"] .da');"
                                 " return r && r.textContent === 'Shared with ben, cy'; }", timeout=15_000)
        read = httpx.get(f"{stack.http_url}/api/documents/documents/web-sharer:web-memo.txt",
                         headers={"authorization": f"Bearer {key}"}, timeout=30).json()
        assert (read["access"]["users"], read["owner"]) == (["ben", "cy"], "web-sharer")
        # a bad name is the server's refusal, shown beside the form
        row.locator(".access-edit").click()
        row.locator(".access-users").fill("ben, -bad")
        row.locator(".access-save").click()
        member.wait_for_selector("#documents .access-error:not([hidden])", timeout=15_000)
        assert "users[1]" in row.locator(".access-error").inner_text()
    finally:
        member.close()


def test_a_books_source_and_its_panel_show_the_chapter_section_and_paragraph(browser, stack: Stack) -> None:
    """A book's source names its place in the sources list, and the citation panel shows it as
    chapter › section · ¶n, before and after the chunk is read from /api/chunks."""
    key = stack.key("web-books", "reader", "admin")
    doc = retriever_pb2.Document(doc_id=FILENAME, collection="documents", content=book_bytes(), filename=FILENAME)
    with channel(stack.address("retriever"), bearer(key)) as ch:
        assert not [p.error for p in retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter([doc]), timeout=120) if p.error]
    reader = opened(browser, stack.http_url, key)
    try:
        for box in reader.locator("#data-sources input").all():
            box.set_checked(box.get_attribute("value") == "Documents")
        message = ask_and_wait(reader, LENS.question)
        source = message.locator(".sources li", has_text=LENS.place)
        assert source.count() == 1, message.locator(".sources").inner_text()
        assert FILENAME in source.inner_text()
        source.locator("button.title").click()
        reader.wait_for_selector("#cite-panel[data-loaded=true]", timeout=15_000)
        shown = reader.locator("#panel-meta").inner_text()
        assert "Place" in shown and LENS.place in shown, shown
        assert "eleven brass-bound panels" in reader.locator("#panel-text").inner_text()
    finally:
        reader.close()
