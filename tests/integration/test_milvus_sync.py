"""The Milvus backend against the store, the system of record: a retriever on an empty Milvus
loads the store, a crash between the store write and the Milvus write is repaired at the next
start (and on the memory engine, the same tests), `ragmesh index rebuild` reloads from the store,
a write deletes exactly what a document dropped, by primary key, and bad settings stop the
retriever at start with one line. One milvus-lite file for the module; each test has collections
of its own (MILVUS_PREFIX)."""
from __future__ import annotations

import asyncio
import subprocess
import threading
import sys
from pathlib import Path

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

from ragmesh import config
from ragmesh.access import ACCESS_KEY, TENANT, USER, Access
from ragmesh.errors import ConfigError
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, Document, DocumentRecord, SearchFilter, StoredChunk
from services.cli import main as cli
from services.retriever.app import make_backend
from services.retriever.backend import SearchBackend
from services.retriever.index import IndexRegistry
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.pipeline import Ingestor
from services.retriever.milvus import MilvusBackend, MilvusConfig, sync
from services.retriever.milvus import backend as milvus_backend
from services.retriever.milvus import held, rows

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


def either(kind: str, uri: str, prefix: str) -> SearchBackend:
    """A backend of the kind: Milvus on the module's file, or the memory engine."""
    return backend(uri, prefix) if kind == "milvus" else IndexRegistry(DIM)


def found(b: SearchBackend, tenant: str = "t", readers: frozenset[str] | None = None) -> list[str]:
    """Every chunk text of the tenant a lexical search finds (for `readers`, when given)."""
    r = b.search("c", ["lantern"], None, 100, SearchFilter(tenant=tenant, readers=readers))
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


@pytest.mark.parametrize("kind", ["memory", "milvus"])
def test_a_crash_between_the_store_and_the_index_is_repaired_at_the_next_start(kind: str, uri: str, store, tmp_path,
                                                                                monkeypatch) -> None:
    first = either(kind, uri, "crash_")
    first.warm_up(store, tmp_path, store.version())
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
    restarted = either(kind, uri, "crash_")
    done = restarted.warm_up(store, tmp_path, store.version())
    assert "1 documents replayed" in done if kind == "milvus" else "rebuilt from the store" in done
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


def test_an_interrupted_rebuild_continues_where_it_stopped(uri: str, tmp_path: Path, store, monkeypatch,
                                                          capsys) -> None:
    """Interrupted (Ctrl-C) after its first batches, run again: the second run loads only what the first
    did not, and a document rewritten between the two runs ends as the store has it."""
    docs = [document(f"d{i}", f"doc{i}", 2) for i in range(6)]
    store.replace_documents(docs)
    b = backend(uri, "resume_")
    b.warm_up(store, Path(), store.version())
    for name, value in {"RETRIEVER_BACKEND": "milvus", "MILVUS_URI": uri, "MILVUS_PREFIX": "resume_",
                        "DATA_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sync, "BATCH_CHUNKS", 4)  # two documents a batch
    applied: list[str] = []
    apply = MilvusBackend.apply

    def interrupted_after_two_batches(self, collection, changes):
        if len(applied) == 4:
            raise KeyboardInterrupt
        applied.extend(doc_id for (_, doc_id), _ in changes)
        return apply(self, collection, changes)

    monkeypatch.setattr(MilvusBackend, "apply", interrupted_after_two_batches)
    assert cli(["index", "rebuild"]) == 130
    assert "run `ragmesh index rebuild` again to continue" in capsys.readouterr().err
    assert applied == ["d0", "d1", "d2", "d3"] and b.indexed("c") == 8
    store.replace_documents([document("d1", "rewritten", 1)])  # between the two runs
    applied.clear()
    monkeypatch.setattr(MilvusBackend, "apply", lambda self, collection, changes: (
        applied.extend(doc_id for (_, doc_id), _ in changes), apply(self, collection, changes))[1])
    assert cli(["index", "rebuild"]) == 0
    assert "continuing the interrupted rebuild of c" in capsys.readouterr().out
    assert sorted(applied) == ["d1", "d1", "d4", "d5"], "the second run redid what the first had loaded"
    expected = sorted([f"doc{i} lantern rules {j}" for i in (0, 2, 3, 4, 5) for j in range(2)]
                      + ["rewritten lantern rules 0"])
    assert found(b) == expected and b.indexed("c") == len(expected), "nothing lost, nothing twice"
    assert sync.interrupted(b, store, ["c"]) == {}
    applied.clear()
    assert cli(["index", "rebuild"]) == 0  # the next rebuild starts over
    assert "continuing" not in capsys.readouterr().out and len(applied) == 6
    assert found(b) == expected


@pytest.mark.parametrize("layout", ["shared by every tenant", "older fields"])
def test_a_collection_in_an_older_layout_is_rebuilt_at_start(uri: str, store, layout: str) -> None:
    """A Milvus collection of the layout before per-tenant collections (named for the ragmesh
    collection alone), or a tenant's one with other fields, is rebuilt per tenant and dropped."""
    store.replace_documents([document("a", "alpha", 2), document("a", "alpha", 1, "u")])
    prefix = "layout_" + layout.split()[0] + "_"
    b = backend(uri, prefix)
    b.warm_up(store, Path(), store.version())
    b.drop("c")
    old = MilvusClient.create_schema(auto_id=False)
    old.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=32)
    old.add_field("dense", DataType.FLOAT_VECTOR, dim=DIM)
    params = b.client.prepare_index_params()
    params.add_index("dense", index_type="FLAT", metric_type="IP")
    table = prefix + "c" if layout.startswith("shared") else rows_name(b)
    b.client.create_collection(table, schema=old, index_params=params)
    restarted = backend(uri, prefix)
    done = restarted.warm_up(store, Path(), store.version())
    assert done.startswith("c rebuilt (an older row layout)")
    assert found(restarted) == ["alpha lantern rules 0", "alpha lantern rules 1"]
    assert found(restarted, "u") == ["alpha lantern rules 0"]
    assert restarted.outdated() == []
    assert sorted(t for t in restarted.client.list_collections() if t.startswith(prefix + "c")) == sorted(
        [rows_name(restarted), rows_name(restarted, "u"), held.name(prefix, "c")]), "the shared collection is gone"


def rows_name(b: MilvusBackend, tenant: str = "t") -> str:
    """The Milvus collection of the tenant's chunks of collection "c"."""
    return rows.milvus_name(b.config.prefix, "c", tenant)


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
    ({"milvus_prefix": "p" * 40}, "MILVUS_PREFIX must be letters, digits and '_' \\(at most 31\\)"),
])
def test_bad_settings_are_refused_before_anything_starts(tmp_path: Path, overrides: dict, says: str) -> None:
    settings = config.load().replace(retriever_backend="milvus", milvus_uri=str(tmp_path / "i.db"))
    with pytest.raises(ConfigError, match=says):
        make_backend(settings.replace(**overrides))


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


def version(marker: str, chunks: int) -> tuple[DocumentRecord, list[StoredChunk]]:
    """Document "a" whose chunk ids differ from version to version (so old and new rows coexist
    until the old ones are deleted), each chunk's text naming its version."""
    record, stored = document("a", marker, chunks)
    for s in stored:
        s.chunk.chunk_id = f"{s.chunk.chunk_id}-{marker}"
    return record, stored


def versions_seen(b: SearchBackend) -> set[str]:
    return {text.split()[0] for text in found(b)}


@pytest.mark.parametrize("kind", ["memory", "milvus"])
def test_a_replaced_document_is_never_seen_in_two_versions(kind: str, uri: str, store, tmp_path, monkeypatch) -> None:
    """Searches run while a document is replaced again and again: each sees the old or the new
    version, never chunks of both (on Milvus, one search is made to run exactly between the upsert
    of the new rows and the delete of the old ones)."""
    b = either(kind, uri, "swap_")
    b.warm_up(store, tmp_path, store.version())
    committer = Committer(store, b)
    committer.replace([version("v0", 3)])
    if isinstance(b, MilvusBackend):
        in_window: list[set[str]] = []
        delete = b.client.delete

        def delete_after_a_search(*args, **kwargs):
            in_window.append(versions_seen(b))
            return delete(*args, **kwargs)

        monkeypatch.setattr(b.client, "delete", delete_after_a_search)
        committer.replace([version("v1", 2)])
        assert in_window == [{"v1"}], "a search between the upsert and the delete saw both versions"
        monkeypatch.setattr(b.client, "delete", delete)

    stop = threading.Event()
    seen: list[set[str]] = []

    def searcher() -> None:
        while not stop.is_set():
            seen.append(versions_seen(b))

    thread = threading.Thread(target=searcher)
    thread.start()
    try:
        for i in range(2, 22):
            committer.replace([version(f"v{i}", 1 + i % 4)])
    finally:
        stop.set()
        thread.join(30)
    assert seen and all(len(versions) == 1 for versions in seen), [v for v in seen if len(v) != 1][:3]
    assert versions_seen(b) == {"v21"}


@pytest.mark.slow
def test_index_rebuild_runs_from_a_shell_with_a_milvus_lite_file(tmp_path: Path) -> None:
    """pymilvus reads MILVUS_URI when it is imported and refuses a file path there: a fresh
    process (the CLI, `make run`'s retriever) must still start with one. And a milvus-lite file
    opened by a second process has its collections released: they are loaded before use."""
    store = SqliteStore(tmp_path / "ragmesh.sqlite3")
    try:
        store.replace_documents([document("a", "alpha", 2)])
    finally:
        store.close()
    env = {"RETRIEVER_BACKEND": "milvus", "MILVUS_URI": str(tmp_path / "index.db"), "DATA_DIR": str(tmp_path),
           "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "services.cli", "index", "rebuild"], env=env,
                              capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])
        assert done.returncode == 0, done.stderr[-2000:]
        assert "rebuilt c: 2 chunks" in done.stdout


class Calls:
    """The Milvus client's calls a test is watching, by method name."""

    def __init__(self, b: MilvusBackend, monkeypatch, names: tuple[str, ...] = ("delete", "query", "upsert")) -> None:
        self.made: list[tuple[str, tuple, dict]] = []
        for name in names:
            real = getattr(b.client, name)
            monkeypatch.setattr(b.client, name, self._watch(name, real))

    def _watch(self, name: str, real):
        def call(*args, **kwargs):
            self.made.append((name, args, kwargs))
            return real(*args, **kwargs)
        return call

    def of(self, name: str, table: str | None = None) -> list[dict]:
        return [kwargs for n, args, kwargs in self.made if n == name and (table is None or args[0] == table)]


def pks(b: MilvusBackend, tenant: str = "t") -> set[str]:
    """Primary keys of every row of the tenant's collection "c"."""
    return {r["pk"] for r in b.client.query(rows_name(b, tenant), filter="chunk_index >= 0", output_fields=["pk"])}


def pk(tenant: str, doc_id: str, chunk_id: str) -> str:
    return rows.digest("chunk", tenant, doc_id, chunk_id)


def test_new_documents_are_written_without_a_delete_or_a_query(uri: str, store, monkeypatch) -> None:
    b = backend(uri, "fresh_")
    b.warm_up(store, Path(), store.version())
    calls = Calls(b, monkeypatch)
    committer = Committer(store, b)
    committer.replace([document("a", "alpha", 3), document("b", "beta", 2), document("a", "alpha", 1, "u")])
    committer.replace([document("c", "gamma", 2)])
    assert calls.of("delete") == [] and calls.of("query") == [], "a document seen for the first time deletes nothing"
    assert len(calls.of("upsert", rows_name(b))) == 2, "one upsert of rows a write, whatever its documents"
    assert len(found(b)) == 7 and found(b, "u") == ["alpha lantern rules 0"]


def test_a_replaced_document_loses_exactly_its_dropped_chunks_by_primary_key(uri: str, store, monkeypatch) -> None:
    b = backend(uri, "dropped_")
    b.warm_up(store, Path(), store.version())
    committer = Committer(store, b)
    record, stored = document("a", "old", 4)
    committer.replace([(record, stored), document("b", "other", 2)])
    calls = Calls(b, monkeypatch)
    kept = [stored[0], stored[2]]
    added = document("a", "new", 1)[1][0]
    added.chunk.chunk_id = "t/c/a#new"
    committer.replace([(record, kept + [added])])
    deletes = calls.of("delete", rows_name(b))
    assert deletes == [{"ids": sorted([pk("t", "a", "t/c/a#1"), pk("t", "a", "t/c/a#3")])}]
    assert calls.of("query") == [] and all("filter" not in kwargs for kwargs in calls.of("delete"))
    assert pks(b) == {pk("t", "a", c) for c in ("t/c/a#0", "t/c/a#2", "t/c/a#new", )} | {
        pk("t", "b", "t/c/b#0"), pk("t", "b", "t/c/b#1")}
    committer.delete("t", "c", ["a"])
    assert pks(b) == {pk("t", "b", "t/c/b#0"), pk("t", "b", "t/c/b#1")}


def test_a_crash_between_the_upsert_and_the_delete_is_cleaned_up_at_the_next_start(uri: str, store,
                                                                                    monkeypatch) -> None:
    """The record of what Milvus holds is widened before the rows are written: a writer killed after
    writing the new rows and before deleting the old ones leaves both, the search shows the new version
    only, and the next start deletes the old rows."""
    first = backend(uri, "halfway_")
    first.warm_up(store, Path(), store.version())
    committer = Committer(store, first)
    committer.replace([version("v0", 3)])

    def killed(*args, **kwargs):
        raise RuntimeError("killed between the upsert and the delete")

    monkeypatch.setattr(first.client, "delete", killed)
    with pytest.raises(RuntimeError):
        committer.replace([version("v1", 2)])
    assert len(pks(first)) == 5 and versions_seen(first) == {"v1"}
    monkeypatch.undo()
    restarted = backend(uri, "halfway_")
    restarted.warm_up(store, Path(), store.version())
    assert pks(restarted) == {pk("t", "a", f"t/c/a#{i}-v1") for i in range(2)}
    assert found(restarted) == ["v1 lantern rules 0", "v1 lantern rules 1"]


def test_an_access_change_the_index_missed_is_applied_at_the_next_start(uri: str, store, monkeypatch) -> None:
    """Access lives in each row (rows.access_entries): a share written to the store by a writer killed
    before the Milvus write is in Milvus after the next start's replay, as any other change."""
    first = backend(uri, "access_")
    first.warm_up(store, Path(), store.version())
    committer = Committer(store, first)
    bob = frozenset((TENANT, USER + "bob"))

    def memo(access: Access) -> tuple[DocumentRecord, list[StoredChunk]]:
        record, chunks = document("a", "memo", 2)
        for s in chunks:
            s.chunk.metadata[ACCESS_KEY] = access.encode()
        return record, chunks

    committer.replace([memo(Access(owner="alice"))])
    assert found(first, readers=bob) == [] and len(found(first)) == 2

    def killed(*args, **kwargs):
        raise RuntimeError("killed between the store write and the Milvus write")

    monkeypatch.setattr(first, "apply", killed)
    with pytest.raises(RuntimeError):
        committer.replace([memo(Access(owner="alice", users=("bob",)))])
    assert found(first, readers=bob) == []
    restarted = backend(uri, "access_")
    restarted.warm_up(store, Path(), store.version())
    assert found(restarted, readers=bob) == ["memo lantern rules 0", "memo lantern rules 1"]


def test_a_document_past_one_record_row_keeps_exact_keys(uri: str, store, monkeypatch) -> None:
    """Keys past held.PER_ROW go on in further rows of the record; shrinking drops those rows."""
    monkeypatch.setattr(held, "PER_ROW", 2)
    b = backend(uri, "long_")
    b.warm_up(store, Path(), store.version())
    committer = Committer(store, b)
    for marker, chunks in (("five", 5), ("one", 1), ("three", 3)):
        committer.replace([version(marker, chunks)])
        assert pks(b) == {pk("t", "a", f"t/c/a#{i}-{marker}") for i in range(chunks)}
        assert versions_seen(b) == {marker}
    record = held.name("long_", "c")
    assert len(b.client.query(record, filter='key != ""', output_fields=["key"])) == 2, "3 keys: two rows of 2"


# -- through the Ingestor (Retriever/Ingest): a stream's documents share embedding calls and commits --


async def _hashed(texts: list[str], task: str) -> np.ndarray:
    vectors = np.stack([np.frombuffer(rows.digest("v", t).encode()[:DIM], np.uint8) for t in texts]).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def ingested(b: SearchBackend, store, *docs: Document, committer: Committer | None = None) -> dict[str, str]:
    """Each document's last stage, the documents sent in one stream."""
    ingestor = Ingestor(store, b, _hashed, min_chars=100, max_chars=200, committer=committer)

    async def stream():
        for d in docs:
            yield d

    async def run() -> dict[str, str]:
        return {p.doc_id: p.stage async for p in ingestor.ingest(stream())}

    return asyncio.run(run())


def text(marker: str, sentences: int) -> str:
    """A text that the chunker cuts into about one chunk every two sentences."""
    return " ".join(f"The {marker} lantern rules sentence number {i} is long enough to count here." for i in range(sentences))


def test_an_ingest_stream_deletes_nothing_for_new_documents_and_exactly_the_dropped_chunks_by_key(
        uri: str, store, monkeypatch) -> None:
    b = backend(uri, "ingest_")
    b.warm_up(store, Path(), store.version())
    calls = Calls(b, monkeypatch)
    sent = [Document(f"d{i}", "c", text=text(f"m{i}", 6), tenant="t") for i in range(6)]
    assert set(ingested(b, store, *sent).values()) == {"INDEXED"}
    assert calls.of("delete") == [] and calls.of("query") == [], "a document seen for the first time deletes nothing"
    assert len(calls.of("upsert", rows_name(b))) == 1, "the stream's documents went in one upsert"
    before = pks(b)
    long = [s.chunk.chunk_id for s in store.document_chunks("t", "c", "d0")]
    assert len(long) > 2
    calls.made.clear()
    assert ingested(b, store, Document("d0", "c", text=text("short", 1), tenant="t"),
                    Document("d9", "c", text=text("m9", 2), tenant="t")) == {"d0": "INDEXED", "d9": "INDEXED"}
    dropped = {pk("t", "d0", c) for c in long[1:]}
    deletes = calls.of("delete", rows_name(b))
    assert deletes == [{"ids": sorted(dropped)}], "exactly the replaced document's dropped keys, by key"
    assert all("filter" not in kwargs for kwargs in calls.of("delete")) and calls.of("query") == []
    added = {pk("t", "d9", s.chunk.chunk_id) for s in store.document_chunks("t", "c", "d9")}
    assert pks(b) == (before - dropped) | added


@pytest.mark.parametrize("kind", ["memory", "milvus"])
def test_an_ingest_stream_killed_between_the_store_and_the_index_is_repaired_at_the_next_start(
        kind: str, uri: str, store, tmp_path, monkeypatch) -> None:
    first = either(kind, uri, "ingestcrash_")
    first.warm_up(store, tmp_path, store.version())
    assert set(ingested(first, store, Document("a", "c", text="old lantern rules", tenant="t")).values()) == {"INDEXED"}

    def killed(*args, **kwargs):
        raise RuntimeError("killed between the store write and the index write")

    monkeypatch.setattr(first, "apply", killed)
    out = ingested(first, store, Document("a", "c", text="new lantern rules", tenant="t"),
                   Document("b", "c", text="more lantern rules", tenant="t"))
    assert out == {"a": "FAILED", "b": "FAILED"}
    assert found(first) == ["old lantern rules"], "the old version stays searchable"
    monkeypatch.undo()
    restarted = either(kind, uri, "ingestcrash_")
    restarted.warm_up(store, tmp_path, store.version())
    assert found(restarted) == ["more lantern rules", "new lantern rules"]


@pytest.mark.parametrize("kind", ["memory", "milvus"])
def test_a_document_sent_again_in_one_stream_ends_as_its_last_version(kind: str, uri: str, store, tmp_path) -> None:
    b = either(kind, uri, "again_")
    b.warm_up(store, tmp_path, store.version())
    sent = [Document("a", "c", text=text(marker, n), tenant="t") for marker, n in (("v1", 6), ("v2", 2), ("v3", 4))]
    assert ingested(b, store, *sent) == {"a": "INDEXED"}
    assert {t.split()[1] for t in found(b)} == {"v3"}
    assert len(found(b)) == len(store.document_chunks("t", "c", "a"))
