"""Kubernetes manifests (docker/k8s/): every object validated against the Kubernetes API schema
(kubernetes-validate, strict: unknown fields are errors), then checked for what ties them to the project:
the Feast config is a Feast RepoConfig, the paths the processes are given are where it is mounted, Triton's
settings parse as the entrypoint parses them and its readiness probe asks Triton's ready endpoint, the
consumer replicas fit the topic's partitions, services select the pods, and the Prometheus config with the
project's rules passes promtool."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from reranker.serving.server import ServerSettings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "docker" / "k8s"
MANIFESTS = sorted(K8S.glob("*.yaml"))
FEAST_MOUNT = "/etc/gistrank/feast"


def objects() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} objects"
    return matches[0]


def container(deployment: str) -> dict[str, Any]:
    (only,) = find("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return only


def test_there_are_manifests_for_each_part() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects()}
    assert {
        ("Deployment", "gistrank-consumer"),
        ("Deployment", "gistrank-triton"),
        ("Service", "gistrank-triton"),
        ("ConfigMap", "gistrank-feast"),
        ("ConfigMap", "gistrank-prometheus"),
    } <= kinds


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_object_is_valid_against_the_kubernetes_schema(path: Path) -> None:
    version = kubernetes_validate.latest_version()
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError


def test_the_validator_refuses_a_broken_manifest() -> None:
    """The schema check above can fail: a misspelt field and a wrong type are errors."""
    broken = find("Deployment", "gistrank-triton")
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)
    wrong = find("Deployment", "gistrank-consumer")
    wrong["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, kubernetes_validate.latest_version(), strict=True)


def test_the_feast_config_is_a_feast_repo_config_mounted_where_the_processes_read_it() -> None:
    from feast import RepoConfig

    text = find("ConfigMap", "gistrank-feast")["data"]["feature_store.yaml"]
    config = RepoConfig(**yaml.safe_load(os.path.expandvars(text)))
    assert config.online_store.type == "redis" and config.online_store.redis_type.value == "redis_cluster"
    assert config.registry.registry_type == "sql"
    path = f"{FEAST_MOUNT}/feature_store.yaml"
    consumer, triton = container("gistrank-consumer"), container("gistrank-triton")
    args = consumer["args"]
    assert args[args.index("--feast-config") + 1] == path
    assert {"name": "GISTRANK_SERVE_FEAST_CONFIG", "value": path} in triton["env"]
    for name, c in (("gistrank-consumer", consumer), ("gistrank-triton", triton)):
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in find("Deployment", name)["spec"]["template"]["spec"]["volumes"]}
        assert mounts["feast-config"] == FEAST_MOUNT
        assert volumes["feast-config"]["configMap"]["name"] == "gistrank-feast"
        # the registry URL's ${FEAST_DB_PASSWORD} comes from the pod's environment
        assert "FEAST_DB_PASSWORD" in {e["name"] for e in c["env"]}


def test_triton_settings_parse_and_its_probes_ask_triton() -> None:
    entrypoint = _entrypoint()
    triton = container("gistrank-triton")
    env = {
        e["name"]: e.get("value", "from-a-secret") for e in triton["env"] if e["name"].startswith("GISTRANK_")
    }
    settings: ServerSettings = entrypoint.settings_from_env(env)
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    assert ports == {
        "http": settings.http_port,
        "grpc": settings.grpc_port,
        "metrics": settings.metrics_port,
    }
    assert settings.host == "0.0.0.0"  # inside the pod: the kubelet and Prometheus reach it on the pod IP
    assert triton["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_consumer_replicas_fit_the_partitions_and_services_select_pods() -> None:
    consumer = find("Deployment", "gistrank-consumer")
    args = container("gistrank-consumer")["args"]
    assert args[0] == "consume"
    assert consumer["spec"]["replicas"] <= int(args[args.index("--partitions") + 1])
    for deployment in ("gistrank-consumer", "gistrank-triton"):
        spec = find("Deployment", deployment)["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    for service, deployment in (
        ("gistrank-triton", "gistrank-triton"),
        ("gistrank-triton-pods", "gistrank-triton"),
        ("gistrank-consumer-pods", "gistrank-consumer"),
    ):
        spec = find("Service", service)["spec"]
        pod_labels = find("Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
        assert spec["selector"].items() <= pod_labels.items()
        named = {p["name"] for p in container(deployment)["ports"]}
        assert {p["targetPort"] for p in spec["ports"]} <= named


@pytest.mark.promtool
def test_prometheus_config_with_the_project_rules_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run scripts/setup_system.sh")
    (tmp_path / "prometheus.yml").write_text(
        find("ConfigMap", "gistrank-prometheus")["data"]["prometheus.yml"]
    )
    (tmp_path / "rules").mkdir()
    for rules in ("recording_rules.yml", "alert_rules.yml"):
        shutil.copy(ROOT / "monitoring" / "prometheus" / rules, tmp_path / "rules" / rules)
    result = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 rule files found" in result.stdout + result.stderr, shlex.join(result.args)
    compose_jobs = {
        job["job_name"]
        for job in yaml.safe_load((ROOT / "monitoring/prometheus/prometheus.yml").read_text())[
            "scrape_configs"
        ]
    }
    k8s_jobs = {
        job["job_name"] for job in yaml.safe_load((tmp_path / "prometheus.yml").read_text())["scrape_configs"]
    }
    assert k8s_jobs == compose_jobs - {"prometheus"}  # the rules select by these job names
    # each job resolves a headless service of the pods that listen on its port
    for job in yaml.safe_load((tmp_path / "prometheus.yml").read_text())["scrape_configs"]:
        (sd,) = job["dns_sd_configs"]
        (name,) = sd["names"]
        service = find("Service", name)
        assert service["spec"]["clusterIP"] == "None"
        assert sd["port"] in {p["port"] for p in service["spec"]["ports"]}


def _entrypoint() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "triton_entrypoint", ROOT / "docker" / "triton" / "entrypoint.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kafka_clients_log_in_as_the_users_the_acl_job_grants() -> None:
    """The ACL Job grants each role to a user; the consumer and Triton log in as those users, with their
    settings valid `KafkaSettings` (passwords from the Secret), and nobody uses PLAINTEXT."""
    from reranker.catalog.kafka_acls import ROLES
    from reranker.catalog.kafka_settings import KafkaSettings

    (job,) = find("Job", "gistrank-kafka-acls")["spec"]["template"]["spec"]["containers"]
    args = job["args"]
    assert args[0] == "kafka-acls"
    roles = {args[i].removeprefix("--"): args[i + 1] for i in range(1, len(args), 2)}
    assert set(roles) == set(ROLES)
    for deployment, role in (("gistrank-consumer", "consumer"), ("gistrank-triton", "serving")):
        env = {e["name"]: e.get("value", "from-a-secret") for e in container(deployment)["env"]}
        assert env["GISTRANK_KAFKA_SASL_USERNAME"] == roles[role], deployment
        assert env["GISTRANK_KAFKA_SASL_PASSWORD"] == "from-a-secret"
        kafka = {k: v for k, v in env.items() if k.startswith("GISTRANK_KAFKA_")}
        settings = KafkaSettings.from_env(kafka)
        assert settings.security_protocol == "SASL_SSL", deployment
    job_env = {e["name"]: e.get("value", "from-a-secret") for e in job["env"]}
    assert KafkaSettings.from_env(job_env).security_protocol == "SASL_SSL"
