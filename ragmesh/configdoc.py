"""The environment-variable tables of the operators' docs, generated from the settings models in
`ragmesh/config.py` so they cannot drift.

One table per settings section, in `config.SECTIONS` order, headed by the section's title and the
services whose model holds it; one row per field: the variable it reads (and those it falls back
to), its default and its description.

`python -m ragmesh.configdoc` prints the tables; `--write FILE` replaces the text between the
markers below in that file; `--check FILE` exits 1 when that text is stale (a test runs it).
Every field must have a description: a field without one fails all three.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

from ragmesh import config

START = "<!-- config-table:start -->"
END = "<!-- config-table:end -->"


@dataclasses.dataclass(frozen=True)
class Row:
    field: str
    variable: str
    fallbacks: tuple[str, ...]  # variables read when `variable` is unset (GEMINI_API_KEY -> GOOGLE_API_KEY)
    default: object
    meaning: str
    section: str  # the section's title
    readers: tuple[str, ...]  # services whose model holds the field; none = the command line and `make run`


def readers(section: type[config.Section]) -> tuple[str, ...]:
    return tuple(name for name, model in config.SERVICE_MODELS.items() if issubclass(model, section))


def rows(sections: Sequence[type[config.Section]] = config.SECTIONS) -> list[Row]:
    """One row per field of each section, in declaration order."""
    out = []
    for section in sections:
        for name, info in section.model_fields.items():
            variable, *fallbacks = config.variables(name, section)
            out.append(Row(name, variable, tuple(fallbacks), info.default, info.description or "", section.title,
                           readers(section)))
    return out


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


def _read_by(names: tuple[str, ...]) -> str:
    if not names:
        return "the command line and `make run` only"
    if len(names) == len(config.SERVICE_MODELS):
        return "every service"
    return ", ".join(names)


def table(sections: Sequence[type[config.Section]] = config.SECTIONS) -> str:
    """The markdown tables. Raises ValueError naming the fields that have no description."""
    found = rows(sections)
    missing = [r.field for r in found if not r.meaning]
    if missing:
        raise ValueError("ragmesh/config.py: no description for " + ", ".join(missing)
                         + " (the meaning argument of its env(...))")
    blocks = []
    for (section, names), group in itertools.groupby(found, key=lambda r: (r.section, r.readers)):
        lines = [f"**{section}** (read by {_read_by(names)})", "", "| variable | default | meaning |", "|---|---|---|"]
        for r in group:
            meaning = r.meaning + "".join(f" (unset: `{name}`)" for name in r.fallbacks)
            lines.append(f"| `{r.variable}` | {show(r.default, r.field)} | {_cell(meaning)} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


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
