"""The Milvus search backend: one Milvus collection per tenant and ragmesh collection (so BM25
statistics are the tenant's), shared by every retriever replica (a Milvus server or cluster in
production, a milvus-lite file in tests)."""
import os

# pymilvus parses MILVUS_URI from the environment when it is imported and refuses a milvus-lite
# file path there (ConnectionConfigException at import); ragmesh passes the URI to MilvusClient itself.
_uri = os.environ.pop("MILVUS_URI", None)
try:
    import pymilvus  # noqa: F401
finally:
    if _uri is not None:
        os.environ["MILVUS_URI"] = _uri

from services.retriever.milvus import sync  # noqa: E402
from services.retriever.milvus.backend import MilvusBackend  # noqa: E402
from services.retriever.milvus.connection import MilvusConfig  # noqa: E402

__all__ = ["MilvusBackend", "MilvusConfig", "sync"]
