"""The environment-variable table of the runbook, generated from `ragmesh/config.py` so it cannot drift.

Each `Settings` field gives one row: the variable its default factory reads, the default (what
`Settings()` holds with the variable unset) and its meaning, taken from the comments in the source:

- a comment at the end of a field's line documents that field;
- a block of comment lines right above a field documents it and the fields that follow it in the
  same paragraph (no blank line between) until one has a comment block of its own;
- a one-line heading such as `# Embedder` (a few words, no punctuation) names a section and is left
  out of the meanings.

`python -m ragmesh.configdoc` prints the table; `--write README.md` replaces the text between the
markers below in that file; `--check README.md` exits 1 when that text is stale (a test runs it).
Every field must have a meaning: a field without one fails both.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

from ragmesh import config

START = "<!-- config-table:start -->"
END = "<!-- config-table:end -->"
_READERS = {"_env", "_int", "_optional_int", "_float"}
_HEADING = re.compile(r"^[A-Z][A-Za-z0-9 /-]{0,30}$")


@dataclasses.dataclass(frozen=True)
class Row:
    field: str
    variable: str
    fallbacks: tuple[str, ...]  # variables read when `variable` is unset (GEMINI_API_KEY -> GOOGLE_API_KEY)
    default: object
    meaning: str


def _comments(source: str) -> dict[int, str]:
    """Line number -> comment text (without '#'), for every comment in the source."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def _variables(node: ast.AST) -> list[str]:
    """Environment variables a default factory reads, outermost first."""
    names: list[str] = []
    for call in ast.walk(node):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _READERS
                and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
            names.append(call.args[0].value)
    return names


def _settings_class(tree: ast.Module) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Settings":
            return node
    raise LookupError("no class Settings in ragmesh/config.py")


@contextlib.contextmanager
def _unset(names: set[str]) -> Iterator[None]:
    saved = {name: os.environ.pop(name) for name in list(names) if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def rows(source: str | None = None) -> list[Row]:
    """One row per Settings field that reads an environment variable, in source order."""
    source = source if source is not None else Path(config.__file__).read_text()
    lines = source.splitlines()
    comments = _comments(source)
    parsed: list[tuple[str, list[str], str]] = []
    group = ""  # the comment block in force for this paragraph
    for node in _settings_class(ast.parse(source)).body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        block: list[str] = []
        above = node.lineno - 1
        while above >= 1 and lines[above - 1].strip().startswith("#"):
            block.insert(0, comments.get(above, ""))
            above -= 1
        headed = bool(block) and bool(_HEADING.match(block[0]))
        if headed:
            block = block[1:]  # a section heading, not a meaning
        if block:
            group = " ".join(block)
        elif headed or (above >= 1 and not lines[above - 1].strip()):
            group = ""  # a new section or a blank line ends the paragraph
        trailing = " ".join(comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments
                            and not lines[n - 1].strip().startswith("#"))
        if trailing:
            trailing = trailing[0].upper() + trailing[1:] + ("" if trailing.endswith(".") else ".")
        meaning = " ".join(part for part in (trailing, group) if part)
        variables = _variables(node.value) if node.value is not None else []
        if variables:
            parsed.append((node.target.id, variables, meaning))
    with _unset({name for _, names, _ in parsed for name in names}):
        defaults = config.Settings()
    return [Row(name, names[0], tuple(names[1:]), getattr(defaults, name), meaning)
            for name, names, meaning in parsed]


def _size(value: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale and value % scale == 0:
            return f" ({value // scale} {unit})"
    return ""


def show(value: object, field: str = "") -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, int):
        return f"`{value}`" + (_size(value) if field.endswith("_bytes") else "")
    text = str(value)
    if isinstance(value, Path) and not value.is_absolute():
        text = f"./{text}"
    return f"`{text}`" if text else "(empty)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(source: str | None = None) -> str:
    """The markdown table. Raises ValueError naming the fields that have no meaning."""
    found = rows(source)
    missing = [r.field for r in found if not r.meaning]
    if missing:
        raise ValueError("ragmesh/config.py: no comment documents " + ", ".join(missing)
                         + " (write one above the field or at the end of its line)")
    out = ["| variable | default | meaning |", "|---|---|---|"]
    for r in found:
        meaning = r.meaning + "".join(f" (unset: `{name}`)" for name in r.fallbacks)
        out.append(f"| `{r.variable}` | {show(r.default, r.field)} | {_cell(meaning)} |")
    return "\n".join(out)


def replace(document: str, generated: str) -> str:
    """`document` with the text between the markers replaced. Raises ValueError without both markers."""
    start, end = document.find(START), document.find(END)
    if start < 0 or end < start or document.count(START) != 1 or document.count(END) != 1:
        raise ValueError(f"the file needs one {START} line and, after it, one {END} line")
    return document[: start + len(START)] + "\n" + generated + "\n" + document[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragmesh.configdoc", description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", metavar="FILE", type=Path, help="exit 1 when FILE's table is stale")
    what.add_argument("--write", metavar="FILE", type=Path, help="replace FILE's table with a fresh one")
    args = parser.parse_args(argv)
    try:
        generated = table()
        if args.check is None and args.write is None:
            print(generated)
            return 0
        path = args.check or args.write
        current = path.read_text()
        fresh = replace(current, generated)
    except (OSError, ValueError) as exc:
        print(f"configdoc: {exc}", file=sys.stderr)
        return 1
    if args.write is not None:
        if fresh != current:
            path.write_text(fresh)
        print(f"configdoc: {path}: table {'updated' if fresh != current else 'already fresh'}")
        return 0
    if fresh != current:
        print(f"configdoc: {path}: the environment-variable table is stale; run "
              f"`python -m ragmesh.configdoc --write {path}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
