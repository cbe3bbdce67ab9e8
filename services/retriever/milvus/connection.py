"""Where the Milvus backend's data lives: its settings (checked when they are loaded), and
the connection every part of it (the backend, held.py's records, sync.py's loads) calls through,
so a failing server is one kind of error everywhere."""
from __future__ import annotations

from dataclasses import dataclass

from pymilvus import MilvusClient
from pymilvus.client.types import LoadState
from pymilvus.exceptions import MilvusException

from ragmesh.config import SearchBackendSettings, json_object, redact_uri
from ragmesh.errors import ConfigError, Unavailable


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
    def from_settings(cls, s: SearchBackendSettings) -> "MilvusConfig":
        """From settings checked when they were loaded (a bad one stops the retriever with one line)."""
        return cls(s.milvus_uri, s.milvus_token, s.milvus_db, s.milvus_index_type,
                   json_object("MILVUS_INDEX_PARAMS", s.milvus_index_params),
                   json_object("MILVUS_SEARCH_PARAMS", s.milvus_search_params), s.milvus_consistency, s.milvus_prefix)


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
