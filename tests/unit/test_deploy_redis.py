"""Redis for the gateway replicas in the deployment files (rendered and schema-checked with the other
manifests by test_deploy.py): in production a StatefulSet only the gateway reaches, REDIS_URL from a
Secret the operator makes, two gateway replicas or more; in compose a profile with a second gateway."""
from __future__ import annotations

from urllib.parse import urlsplit

from ragmesh import config
from tests.unit.test_deploy import (LAYOUTS, PRODUCTION, _admits, _by_kind, _environment, _labels_match, compose,  # noqa: F401
                                    render)


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_production_runs_redis_for_two_gateway_replicas_or_more() -> None:
    for layout in PRODUCTION:
        objects = render(LAYOUTS[layout])
        redis = _by_kind(objects, "StatefulSet")["redis"]
        service = _by_kind(objects, "Service")["redis"]
        assert redis["spec"]["serviceName"] == "redis" and service["spec"]["clusterIP"] == "None"
        pod = redis["spec"]["template"]
        assert _labels_match(service["spec"]["selector"], pod["metadata"]["labels"])
        (container,) = pod["spec"]["containers"]
        args = container["args"]
        assert args[args.index("--save") + 1] == "" and args[args.index("--appendonly") + 1] == "no", \
            "nothing persisted: it holds nothing that cannot be lost"
        assert args[args.index("--maxmemory-policy") + 1] == "noeviction" and "--maxmemory" in args, \
            "rate windows and answer claims are never evicted to make room for scope entries"
        assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
        assert _env(container)["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "ragmesh-redis",
                                                                                  "key": "password"}
        assert not _by_kind(objects, "Secret"), "the operator makes ragmesh-redis; apply never writes it"
        assert "redis" not in _by_kind(objects, "PersistentVolumeClaim")
        gateway = _by_kind(objects, "Deployment")["gateway"]["spec"]["template"]["spec"]["containers"][0]
        assert _env(gateway)["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "ragmesh-redis", "key": "url"}
        assert _by_kind(objects, "HorizontalPodAutoscaler")["gateway"]["spec"]["minReplicas"] >= 2
        policy = _by_kind(objects, "NetworkPolicy")["redis"]
        assert _labels_match(policy["spec"]["podSelector"]["matchLabels"], pod["metadata"]["labels"])
        pods = {n: d["spec"]["template"]["metadata"]["labels"] for n, d in _by_kind(objects, "Deployment").items()}
        assert _admits(policy, pods["gateway"], 6379)
        assert not any(_admits(policy, pods[n], 6379) for n in ("embedder", "retriever", "generator"))


def test_one_gateway_layouts_keep_state_in_process() -> None:
    for layout in ("base", "dev"):
        objects = render(LAYOUTS[layout])
        assert "redis" not in _by_kind(objects, "StatefulSet")
        gateway = _by_kind(objects, "Deployment")["gateway"]["spec"]["template"]["spec"]["containers"][0]
        assert "REDIS_URL" not in _env(gateway)


def test_compose_redis_profile_adds_redis_and_a_second_gateway(compose) -> None:  # noqa: F811
    services = compose["services"]
    assert {n for n, s in services.items() if "redis" in s.get("profiles", [])} == {"redis", "gateway-replica"}
    replica, gateway = services["gateway-replica"], services["gateway"]
    assert replica["command"] == gateway["command"] and replica["healthcheck"] == gateway["healthcheck"]
    assert urlsplit(_environment(replica)["REDIS_URL"]).hostname == "redis"
    assert _environment(gateway)["REDIS_URL"] == "${REDIS_URL:-}", "in process unless asked"
    assert replica["depends_on"]["redis"]["condition"] == "service_healthy"
    assert gateway["depends_on"]["redis"] == {"condition": "service_healthy", "required": False}
    command = services["redis"]["command"]
    assert command[command.index("--save") + 1] == "" and "ports" not in services["redis"]
    published = {p.rsplit(":", 1)[0] for s in (gateway, replica) for p in s["ports"]}
    assert len(published) == len(gateway["ports"]) + len(replica["ports"]), "each replica on ports of its own"


def test_the_redis_url_is_masked_in_logged_settings() -> None:
    settings = config.Settings().replace(redis_url="redis://:s3cret@redis:6379/0")
    assert settings.describe()["redis_url"] == "redis://redis:6379"
