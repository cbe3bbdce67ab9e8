"""All four services over mTLS: certificates made here with `cryptography` (a CA, one certificate
for 127.0.0.1 and localhost that every service uses as server and as client, and an unrelated CA
with its own certificate). An answer through the gateway proves gateway -> retriever ->
embedder/generator all spoke mTLS; then the retriever turns away clients without a certificate,
with one another CA signed, and plaintext clients, and a service bound to 0.0.0.0 without TLS
refuses to start."""
from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from demo.loader import meeting_documents
from ragmesh import convert
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel
from tests.stack import DEMO, HOST, Stack

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What premium was paid for Brightwater Bio?"


@dataclasses.dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    other_cert: Path
    other_key: Path

    def read(self, name: str) -> bytes:
        return getattr(self, name).read_bytes()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
          common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """For 127.0.0.1 and localhost, usable as a server and as a client certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _write(folder: Path, name: str, item: x509.Certificate | ec.EllipticCurvePrivateKey) -> Path:
    path = folder / name
    if isinstance(item, x509.Certificate):
        path.write_bytes(item.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
        path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca_key, ca = _ca("ragmesh test CA")
    key, cert = _leaf(ca_key, ca, "ragmesh-service")
    other_ca_key, other_ca = _ca("some other CA")
    other_key, other_cert = _leaf(other_ca_key, other_ca, "intruder")
    return Pki(_write(folder, "ca.pem", ca), _write(folder, "cert.pem", cert), _write(folder, "key.pem", key),
               _write(folder, "other-ca.pem", other_ca), _write(folder, "other-cert.pem", other_cert),
               _write(folder, "other-key.pem", other_key))


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp("tls-stack"), tls_cert=str(pki.cert), tls_key=str(pki.key),
                  tls_ca=str(pki.ca)).start()
    try:
        wanted = [d for d in meeting_documents() if b"Brightwater" in d.content][:2] + meeting_documents()[:4]

        async def load() -> list[retriever_pb2.IngestProgress]:
            client = RetrieverClient(stack.address("retriever"), 30, 300,
                                     ClientAuth.key(stack.settings, stack.admin_key))

            async def documents() -> AsyncIterator[retriever_pb2.Document]:
                for d in {d.doc_id: d for d in wanted}.values():
                    yield convert.document_to_proto(d)

            try:
                return [p async for p in client.ingest(documents())]
            finally:
                await client.close()

        progress = stack.call(load(), timeout=300)
        indexed = {p.doc_id for p in progress if p.stage == retriever_pb2.INDEXED}
        assert indexed == {d.doc_id for d in wanted}, progress
        yield stack
    finally:
        stack.stop()


def _right_cert(pki: Pki) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=pki.read("ca"), private_key=pki.read("key"),
                                        certificate_chain=pki.read("cert"))


def _search(address: str, metadata, credentials: grpc.ChannelCredentials | None) -> retriever_pb2.SearchResponse:
    with channel(address, metadata, credentials) as ch:
        return retriever_pb2_grpc.RetrieverStub(ch).Search(
            retriever_pb2.SearchRequest(query="Brightwater Bio premium", collections=["meeting_notes"], top_k=5),
            timeout=15)


def test_an_answer_through_the_gateway_crosses_every_hop_over_mtls(tls_stack: Stack, pki: Pki) -> None:
    assert tls_stack.hosts["gateway"].settings.tls_ca == str(pki.ca)
    # The gateway's gRPC port asks for no client certificate: users bring keys, not certificates.
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.read("ca"))
    with channel(tls_stack.address("gateway"), tls_stack.metadata, credentials) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(question=QUESTION), timeout=90))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "done", kinds
    assert "error" not in kinds, [e.error for e in events if e.WhichOneof("event") == "error"]
    strategy = next(e.strategy for e in events if e.WhichOneof("event") == "strategy")
    # The retriever answered (over mTLS), with dense search on: it reached the embedder (over mTLS).
    assert strategy.chunks > 0 and strategy.candidate_count > 0, strategy
    assert not strategy.dense_skipped and not list(strategy.unavailable), strategy
    # The generator answered (over mTLS), from the retrieved notes.
    answer = "".join(e.content for e in events)
    assert "88%" in answer, answer
    assert events[-1].done.conversation_id and not events[-1].done.stopped


def test_the_http_bridge_serves_https_only(tls_stack: Stack, pki: Pki) -> None:
    port = tls_stack.app("gateway").http_port
    context = ssl.create_default_context(cafile=str(pki.ca))
    reply = httpx.get(f"https://{HOST}:{port}/healthz", verify=context, timeout=30)
    # The gateway's health checks of the other three went over mTLS too.
    assert reply.status_code == 200, reply.text
    assert reply.json()["services"] == {"gateway": "SERVING", "embedder": "SERVING", "retriever": "SERVING",
                                        "generator": "SERVING"}
    meta = httpx.get(f"https://{HOST}:{port}/api/meta", headers=tls_stack.headers, verify=context, timeout=30)
    assert meta.status_code == 200 and meta.json()["identity"]["tenant"] == DEMO
    with pytest.raises(httpx.ConnectError):  # a server certificate nobody we trust signed
        httpx.get(f"https://{HOST}:{port}/healthz", verify=ssl.create_default_context(cafile=str(pki.other_ca)),
                  timeout=10)
    with pytest.raises(httpx.HTTPError):  # plaintext HTTP to the TLS port
        httpx.get(f"http://{HOST}:{port}/healthz", timeout=10)


def test_the_retriever_takes_the_right_certificate_with_an_admin_key(tls_stack: Stack, pki: Pki) -> None:
    reply = _search(tls_stack.address("retriever"), tls_stack.metadata, _right_cert(pki))
    assert reply.hits and any("Brightwater" in h.chunk.text for h in reply.hits)
    assert {h.chunk.tenant for h in reply.hits} == {DEMO}, "an admin key acts in its own tenant"
    # The certificate alone is the service credential, acting for the tenant the metadata names.
    reply = _search(tls_stack.address("retriever"), (("x-ragmesh-tenant", DEMO), ("x-ragmesh-user", "svc")),
                    _right_cert(pki))
    assert reply.hits
    # ...and only in that tenant: another tenant sees nothing of DEMO's notes.
    assert not _search(tls_stack.address("retriever"), (("x-ragmesh-tenant", "other"),), _right_cert(pki)).hits
    # A member key is still not an internal credential, certificate or not.
    member = tls_stack.key(DEMO, "someone")
    with pytest.raises(grpc.RpcError) as err:
        _search(tls_stack.address("retriever"), bearer(member), _right_cert(pki))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_the_retriever_refuses_a_client_without_a_certificate(tls_stack: Stack, pki: Pki) -> None:
    no_cert = grpc.ssl_channel_credentials(root_certificates=pki.read("ca"))
    with pytest.raises(grpc.RpcError) as err:
        _search(tls_stack.address("retriever"), tls_stack.metadata, no_cert)  # even with a valid admin key
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value


def test_the_retriever_refuses_a_certificate_another_ca_signed(tls_stack: Stack, pki: Pki) -> None:
    intruder = grpc.ssl_channel_credentials(root_certificates=pki.read("ca"), private_key=pki.read("other_key"),
                                            certificate_chain=pki.read("other_cert"))
    with pytest.raises(grpc.RpcError) as err:
        _search(tls_stack.address("retriever"), tls_stack.metadata, intruder)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value


def test_a_client_that_does_not_trust_the_servers_ca_stops_at_the_handshake(tls_stack: Stack, pki: Pki) -> None:
    distrusting = grpc.ssl_channel_credentials(root_certificates=pki.read("other_ca"), private_key=pki.read("key"),
                                               certificate_chain=pki.read("cert"))
    with pytest.raises(grpc.RpcError) as err:
        _search(tls_stack.address("retriever"), tls_stack.metadata, distrusting)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value


@pytest.mark.parametrize("service", ["retriever", "gateway", "embedder", "generator"])
def test_plaintext_clients_cannot_reach_a_tls_port(tls_stack: Stack, service: str) -> None:
    with channel(tls_stack.address(service), tls_stack.metadata) as ch:
        with pytest.raises(grpc.RpcError) as err:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value


def test_a_public_bind_without_tls_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TLS_CERT", "TLS_KEY", "TLS_CA", "ALLOW_PLAINTEXT", "MONGODB_URI")}
    env |= {"RAGMESH_HOST": "0.0.0.0", "DATA_DIR": str(tmp_path), "RETRIEVER_PORT": "0",
            "SERVICE_TOKEN": "set-so-only-tls-is-missing", "API_KEY_PEPPER": "set-too", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "services.retriever"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "refusing to start" in said and "TLS_CERT" in said, said
    assert "retriever" in done.stderr, done.stderr
    assert not (tmp_path / "ragmesh.sqlite3").exists(), "it stopped before opening anything"
