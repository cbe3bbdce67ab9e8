"""Getting content in: chunking and the ingest pipeline (parse -> chunk -> embed -> store -> index)."""
