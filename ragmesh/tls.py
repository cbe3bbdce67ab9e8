"""TLS for every gRPC port and the HTTP bridge, from files named in the environment (TLS_CERT,
TLS_KEY, TLS_CA), and the rule that a service reachable from other machines speaks TLS."""
from __future__ import annotations

from pathlib import Path

import grpc

from ragmesh.config import Settings, is_loopback


def enabled(settings: Settings) -> bool:
    return bool(settings.tls_cert and settings.tls_key)


def _read(path: str, variable: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{variable}={path}: cannot read it ({exc.strerror})") from None


def check(settings: Settings) -> None:
    """Raises ValueError (the message says what to set) for a bind other machines reach without TLS
    (the TLS files themselves were checked with the settings)."""
    if not is_loopback(settings.host) and not enabled(settings) and not settings.allow_plaintext:
        raise ValueError(f"refusing to serve plaintext on {settings.host}: set TLS_CERT and TLS_KEY (and TLS_CA "
                         f"for mTLS), bind 127.0.0.1, or set ALLOW_PLAINTEXT=true when a proxy or mesh "
                         f"terminates TLS in front of this service")


def server_credentials(settings: Settings, require_client_cert: bool) -> grpc.ServerCredentials | None:
    """None without TLS. With TLS_CA and `require_client_cert`, a client must present a certificate
    TLS_CA signed, or the handshake fails."""
    if not enabled(settings):
        return None
    pair = (_read(settings.tls_key, "TLS_KEY"), _read(settings.tls_cert, "TLS_CERT"))
    ca = _read(settings.tls_ca, "TLS_CA") if settings.tls_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=ca,
                                       require_client_auth=bool(ca) and require_client_cert)


def channel_credentials(settings: Settings) -> grpc.ChannelCredentials | None:
    """None without TLS; else verify servers against TLS_CA (or the system roots) and present our
    own certificate, which internal services require under mTLS."""
    if not enabled(settings):
        return None
    ca = _read(settings.tls_ca, "TLS_CA") if settings.tls_ca else None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=_read(settings.tls_key, "TLS_KEY"),
                                        certificate_chain=_read(settings.tls_cert, "TLS_CERT"))
