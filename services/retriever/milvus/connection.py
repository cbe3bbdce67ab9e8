"""Where the Milvus backend's data lives: its settings, checked before anything connects, and
the connection every part of it (the backend, held.py's records, sync.py's loads) calls through,
so a failing server is one kind of error everywhere."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pymilvus import MilvusClient
from pymilvus.client.types import LoadState
from pymilvus.exceptions import MilvusException

from ragmesh.config import ConfigError, Settings, redact_uri
from ragmesh.errors import Unavailable
from services.retriever.milvus import rows

INDEX_TYPES = ("FLAT", "HNSW", "IVF_FLAT")
CONSISTENCY = ("Strong", "Bounded", "Session", "Eventually")


def _json_object(name: str, raw: str) -> dict:
    try:
        value = json.loads(raw or "{}")
    except ValueError as exc:
        raise ConfigError(f"{name} must be a JSON object, got {raw!r}: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object, got {raw!r}")
    return value


@dataclass(frozen=True)
class MilvusConfig:
    uri: str
    token: str
    db: str
    index_type: str
    index_params: dict
    search_params: dict
    consistency: str
    prefix: str

    @classmethod
    def from_settings(cls, s: Settings) -> "MilvusConfig":
        """Checked before anything connects: a bad setting stops the retriever with one line."""
        uri = s.milvus_uri.strip()
        if not uri:
            raise ConfigError("RETRIEVER_BACKEND=milvus needs MILVUS_URI (a path ending in .db for milvus-lite, "
                              "or http://host:19530)")
        scheme = uri.partition("://")[0].lower() if "://" in uri else ""
        if scheme and scheme not in ("http", "https", "tcp", "grpc", "unix"):
            raise ConfigError(f"MILVUS_URI {redact_uri(uri)}: the scheme must be http, https, tcp, grpc or unix")
        if not scheme and (not uri.endswith(".db") or not Path(uri).parent.is_dir()):
            raise ConfigError(f"MILVUS_URI {uri!r}: a milvus-lite file must end in .db, in a folder that exists")
        index_type = s.milvus_index_type.upper()
        if index_type not in INDEX_TYPES:
            raise ConfigError(f"MILVUS_INDEX_TYPE must be one of {', '.join(INDEX_TYPES)}, got {s.milvus_index_type!r}")
        consistency = next((c for c in CONSISTENCY if c.lower() == s.milvus_consistency.lower()), None)
        if consistency is None:
            raise ConfigError(f"MILVUS_CONSISTENCY must be one of {', '.join(CONSISTENCY)}, "
                              f"got {s.milvus_consistency!r}")
        if not s.milvus_prefix.isidentifier() or len(s.milvus_prefix) > rows.MAX_PREFIX:
            raise ConfigError(f"MILVUS_PREFIX must be letters, digits and '_' (at most {rows.MAX_PREFIX}), "
                              f"got {s.milvus_prefix!r}")
        return cls(uri, s.milvus_token, s.milvus_db, index_type,
                   _json_object("MILVUS_INDEX_PARAMS", s.milvus_index_params),
                   _json_object("MILVUS_SEARCH_PARAMS", s.milvus_search_params), consistency, s.milvus_prefix)


class Connection:
    """A MilvusClient made on first use."""

    def __init__(self, config: MilvusConfig) -> None:
        self.config = config
        self._client: MilvusClient | None = None

    @property
    def client(self) -> MilvusClient:
        if self._client is None:
            self.connect()
        assert self._client is not None
        return self._client

    def connect(self) -> None:
        """Raises ConfigError with one clear line when the URI is wrong or nothing answers there."""
        where = redact_uri(self.config.uri) if "://" in self.config.uri else self.config.uri
        try:
            self._client = MilvusClient(uri=self.config.uri, token=self.config.token, db_name=self.config.db,
                                        timeout=10)
            listed = self._client.list_collections()
        except Exception as exc:  # pymilvus raises several kinds for a bad address, database or credential
            reason = getattr(exc, "message", "") or str(exc) or type(exc).__name__
            raise ConfigError(f"MILVUS_URI {where}: cannot use Milvus there: {reason.splitlines()[0][:300]}") from None
        for table in listed:
            # A Milvus server keeps collections loaded across restarts; a milvus-lite file opened by
            # another process than the one that wrote it has them all released (no search, no get).
            if table.startswith(self.config.prefix) and \
                    self.call(self._client.get_load_state, table)["state"] != LoadState.Loaded:
                self.call(self._client.load_collection, table)

    def call(self, fn, *args, **kwargs):
        """A Milvus call; a failing server is Unavailable (a retriable gRPC status), never INTERNAL."""
        try:
            return fn(*args, **kwargs)
        except MilvusException as exc:
            raise Unavailable(f"Milvus: {exc.message[:300]}") from exc

    def create_table(self, table: str, schema, indexes, consistency: str) -> None:
        """A new Milvus collection with its indexes, loaded. The indexes are not waited for:
        pymilvus's create_index polls their state every half second (1.5 s for a collection of
        three, most of a tenant's first write and of a test's setup), and an empty collection has
        nothing to build."""
        self.call(self.client.create_collection, table, schema=schema, consistency_level=consistency)
        self.call(self.client.create_index, table, indexes, sync=False)
        self.call(self.client.load_collection, table)

    def disconnect(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
