"""The retriever's operator commands, part of the `ragmesh` command (services.cli):

    ragmesh index rebuild [--collection NAME]...

`index rebuild` (RETRIEVER_BACKEND=milvus) drops the Milvus collections named (default: every one
the store holds) and reloads them from the store, with a progress bar; run it where the
retriever's settings are (MILVUS_URI, the store). Rerun it after an interruption: it continues
where it stopped (exit status 130 when interrupted). Exit status 2 when the backend is not milvus
or a collection named is not in the store."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

from ragmesh.cli import Commands
from ragmesh.config import Settings
from ragmesh.store import open_store
from services.retriever.backend import CollectionOptions


def add_commands(commands: Commands) -> None:
    """`index rebuild`, added to the `ragmesh` command's parser."""
    index = commands.add_parser("index", help="the retriever's search index (RETRIEVER_BACKEND=milvus)")
    actions = index.add_subparsers(dest="action", required=True)
    rebuild = actions.add_parser("rebuild", help="drop and reload Milvus collections from the store")
    rebuild.add_argument("--collection", dest="collections", action="append", metavar="NAME",
                         help="a collection to rebuild (repeatable; default: every one)")
    rebuild.set_defaults(run=rebuild_index)


def rebuild_index(args: argparse.Namespace, settings: Settings) -> int:
    """The Milvus index from the store (the memory backend rebuilds itself at every start)."""
    if settings.retriever_backend != "milvus":
        print("ragmesh: RETRIEVER_BACKEND is not milvus: the memory backend rebuilds from the store at every start",
              file=sys.stderr)
        return 2
    # Here, not at the top: pymilvus takes about a second to import, which the other commands need not wait.
    from services.retriever.milvus import MilvusBackend, MilvusConfig, sync

    backend = MilvusBackend(MilvusConfig.from_settings(settings), 0)
    store = open_store(settings)
    try:
        for name, options in store.collection_options().items():
            backend.configure(name, CollectionOptions(**options))
        backend.connect()
        stats = {c.name: c.chunks for c in store.collections()}
        names = args.collections or None
        unknown = [n for n in names or [] if n not in stats]
        if unknown:
            print(f"ragmesh: the store holds no collection {', '.join(map(repr, unknown))}", file=sys.stderr)
            return 2
        for name, version in sync.interrupted(backend, store, names or sorted(stats)).items():
            print(f"continuing the interrupted rebuild of {name} (started at store version {version})")
        # tqdm shows chunks/s as it goes: a rebuild writes by batches across documents, so the rate stays flat.
        bar = tqdm(total=sum(stats[n] for n in names or stats), desc="rebuild", unit="chunk", unit_scale=True,
                   smoothing=0.1, file=sys.stderr, disable=None)
        started = time.monotonic()
        try:
            chunks = sync.rebuild(backend, store, names, progress=bar.update)
        except KeyboardInterrupt:
            print("ragmesh: interrupted: run `ragmesh index rebuild` again to continue where it stopped",
                  file=sys.stderr)
            return 130
        finally:
            bar.close()
    finally:
        backend.close(Path(), 0)
        store.close()
    seconds = time.monotonic() - started
    print(f"rebuilt {', '.join(names or sorted(stats)) or 'nothing'}: {chunks:,} chunks in "
          f"{seconds:.1f} s ({chunks / max(seconds, 1e-9):,.0f} chunks/s)")
    return 0
