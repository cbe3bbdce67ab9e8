"""The Milvus backend against the store, the system of record: a retriever on an empty Milvus
loads the store, a crash between the store write and the Milvus write is repaired at the next
start, `ragmesh index rebuild` reloads from the store, and bad settings stop the retriever at
start with one line. One milvus-lite file for the module; each test has collections of its own
(MILVUS_PREFIX)."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragmesh import config
from ragmesh.cli import main as cli
from ragmesh.identity.authenticator import ConfigError
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, DocumentRecord, SearchFilter, StoredChunk
from services.retriever.app import make_backend
from services.retriever.ingest.commit import Committer
from services.retriever.milvus import MilvusBackend, MilvusConfig, sync
from services.retriever.milvus import backend as milvus_backend

DIM = 4


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("milvus") / "index.db")


@pytest.fixture
def store(tmp_path: Path):
    s = SqliteStore(tmp_path / "ragmesh.sqlite3")
    yield s
    s.close()


def backend(uri: str, prefix: str) -> MilvusBackend:
    return MilvusBackend(MilvusConfig(uri, "", "", "FLAT", {}, {}, "Strong", prefix), DIM)


def document(doc_id: str, marker: str, chunks: int, tenant: str = "t") -> tuple[DocumentRecord, list[StoredChunk]]:
    rng = np.random.default_rng(len(marker) + chunks)
    record = DocumentRecord(doc_id=doc_id, collection="c", tenant=tenant, content_hash=marker, chunk_count=chunks)
    return record, [StoredChunk(Chunk(chunk_id=f"{tenant}/c/{doc_id}#{i}", doc_id=doc_id, collection="c",
                                      text=f"{marker} lantern rules {i}", tenant=tenant),
                                rng.standard_normal(DIM).astype(np.float32)) for i in range(chunks)]


def found(b: MilvusBackend, tenant: str = "t") -> list[str]:
    """Every chunk text of the tenant a lexical search finds."""
    r = b.search("c", ["lantern"], None, 100, SearchFilter(tenant=tenant))
    return sorted(chunk.text for chunk in r.chunks.values()) if r else []


def test_a_retriever_on_an_empty_milvus_loads_the_store(uri: str, store) -> None:
    store.replace_documents([document("a", "alpha", 3), document("b", "beta", 2), document("a", "alpha", 1, "u")])
    b = backend(uri, "empty_")
    done = b.warm_up(store, Path(), store.version())
    assert done.startswith("Milvus was empty: 6 chunks loaded")
    assert found(b) == [f"alpha lantern rules {i}" for i in range(3)] + ["beta lantern rules 0", "beta lantern rules 1"]
    assert found(b, "u") == ["alpha lantern rules 0"]
    assert sync.watermark(b) == store.version()
    again = backend(uri, "empty_").warm_up(store, Path(), store.version())
    assert again.endswith("0 documents replayed since 1")


def test_a_crash_between_the_store_and_milvus_is_repaired_at_the_next_start(uri: str, store, monkeypatch) -> None:
    first = backend(uri, "crash_")
    first.warm_up(store, Path(), store.version())
    committer = Committer(store, first)
    committer.replace([document("a", "old", 3)])
    assert found(first) == [f"old lantern rules {i}" for i in range(3)]

    def killed(*args, **kwargs):
        raise RuntimeError("killed between the store write and the Milvus write")

    monkeypatch.setattr(first, "apply", killed)
    with pytest.raises(RuntimeError):
        committer.replace([document("a", "new", 1)])
    assert store.document_chunks("t", "c", "a")[0].chunk.text == "new lantern rules 0"
    assert found(first) == [f"old lantern rules {i}" for i in range(3)], "the old version stays searchable"
    restarted = backend(uri, "crash_")
    done = restarted.warm_up(store, Path(), store.version())
    assert "1 documents replayed" in done
    assert found(restarted) == ["new lantern rules 0"]


def test_replicas_share_one_index_and_hold_none_of_their_own(uri: str, store, monkeypatch) -> None:
    """What one replica writes, another finds at once, a collection it made included (once the
    other's list of collections is older than NAMES_TTL_S); nobody replays it into an index of its own."""
    monkeypatch.setattr(milvus_backend, "NAMES_TTL_S", 0.0)
    first, second = backend(uri, "replicas_"), backend(uri, "replicas_")
    for b in (first, second):
        b.warm_up(store, Path(), store.version())
    assert second.names() == []
    Committer(store, first).replace([document("a", "shared", 2)])
    assert found(second) == ["shared lantern rules 0", "shared lantern rules 1"]
    assert not second.follows_store and second.indexed("c") == 2


def test_index_rebuild_reloads_milvus_from_the_store(uri: str, tmp_path: Path, store, monkeypatch, capsys) -> None:
    store.replace_documents([document("a", "alpha", 3), document("b", "beta", 2)])
    b = backend(uri, "rebuild_")
    b.warm_up(store, Path(), store.version())
    b.client.delete(rows_name(b), filter='chunk_index >= 0')  # the index lost its rows
    assert found(b) == []
    for name, value in {"RETRIEVER_BACKEND": "milvus", "MILVUS_URI": uri, "MILVUS_PREFIX": "rebuild_",
                        "DATA_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    assert cli(["index", "rebuild", "--collection", "c"]) == 0
    assert "rebuilt c: 5 chunks" in capsys.readouterr().out
    assert len(found(b)) == 5
    assert cli(["index", "rebuild", "--collection", "nope"]) == 2
    assert "no collection 'nope'" in capsys.readouterr().err


def rows_name(b: MilvusBackend) -> str:
    return b.config.prefix + "c"


@pytest.mark.parametrize("overrides, says", [
    ({"retriever_backend": "elastic"}, "RETRIEVER_BACKEND must be memory or milvus"),
    ({"milvus_uri": ""}, "needs MILVUS_URI"),
    ({"milvus_uri": "ftp://host:19530"}, "the scheme must be"),
    ({"milvus_uri": "/no/such/folder/index.db"}, "must end in .db, in a folder that exists"),
    ({"milvus_uri": "index.sqlite"}, "must end in .db"),
    ({"milvus_index_type": "DISKANN"}, "MILVUS_INDEX_TYPE must be one of FLAT, HNSW, IVF_FLAT"),
    ({"milvus_index_params": "[1]"}, "MILVUS_INDEX_PARAMS must be a JSON object"),
    ({"milvus_search_params": "{"}, "MILVUS_SEARCH_PARAMS must be a JSON object"),
    ({"milvus_consistency": "Sometimes"}, "MILVUS_CONSISTENCY must be one of"),
])
def test_bad_settings_are_refused_before_anything_starts(tmp_path: Path, overrides: dict, says: str) -> None:
    settings = dataclasses.replace(config.load(), retriever_backend="milvus", milvus_uri=str(tmp_path / "i.db"))
    with pytest.raises(ConfigError, match=says):
        make_backend(dataclasses.replace(settings, **overrides))


def test_an_unreachable_milvus_fails_at_start(store) -> None:
    b = MilvusBackend(MilvusConfig("http://127.0.0.1:1", "", "", "FLAT", {}, {}, "Strong", "x_"), DIM)
    with pytest.raises(ConfigError, match=r"^MILVUS_URI http://127.0.0.1:1: cannot use Milvus there"):
        b.warm_up(store, Path(), 0)


@pytest.mark.slow
def test_the_retriever_refuses_to_start_on_an_unreachable_milvus_with_one_line(tmp_path: Path) -> None:
    env = {"RETRIEVER_BACKEND": "milvus", "MILVUS_URI": "http://127.0.0.1:1", "DATA_DIR": str(tmp_path),
           "RETRIEVER_PORT": "0", "EMBEDDER_ADDR": "127.0.0.1:1", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "services.retriever"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(
        "retriever: refusing to start: MILVUS_URI http://127.0.0.1:1: cannot use Milvus there")
