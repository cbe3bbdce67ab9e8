"""The page's libraries are served from the gateway (no CDN at run time), at the vendored versions,
with their licence headers and licence files."""
from __future__ import annotations

import re
from pathlib import Path

WEB = Path(__file__).parents[2] / "services" / "gateway" / "web"
VENDORED = {"marked.umd.js": ("marked v18.2.1", "marked.LICENSE"),
            "purify.min.js": ("DOMPurify 3.4.18", "dompurify.LICENSE")}


def test_the_page_loads_only_vendored_scripts() -> None:
    page = (WEB / "index.html").read_text()
    sources = re.findall(r"<script[^>]*\bsrc=\"([^\"]+)\"", page)
    assert sources == ["/vendor/marked.umd.js", "/vendor/purify.min.js"]
    assert not re.search(r"(src|href)=\"(https?:)?//", page), "nothing loaded from another origin"


def test_each_vendored_file_keeps_its_version_and_licence() -> None:
    for name, (header, licence) in VENDORED.items():
        assert header in (WEB / "vendor" / name).read_text()[:400], name
        assert (WEB / "vendor" / licence).stat().st_size > 1000, licence
