"""Settings from environment variables only, with defaults that run on one machine.

Settings come in sections (network, store, identity, logging, ...), pydantic-settings models whose
fields each name the variable they read, their type, default and meaning (`ragmesh.configdoc`
writes the operators' table from them). Each service reads its own model - the sections every
service shares plus its own: `EmbedderSettings`, `RetrieverSettings`, `GeneratorSettings`,
`GatewaySettings` - and `Settings` holds every section, for the command line, the supervisor
(`make run`) and tests. A value the service must not start with raises `ConfigError` naming the
variable, when the model is made.
"""
from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AliasChoices, BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragmesh.errors import ConfigError

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")  # a variable set to nothing is off, as before


def _flag(raw: object) -> object:
    """The one way a variable says yes or no."""
    if not isinstance(raw, str):
        return raw
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError("must be true or false (1/0, yes/no, on/off)")


def _blank_is_default(raw: object) -> object:
    """A number set to nothing (VAR=) takes its default."""
    if isinstance(raw, str) and not raw.strip():
        raise PydanticUseDefault()
    return raw


Flag = Annotated[bool, BeforeValidator(_flag)]
Int = Annotated[int, BeforeValidator(_blank_is_default)]
Float = Annotated[float, BeforeValidator(_blank_is_default)]
OptionalInt = Annotated[int | None, BeforeValidator(_blank_is_default)]  # unset = the service picks
AutoOnOff = Literal["auto", "on", "off"]


def env(variable: str, default: Any, meaning: str, *fallbacks: str) -> Any:
    """A field read from `variable` (then from `fallbacks`, in order, when it is unset)."""
    alias = AliasChoices(variable, *fallbacks) if fallbacks else variable
    return Field(default, validation_alias=alias, description=meaning)


def variables(field_name: str, model: type[BaseSettings]) -> list[str]:
    """The environment variables a field reads, first choice first."""
    alias = model.model_fields[field_name].validation_alias
    return [str(a) for a in alias.choices] if isinstance(alias, AliasChoices) else [str(alias)]


_KINDS = {"int_parsing": "must be an integer", "float_parsing": "must be a number",
          "bool_parsing": "must be true or false", "int_from_float": "must be an integer",
          "extra_forbidden": "is not a setting"}


def _problems(exc: ValidationError) -> str:
    """One line per bad value, naming its variable, as operators read it in a refused start."""
    lines = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):  # a check across fields says everything itself
            lines.append(str(cause))
            continue
        where = ".".join(str(part) for part in error["loc"])
        if isinstance(cause, ValueError):
            kind = str(cause)
        elif error["type"] == "literal_error":
            kind = f"must be {error['ctx']['expected']}"
        else:
            kind = _KINDS.get(error["type"], error["msg"])
        lines.append(f"environment variable {where} {kind}, got {error['input']!r}")
    return "; ".join(lines)


class Section(BaseSettings):
    """Base of every settings model: exact variable names, frozen values, ConfigError for bad ones."""

    model_config = SettingsConfigDict(case_sensitive=True, frozen=True, extra="forbid", protected_namespaces=())
    #: Heading of the section in the operators' table (ragmesh.configdoc).
    title: ClassVar[str] = ""

    def __init__(self, **values: Any) -> None:
        """Values by field name win over the environment (as a test's overrides do)."""
        fields = type(self).model_fields
        named = {variables(k, type(self))[0] if k in fields else k: v for k, v in values.items()}
        try:
            super().__init__(**named)
        except ValidationError as exc:
            raise ConfigError(_problems(exc)) from None

    @classmethod
    def load(cls) -> Self:
        """This model from the environment."""
        return cls()

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` (by field name), checked as a load is."""
        return type(self)(**({name: getattr(self, name) for name in type(self).model_fields} | changes))

    def describe(self) -> dict[str, object]:
        """Settings safe to log: secrets masked."""
        out: dict[str, object] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            # A milvus-lite file path is shown; a URI may carry credentials.
            if name in ("mongodb_uri", "redis_url") or name == "milvus_uri" and "://" in value:
                out[name] = redact_uri(value)
            else:
                secret = any(word in name for word in ("key", "token", "secret", "pepper"))
                out[name] = "***" if secret and value else str(value)
        return out


# -- sections every service reads ---------------------------------------------------------------

_PORTS = "gRPC port of each service, and the gateway's HTTP port (REST/SSE bridge and web page)."
_ADDRS = "Addresses of the other services; default to this host and the ports above."


class NetworkSettings(Section):
    title = "Addresses"

    host: str = env("RAGMESH_HOST", "127.0.0.1",
                    "Address every service binds (0.0.0.0 in a container); a non-loopback bind needs TLS or "
                    "ALLOW_PLAINTEXT, explicit SERVICE_TOKEN / API_KEY_PEPPER and, for the HTTP bridge, ALLOWED_HOSTS.")
    gateway_port: Int = env("GATEWAY_PORT", 50051, _PORTS)
    embedder_port: Int = env("EMBEDDER_PORT", 50052, _PORTS)
    retriever_port: Int = env("RETRIEVER_PORT", 50053, _PORTS)
    generator_port: Int = env("GENERATOR_PORT", 50054, _PORTS)
    http_port: Int = env("HTTP_PORT", 8080, _PORTS)
    embedder_addr: str = env("EMBEDDER_ADDR", "", _ADDRS)
    retriever_addr: str = env("RETRIEVER_ADDR", "", _ADDRS)
    generator_addr: str = env("GENERATOR_ADDR", "", _ADDRS)

    def address(self, service: str) -> str:
        """host:port of a service, from its *_ADDR variable or this host and its port."""
        explicit = getattr(self, f"{service}_addr", "")
        return explicit or f"{self.host}:{getattr(self, f'{service}_port')}"


class StoreSettings(Section):
    title = "Local state and store"

    data_dir: Path = env("DATA_DIR", Path("./data"),
                         "Local state: the SQLite store, the retriever's index snapshot, secrets made on a loopback "
                         "bind.")
    mongodb_uri: str = env("MONGODB_URI", "", "Store: MongoDB when MONGODB_URI is set, else SQLite under DATA_DIR.")
    mongodb_db: str = env("MONGODB_DB", "ragmesh", "Database name.")
    mongodb_timeout_ms: Int = env("MONGODB_TIMEOUT_MS", 5000,
                                  "Server selection bounds how long start-up waits for an unreachable server.")
    mongodb_connect_timeout_ms: Int = env("MONGODB_CONNECT_TIMEOUT_MS", 5000,
                                          "Connection and socket timeouts (milliseconds).")
    mongodb_socket_timeout_ms: Int = env("MONGODB_SOCKET_TIMEOUT_MS", 30000,
                                         "Connection and socket timeouts (milliseconds).")
    mongodb_transactions: AutoOnOff = env("MONGODB_TRANSACTIONS", "auto",
                                          "auto: transactions where `hello` reports a replica set or mongos; off: "
                                          "versioned writes only (Cosmos DB for MongoDB reports a replica set but has "
                                          "no transactions across collections).")

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "ragmesh.sqlite3"


class ServingSettings(Section):
    title = "Admission, message sizes and shutdown"

    max_concurrent_calls: Int = env("MAX_CONCURRENT_CALLS", 256,
                                    "Admission: calls in flight per service beyond which new ones get "
                                    "RESOURCE_EXHAUSTED / HTTP 429 (0 = no limit); the gateway counts its gRPC calls "
                                    "and its /api requests together.")
    tenant_call_share: Float = env("TENANT_CALL_SHARE", 0.25,
                                   "The fraction of MAX_CONCURRENT_CALLS one tenant may hold (calls of the service "
                                   "credential count for the tenant they act for); past it RESOURCE_EXHAUSTED / 429, "
                                   "so other tenants find room. 0 or 1 = no share of its own.")
    user_call_share: Float = env("USER_CALL_SHARE", 0.125,
                                 "The fraction of MAX_CONCURRENT_CALLS one user of a tenant may hold. 0 or 1 = no "
                                 "share of its own.")
    tenant_stream_share: Float = env("TENANT_STREAM_SHARE", 0.125,
                                     "The fraction of MAX_CONCURRENT_CALLS one tenant's client streams (gRPC Ingest "
                                     "and Upsert, /api/documents uploads) may hold, so they leave room for its asks; "
                                     "past it RESOURCE_EXHAUSTED / 429. 0 or 1 = no share of its own.")
    stream_idle_timeout_s: Float = env("STREAM_IDLE_TIMEOUT_S", 30.0,
                                       "Seconds a client stream (Ingest, Upsert; an /api body) may send nothing: then "
                                       "it ends with DEADLINE_EXCEEDED / 408 and frees its slot. Each message must "
                                       "arrive whole within it. 0 = no idle timeout.")
    grpc_max_message_bytes: Int = env("GRPC_MAX_MESSAGE_BYTES", 64 * 1024 * 1024,
                                      "Largest gRPC message a service sends (what it takes is set per method: see "
                                      "GRPC_UNARY_MAX_BYTES).")
    grpc_unary_max_bytes: Int = env("GRPC_UNARY_MAX_BYTES", 4 * 1024 * 1024,
                                    "The largest request message of a unary gRPC call (a search, a question, a prompt, "
                                    "texts to embed); the streamed Ingest takes INGEST_MAX_BYTES and 1 MiB a document, "
                                    "Upsert 8 MiB a chunk, and no server receives anything larger "
                                    "(ragmesh.message_limits).")
    ingest_max_bytes: Int = env("INGEST_MAX_BYTES", 50 * 1024 * 1024,
                                "Ingest: files over this size are refused (per file, with a clear error).")
    grace_period: Float = env("SHUTDOWN_GRACE_S", 5.0, "On SIGTERM, calls in flight get this long (seconds) to finish.")
    health_watches_max: Int = env("HEALTH_WATCHES_MAX", 128,
                                  "grpc.health.v1 Watch streams (open to anyone, like every health call) a service "
                                  "holds at once; past it, or past HEALTH_WATCHES_PER_ADDRESS from one client address, "
                                  "a new one is RESOURCE_EXHAUSTED. 0 = no limit.")
    health_watches_per_address: Int = env("HEALTH_WATCHES_PER_ADDRESS", 16,
                                          "Watch streams one client address may hold at once (see HEALTH_WATCHES_MAX). "
                                          "0 = no limit.")


class LoggingSettings(Section):
    title = "Logging"

    log_level: str = env("LOG_LEVEL", "INFO", "JSON logs to stdout at this level (DEBUG, INFO, WARNING, ERROR).")


class MetricsSettings(Section):
    title = "Metrics"

    metrics_enabled: Flag = env("METRICS_ENABLED", True,
                                "Prometheus metrics; false = nothing recorded and nothing served (what `make bench` "
                                "compares with).")
    metrics_port: OptionalInt = env("METRICS_PORT", None,
                                    "Port of /metrics on the embedder, retriever and generator (the gateway serves "
                                    "/metrics on HTTP_PORT); unset = 9102, 9103 and 9104 respectively, 0 = not served.")


class TracingSettings(Section):
    title = "Tracing"

    otel_endpoint: str = env("OTEL_EXPORTER_OTLP_ENDPOINT", "",
                             "OpenTelemetry: traces go to this OTLP/gRPC collector (e.g. http://otel-collector:4317); "
                             "empty = no tracing.")


_DEADLINES = "Deadlines (seconds) a client sets when the caller gave none."


class DeadlineSettings(Section):
    title = "Deadlines"

    embed_timeout: Float = env("EMBED_TIMEOUT_S", 10.0, _DEADLINES)
    search_timeout: Float = env("SEARCH_TIMEOUT_S", 10.0, _DEADLINES)
    ingest_timeout: Float = env("INGEST_TIMEOUT_S", 600.0, _DEADLINES)
    generate_timeout: Float = env("GENERATE_TIMEOUT_S", 120.0, _DEADLINES)


_SECRETS = ("Empty secrets on a loopback bind are made once under DATA_DIR/secrets; a service bound elsewhere needs "
            "them set explicitly.")
_JWT_KEYS = ("JWTs from an identity provider, verified with one of these: a shared secret (HS256), a public key, or "
             "the provider's JWKS; empty = no JWTs accepted.")
_JWT_CLAIMS = "Claims that name the tenant, the user and the role (admin or member; absent = member)."
_TLS = ("TLS on every gRPC port and on HTTP (files); with TLS_CA, internal services require client certificates "
        "signed by it (mTLS) and clients verify servers against it.")


class IdentitySettings(Section):
    title = "Identity (see ragmesh.identity)"

    service_token: str = env("SERVICE_TOKEN", "", f"The gateway's service credential. {_SECRETS}")
    api_key_pepper: str = env("API_KEY_PEPPER", "", f"HMAC key of stored API keys. {_SECRETS}")
    api_key: str = env("RAGMESH_API_KEY", "",
                       "The key a command-line client (ragmesh ingest, the benchmarks) sends.")
    jwt_secret: str = env("JWT_SECRET", "", f"HS256. {_JWT_KEYS}")
    jwt_public_key: str = env("JWT_PUBLIC_KEY", "", f"PEM text or a file. {_JWT_KEYS}")
    jwt_jwks_url: str = env("JWT_JWKS_URL", "", _JWT_KEYS)
    jwt_issuer: str = env("JWT_ISSUER", "", "Required `iss` and `aud` claims when set.")
    jwt_audience: str = env("JWT_AUDIENCE", "", "Required `iss` and `aud` claims when set.")
    jwt_tenant_claim: str = env("JWT_TENANT_CLAIM", "tenant", _JWT_CLAIMS)
    jwt_user_claim: str = env("JWT_USER_CLAIM", "sub", _JWT_CLAIMS)
    jwt_role_claim: str = env("JWT_ROLE_CLAIM", "role", _JWT_CLAIMS)
    jwt_groups_claim: str = env("JWT_GROUPS_CLAIM", "groups",
                                "Claim that lists the user's groups (names as for users; absent = none), which "
                                "documents can be shared with.")
    auth_failures_per_minute: Int = env("AUTH_FAILURES_PER_MINUTE", 20,
                                        "Failed credentials per client address per minute; past it the address is "
                                        "refused (HTTP 429 / RESOURCE_EXHAUSTED) before its credential is checked, "
                                        "until the minute is over. 0 = no throttling.")
    tls_cert: str = env("TLS_CERT", "", _TLS)
    tls_key: str = env("TLS_KEY", "", _TLS)
    tls_ca: str = env("TLS_CA", "", _TLS)
    allow_plaintext: Flag = env("ALLOW_PLAINTEXT", False,
                                "A non-loopback bind without TLS is refused unless TLS is terminated in front "
                                "(a mesh sidecar).")

    @model_validator(mode="after")
    def _tls_files_go_together(self) -> Self:
        """A certificate without its key (or a CA without both) would silently mean plaintext."""
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("TLS_CERT and TLS_KEY go together: set both or neither")
        if self.tls_ca and not self.tls_cert:
            raise ConfigError("TLS_CA (mTLS) needs TLS_CERT and TLS_KEY too")
        return self


class ServiceSettings(NetworkSettings, StoreSettings, ServingSettings, LoggingSettings, MetricsSettings,
                      TracingSettings, DeadlineSettings, IdentitySettings):
    """What every service reads: where it listens and calls, its store, admission, observability, identity."""


# -- sections of one service or two -------------------------------------------------------------

class ModelProviderSettings(Section):
    title = "Model providers"

    gemini_api_key: str = env("GEMINI_API_KEY", "",
                              "Google AI key for the Gemini models and embeddings; empty = the offline defaults.",
                              "GOOGLE_API_KEY")
    gemini_base_url: str = env("GEMINI_BASE_URL", "",
                               "Another Gemini endpoint (a proxy, or the tests' fake); empty = Google's.")
    default_model: str = env("DEFAULT_MODEL", "",
                             "Model for a request that names none; empty = gemini-2.5-flash with GEMINI_API_KEY, "
                             "else extractive.")


_EMBED_BATCHING = ("Micro-batching: concurrent Embed calls of one task share a model call. A batch waits at most the "
                   "window (0 = only what is already waiting) for up to EMBED_MAX_BATCH texts. Of EMBED_MAX_QUEUE "
                   "places for waiting texts a tenant holds at most half of those the other tenants leave free; past "
                   "it, its new calls get RESOURCE_EXHAUSTED.")
_EMBED_CAPS = ("Embed: characters of one text, and of all texts of one call (a call takes at most EMBED_BATCH_SIZE "
               "texts, 64 at least). Unset: 8,000 a text (a search query of 4,000, a correction of 6,000, a chunk of "
               "EMBED_MAX_CHARS; Gemini reads 2,048 tokens) or EMBED_MAX_CHARS if larger, and 128 Ki a call or "
               "EMBED_BATCH_SIZE x EMBED_MAX_CHARS if larger (one ingest call): raising EMBED_MAX_CHARS for Gemini's "
               "longer chunks raises both.")


class ChunkSettings(Section):
    title = "Chunks and embedding calls"

    embed_batch_size: Int = env("EMBED_BATCH_SIZE", 64,
                                "Texts per model call in the embedder, and per Embed call when the retriever ingests.")
    embed_max_chars: Int = env("EMBED_MAX_CHARS", 800,
                               "The most characters of a chunk the embedding model reads whole: longer chunks are "
                               "split so every word is embedded (all-MiniLM-L6-v2 reads 256 tokens, 900-1,100 "
                               "characters; Gemini's 2,048 tokens).")


class EmbeddingSettings(Section):
    title = "Embedder"

    embed_backend: Literal["local", "gemini"] = env(
        "EMBED_BACKEND", "local",
        "local (all-MiniLM-L6-v2 from its package, offline) or gemini (gemini-embedding-001, needs GEMINI_API_KEY).")
    embed_runtime: Literal["onnx", "torch"] = env(
        "EMBED_RUNTIME", "onnx",
        "How the local model runs: onnx (ONNX Runtime, the same vectors at a fraction of the CPU) or torch "
        "(sentence-transformers as shipped).")
    embed_documents_int8: Flag = env(
        "EMBED_DOCUMENTS_INT8", False,
        "With the onnx runtime, documents (ingest) run on an int8 copy of the model (ONNX Runtime's dynamic "
        "quantization; about half the CPU of float32 a chunk, vectors at cosine >= 0.99 to float32's, SciFact "
        "nDCG@10 within 0.002). Opt-in: on the demo corpus it reorders one labelled answer's sources. Off: "
        "EMBED_DOCUMENTS_BF16 decides. Conversation memory runs on the int8 copy either way.")
    embed_documents_bf16: AutoOnOff = env(
        "EMBED_DOCUMENTS_BF16", "auto",
        "With the onnx runtime and EMBED_DOCUMENTS_INT8 off, documents (ingest) past 64 tokens run through torch in "
        "bfloat16 (shorter ones as questions do): auto = on CPUs that multiply bf16 in hardware (AMX, AVX512-BF16; "
        "2.5x less CPU a chunk, cosine >= 0.9999 to float32), on, or off.")
    cpu_class: Literal["native", "avx2"] = env(
        "CPU_CLASS", "native",
        "The CPU the embedder's encoder choices assume: native (this CPU's flags) or avx2 (as on an AVX2-only CPU: "
        "no bf16 documents, 7-bit int8 weights for want of VNNI), to measure that class on a newer CPU. "
        "`python -m bench --cpu-class avx2` sets it with each library's own switches (bench/README.md).")
    model_cache_dir: str = env("MODEL_CACHE_DIR", "",
                               "Where the local model's ONNX export is kept (made at first start); empty = "
                               "DATA_DIR/models.")
    embed_batch_window_ms: Float = env("EMBED_BATCH_WINDOW_MS", 5.0, _EMBED_BATCHING)
    embed_max_batch: Int = env("EMBED_MAX_BATCH", 64, _EMBED_BATCHING)
    embed_max_queue: Int = env("EMBED_MAX_QUEUE", 4096, _EMBED_BATCHING)
    embed_text_max_chars: OptionalInt = env("EMBED_TEXT_MAX_CHARS", None, _EMBED_CAPS)
    embed_call_max_chars: OptionalInt = env("EMBED_CALL_MAX_CHARS", None, _EMBED_CAPS)
    embed_slice_chars: OptionalInt = env("EMBED_SLICE_CHARS", None,
                                         "Fairness: the most characters of Embed calls in one model call (one text at "
                                         "least) while tenants share the embedder: a larger call runs in slices, other "
                                         "tenants' calls run between them. A tenant alone gets slices twice as large, "
                                         "and its small calls share model calls as before. Unset = 2048 for the local "
                                         "model (one text of 2,000 characters, or 40 questions, a call), no slicing "
                                         "for Gemini; 0 = none.")


_OPENAI = "Any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio); empty = not used."


class GenerationSettings(Section):
    title = "Generator"

    extractive_delay_ms: Float = env("EXTRACTIVE_DELAY_MS", 15.0,
                                     "Pause between the streamed pieces of the offline extractive answer "
                                     "(milliseconds).")
    stream_piece_ms: Float = env("STREAM_PIECE_MS", 50.0,
                                 "An answer's text that a model streams within this long of the last piece sent "
                                 "goes out as one piece (every piece costs a message, an SSE event and a write "
                                 "whatever its size); the first piece goes out at once (milliseconds; 0 = each "
                                 "piece as it comes).")
    openai_base_url: str = env("OPENAI_BASE_URL", "", _OPENAI)
    openai_api_key: str = env("OPENAI_API_KEY", "", _OPENAI)
    openai_model: str = env("OPENAI_MODEL", "", _OPENAI)
    openai_context_tokens: Int = env("OPENAI_CONTEXT_TOKENS", 8192,
                                     "The OPENAI_MODEL's context window in tokens, as its server runs it (Ollama's "
                                     "num_ctx, vLLM's max_model_len): the gateway sizes the retrieved context to it "
                                     "(three quarters of what 4,096 tokens of instructions, conversation and answer "
                                     "leave, at most CONTEXT_MAX_CHARS); 0 = not declared: the offline answerer's "
                                     "CONTEXT_CHAR_BUDGET.")


_RETRIES = "Embedding calls at ingest: a transient failure is retried this often, waiting base, 2x base, ..."
_SUMMARIES = ("Summaries at ingest (the summary path) for documents of at least SUMMARY_MIN_CHARS, unless a request "
              "says otherwise; SUMMARY_MODEL empty = the generator's default model.")


class IngestSettings(Section):
    title = "Retriever: ingest and freshness"

    follow_interval_s: Float = env("FOLLOW_INTERVAL_S", 1.0,
                                   "How often a retriever checks the store for other replicas' writes (seconds).")
    chunk_min_chars: Int = env("CHUNK_MIN_CHARS", 400, "Chunk size bounds (characters) for user documents at ingest.")
    chunk_max_chars: Int = env("CHUNK_MAX_CHARS", 800, "Chunk size bounds (characters) for user documents at ingest.")
    ingest_parse_timeout_s: Float = env("INGEST_PARSE_TIMEOUT_S", 60.0,
                                        "Ingest: a document still parsing after this long fails (per document, with "
                                        "a clear error).")
    embed_retries: Int = env("EMBED_RETRIES", 4, _RETRIES)
    embed_retry_base_s: Float = env("EMBED_RETRY_BASE_S", 0.5, _RETRIES)
    ingest_summaries: Flag = env("INGEST_SUMMARIES", True, _SUMMARIES)
    summary_min_chars: Int = env("SUMMARY_MIN_CHARS", 3000, _SUMMARIES)
    summary_model: str = env("SUMMARY_MODEL", "", _SUMMARIES)


_MILVUS_INDEX = ("Milvus dense index: FLAT (exact, default), HNSW or IVF_FLAT, with their build parameters as JSON "
                 "(e.g. {\"M\": 16, \"efConstruction\": 200} or {\"nlist\": 1024}) and search parameters as JSON "
                 "(e.g. {\"ef\": 128} or {\"nprobe\": 32}).")
_MILVUS_CREDENTIAL = "Milvus credential (\"user:password\" or an API key) and database; empty = none / the default."
MILVUS_INDEX_TYPES = ("FLAT", "HNSW", "IVF_FLAT")
MILVUS_CONSISTENCY = ("Strong", "Bounded", "Session", "Eventually")
# Milvus's longest collection name (proxy.maxNameLength) less the longest a ragmesh name (64 characters, the
# first one plain, the others escaped in 3) and the tenant part take (services/retriever/milvus/rows.py).
MILVUS_MAX_PREFIX = 255 - (1 + 63 * 3) - 34


def json_object(variable: str, raw: str) -> dict:
    """A variable that holds a JSON object (empty = {})."""
    try:
        value = json.loads(raw or "{}")
    except ValueError as exc:
        raise ConfigError(f"{variable} must be a JSON object, got {raw!r}: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{variable} must be a JSON object, got {raw!r}")
    return value


class SearchBackendSettings(Section):
    title = "Retriever: search backend"

    retriever_backend: str = env("RETRIEVER_BACKEND", "memory",
                                 "Search backend: memory (FAISS + BM25 in each replica, rebuilt from the store) or "
                                 "milvus (one shared Milvus index; the store stays the system of record and the index "
                                 "is rebuilt from it).")
    milvus_uri: str = env("MILVUS_URI", "",
                          "Milvus: a file path runs milvus-lite in process (tests, a laptop); http(s)://host:19530 a "
                          "server, a cluster or Zilliz Cloud. Checked at start: a bad or unreachable URI stops the "
                          "retriever.")
    milvus_token: str = env("MILVUS_TOKEN", "", _MILVUS_CREDENTIAL)
    milvus_db: str = env("MILVUS_DB", "", _MILVUS_CREDENTIAL)
    milvus_index_type: str = env("MILVUS_INDEX_TYPE", "FLAT", _MILVUS_INDEX)
    milvus_index_params: str = env("MILVUS_INDEX_PARAMS", "{}", _MILVUS_INDEX)
    milvus_search_params: str = env("MILVUS_SEARCH_PARAMS", "{}", _MILVUS_INDEX)
    milvus_consistency: str = env("MILVUS_CONSISTENCY", "Strong",
                                  "Milvus consistency level of searches: Strong (a search sees every write "
                                  "acknowledged before it), Bounded, Session or Eventually.")
    milvus_prefix: str = env("MILVUS_PREFIX", "ragmesh_",
                             "Milvus: collection names are this prefix + the ragmesh collection name.")
    fusion: Literal["rrf", "convex", "dbsf"] = env(
        "FUSION", "dbsf",
        "How a search's dense and keyword lists are fused (unless it asks for linear fusion, as the notes contract "
        "does): dbsf (distribution-based score fusion: each list's scores scaled by its mean +- 3 standard "
        "deviations, then 0.6 dense + 0.4 keyword), convex (each list's scores divided by its best, 0.6 / 0.4) or "
        "rrf (weighted reciprocal rank fusion, k 20, 0.5 / 0.5). SciFact train nDCG@10 0.743, 0.742, 0.735, each "
        "chunk searched after its document's title (docs/benchmarks.md). Each collection is fused on its own; an "
        "answer's hits merge the collections by rank.")

    @field_validator("retriever_backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in ("memory", "milvus"):
            raise ConfigError(f"RETRIEVER_BACKEND must be memory or milvus, got {value!r}")
        return value

    @field_validator("milvus_uri")
    @classmethod
    def _stripped(cls, value: str) -> str:
        return value.strip()

    @field_validator("milvus_index_type")
    @classmethod
    def _index_spelling(cls, value: str) -> str:
        return value.upper()

    @field_validator("milvus_consistency")
    @classmethod
    def _consistency_spelling(cls, value: str) -> str:
        return next((c for c in MILVUS_CONSISTENCY if c.lower() == value.lower()), value)

    @model_validator(mode="after")
    def _milvus(self) -> Self:
        """With RETRIEVER_BACKEND=milvus, checked before anything connects: a bad setting stops the
        retriever with one line."""
        if self.retriever_backend != "milvus":
            return self
        uri = self.milvus_uri
        if not uri:
            raise ConfigError("RETRIEVER_BACKEND=milvus needs MILVUS_URI (a path ending in .db for milvus-lite, "
                              "or http://host:19530)")
        scheme = uri.partition("://")[0].lower() if "://" in uri else ""
        if scheme and scheme not in ("http", "https", "tcp", "grpc", "unix"):
            raise ConfigError(f"MILVUS_URI {redact_uri(uri)}: the scheme must be http, https, tcp, grpc or unix")
        if not scheme and (not uri.endswith(".db") or not Path(uri).parent.is_dir()):
            raise ConfigError(f"MILVUS_URI {uri!r}: a milvus-lite file must end in .db, in a folder that exists")
        if self.milvus_index_type not in MILVUS_INDEX_TYPES:
            raise ConfigError(f"MILVUS_INDEX_TYPE must be one of {', '.join(MILVUS_INDEX_TYPES)}, "
                              f"got {self.milvus_index_type!r}")
        if self.milvus_consistency not in MILVUS_CONSISTENCY:
            raise ConfigError(f"MILVUS_CONSISTENCY must be one of {', '.join(MILVUS_CONSISTENCY)}, "
                              f"got {self.milvus_consistency!r}")
        if not self.milvus_prefix.isidentifier() or len(self.milvus_prefix) > MILVUS_MAX_PREFIX:
            raise ConfigError(f"MILVUS_PREFIX must be letters, digits and '_' (at most {MILVUS_MAX_PREFIX}), "
                              f"got {self.milvus_prefix!r}")
        for variable, raw in (("MILVUS_INDEX_PARAMS", self.milvus_index_params),
                              ("MILVUS_SEARCH_PARAMS", self.milvus_search_params)):
            json_object(variable, raw)
        return self


_INGEST_WORKERS = ("Worker processes files are parsed in; a worker past INGEST_PARSE_TIMEOUT_S or its memory limit "
                   "is killed (its document fails naming the limit) and replaced.")


class ParseLimitSettings(Section):
    title = "Retriever: parse limits"

    ingest_parse_workers: Int = env("INGEST_PARSE_WORKERS", 3, _INGEST_WORKERS)
    ingest_parses_per_tenant: Int = env("INGEST_PARSES_PER_TENANT", 1,
                                        "One tenant's files parsed at once; fewer than INGEST_PARSE_WORKERS, so other "
                                        "tenants always find one free.")
    ingest_parse_memory_mb: Int = env("INGEST_PARSE_MEMORY_MB", 1024,
                                      "Address space of a parse worker (MB; 0 = no limit; a worker with its parsers "
                                      "loaded takes ~200 MB).")
    ingest_inline_parse_bytes: Int = env("INGEST_INLINE_PARSE_BYTES", 64 * 1024,
                                         "Text, Markdown, HTML and JSON files (and text bodies) up to this size are "
                                         "parsed in place, not in a worker: their parse costs less than the round trip "
                                         "to a process (0 = every file in a worker).")
    ingest_zip_max_bytes: Int = env("INGEST_ZIP_MAX_BYTES", 200 * 1024 * 1024,
                                    "DOCX/PPTX are refused before parsing when their zip declares more than this "
                                    "uncompressed in all.")
    ingest_zip_max_ratio: Float = env("INGEST_ZIP_MAX_RATIO", 100.0,
                                      "... or it, or one member, expands more than this many times to over 1 MiB "
                                      "(a decompression bomb).")
    ingest_zip_max_members: Int = env("INGEST_ZIP_MAX_MEMBERS", 10_000,
                                      "... or holds more than this many files (a member that inflates past its "
                                      "declared size is refused too).")


_SCOPE_CACHE = "Scope cache of retrieved hits per tenant and conversation: lifetime (seconds) and entries per tenant."
_QUALITY = "Quality steps; each runs only when a model (not the extractive backend) answers."
_STEP_TIMEOUTS = "Seconds each model step may take; past it the step falls back to the unimproved path (said so)."
_MONTHLY = "Per user and calendar month (0 = no limit); beyond it HTTP 429 / RESOURCE_EXHAUSTED."
_RECENCY = ("\"latest\", \"most recent\", \"newest\", \"current\", \"as of now\" in a question send the retriever's "
            "time decay: score x max(floor, exp(-age_days / half-life)).")


class AnsweringSettings(Section):
    title = "Gateway: answering"

    max_concurrent_retrievals: Int = env("MAX_CONCURRENT_RETRIEVALS", 16,
                                         "Gateway: questions planned (embedded and searched) at once; past it a "
                                         "question gets HTTP 429 / RESOURCE_EXHAUSTED at once. Sized so queued work "
                                         "finishes inside RETRIEVAL_TIMEOUT_S on 2 cores (make bench's load part); "
                                         "0 = no limit.")
    scope_cache_ttl_s: Float = env("SCOPE_CACHE_TTL_S", 900.0, _SCOPE_CACHE)
    scope_cache_size: Int = env("SCOPE_CACHE_SIZE", 1024, _SCOPE_CACHE)
    scope_cache_bytes: Int = env("SCOPE_CACHE_BYTES", 8 << 20,
                                 "Bytes of scope entries each tenant keeps, least recently used out first like "
                                 "SCOPE_CACHE_SIZE: in Redis (REDIS_URL) their stored (compressed) sizes, which size "
                                 "Redis (Running Redis in docs/operations.md); in one gateway the characters of their "
                                 "hits' texts and metadata.")
    same_topic_threshold: Float = env("SAME_TOPIC_THRESHOLD", 0.5,
                                      "Cosine similarity of two questions' embeddings at or above which the cached "
                                      "hits are reused.")
    history_turns: Int = env("HISTORY_TURNS", 3,
                             "Earlier turns of the conversation read before routing (the prompt carries as many as "
                             "HISTORY_CHAR_BUDGET holds).")
    context_char_budget: Int = env("CONTEXT_CHAR_BUDGET", 4000,
                                   "Characters of retrieved context for the offline extractive answerer (hard cap "
                                   "12,000), and for every model while the generator cannot say what it takes; it "
                                   "quotes the route's 5, 10 or 15 best hits.")
    context_max_chars: Int = env("CONTEXT_MAX_CHARS", 200_000,
                                 "Characters of retrieved context a model's prompt carries at most: each model takes "
                                 "what its generator backend declares from its context window (Gemini about a "
                                 "million tokens, OPENAI_CONTEXT_TOKENS), with as many hits as fill it (at most 100), "
                                 "and complete factsheets keep their room when notes compete for it.")
    retrieval_timeout_s: Float = env("RETRIEVAL_TIMEOUT_S", 3.5,
                                     "The searches of one question run side by side within this (seconds); late ones "
                                     "are left out.")
    scope_llm_check: Flag = env("SCOPE_LLM_CHECK", False,
                                "Let the model confirm a same-topic reuse, within SCOPE_LLM_TIMEOUT_S (seconds).")
    scope_llm_timeout_s: Float = env("SCOPE_LLM_TIMEOUT_S", 0.8,
                                     "Let the model confirm a same-topic reuse, within SCOPE_LLM_TIMEOUT_S (seconds).")
    quality_rewrite: Flag = env("QUALITY_REWRITE", True,
                                f"{_QUALITY} Rewrite the question into up to 3 more search queries, with a prompt for "
                                f"its intent (picked by rules).")
    quality_rerank: Flag = env("QUALITY_RERANK", True,
                               f"{_QUALITY} Have the model score the best RERANK_CANDIDATES fused hits 0-10 and "
                               f"reorder them by that score.")
    quality_compress: Flag = env("QUALITY_COMPRESS", True,
                                 f"{_QUALITY} Cut each context chunk to the sentences the question needs, marked "
                                 f"[Partial]: / [Conflicting]:.")
    quality_history: Flag = env("QUALITY_HISTORY", True,
                                f"{_QUALITY} Answer from the conversation (summary and recent turns), not the hits, "
                                f"when earlier turns exist and the best hit is under every similarity threshold.")
    quality_model: str = env("QUALITY_MODEL", "",
                             "Model the quality steps ask (e.g. a fast one beside a slow answering model); empty = the "
                             "answer's model.")
    rerank_candidates: Int = env("RERANK_CANDIDATES", 20,
                                 "Fused hits the model reranks (the rest follow in fused order).")
    rewrite_timeout_s: Float = env("REWRITE_TIMEOUT_S", 2.0, _STEP_TIMEOUTS)
    rerank_timeout_s: Float = env("RERANK_TIMEOUT_S", 4.0, _STEP_TIMEOUTS)
    compress_timeout_s: Float = env("COMPRESS_TIMEOUT_S", 4.0, _STEP_TIMEOUTS)
    reasoning_model: str = env("REASONING_MODEL", "",
                               "Model for the DEEP route (reasoning questions); empty = the request's or default "
                               "model.")
    history_char_budget: Int = env("HISTORY_CHAR_BUDGET", 6000,
                                   "Characters of earlier turns a prompt carries verbatim: the whole conversation "
                                   "while it fits; past it, the running summary (extended in the background as turns "
                                   "stop fitting) and the turns after it.")
    default_window_days: str = env("DEFAULT_WINDOW_DAYS", "Conversation memory=90",
                                   "Time window per data source (\"Data Source=days\", comma-separated): a question "
                                   "with no date, window or recency word searches that source's last N days; when "
                                   "they hold nothing it searches every date, newest first. Off for meeting notes, "
                                   "factsheets and documents: their questions span years, and a window there would "
                                   "hide an older note that answers while newer ones exist.")
    recency_half_life_days: Float = env("RECENCY_HALF_LIFE_DAYS", 30.0, _RECENCY)
    recency_floor: Float = env("RECENCY_FLOOR", 0.3, _RECENCY)


class UsageSettings(Section):
    title = "Gateway: usage limits and background memory"

    monthly_message_limit: Int = env("MONTHLY_MESSAGE_LIMIT", 0, _MONTHLY)
    monthly_token_limit: Int = env("MONTHLY_TOKEN_LIMIT", 0, _MONTHLY)
    rate_limit_per_minute: Int = env("RATE_LIMIT_PER_MINUTE", 60,
                                     "Asks and uploads (requests to ingest documents) per user per minute (0 = no "
                                     "limit), counted once for all gateway replicas on one REDIS_URL (by each replica "
                                     "while Redis is unreachable). On by default: one key cannot take every slot of "
                                     "the deployment, nor flood the ingest path with files it knows will be refused; "
                                     "the test stack and `make bench` set 0.")
    memory_queue_max: Int = env("MEMORY_QUEUE_MAX", 1000,
                                "Background memory embedding: at most this many turns waiting; retries with backoff.")


_UNIDENTIFIED = ("The HTTP bridge's front door (services/gateway/api): a request is identified from its headers before "
                 "its body is read or a slot is taken. The credential checks of requests not yet identified (key "
                 "lookups, JWT signatures) have a budget of their own, apart from MAX_CONCURRENT_CALLS: this many at "
                 "once, this many more waiting for their turn; past both, 429.")
_BODY_TIMEOUTS = ("Seconds an identified request may take to send its whole JSON body, and an upload to /api/documents "
                  "its whole multipart body; past it 408 and the connection is closed.")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class HttpBridgeSettings(Section):
    title = "Gateway: HTTP bridge"

    http_max_body_bytes: Int = env("HTTP_MAX_BODY_BYTES", 1024 * 1024,
                                   "The largest JSON body the HTTP bridge reads (uploads to /api/documents may be up "
                                   "to UPLOAD_MAX_BYTES).")
    upload_max_bytes: Int = env("UPLOAD_MAX_BYTES", 200 * 1024 * 1024,
                                "The largest upload to /api/documents (each file up to INGEST_MAX_BYTES).")
    upload_memory_per_tenant_mb: Int = env("UPLOAD_MEMORY_PER_TENANT_MB", 64,
                                           "MB of one tenant's uploaded files (HTTP and gRPC) the gateway holds in "
                                           "memory at once while it sends them to the retriever; the others wait on "
                                           "disk for their turn (a file over it goes alone). gRPC files are received "
                                           "within a share of the same size, each counted as the largest a message "
                                           "may be: past it RESOURCE_EXHAUSTED.")
    http_unauthenticated_max: Int = env("HTTP_UNAUTHENTICATED_MAX", 32, _UNIDENTIFIED)
    http_unauthenticated_queue: Int = env("HTTP_UNAUTHENTICATED_QUEUE", 512, _UNIDENTIFIED)
    http_header_timeout_s: Float = env("HTTP_HEADER_TIMEOUT_S", 10.0,
                                       "Seconds a connection may take to send a request's headers (from its first "
                                       "byte, or from connecting); past it the connection is closed.")
    http_body_timeout_s: Float = env("HTTP_BODY_TIMEOUT_S", 30.0, _BODY_TIMEOUTS)
    http_upload_timeout_s: Float = env("HTTP_UPLOAD_TIMEOUT_S", 600.0, _BODY_TIMEOUTS)
    http_bodies_per_user: Int = env("HTTP_BODIES_PER_USER", 8,
                                    "Requests of one user whose bodies are still arriving, at once (each holds a "
                                    "request slot meanwhile); past it 429. 0 = no limit.")
    forwarded_allow_ips: str = env("FORWARDED_ALLOW_IPS", "",
                                   "Proxies (comma-separated addresses or CIDRs, \"*\" = any) whose X-Forwarded-For "
                                   "names the client; empty = none (a client on this host cannot name another "
                                   "address). Behind an ingress, list its addresses, or every client shares its "
                                   "address (the failed-credential throttle, AUTH_FAILURES_PER_MINUTE, is per client "
                                   "address).")
    api_docs: Flag = env("API_DOCS", True,
                         "The interactive API page (/docs, Swagger UI from vendored files); /openapi.json is always "
                         "served.")
    allowed_hosts: str = env("ALLOWED_HOSTS", "",
                             "Host names the HTTP bridge answers to (comma-separated; \"*\" = any); default: the bind "
                             "host.")

    def allowed_host_names(self) -> frozenset[str] | None:
        """Host names the bridge answers to; None = any ("*"). Raises ConfigError when the bridge binds
        every address and ALLOWED_HOSTS names none (the gateway's model checks it at load)."""
        named = {h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()}
        if "*" in named:
            return None
        if named:
            return frozenset(named)
        host: str = getattr(self, "host")  # a section of a model that has Network's fields
        if host in ("0.0.0.0", "::", ""):
            raise ConfigError(f"ALLOWED_HOSTS must be set when the HTTP bridge binds {host or 'every address'}: "
                              f"the host names clients use (comma-separated), or * for any")
        loopback = set(LOOPBACK_NAMES) if is_loopback(host) else set()
        return frozenset({host.lower(), *loopback})


class SharedStateSettings(Section):
    title = "Gateway: shared conversation state"

    redis_url: str = env("REDIS_URL", "",
                         "Redis shared by the gateway replicas for running answers and stop requests, scope-cache "
                         "entries and rate windows (redis://[user:password@]host:port/db, rediss:// for TLS); unset = "
                         "in this process (one gateway). Redis holds nothing that cannot be lost.")
    redis_timeout_s: Float = env("REDIS_TIMEOUT_S", 0.25,
                                 "Longest wait for one Redis call (seconds); past it, or when Redis is unreachable, "
                                 "the gateway goes on without it for a second (stop and reuse on this replica only, "
                                 "rate windows counted here).")


_BACKOFF = ("A service that exits is started again after RESTART_BACKOFF_S, doubling on each exit in a row up to "
            "RESTART_BACKOFF_MAX_S (from the first again once a run lasted a minute).")


class SupervisorSettings(Section):
    title = "Supervisor (`make run`)"

    restart_backoff_s: Float = env("RESTART_BACKOFF_S", 1.0, _BACKOFF)
    restart_backoff_max_s: Float = env("RESTART_BACKOFF_MAX_S", 30.0, _BACKOFF)


# -- one model per service, and all of them --------------------------------------------------------

class EmbedderSettings(ServiceSettings, ModelProviderSettings, ChunkSettings, EmbeddingSettings):
    """What the embedder reads; the Gemini backend's key is checked at load."""

    @model_validator(mode="after")
    def _gemini_key(self) -> Self:
        if self.embed_backend == "gemini" and not self.gemini_api_key:
            raise ConfigError("EMBED_BACKEND=gemini needs GEMINI_API_KEY")
        return self


class GeneratorSettings(ServiceSettings, ModelProviderSettings, GenerationSettings):
    """What the generator reads."""


class RetrieverSettings(ServiceSettings, ChunkSettings, IngestSettings, SearchBackendSettings, ParseLimitSettings):
    """What the retriever reads."""


class GatewaySettings(ServiceSettings, ModelProviderSettings, AnsweringSettings, UsageSettings, HttpBridgeSettings,
                      SharedStateSettings):
    """What the gateway reads; its HTTP bridge's host names are checked at load."""

    @model_validator(mode="after")
    def _bridge_hosts(self) -> Self:
        self.allowed_host_names()
        return self


# In the order of the operators' table: every section once.
SECTIONS: tuple[type[Section], ...] = (
    NetworkSettings, StoreSettings, ServingSettings, LoggingSettings, MetricsSettings, TracingSettings,
    DeadlineSettings, IdentitySettings, ModelProviderSettings, ChunkSettings, EmbeddingSettings, GenerationSettings,
    IngestSettings, SearchBackendSettings, ParseLimitSettings, AnsweringSettings, UsageSettings, HttpBridgeSettings,
    SharedStateSettings, SupervisorSettings,
)
SERVICE_MODELS: dict[str, type[ServiceSettings]] = {
    "embedder": EmbedderSettings, "retriever": RetrieverSettings, "generator": GeneratorSettings,
    "gateway": GatewaySettings,
}


class Settings(ServiceSettings, ModelProviderSettings, ChunkSettings, EmbeddingSettings, GenerationSettings,
               IngestSettings, SearchBackendSettings, ParseLimitSettings, AnsweringSettings, UsageSettings,
               HttpBridgeSettings, SharedStateSettings, SupervisorSettings):
    """Every section: for the command line, the supervisor and tests (which hand it to the services:
    it holds every field of each service's model)."""


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps a service on this machine (secrets may then be made here)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
