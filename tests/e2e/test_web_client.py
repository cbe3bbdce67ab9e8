"""The web client's flows in a real browser (Debian's headless Chromium, driven by Playwright): one
test per flow of issue 14 (sign in, stream, reopen from the sidebar, citation preview and panel,
upload and ask, summarize a picked document, correct an answer, rename and delete, keyboard only),
screenshots at 360 and 1,440 px, and no console error anywhere.

One browser and the session's stack for the module; each test opens its own page (its own context,
so its own localStorage) signed in with a key of its own user, so sidebars do not mix."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fpdf import FPDF

from tests.auth import headers
from tests.e2e.test_web_page import ARGS, CHROMIUM
from tests.fakes.gemini import text, thought
from tests.stack import DEMO, Stack

pytestmark = [pytest.mark.slow, pytest.mark.browser]

QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"
STREAMED = "How did Harborview change its net exposure in June 2024?"  # a long answer, streamed in pieces
PDF_FACT = "The Zephyr Orchard Fund keeps exactly 37 beehives on its Valencia estate."
WIDE, NARROW = {"width": 1440, "height": 900}, {"width": 360, "height": 780}


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make test` installs it with apt-get")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


class Pages:
    """Opens signed-in pages and records every console error and uncaught exception on them."""

    def __init__(self, browser) -> None:  # type: ignore[no-untyped-def]
        self.browser = browser
        self.opened: list = []
        self.errors: list[str] = []

    def open(self, url: str, key: str, viewport: dict = WIDE):  # type: ignore[no-untyped-def]
        page = self.browser.new_page(viewport=viewport)
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"exception: {e}"))
        page.goto(f"{url}/#key={key}")
        page.wait_for_selector("#data-sources input", state="attached", timeout=15_000)
        self.opened.append(page)
        return page


@pytest.fixture
def pages(browser) -> Iterator[Pages]:  # type: ignore[no-untyped-def]
    made = Pages(browser)
    yield made
    for page in made.opened:
        page.close()
    assert made.errors == [], made.errors


def ask(page, question: str, state: str = "done", timeout: float = 60_000):  # type: ignore[no-untyped-def]
    before = page.locator(".msg.assistant").count()
    page.fill("#question", question)
    page.press("#question", "Enter")
    return settled(page, before, state, timeout)


def settled(page, n: int, state: str = "done", timeout: float = 60_000):  # type: ignore[no-untyped-def]
    page.wait_for_function(
        "([n, state]) => { const m = document.querySelectorAll('.msg.assistant')[n];"
        " return m && m.getAttribute('data-state') === state; }", arg=[n, state], timeout=timeout)
    page.wait_for_load_state("networkidle")  # the sidebar's refresh after the answer
    return page.locator(".msg.assistant").nth(n)


@contextmanager
def slow_answers(stack: Stack, delay_s: float) -> Iterator[None]:
    """The offline backend waits this long between pieces of an answer, so a test sees it stream."""
    backend = stack.app("generator").service.backends["extractive"]
    backend.delay, saved = delay_s, backend.delay
    try:
        yield
    finally:
        backend.delay = saved


def make_pdf(path: Path) -> Path:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.multi_cell(0, 8, "Zephyr Orchard Fund: estate report.\n\n" + PDF_FACT +
                   " The hives were counted in April 2024 by the estate manager, Ines Duarte.")
    pdf.output(str(path))
    return path


def test_a_key_link_signs_in_to_an_empty_sidebar(pages: Pages, stack: Stack) -> None:
    key = stack.key(DEMO, "web-newcomer")
    page = pages.open(stack.http_url, key)
    assert "key=" not in page.url
    assert page.locator("#sidebar").is_visible()
    page.locator("#no-conversations").wait_for()
    models = page.locator("#model option").all_inner_texts()
    assert "extractive" in models and "gemini-2.5-pro" not in models, models  # configured models only
    assert page.evaluate("document.activeElement.id") == "question"


def test_an_answer_streams_in_renders_markdown_and_links_its_citations(pages: Pages, stack: Stack) -> None:
    with slow_answers(stack, 0.1):
        page = pages.open(stack.http_url, stack.key(DEMO, "web-stream"))
        page.fill("#question", STREAMED)
        page.click("#send")
        page.wait_for_function(  # seen mid-stream: part of the answer, not yet done
            "() => { const m = document.querySelector('.msg.assistant');"
            " return m && m.dataset.state === 'streaming' && m.querySelector('.answer').innerText.length > 20; }",
            timeout=30_000)
        assert page.locator("#stop").is_enabled() and page.locator("#send").is_disabled()
        message = settled(page, 0)
    assert "net exposure" in message.locator(".answer").inner_text()
    assert message.locator(".answer ul li strong").count() >= 1, "markdown: a list with bold titles"
    cites = message.locator(".answer button.cite")
    assert cites.count() >= 1
    first = cites.first.get_attribute("data-cite")
    assert message.locator(f".sources li[data-index='{first}']").count() == 1
    strategy = message.locator("details.strategy")
    assert "RAG_NEW_QUERY" in strategy.inner_text() and not strategy.evaluate("d => d.open")
    strategy.locator("summary").click()  # collapsible: the why, for people who want it
    assert "Why" in strategy.inner_text() and "meeting_notes" in strategy.inner_text()
    sidebar = page.locator("#conversation-list li")
    assert sidebar.count() == 1 and sidebar.first.get_attribute("aria-current") == "true"
    assert STREAMED[:30] in sidebar.first.inner_text()


def test_a_reloaded_page_reopens_the_conversation_with_citations_that_still_resolve(pages: Pages, stack: Stack) -> None:
    page = pages.open(stack.http_url, stack.key(DEMO, "web-reload"))
    answer = ask(page, QUESTION).locator(".answer").inner_text()
    conversation = page.evaluate("document.body.dataset.conversationId")
    page.reload()
    page.wait_for_selector("#conversation-list li", timeout=15_000)
    assert page.locator(".msg").count() == 0
    page.locator(f"#conversation-list li[data-id='{conversation}'] .open").click()
    page.wait_for_selector(".msg.assistant[data-state=done]")
    assert page.locator(".msg.user").inner_text() == QUESTION
    assert page.locator(".msg.assistant .answer").inner_text() == answer
    assert "RAG_NEW_QUERY" in page.locator(".msg.assistant details.strategy").inner_text()
    page.locator(".msg.assistant .answer button.cite").first.click()
    page.wait_for_selector("#cite-panel[data-loaded=true]")
    assert "Kestrel" in page.locator("#cite-panel").inner_text()
    assert page.evaluate("document.body.dataset.conversationId") == conversation
    ask(page, "And what about Mexico?")  # the conversation goes on where it was
    assert page.locator(".msg.user").count() == 2


def test_hovering_a_citation_previews_it_and_a_click_opens_the_source_panel(pages: Pages, stack: Stack,
                                                                             tmp_path: Path) -> None:
    page = pages.open(stack.http_url, stack.key(DEMO, "web-cite"))
    message = ask(page, QUESTION)
    cite = message.locator(".answer button.cite").first
    cite.hover()
    preview = page.locator("#cite-preview")
    preview.wait_for(state="visible")
    shown = preview.inner_text()
    assert "Kestrel" in shown and len(shown) <= 200 + 100  # the title, then about 200 characters
    cite.click()
    panel = page.locator("#cite-panel")
    page.wait_for_selector("#cite-panel[data-loaded=true]")
    assert preview.is_hidden()
    details = panel.locator("#panel-meta").inner_text()
    for label in ("Document", "Collection", "Date", "Fund"):
        assert label in details, details
    assert "Kestrel Emerging Markets" in details and "2024-03-14" in details
    chunk_id = panel.get_attribute("data-chunk-id")
    chunk = httpx.get(f"{stack.http_url}/api/chunks/{quote(chunk_id, safe='')}", headers=headers(stack.admin_key),
                      timeout=30).json()
    assert panel.locator("#panel-text").inner_text().strip() == chunk["text"].strip()
    assert cite.get_attribute("aria-expanded") == "true"
    page.screenshot(path=str(tmp_path / "panel-1440.png"), full_page=False)
    page.click("#panel-close")
    assert panel.is_hidden() and cite.get_attribute("aria-expanded") == "false"


@pytest.mark.parametrize("viewport", [NARROW, WIDE], ids=["360px", "1440px"])
def test_an_uploaded_pdf_shows_its_progress_and_results_and_can_be_asked_about(pages: Pages, stack: Stack,
                                                                               tmp_path: Path, viewport: dict) -> None:
    page = pages.open(stack.http_url, stack.key(f"web-upload-{viewport['width']}", "admin", "admin"), viewport)
    page.locator("#upload-box summary").click()
    page.set_input_files("#upload-files", str(make_pdf(tmp_path / "zephyr-estate.pdf")))
    page.click("#upload-send")
    row = page.locator("#upload-results li[data-file='zephyr-estate.pdf']")
    row.wait_for()
    page.wait_for_selector("#upload-results li[data-state=done]", timeout=60_000)
    result = row.locator(".stage").inner_text()
    assert "Indexed" in result and "chunks" in result and "redaction" in result and "USER" in result, result
    assert row.locator("progress").get_attribute("value") == "100"
    page.wait_for_selector("#documents label[title*='zephyr-estate.pdf']", state="attached")
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"], "nothing wider than the screen"
    if page.locator("#filters").get_attribute("open") is None:  # folded on small screens
        page.locator("#filters summary").click()
    page.check("#data-sources input[value='Documents']")
    answer = ask(page, "How many beehives does the Zephyr Orchard Fund keep?").locator(".answer").inner_text()
    assert "37 beehives" in answer
    assert page.locator(".msg.assistant .sources li").first.get_attribute("data-doc-id") == "zephyr-estate.pdf"


def test_summarize_a_picked_document_takes_the_summary_route(pages: Pages, stack: Stack) -> None:
    admin = stack.key("web-summary", "admin", "admin")
    story = "\n\n".join(f"Chapter {i}\n\n" + " ".join(f"The lighthouse keeper logged storm {i}.{j} at dawn."
                                                        for j in range(50)) for i in range(1, 6))
    with httpx.stream("POST", stack.http_url + "/api/documents", headers=headers(admin), timeout=120, json={
            "collection": "documents", "summarize": True,
            "documents": [{"doc_id": "keeper-log", "title": "The keeper's log", "text": story}]}) as reply:
        assert reply.status_code == 200 and '"INDEXED"' in reply.read().decode()
    page = pages.open(stack.http_url, admin)
    page.locator("#documents-box summary").click()
    assert page.locator("#summarize").is_disabled()
    page.check("#documents input[value='documents/keeper-log']")
    assert page.locator("#documents label[data-summarized=true]").count() == 1
    assert "The keeper's log" in page.locator("#scope").inner_text()
    page.click("#summarize")
    message = settled(page, 0)
    assert "SUMMARY" in message.locator("details.strategy summary").inner_text()
    assert page.locator(".msg.user").inner_text() == "Summarize this document."
    message.locator(".sources button.title").first.click()  # a summary's source opens its document
    page.wait_for_selector("#cite-panel[data-loaded=true]")
    assert "The keeper's log" in page.locator("#panel-meta").inner_text()


def test_stop_mid_answer_keeps_the_partial_answer(pages: Pages, stack: Stack) -> None:
    with slow_answers(stack, 0.3):
        page = pages.open(stack.http_url, stack.key(DEMO, "web-stop"))
        page.fill("#question", STREAMED)
        page.click("#send")
        page.wait_for_function("() => document.querySelector('.msg.assistant .answer').innerText.trim().length > 10",
                               timeout=30_000)
        page.click("#stop")
        message = settled(page, 0, "stopped")
    assert "Response stopped by user" in message.inner_text()
    assert page.locator("#send").is_enabled()


def test_a_correction_is_used_on_the_next_answer(pages: Pages, stack: Stack, gemini_gateway) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(thought("Looking at the March meeting."), text("Kestrel cut Brazil to **8%** of NAV [1]."))
    page = pages.open(url, stack.key(DEMO, "web-corrector"))
    message = ask(page, QUESTION)
    thinking = message.locator("details.thinking")
    assert thinking.is_visible() and not thinking.evaluate("d => d.open")  # folded once the answer is in
    assert message.locator(".answer strong").inner_text() == "8%"
    message.locator(".thumbs-down").click()
    page.fill(".correction textarea", "Kestrel cut Brazil to 4% of NAV, not 8%.")
    page.click(".correction button[type=submit]")
    page.wait_for_selector(".correction .notice.ok")
    fake.stream(text("Kestrel cut Brazil to 4% of NAV [1]."))
    before = len(fake.requests("streamGenerateContent"))
    second = ask(page, "How far did Kestrel cut Brazil in March 2024?")
    assert "1 correction applied" in second.locator("details.strategy summary").inner_text()
    sent = str(fake.requests("streamGenerateContent")[before].body)
    assert "Kestrel cut Brazil to 4% of NAV, not 8%." in sent


def test_rename_and_delete_a_conversation_from_the_sidebar(pages: Pages, stack: Stack) -> None:
    key = stack.key(DEMO, "web-tidy")
    page = pages.open(stack.http_url, key)
    ask(page, QUESTION)
    conversation = page.evaluate("document.body.dataset.conversationId")
    row = page.locator(f"#conversation-list li[data-id='{conversation}']")
    row.locator(".rename-conversation").click()
    page.fill("#conversation-list input.rename", "Kestrel Brazil cut")
    page.press("#conversation-list input.rename", "Enter")
    page.wait_for_selector(f"#conversation-list li[data-id='{conversation}'] .open:has-text('Kestrel Brazil cut')")
    listed = httpx.get(stack.http_url + "/api/conversations", headers=headers(key), timeout=30).json()
    assert listed["conversations"][0]["title"] == "Kestrel Brazil cut"
    row.locator(".delete-conversation").click()
    row.locator(".confirm-delete").click()
    page.wait_for_selector(f"#conversation-list li[data-id='{conversation}']", state="detached")
    assert page.locator(".msg").count() == 0, "the open conversation was the deleted one"
    assert page.locator("#no-conversations").is_visible()
    gone = httpx.get(f"{stack.http_url}/api/conversations/{conversation}", headers=headers(key), timeout=30)
    assert gone.status_code == 404


def test_keyboard_only_ask_open_a_citation_and_close_the_panel(pages: Pages, stack: Stack) -> None:
    page = pages.open(stack.http_url, stack.key(DEMO, "web-keys"))
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.type("What did Kestrel do with its Brazil")
    page.keyboard.press("Shift+Enter")  # a new line, not a send
    page.keyboard.type("exposure in March 2024?")
    assert page.locator(".msg").count() == 0
    assert "\n" in page.input_value("#question")
    page.keyboard.press("Enter")
    settled(page, 0)
    for _ in range(80):  # Tab through the page until a citation marker has the focus
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('cite')"):
            break
    else:
        pytest.fail("no citation marker is reachable with Tab")
    focused = page.evaluate("document.activeElement.getAttribute('data-cite')")
    assert page.locator("#cite-preview").is_visible(), "focus shows the preview as hover does"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none"), "the focus is visible"
    page.keyboard.press("Enter")
    page.wait_for_selector("#cite-panel[data-loaded=true]")
    assert page.evaluate("document.activeElement.id") == "panel-close"
    page.keyboard.press("Escape")
    assert page.locator("#cite-panel").is_hidden()
    assert page.evaluate("document.activeElement.getAttribute('data-cite')") == focused, "focus goes back"


@pytest.mark.parametrize("viewport", [NARROW, WIDE], ids=["360px", "1440px"])
def test_screenshots_at_360_and_1440_px(pages: Pages, stack: Stack, tmp_path: Path, viewport: dict) -> None:
    page = pages.open(stack.http_url, stack.key(DEMO, f"web-shot-{viewport['width']}"), viewport)
    ask(page, QUESTION)
    width = viewport["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "nothing wider than the screen"
    page.screenshot(path=str(tmp_path / f"answer-{width}.png"), full_page=True)
    page.locator(".msg.assistant .answer button.cite").first.click()
    page.wait_for_selector("#cite-panel[data-loaded=true]")
    assert page.locator("#panel-close").is_visible()
    page.screenshot(path=str(tmp_path / f"panel-{width}.png"))
    page.keyboard.press("Escape")
    if width < 900:  # the sidebar is a drawer on small screens
        assert page.locator("#sidebar").is_hidden()
        page.click("#menu")
        page.locator("#sidebar").wait_for(state="visible")
        page.wait_for_timeout(300)  # its slide-in
        page.screenshot(path=str(tmp_path / f"sidebar-{width}.png"))
        page.keyboard.press("Escape")
        page.locator("#sidebar").wait_for(state="hidden")
    print(f"screenshots: {tmp_path}")


def test_a_reopened_answer_shows_the_strategy_line_it_was_given(pages: Pages, stack: Stack) -> None:
    key = stack.key(DEMO, "web-reopen-strategy")
    page = pages.open(stack.http_url, key)
    live = ask(page, QUESTION).locator("details.strategy")
    live.locator("summary").click()
    said = live.locator("dl").inner_text()
    conversation = page.evaluate("document.body.dataset.conversationId")
    page.reload()
    page.wait_for_selector("#conversation-list li", timeout=15_000)
    page.locator(f"#conversation-list li[data-id='{conversation}'] .open").click()
    page.wait_for_selector(".msg.assistant[data-state=done]")
    reopened = page.locator(".msg.assistant details.strategy")
    reopened.locator("summary").click()
    shown = reopened.locator("dl").inner_text()
    stored = httpx.get(f"{stack.http_url}/api/conversations/{conversation}", headers=headers(key),
                       timeout=30).json()["messages"][1]["strategy"]
    assert shown == said, "the why, collections, filters and the rest, as when it was asked"
    assert stored["reason"] in shown and "meeting_notes, factsheets" in shown and "2024-03-01 to 2024-03-31" in shown
    assert "ms answer" in reopened.locator("summary").inner_text()


def test_stopping_before_any_content_removes_the_question(pages: Pages, stack: Stack, gemini_gateway) -> None:
    url, fake, _ = gemini_gateway
    key = stack.key(DEMO, "web-stop-early")
    fake.stream(thought("Reading the March notes first."), text("never shown"), hold_after=1)
    page = pages.open(url, key)
    page.fill("#question", QUESTION)
    page.click("#send")
    page.locator(".msg.assistant details.thinking").wait_for(state="visible", timeout=30_000)
    conversation = page.evaluate("document.body.dataset.conversationId")
    page.click("#stop")
    page.wait_for_function("() => !document.querySelector('.msg')", timeout=15_000)
    assert page.input_value("#question") == QUESTION, "the question is back in the box, to edit or send again"
    assert "not kept" in page.locator("#status").inner_text()
    assert page.evaluate("document.body.dataset.conversationId") == ""
    assert fake.hung_up.wait(10)
    for _ in range(100):  # the server drops it too
        if httpx.get(f"{url}/api/conversations/{conversation}", headers=headers(key), timeout=30).status_code == 404:
            break
        page.wait_for_timeout(50)
    else:
        pytest.fail("the stopped question was kept")
    page.wait_for_load_state("networkidle")
    assert page.locator("#conversation-list li").count() == 0
