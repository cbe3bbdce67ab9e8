"""The pages' libraries are served from the gateway (no CDN at run time), at the vendored versions,
with their licence headers and licence files; the pages hold no inline code (their Content-Security-Policy
allows scripts and styles of their own origin only)."""
from __future__ import annotations

import re
from pathlib import Path

WEB = Path(__file__).parents[2] / "services" / "gateway" / "web"
VENDORED = {"marked.umd.js": ("marked v18.2.1", "marked.LICENSE"),
            "purify.min.js": ("DOMPurify 3.4.18", "dompurify.LICENSE"),
            "swagger-ui/swagger-ui-bundle.js": ("swagger-ui-bundle.js.LICENSE.txt", "swagger-ui/swagger-ui.LICENSE")}
PAGES = {"index.html": ["/vendor/marked.umd.js", "/vendor/purify.min.js", "/static/app.js"],
         "docs.html": ["/vendor/swagger-ui/swagger-ui-bundle.js", "/static/docs.js"]}


def test_the_pages_load_only_their_own_scripts_and_no_inline_code() -> None:
    for name, scripts in PAGES.items():
        page = (WEB / name).read_text()
        assert re.findall(r"<script[^>]*\bsrc=\"([^\"]+)\"", page) == scripts, name
        assert not re.search(r"(src|href)=\"(https?:)?//", page), f"{name}: nothing loaded from another origin"
        assert not re.search(r"<script(?![^>]*\bsrc=)|<style|\sstyle=|\son[a-z]+=", page), f"{name}: inline code"
        assert all((WEB / path.removeprefix("/")).is_file() for path in scripts), name


def test_each_vendored_file_keeps_its_version_and_licence() -> None:
    for name, (header, licence) in VENDORED.items():
        assert header in (WEB / "vendor" / name).read_text()[:400], name
        assert (WEB / "vendor" / licence).stat().st_size > 1000, licence
