"""The web chat page in a real browser (Debian's headless Chromium, driven by Playwright)."""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gemini import chunk, grounding, text
from tests.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.browser]

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


def opened(browser, url: str):  # type: ignore[no-untyped-def]
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(url + "/")
    return page


@pytest.fixture(scope="module")
def page(browser, stack: Stack) -> Iterator:
    page = opened(browser, stack.http_url)
    yield page
    page.close()


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


def test_web_search_shows_the_searches_and_linked_pages(browser, gemini_gateway) -> None:
    """With the Web Search source on, the model's Google searches and the pages it used
    appear under the answer (the Gemini-backed gateway on the fake Gemini server)."""
    url, fake, _ = gemini_gateway
    fake.stream(text("Kestrel cut Brazil [1]. Rates rose on the web."),
                chunk({"text": ""}, grounding=grounding([("Rates news", "https://example.org/rates")],
                                                        ["kestrel brazil rates"])))
    page = opened(browser, url)
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
