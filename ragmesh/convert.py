"""The one place protobuf messages become domain objects and back."""
from __future__ import annotations

import dataclasses

import numpy as np

from ragmesh import access
from ragmesh import types as t
from ragmesh.access import Access
from ragmesh.v1 import common_pb2, generator_pb2, retriever_pb2


def chunk_to_proto(c: t.Chunk) -> common_pb2.Chunk:
    return common_pb2.Chunk(
        chunk_id=c.chunk_id, doc_id=c.doc_id, collection=c.collection, text=c.text,
        metadata=access.shown(c.metadata), date=c.date, tenant=c.tenant,
        parent_chunk_id=c.parent_chunk_id, chunk_index=c.chunk_index,
    )


def chunk_from_proto(p: common_pb2.Chunk) -> t.Chunk:
    return t.Chunk(
        chunk_id=p.chunk_id, doc_id=p.doc_id, collection=p.collection, text=p.text,
        metadata=dict(p.metadata), date=p.date, tenant=p.tenant,
        parent_chunk_id=p.parent_chunk_id, chunk_index=p.chunk_index,
    )


def filter_to_proto(f: t.SearchFilter) -> common_pb2.Filter:
    msg = common_pb2.Filter(
        tenant=f.tenant, start_date=f.start_date, end_date=f.end_date,
        date_field=f.date_field, equals=f.equals,
    )
    any_of = getattr(msg, "in")  # `in` is a Python keyword
    for key, values in f.any_of.items():
        any_of[key].values.extend(values)
    if f.doc_ids is not None:
        msg.doc_ids.SetInParent()  # set even when empty: an empty list admits nothing
        msg.doc_ids.values.extend(f.doc_ids)
    return msg


def filter_from_proto(p: common_pb2.Filter) -> t.SearchFilter:
    return t.SearchFilter(
        tenant=p.tenant, start_date=p.start_date, end_date=p.end_date, date_field=p.date_field,
        any_of={k: list(v.values) for k, v in getattr(p, "in").items()},
        equals=dict(p.equals), doc_ids=list(p.doc_ids.values) if p.HasField("doc_ids") else None,
    )


def hit_to_proto(h: t.Hit) -> retriever_pb2.Hit:
    return retriever_pb2.Hit(
        chunk=chunk_to_proto(h.chunk), score=h.score, dense_rank=h.dense_rank,
        sparse_rank=h.sparse_rank, dense_score=h.dense_score, sparse_score=h.sparse_score,
        fused_score=h.fused_score, boosts=h.boosts, parent_text=h.parent_text,
    )


def hit_from_proto(p: retriever_pb2.Hit) -> t.Hit:
    return t.Hit(
        chunk=chunk_from_proto(p.chunk), score=p.score, dense_rank=p.dense_rank,
        sparse_rank=p.sparse_rank, dense_score=p.dense_score, sparse_score=p.sparse_score,
        fused_score=p.fused_score, boosts=list(p.boosts), parent_text=p.parent_text,
    )


def document_to_proto(d: t.Document) -> retriever_pb2.Document:
    msg = retriever_pb2.Document(
        doc_id=d.doc_id, collection=d.collection, text=d.text, metadata=d.metadata,
        date=d.date, tenant=d.tenant, title=d.title, content=d.content, filename=d.filename,
        mime_type=d.mime_type,
    )
    if d.summarize is not None:
        msg.summarize = d.summarize
    if d.access is not None:
        msg.access.CopyFrom(access_to_proto(d.access))
    if d.vector is not None:
        msg.vector.extend(d.vector.tolist())
    return msg


def access_to_proto(a: Access) -> common_pb2.Access:
    return common_pb2.Access(users=a.users, groups=a.groups, tenant=a.tenant, owner=a.owner)


def access_from_proto(p: common_pb2.Access, field: str = "access") -> Access:
    """A checked Access (InvalidArgument naming the field for a name that breaks the identity rule)."""
    return Access.of(p.owner, p.users, p.groups, p.tenant, field=field)


def document_from_proto(p: retriever_pb2.Document) -> t.Document:
    return t.Document(
        doc_id=p.doc_id, collection=p.collection, text=p.text, metadata=dict(p.metadata),
        date=p.date, tenant=p.tenant, title=p.title, content=p.content, filename=p.filename,
        mime_type=p.mime_type, summarize=p.summarize if p.HasField("summarize") else None,
        access=access_from_proto(p.access) if p.HasField("access") else None,
        vector=np.asarray(p.vector, np.float32) if p.vector else None,
    )


def document_info_to_proto(r: t.DocumentRecord) -> retriever_pb2.DocumentInfo:
    return retriever_pb2.DocumentInfo(
        doc_id=r.doc_id, collection=r.collection, tenant=r.tenant, title=r.title, metadata=access.shown(r.metadata),
        date=r.date, chunk_count=r.chunk_count, content_hash=r.content_hash, summary=r.summary,
        sections=[retriever_pb2.SectionOutline(title=s.title, summary=s.summary, page=s.page)
                  for s in r.sections],
        access=access_to_proto(access.of_metadata(r.metadata)),
    )


def document_info_from_proto(p: retriever_pb2.DocumentInfo) -> t.DocumentRecord:
    return t.DocumentRecord(
        doc_id=p.doc_id, collection=p.collection, tenant=p.tenant, content_hash=p.content_hash,
        title=p.title, metadata=_with_access(dict(p.metadata), p), date=p.date, chunk_count=p.chunk_count,
        summary=p.summary,
        sections=[t.SectionOutline(s.title, s.summary, s.page) for s in p.sections],
    )


def citation_to_proto(c: t.Citation) -> common_pb2.Citation:
    return common_pb2.Citation(
        index=c.index, chunk_id=c.chunk_id, doc_id=c.doc_id, collection=c.collection,
        title=c.title, date=c.date, metadata=c.metadata, url=c.url, snippet=c.snippet, ref=c.ref,
        chapter=c.chapter, section=c.section, paragraph=c.paragraph,
    )


def citation_from_proto(p: common_pb2.Citation) -> t.Citation:
    return t.Citation(
        index=p.index, chunk_id=p.chunk_id, doc_id=p.doc_id, collection=p.collection,
        title=p.title, date=p.date, metadata=dict(p.metadata), url=p.url, snippet=p.snippet,
        ref=p.ref, chapter=p.chapter, section=p.section, paragraph=p.paragraph,
    )


def block_to_proto(b: t.ContextBlock) -> generator_pb2.ContextBlock:
    msg = generator_pb2.ContextBlock(index=b.index, text=b.text, label=b.label)
    if b.chunk is not None:
        msg.chunk.CopyFrom(chunk_to_proto(b.chunk))
    return msg


def block_from_proto(p: generator_pb2.ContextBlock) -> t.ContextBlock:
    return t.ContextBlock(
        index=p.index, text=p.text, label=p.label,
        chunk=chunk_from_proto(p.chunk) if p.HasField("chunk") else None,
    )


def gen_event_from_proto(event: generator_pb2.GenerateEvent) -> t.GenEvent:
    kind = event.WhichOneof("event")
    if kind in ("thinking", "content"):
        return t.GenEvent(kind, text=getattr(event, kind))
    if kind == "grounding":
        return t.GenEvent(kind, citations=[citation_from_proto(c) for c in event.grounding.web],
                          queries=list(event.grounding.queries))
    if kind == "usage":
        u: common_pb2.Usage = event.usage
        return t.GenEvent(kind, usage={
            "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "thinking_tokens": u.thinking_tokens, "total_tokens": u.total_tokens,
        })
    return t.GenEvent("done", model=event.done.model, text=event.done.finish_reason)


def gen_event_to_proto(e: t.GenEvent) -> generator_pb2.GenerateEvent:
    if e.kind in ("thinking", "content"):
        return generator_pb2.GenerateEvent(**{e.kind: e.text})
    if e.kind == "grounding":
        return generator_pb2.GenerateEvent(
            grounding=generator_pb2.Grounding(web=[citation_to_proto(c) for c in e.citations], queries=e.queries)
        )
    if e.kind == "usage":
        return generator_pb2.GenerateEvent(usage=common_pb2.Usage(**e.usage))
    return generator_pb2.GenerateEvent(done=generator_pb2.Done(model=e.model, finish_reason=e.text))


def document_entry_to_proto(e: t.DocumentEntry) -> retriever_pb2.DocumentEntry:
    """A list's line: the header without the summary text and the sections."""
    header = dataclasses.replace(e.document, summary="", sections=[])
    return retriever_pb2.DocumentEntry(document=document_info_to_proto(header), updated_at=e.updated_at,
                                       summarized=e.summarized)


def document_entry_from_proto(p: retriever_pb2.DocumentEntry) -> t.DocumentEntry:
    return t.DocumentEntry(document_info_from_proto(p.document), p.updated_at, p.summarized)


def chunk_context_to_proto(c: t.ChunkContext) -> retriever_pb2.ChunkInfo:
    """The document's header and summary come along; its sections do not."""
    info = retriever_pb2.ChunkInfo(chunk=chunk_to_proto(c.chunk), parent_text=c.parent_text)
    if c.document is not None:
        info.document.CopyFrom(document_info_to_proto(dataclasses.replace(c.document, sections=[])))
    return info


def chunk_context_from_proto(p: retriever_pb2.ChunkInfo) -> t.ChunkContext:
    return t.ChunkContext(chunk_from_proto(p.chunk), p.parent_text,
                          document_info_from_proto(p.document) if p.HasField("document") else None)


def _with_access(metadata: dict[str, str], p: retriever_pb2.DocumentInfo) -> dict[str, str]:
    """A record's metadata as the retriever keeps it: with its encoded access, so a DocumentRecord
    says who may read it on both sides of the wire (ragmesh.access.of_metadata)."""
    if p.HasField("access"):
        metadata[access.ACCESS_KEY] = access_from_proto(p.access).encode()
    return metadata
