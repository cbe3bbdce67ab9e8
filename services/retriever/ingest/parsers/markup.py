"""Markdown and HTML: headings start sections (their levels give the chapters); HTML through the standard
library's parser (scripts, styles and the like skipped, block elements ending paragraphs)."""
from __future__ import annotations

import re
from html.parser import HTMLParser

from services.retriever.ingest.parsed import Parsed, Section, UnreadableFile
from services.retriever.ingest.parsers.text import decode

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def parse_markdown(data: bytes, name: str) -> list[Parsed]:
    lines = decode(data, name).split("\n")
    sections, body, title = [Section("")], [], ""
    fenced = False

    def heading(text: str, level: int) -> None:
        nonlocal title
        sections[-1].add("\n".join(body).strip("\n"))
        body.clear()
        sections.append(Section(text, level=level, lead=1))
        body.extend([text, ""])
        title = title or (text if level == 1 else "")

    skip = False
    for line, following in zip(lines, lines[1:] + [""]):
        if skip:
            skip = False
            continue
        if _FENCE.match(line):
            fenced = not fenced
        atx = None if fenced else _ATX.match(line)
        if atx:
            heading(atx.group(2), len(atx.group(1)))
        elif not fenced and line.strip() and _SETEXT.match(following) and not _SETEXT.match(line):
            heading(line.strip(), 1 if following.strip().startswith("=") else 2)
            skip = True
        else:
            body.append(line)
    sections[-1].add("\n".join(body).strip("\n"))
    return [Parsed("", sections, "markdown", title=title)]


_SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
_BLOCK = {
    "p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "blockquote", "pre",
    "header", "footer", "nav", "aside", "main", "dt", "dd", "dl", "figure", "figcaption", "hr",
    "form", "fieldset", "address", "details", "summary", "caption", "thead", "tbody",
}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}


class _HtmlText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections = [Section("")]
        self.title = ""
        self._line: list[str] = []
        self._heading: list[str] | None = None
        self._skipping = 0
        self._in_title = False

    def _flush(self) -> None:
        text = " ".join("".join(self._line).split())
        self._line.clear()
        self.sections[-1].add(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _SKIP:
            self._skipping += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _HEADINGS:
            self._flush()
            self._heading = []
        elif tag in ("td", "th"):
            if self._line:
                self._line.append(" | ")
        elif tag in _BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in _HEADINGS and self._heading is not None:
            text = " ".join("".join(self._heading).split())
            self._heading = None
            if text:
                self.sections.append(Section(text, level=int(tag[1]), lead=1))
                self.sections[-1].add(text)
        elif tag in _BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif self._skipping:
            return
        elif self._heading is not None:
            self._heading.append(data)
        else:
            self._line.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def parse_html(data: bytes, name: str) -> list[Parsed]:
    parser = _HtmlText()
    try:
        parser.feed(decode(data, name))
        parser.close()
    except UnreadableFile:
        raise
    except Exception as exc:  # html.parser is lenient; this is for what it still cannot take
        raise UnreadableFile(name, f"is not readable HTML ({type(exc).__name__}: {exc})") from None
    return [Parsed("", parser.sections, "html", title=" ".join(parser.title.split()))]
