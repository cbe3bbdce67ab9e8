"""Getting content in (003 part 1.1 and part 2): parsers/ turn files into titled sections with
pages; detect.py, sanitize.py and strategies.py pick the chunker, redact PII and cut chunks
(chunker.py packs sentences); embedding.py batches and retries the embedder; summaries.py makes
004's per-document summaries; pipeline.py runs it all per document and deletes; upsert.py takes
chunks that already carry vectors."""
