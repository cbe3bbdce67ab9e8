"""`python -m ragmesh.healthcheck [SERVICE]`: asks a service on this host for its grpc.health.v1 status
and exits 0 when it is SERVING, 1 otherwise (NOT_SERVING while warming up, unreachable, refused).

The container's HEALTHCHECK and compose's healthchecks run it. It reads the same settings as the
service (the environment): the port (`<SERVICE>_PORT`), the bind address (a wildcard bind is asked on
127.0.0.1) and TLS: with TLS_CERT / TLS_KEY it speaks TLS, verifies the server against TLS_CA and
presents the service's own certificate, which internal services require under mTLS. The certificate
is checked for the name other services use to reach this one (the host of `<SERVICE>_ADDR`, e.g.
`retriever` for RETRIEVER_ADDR=retriever:50053), or `--tls-server-name`.

SERVICE is gateway, embedder, retriever or generator; without it, RAGMESH_SERVICE, else the service
that the container's first process runs (`python -m services.<name>`). Health needs no credential.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SERVICES = ("gateway", "embedder", "retriever", "generator")
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def service_from_cmdline(cmdline: bytes) -> str | None:
    """`python -m services.retriever` (NUL-separated, as in /proc/<pid>/cmdline) -> "retriever"."""
    for arg in cmdline.split(b"\0"):
        text = arg.decode(errors="replace")
        if text.startswith("services.") and text.removeprefix("services.") in SERVICES:
            return text.removeprefix("services.")
    return None


def detect_service() -> str | None:
    named = os.environ.get("RAGMESH_SERVICE", "").strip()
    if named:
        return named
    try:
        return service_from_cmdline(Path("/proc/1/cmdline").read_bytes())
    except OSError:
        return None


def target(settings, service: str, server_name: str = "") -> tuple[str, str]:
    """(address to dial, name the server's certificate must carry or "" for the address's own)."""
    port = getattr(settings, f"{service}_port")
    host = "127.0.0.1" if settings.host in _WILDCARDS else settings.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    if not server_name:
        explicit = getattr(settings, f"{service}_addr", "")
        server_name = explicit.rpartition(":")[0].strip("[]") if explicit else ""
    return f"{host}:{port}", server_name


def check(service: str, timeout: float = 3.0, server_name: str = "") -> tuple[bool, str]:
    """(serving, what was seen) for `service` as configured by the environment."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from ragmesh import config, tls

    settings = config.load()
    address, server_name = target(settings, service, server_name)
    try:
        credentials = tls.channel_credentials(settings)
    except ValueError as exc:
        return False, str(exc)
    if credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        channel = grpc.secure_channel(address, credentials, options=options)
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError as exc:
            return False, f"{service} at {address}: {exc.code().name} {exc.details() or ''}".rstrip()
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"{service} at {address}: {status}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragmesh.healthcheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("service", nargs="?", choices=SERVICES,
                        help="default: RAGMESH_SERVICE, else the service the container's first process runs")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (3)")
    parser.add_argument("--tls-server-name", default="",
                        help="name the server certificate must carry (default: the host of <SERVICE>_ADDR)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(argv)
    service = args.service or detect_service()
    if service not in SERVICES:
        print("healthcheck: name the service (gateway, embedder, retriever, generator) or set RAGMESH_SERVICE",
              file=sys.stderr)
        return 1
    try:
        ok, seen = check(service, args.timeout, args.tls_server_name)
    except ValueError as exc:  # a malformed setting (e.g. a port that is not a number)
        ok, seen = False, str(exc)
    if not args.quiet:
        print(seen, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
