"""Settings from environment variables only, with defaults that run on one machine."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _number(name: str, default: float, cast: type, kind: str):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return cast(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be {kind}, got {raw!r}") from exc


def _int(name: str, default: int) -> int:
    return _number(name, default, int, "an integer")


def _optional_int(name: str) -> int | None:
    """An integer, or None when the variable is unset (the service then picks its own default)."""
    return _number(name, None, int, "an integer")


def _float(name: str, default: float) -> float:
    return _number(name, default, float, "a number")


class ConfigError(ValueError):
    """Settings a service must not start with; the message says what to set."""


@dataclass(frozen=True)
class Settings:
    """Every knob of every service; each field names the variable it reads."""

    # Address every service binds (0.0.0.0 in a container); a non-loopback bind needs TLS or ALLOW_PLAINTEXT,
    # explicit SERVICE_TOKEN / API_KEY_PEPPER and, for the HTTP bridge, ALLOWED_HOSTS.
    host: str = field(default_factory=lambda: _env("RAGMESH_HOST", "127.0.0.1"))
    # gRPC port of each service, and the gateway's HTTP port (REST/SSE bridge and web page).
    gateway_port: int = field(default_factory=lambda: _int("GATEWAY_PORT", 50051))
    embedder_port: int = field(default_factory=lambda: _int("EMBEDDER_PORT", 50052))
    retriever_port: int = field(default_factory=lambda: _int("RETRIEVER_PORT", 50053))
    generator_port: int = field(default_factory=lambda: _int("GENERATOR_PORT", 50054))
    http_port: int = field(default_factory=lambda: _int("HTTP_PORT", 8080))
    # Addresses of the other services; default to this host and the ports above.
    embedder_addr: str = field(default_factory=lambda: _env("EMBEDDER_ADDR", ""))
    retriever_addr: str = field(default_factory=lambda: _env("RETRIEVER_ADDR", ""))
    generator_addr: str = field(default_factory=lambda: _env("GENERATOR_ADDR", ""))

    # Local state: the SQLite store, the retriever's index snapshot, secrets made on a loopback bind.
    data_dir: Path = field(default_factory=lambda: Path(_env("DATA_DIR", "./data")))
    # Admission: calls in flight per service beyond which new ones get RESOURCE_EXHAUSTED / HTTP 429
    # (0 = no limit); the gateway counts its gRPC calls and its /api requests together.
    max_concurrent_calls: int = field(default_factory=lambda: _int("MAX_CONCURRENT_CALLS", 256))
    # Gateway: questions planned (embedded and searched) at once; past it a question gets HTTP 429 /
    # RESOURCE_EXHAUSTED at once. Sized so queued work finishes inside RETRIEVAL_TIMEOUT_S on 2 cores
    # (make bench's load part); 0 = no limit.
    max_concurrent_retrievals: int = field(default_factory=lambda: _int("MAX_CONCURRENT_RETRIEVALS", 16))
    # Largest gRPC message a service sends (what it takes is set per method: see GRPC_UNARY_MAX_BYTES), and
    # the largest JSON body the HTTP bridge reads (uploads to /api/documents may be up to UPLOAD_MAX_BYTES).
    grpc_max_message_bytes: int = field(default_factory=lambda: _int("GRPC_MAX_MESSAGE_BYTES", 64 * 1024 * 1024))
    http_max_body_bytes: int = field(default_factory=lambda: _int("HTTP_MAX_BODY_BYTES", 1024 * 1024))
    upload_max_bytes: int = field(default_factory=lambda: _int("UPLOAD_MAX_BYTES", 200 * 1024 * 1024))
    # JSON logs to stdout at this level (DEBUG, INFO, WARNING, ERROR).
    log_level: str = field(default_factory=lambda: _env("LOG_LEVEL", "INFO"))
    # Prometheus metrics; false = nothing recorded and nothing served (what `make bench` compares with).
    metrics_enabled: bool = field(
        default_factory=lambda: _env("METRICS_ENABLED", "true").lower() in ("1", "true", "yes", "on")
    )
    # Port of /metrics on the embedder, retriever and generator (the gateway serves /metrics on
    # HTTP_PORT); unset = 9102, 9103 and 9104 respectively, 0 = not served.
    metrics_port: int | None = field(default_factory=lambda: _optional_int("METRICS_PORT"))
    # OpenTelemetry: traces go to this OTLP/gRPC collector (e.g. http://otel-collector:4317); empty = no tracing.
    otel_endpoint: str = field(default_factory=lambda: _env("OTEL_EXPORTER_OTLP_ENDPOINT", ""))

    # Deadlines (seconds) a client sets when the caller gave none.
    embed_timeout: float = field(default_factory=lambda: _float("EMBED_TIMEOUT_S", 10.0))
    search_timeout: float = field(default_factory=lambda: _float("SEARCH_TIMEOUT_S", 10.0))
    ingest_timeout: float = field(default_factory=lambda: _float("INGEST_TIMEOUT_S", 600.0))
    generate_timeout: float = field(default_factory=lambda: _float("GENERATE_TIMEOUT_S", 120.0))
    # On SIGTERM, calls in flight get this long (seconds) to finish.
    grace_period: float = field(default_factory=lambda: _float("SHUTDOWN_GRACE_S", 5.0))

    # Embedder
    # local (all-MiniLM-L6-v2 from its package, offline) or gemini (gemini-embedding-001, needs GEMINI_API_KEY).
    embed_backend: str = field(default_factory=lambda: _env("EMBED_BACKEND", "local"))
    # How the local model runs: onnx (ONNX Runtime, the same vectors at a fraction of the CPU) or torch
    # (sentence-transformers as shipped).
    embed_runtime: str = field(default_factory=lambda: _env("EMBED_RUNTIME", "onnx"))
    # With the onnx runtime, documents (ingest) run through torch in bfloat16: auto = on CPUs that multiply
    # bf16 in hardware (AMX, AVX512-BF16; 2.5x less CPU a chunk, cosine >= 0.9999 to float32), on, or off.
    embed_documents_bf16: str = field(default_factory=lambda: _env("EMBED_DOCUMENTS_BF16", "auto"))
    # Where the local model's ONNX export is kept (made at first start); empty = DATA_DIR/models.
    model_cache_dir: str = field(default_factory=lambda: _env("MODEL_CACHE_DIR", ""))
    # Texts per model call in the embedder, and per Embed call when the retriever ingests.
    embed_batch_size: int = field(default_factory=lambda: _int("EMBED_BATCH_SIZE", 64))
    # Google AI key for the Gemini models and embeddings; empty = the offline defaults.
    gemini_api_key: str = field(
        default_factory=lambda: _env("GEMINI_API_KEY", _env("GOOGLE_API_KEY", ""))
    )
    # Micro-batching: concurrent Embed calls of one task share a model call. A batch waits at most
    # the window (0 = only what is already waiting) for up to EMBED_MAX_BATCH texts; beyond
    # EMBED_MAX_QUEUE texts waiting, new calls get RESOURCE_EXHAUSTED.
    embed_batch_window_ms: float = field(default_factory=lambda: _float("EMBED_BATCH_WINDOW_MS", 5.0))
    embed_max_batch: int = field(default_factory=lambda: _int("EMBED_MAX_BATCH", 64))
    embed_max_queue: int = field(default_factory=lambda: _int("EMBED_MAX_QUEUE", 4096))

    # Generator
    # Model for a request that names none; empty = gemini-2.5-flash with GEMINI_API_KEY, else extractive.
    default_model: str = field(default_factory=lambda: _env("DEFAULT_MODEL", ""))
    # Pause between the streamed pieces of the offline extractive answer (milliseconds).
    extractive_delay_ms: float = field(default_factory=lambda: _float("EXTRACTIVE_DELAY_MS", 15.0))
    # Another Gemini endpoint (a proxy, or the tests' fake); empty = Google's.
    gemini_base_url: str = field(default_factory=lambda: _env("GEMINI_BASE_URL", ""))
    # Any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio); empty = not used.
    openai_base_url: str = field(default_factory=lambda: _env("OPENAI_BASE_URL", ""))
    openai_api_key: str = field(default_factory=lambda: _env("OPENAI_API_KEY", ""))
    openai_model: str = field(default_factory=lambda: _env("OPENAI_MODEL", ""))

    # Retriever
    # How often a retriever checks the store for other replicas' writes (seconds).
    follow_interval_s: float = field(default_factory=lambda: _float("FOLLOW_INTERVAL_S", 1.0))
    # Chunk size bounds (characters) for user documents at ingest.
    chunk_min_chars: int = field(default_factory=lambda: _int("CHUNK_MIN_CHARS", 400))
    chunk_max_chars: int = field(default_factory=lambda: _int("CHUNK_MAX_CHARS", 800))
    # The most characters of a chunk the embedding model reads whole: longer chunks are split so every
    # word is embedded (all-MiniLM-L6-v2 reads 256 tokens, 900-1,100 characters; Gemini's 2,048 tokens).
    embed_max_chars: int = field(default_factory=lambda: _int("EMBED_MAX_CHARS", 800))
    # Ingest: files over this size are refused (per file, with a clear error).
    ingest_max_bytes: int = field(default_factory=lambda: _int("INGEST_MAX_BYTES", 50 * 1024 * 1024))
    # Ingest: a document still parsing after this long fails (per document, with a clear error).
    ingest_parse_timeout_s: float = field(default_factory=lambda: _float("INGEST_PARSE_TIMEOUT_S", 60.0))
    # Embedding calls at ingest: a transient failure is retried this often, waiting base, 2x base, ...
    embed_retries: int = field(default_factory=lambda: _int("EMBED_RETRIES", 4))
    embed_retry_base_s: float = field(default_factory=lambda: _float("EMBED_RETRY_BASE_S", 0.5))
    # Summaries at ingest (004 Path B) for documents of at least SUMMARY_MIN_CHARS, unless a
    # request says otherwise; SUMMARY_MODEL empty = the generator's default model.
    ingest_summaries: bool = field(
        default_factory=lambda: _env("INGEST_SUMMARIES", "true").lower() in ("1", "true", "yes", "on")
    )
    summary_min_chars: int = field(default_factory=lambda: _int("SUMMARY_MIN_CHARS", 3000))
    summary_model: str = field(default_factory=lambda: _env("SUMMARY_MODEL", ""))

    # Search backend: memory (FAISS + BM25 in each replica, rebuilt from the store) or milvus (one
    # shared Milvus index; the store stays the system of record and the index is rebuilt from it).
    retriever_backend: str = field(default_factory=lambda: _env("RETRIEVER_BACKEND", "memory"))
    # Milvus: a file path runs milvus-lite in process (tests, a laptop); http(s)://host:19530 a
    # server, a cluster or Zilliz Cloud. Checked at start: a bad or unreachable URI stops the retriever.
    milvus_uri: str = field(default_factory=lambda: _env("MILVUS_URI", ""))
    # Milvus credential ("user:password" or an API key) and database; empty = none / the default.
    milvus_token: str = field(default_factory=lambda: _env("MILVUS_TOKEN", ""))
    milvus_db: str = field(default_factory=lambda: _env("MILVUS_DB", ""))
    # Milvus dense index: FLAT (exact, default), HNSW or IVF_FLAT, with their build parameters as
    # JSON (e.g. {"M": 16, "efConstruction": 200} or {"nlist": 1024}) and search parameters as JSON
    # (e.g. {"ef": 128} or {"nprobe": 32}).
    milvus_index_type: str = field(default_factory=lambda: _env("MILVUS_INDEX_TYPE", "FLAT"))
    milvus_index_params: str = field(default_factory=lambda: _env("MILVUS_INDEX_PARAMS", "{}"))
    milvus_search_params: str = field(default_factory=lambda: _env("MILVUS_SEARCH_PARAMS", "{}"))
    # Milvus consistency level of searches: Strong (a search sees every write acknowledged before
    # it), Bounded, Session or Eventually.
    milvus_consistency: str = field(default_factory=lambda: _env("MILVUS_CONSISTENCY", "Strong"))
    # Milvus: collection names are this prefix + the ragmesh collection name.
    milvus_prefix: str = field(default_factory=lambda: _env("MILVUS_PREFIX", "ragmesh_"))

    # Gateway
    # Scope cache of retrieved hits per tenant and conversation: lifetime (seconds) and entries per tenant.
    scope_cache_ttl_s: float = field(default_factory=lambda: _float("SCOPE_CACHE_TTL_S", 900.0))
    scope_cache_size: int = field(default_factory=lambda: _int("SCOPE_CACHE_SIZE", 1024))
    # Cosine similarity of two questions' embeddings at or above which the cached hits are reused.
    same_topic_threshold: float = field(
        default_factory=lambda: _float("SAME_TOPIC_THRESHOLD", 0.5)
    )
    # Earlier turns of the conversation read before routing (the prompt carries as many as HISTORY_CHAR_BUDGET holds).
    history_turns: int = field(default_factory=lambda: _int("HISTORY_TURNS", 3))
    # Characters of retrieved context in the prompt (hard cap 12,000).
    context_char_budget: int = field(default_factory=lambda: _int("CONTEXT_CHAR_BUDGET", 4000))
    # The searches of one question run side by side within this (seconds); late ones are left out.
    retrieval_timeout_s: float = field(default_factory=lambda: _float("RETRIEVAL_TIMEOUT_S", 3.5))
    # Let the model confirm a same-topic reuse, within SCOPE_LLM_TIMEOUT_S (seconds).
    scope_llm_check: bool = field(default_factory=lambda: _env("SCOPE_LLM_CHECK", "false").lower() == "true")
    scope_llm_timeout_s: float = field(default_factory=lambda: _float("SCOPE_LLM_TIMEOUT_S", 0.8))
    # 003's quality stack; each step runs only when a model (not the extractive backend) answers.
    # Rewrite the question into up to 3 more search queries, with a prompt for its intent (picked by rules).
    quality_rewrite: bool = field(default_factory=lambda: _env("QUALITY_REWRITE", "true").lower() == "true")
    # Have the model score the best RERANK_CANDIDATES fused hits 0-10 and reorder them by that score.
    quality_rerank: bool = field(default_factory=lambda: _env("QUALITY_RERANK", "true").lower() == "true")
    # Cut each context chunk to the sentences the question needs, marked [Partial]: / [Conflicting]:.
    quality_compress: bool = field(default_factory=lambda: _env("QUALITY_COMPRESS", "true").lower() == "true")
    # Answer from the conversation (summary and recent turns), not the hits, when earlier turns exist
    # and the best hit is under every similarity threshold.
    quality_history: bool = field(default_factory=lambda: _env("QUALITY_HISTORY", "true").lower() == "true")
    # Model the quality steps ask (e.g. a fast one beside a slow answering model); empty = the answer's model.
    quality_model: str = field(default_factory=lambda: _env("QUALITY_MODEL", ""))
    # Fused hits the model reranks (the rest follow in fused order).
    rerank_candidates: int = field(default_factory=lambda: _int("RERANK_CANDIDATES", 20))
    # Seconds each model step may take; past it the step falls back to the unimproved path (said so).
    rewrite_timeout_s: float = field(default_factory=lambda: _float("REWRITE_TIMEOUT_S", 2.0))
    rerank_timeout_s: float = field(default_factory=lambda: _float("RERANK_TIMEOUT_S", 4.0))
    compress_timeout_s: float = field(default_factory=lambda: _float("COMPRESS_TIMEOUT_S", 4.0))
    # Model for the DEEP route (reasoning questions); empty = the request's or default model.
    reasoning_model: str = field(default_factory=lambda: _env("REASONING_MODEL", ""))
    # Per user and calendar month (0 = no limit); beyond it HTTP 429 / RESOURCE_EXHAUSTED.
    monthly_message_limit: int = field(default_factory=lambda: _int("MONTHLY_MESSAGE_LIMIT", 0))
    monthly_token_limit: int = field(default_factory=lambda: _int("MONTHLY_TOKEN_LIMIT", 0))
    # Asks and uploads (requests to ingest documents) per user per minute (0 = no limit), counted once for
    # all gateway replicas on one REDIS_URL (by each replica while Redis is unreachable). On by default: one key cannot take every slot of the deployment, nor flood the
    # ingest path with files it knows will be refused; the test stack and `make bench` set 0.
    rate_limit_per_minute: int = field(default_factory=lambda: _int("RATE_LIMIT_PER_MINUTE", 60))
    # Background memory embedding: at most this many turns waiting; retries with backoff.
    memory_queue_max: int = field(default_factory=lambda: _int("MEMORY_QUEUE_MAX", 1000))

    # Identity (see ragmesh.identity). Empty secrets on a loopback bind are made once under
    # DATA_DIR/secrets; a service bound elsewhere needs them set explicitly.
    service_token: str = field(default_factory=lambda: _env("SERVICE_TOKEN", ""))  # the gateway's service credential
    api_key_pepper: str = field(default_factory=lambda: _env("API_KEY_PEPPER", ""))  # HMAC key of stored API keys
    # The key a command-line client (ragmesh ingest, the benchmarks) sends.
    api_key: str = field(default_factory=lambda: _env("RAGMESH_API_KEY", ""))
    # JWTs from an identity provider, verified with one of these: a shared secret (HS256),
    # a public key, or the provider's JWKS; empty = no JWTs accepted.
    jwt_secret: str = field(default_factory=lambda: _env("JWT_SECRET", ""))          # HS256
    jwt_public_key: str = field(default_factory=lambda: _env("JWT_PUBLIC_KEY", ""))  # PEM text or a file
    jwt_jwks_url: str = field(default_factory=lambda: _env("JWT_JWKS_URL", ""))
    # Required `iss` and `aud` claims when set.
    jwt_issuer: str = field(default_factory=lambda: _env("JWT_ISSUER", ""))
    jwt_audience: str = field(default_factory=lambda: _env("JWT_AUDIENCE", ""))
    # Claims that name the tenant, the user and the role (admin or member; absent = member).
    jwt_tenant_claim: str = field(default_factory=lambda: _env("JWT_TENANT_CLAIM", "tenant"))
    jwt_user_claim: str = field(default_factory=lambda: _env("JWT_USER_CLAIM", "sub"))
    jwt_role_claim: str = field(default_factory=lambda: _env("JWT_ROLE_CLAIM", "role"))
    # Failed credentials per client address per minute; past it the address is refused (HTTP 429 /
    # RESOURCE_EXHAUSTED) before its credential is checked, until the minute is over. 0 = no throttling.
    auth_failures_per_minute: int = field(default_factory=lambda: _int("AUTH_FAILURES_PER_MINUTE", 20))
    # TLS on every gRPC port and on HTTP (files); with TLS_CA, internal services require client
    # certificates signed by it (mTLS) and clients verify servers against it.
    tls_cert: str = field(default_factory=lambda: _env("TLS_CERT", ""))
    tls_key: str = field(default_factory=lambda: _env("TLS_KEY", ""))
    tls_ca: str = field(default_factory=lambda: _env("TLS_CA", ""))
    # A non-loopback bind without TLS is refused unless TLS is terminated in front (a mesh sidecar).
    allow_plaintext: bool = field(default_factory=lambda: _env("ALLOW_PLAINTEXT", "false").lower() == "true")
    # Host names the HTTP bridge answers to (comma-separated; "*" = any); default: the bind host.
    allowed_hosts: str = field(default_factory=lambda: _env("ALLOWED_HOSTS", ""))

    # Store: MongoDB when MONGODB_URI is set, else SQLite under DATA_DIR.
    mongodb_uri: str = field(default_factory=lambda: _env("MONGODB_URI", ""))
    # Database name.
    mongodb_db: str = field(default_factory=lambda: _env("MONGODB_DB", "ragmesh"))
    # Server selection bounds how long start-up waits for an unreachable server.
    mongodb_timeout_ms: int = field(default_factory=lambda: _int("MONGODB_TIMEOUT_MS", 5000))
    # Connection and socket timeouts (milliseconds).
    mongodb_connect_timeout_ms: int = field(
        default_factory=lambda: _int("MONGODB_CONNECT_TIMEOUT_MS", 5000)
    )
    mongodb_socket_timeout_ms: int = field(
        default_factory=lambda: _int("MONGODB_SOCKET_TIMEOUT_MS", 30000)
    )
    # auto: transactions where `hello` reports a replica set or mongos; off: versioned writes only
    # (Cosmos DB for MongoDB reports a replica set but has no transactions across collections).
    mongodb_transactions: str = field(default_factory=lambda: _env("MONGODB_TRANSACTIONS", "auto"))

    # Message and embed limits
    # The largest request message of a unary gRPC call (a search, a question, a prompt, texts to embed);
    # the streamed Ingest takes INGEST_MAX_BYTES and 1 MiB a document, Upsert 8 MiB a chunk, and no
    # server receives anything larger (ragmesh.message_limits).
    grpc_unary_max_bytes: int = field(default_factory=lambda: _int("GRPC_UNARY_MAX_BYTES", 4 * 1024 * 1024))
    # Embed: characters of one text, and of all texts of one call (a call takes at most EMBED_BATCH_SIZE
    # texts, 64 at least). Unset: 8,000 a text (a search query of 4,000, a correction of 6,000, a chunk of
    # EMBED_MAX_CHARS; Gemini reads 2,048 tokens) or EMBED_MAX_CHARS if larger, and 128 Ki a call or
    # EMBED_BATCH_SIZE x EMBED_MAX_CHARS if larger (one ingest call): raising EMBED_MAX_CHARS for
    # Gemini's longer chunks raises both.
    embed_text_max_chars: int | None = field(default_factory=lambda: _optional_int("EMBED_TEXT_MAX_CHARS"))
    embed_call_max_chars: int | None = field(default_factory=lambda: _optional_int("EMBED_CALL_MAX_CHARS"))

    # Parse limits
    # Worker processes files are parsed in; a worker past INGEST_PARSE_TIMEOUT_S or its memory limit is
    # killed (its document fails naming the limit) and replaced.
    ingest_parse_workers: int = field(default_factory=lambda: _int("INGEST_PARSE_WORKERS", 3))
    # One tenant's files parsed at once; fewer than INGEST_PARSE_WORKERS, so other tenants always find one free.
    ingest_parses_per_tenant: int = field(default_factory=lambda: _int("INGEST_PARSES_PER_TENANT", 1))
    # Address space of a parse worker (MB; 0 = no limit; a worker with its parsers loaded takes ~200 MB).
    ingest_parse_memory_mb: int = field(default_factory=lambda: _int("INGEST_PARSE_MEMORY_MB", 1024))
    # Text, Markdown, HTML and JSON files (and text bodies) up to this size are parsed in place, not in a
    # worker: their parse costs less than the round trip to a process (0 = every file in a worker).
    ingest_inline_parse_bytes: int = field(default_factory=lambda: _int("INGEST_INLINE_PARSE_BYTES", 64 * 1024))
    # DOCX/PPTX are refused before parsing when their zip declares more than this uncompressed in all.
    ingest_zip_max_bytes: int = field(default_factory=lambda: _int("INGEST_ZIP_MAX_BYTES", 200 * 1024 * 1024))
    # ... or it, or one member, expands more than this many times to over 1 MiB (a decompression bomb).
    ingest_zip_max_ratio: float = field(default_factory=lambda: _float("INGEST_ZIP_MAX_RATIO", 100.0))
    # ... or holds more than this many files (a member that inflates past its declared size is refused too).
    ingest_zip_max_members: int = field(default_factory=lambda: _int("INGEST_ZIP_MAX_MEMBERS", 10_000))

    # The HTTP bridge's front door (services/gateway/api): a request is identified from its headers
    # before its body is read or a slot is taken. The credential checks of requests not yet identified
    # (key lookups, JWT signatures) have a budget of their own, apart from MAX_CONCURRENT_CALLS: this
    # many at once, this many more waiting for their turn; past both, 429.
    http_unauthenticated_max: int = field(default_factory=lambda: _int("HTTP_UNAUTHENTICATED_MAX", 32))
    http_unauthenticated_queue: int = field(default_factory=lambda: _int("HTTP_UNAUTHENTICATED_QUEUE", 512))
    # Seconds a connection may take to send a request's headers (from its first byte, or from
    # connecting); past it the connection is closed.
    http_header_timeout_s: float = field(default_factory=lambda: _float("HTTP_HEADER_TIMEOUT_S", 10.0))
    # Seconds an identified request may take to send its whole JSON body, and an upload to
    # /api/documents its whole multipart body; past it 408 and the connection is closed.
    http_body_timeout_s: float = field(default_factory=lambda: _float("HTTP_BODY_TIMEOUT_S", 30.0))
    http_upload_timeout_s: float = field(default_factory=lambda: _float("HTTP_UPLOAD_TIMEOUT_S", 600.0))
    # Requests of one user whose bodies are still arriving, at once (each holds a request slot
    # meanwhile); past it 429. 0 = no limit.
    http_bodies_per_user: int = field(default_factory=lambda: _int("HTTP_BODIES_PER_USER", 8))
    # Proxies (comma-separated addresses or CIDRs, "*" = any) whose X-Forwarded-For names the client:
    # behind an ingress, list its addresses, or every client shares its address (the failed-credential
    # throttle, AUTH_FAILURES_PER_MINUTE, is per client address).
    forwarded_allow_ips: str = field(default_factory=lambda: _env("FORWARDED_ALLOW_IPS", "127.0.0.1,::1"))
    # The interactive API page (/docs, Swagger UI from vendored files); /openapi.json is always served.
    api_docs: bool = field(default_factory=lambda: _env("API_DOCS", "true").lower() == "true")

    # Embedder fairness
    # The most characters of Embed calls in one model call (one text at least) while tenants share the
    # embedder: a larger call runs in slices, other tenants' calls run between them. A tenant alone gets
    # slices twice as large, and its small calls share model calls as before. Unset = 2048 for the local
    # model (one text of 2,000 characters, or 40 questions, a call), no slicing for Gemini; 0 = none.
    embed_slice_chars: int | None = field(default_factory=lambda: _optional_int("EMBED_SLICE_CHARS"))

    # Shared conversation state (gateway replicas)
    # Redis shared by the gateway replicas for running answers and stop requests, scope-cache entries
    # and rate windows (redis://[user:password@]host:port/db, rediss:// for TLS); unset = in this
    # process (one gateway). Redis holds nothing that cannot be lost.
    redis_url: str = field(default_factory=lambda: _env("REDIS_URL", ""))
    # Longest wait for one Redis call (seconds); past it, or when Redis is unreachable, the gateway goes
    # on without it for a second (stop and reuse on this replica only, rate windows counted here).
    redis_timeout_s: float = field(default_factory=lambda: _float("REDIS_TIMEOUT_S", 0.25))

    # Conversation memory and recency
    # Characters of earlier turns a prompt carries verbatim: the whole conversation while it fits; past it,
    # the running summary (extended in the background as turns stop fitting) and the turns after it.
    history_char_budget: int = field(default_factory=lambda: _int("HISTORY_CHAR_BUDGET", 6000))
    # 002's default window per data source ("Data Source=days", comma-separated): a question with no date,
    # window or recency word searches that source's last N days; when they hold nothing it searches every
    # date, newest first. Off for meeting notes, factsheets and documents: their questions span years, and a
    # window there would hide an older note that answers while newer ones exist.
    default_window_days: str = field(default_factory=lambda: _env("DEFAULT_WINDOW_DAYS", "Conversation memory=90"))
    # "latest", "most recent", "newest", "current", "as of now" in a question send the retriever's time decay:
    # score x max(floor, exp(-age_days / half-life)).
    recency_half_life_days: float = field(default_factory=lambda: _float("RECENCY_HALF_LIFE_DAYS", 30.0))
    recency_floor: float = field(default_factory=lambda: _float("RECENCY_FLOOR", 0.3))

    # Supervisor (`make run`)
    # A service that exits is started again after RESTART_BACKOFF_S, doubling on each exit in a row up to
    # RESTART_BACKOFF_MAX_S (from the first again once a run lasted a minute).
    restart_backoff_s: float = field(default_factory=lambda: _float("RESTART_BACKOFF_S", 1.0))
    restart_backoff_max_s: float = field(default_factory=lambda: _float("RESTART_BACKOFF_MAX_S", 30.0))

    def address(self, service: str) -> str:
        """host:port of a service, from its *_ADDR variable or this host and its port."""
        explicit = getattr(self, f"{service}_addr", "")
        return explicit or f"{self.host}:{getattr(self, f'{service}_port')}"

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "ragmesh.sqlite3"

    def describe(self) -> dict[str, object]:
        """Settings safe to log: secrets masked."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("mongodb_uri", "redis_url") or f.name == "milvus_uri" and "://" in value:  # a milvus-lite file path is shown
                out[f.name] = redact_uri(value)
            else:
                secret = any(word in f.name for word in ("key", "token", "secret", "pepper"))
                out[f.name] = "***" if secret and value else str(value)
        return out


def redact_uri(uri: str) -> str:
    """scheme://hosts of a connection URI: safe to log, since credentials and options may hold secrets."""
    if not uri:
        return ""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return "<unparseable uri>"
    # Everything up to the last "@" may be credentials, escaped or not.
    hosts = rest.rpartition("@")[2].split("/", 1)[0].split("?", 1)[0]
    return f"{scheme}://{hosts}"


def load() -> Settings:
    return Settings()
