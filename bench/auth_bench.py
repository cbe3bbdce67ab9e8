"""What identity costs per call: the check every gRPC call and /api route makes before it runs
(ragmesh.identity.authenticator), for each kind of credential, on a real SQLite key store."""
from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import jwt
import numpy as np

from bench.search_bench import Section, percentiles
from ragmesh import config
from ragmesh.identity import TENANT_HEADER, keys
from ragmesh.identity.authenticator import Authenticator, pepper, service_token
from ragmesh.store.lazy import LazyStore

JWT_SECRET = "bench-" * 8


async def _time_calls(auth: Authenticator, metadata: dict[str, str], calls: int) -> np.ndarray:
    for _ in range(min(100, calls)):  # warm-up: store pages cached, thread pool started
        await auth.authenticate(metadata)
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        await auth.authenticate(metadata)
        times[i] = (time.perf_counter() - start) * 1e6
    return times


def run_auth(calls: int, stored_keys: int) -> Section:
    """Microseconds per authentication with `stored_keys` keys in the store."""
    section = Section("Authentication per call (in process, SQLite key store)")
    with tempfile.TemporaryDirectory(prefix="ragmesh-bench-auth-") as tmp:
        settings = config.load().replace(data_dir=Path(tmp), host="127.0.0.1", mongodb_uri="",
                                         api_key_pepper="", service_token="", jwt_secret=JWT_SECRET,
                                         jwt_jwks_url="", jwt_public_key="", jwt_issuer="", jwt_audience="")
        store = LazyStore(settings)
        store.connect()
        for i in range(stored_keys - 1):
            store.add_api_key(keys.new_key(pepper(settings), f"tenant-{i % 100}", f"user-{i}", "member")[1])
        key, record = keys.new_key(pepper(settings), "acme", "alice", "admin")
        store.add_api_key(record)
        token = jwt.encode({"tenant": "acme", "sub": "alice", "exp": int(time.time()) + 3600}, JWT_SECRET)
        cases = (
            ("users", "API key (gateway)", {"authorization": f"Bearer {key}"}),
            ("users", "JWT HS256 (gateway)", {"authorization": f"Bearer {token}"}),
            ("internal", "operator admin key (internal service)", {"authorization": f"Bearer {key}"}),
            ("internal", "service token (gateway -> internal service)",
             {"authorization": f"Bearer {service_token(settings)}", TENANT_HEADER: "acme"}),
        )
        for audience, label, metadata in cases:
            times = asyncio.run(_time_calls(Authenticator(settings, store, audience), metadata, calls))
            p50, p99 = percentiles(times)
            section.add(f"{label} p50 / p99", f"{p50:.1f} / {p99:.1f}", "us",
                        note=f"{calls:,} calls, {stored_keys:,} keys stored")
        store.close()
    section.notes.append("A key is looked up on every call (no cache), so a revocation holds from the next call; "
                         "the lookup runs in a worker thread so the event loop never waits on the store.")
    return section
