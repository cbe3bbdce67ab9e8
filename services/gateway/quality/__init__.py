"""The quality steps around retrieval, each a model call through the generator service: query
rewriting before the search, reranking of the fused hits, per-chunk compression before the context
is built, and the answer from the conversation when nothing retrieved is close enough. Every step
reports itself (done, skipped and why, or fell back and why) with its time; none can fail an answer."""
from services.gateway.quality.stack import QualityStack, QualityStep

__all__ = ["QualityStack", "QualityStep"]
