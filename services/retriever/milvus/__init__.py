"""The Milvus search backend: one Milvus collection per ragmesh collection, shared by every
retriever replica (a Milvus server or cluster in production, a milvus-lite file in tests)."""
from services.retriever.milvus import sync
from services.retriever.milvus.backend import MilvusBackend, MilvusConfig

__all__ = ["MilvusBackend", "MilvusConfig", "sync"]
