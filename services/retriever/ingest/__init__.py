"""Getting content in (file parsing and type-aware chunking): parsers/ turn files into titled sections with
pages; detect.py, sanitize.py and strategies.py pick the chunker, redact PII and cut chunks
(chunker.py packs sentences); embedding.py batches and retries the embedder; summaries.py makes
the per-document summaries of the summary route; pipeline.py runs it all, batch.py commits a stream's
documents together, and pipeline.py deletes; upsert.py takes
chunks that already carry vectors."""
