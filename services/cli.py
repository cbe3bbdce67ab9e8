"""The `ragmesh` operator command: the shared library's commands (ragmesh.cli: ingest, delete, keys)
and the services' own (services/retriever/cli.py: index rebuild).

It sits above the services, so the shared library below them needs none of their code:

    ragmesh ingest PATH... --collection NAME      (the console script, or: python -m services.cli ...)
    ragmesh index rebuild [--collection NAME]...
"""
from __future__ import annotations

import sys

from ragmesh import cli
from services.retriever import cli as retriever_cli


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, more=[retriever_cli.add_commands])


if __name__ == "__main__":
    sys.exit(main())
