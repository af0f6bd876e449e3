"""Monitoring and deployment files: Prometheus config and rules (checked and unit-tested by promtool), the
Grafana dashboard and provisioning, and the compose stack (validated by docker-compose's own parser).

promtool (Debian `prometheus`) and docker-compose (Debian `docker-compose`) come from
scripts/setup_system.sh; a missing one fails the tests that need it rather than skipping them.
Every PromQL expression of the dashboard and of the Grafana alert rule is parsed by promtool, as a
recording rule: a real PromQL parser, not a pattern match.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = ROOT / "monitoring" / "prometheus"
GRAFANA = ROOT / "monitoring" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "gistrank.json"
PROVISIONING = GRAFANA / "provisioning"
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yml"
COMPOSE_GPU = DOCKER / "compose.gpu.yml"
RULE_FILES = [PROMETHEUS / "recording_rules.yml", PROMETHEUS / "alert_rules.yml"]
RULE_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))

# Grafana replaces these before a query reaches Prometheus; promtool gets a plain duration instead.
GRAFANA_RANGE_VARIABLES = ("$__rate_interval", "$__interval", "$__range")
# A metric name that is not part of a recording rule's name (level:metric:operations).
METRIC_NAME = re.compile(r"(?<![\w:])(gistrank_\w+)")
RECORDED_NAME = re.compile(r"(?<![\w:])([a-z_]+:\w+:\w+)")


def _tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.fail(f"{name} is not installed: run scripts/setup_system.sh")
    return exe


def _run(
    args: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return _run([_tool("promtool"), *map(str, args)], cwd=PROMETHEUS)


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _rules() -> list[dict[str, Any]]:
    return [rule for path in RULE_FILES for group in _load_yaml(path)["groups"] for rule in group["rules"]]


def _alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in _rules() if "alert" in rule}


def _records() -> dict[str, dict[str, Any]]:
    return {rule["record"]: rule for rule in _rules() if "record" in rule}


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _alerting() -> dict[str, Any]:
    return _load_yaml(PROVISIONING / "alerting" / "gistrank.yml")


def _grafana_rule_queries() -> Iterator[tuple[str, str]]:
    """(name, PromQL) of every Prometheus query of the provisioned Grafana alert rules."""
    for group in _alerting()["groups"]:
        for rule in group["rules"]:
            for query in rule["data"]:
                if query["datasourceUid"] != "__expr__":
                    yield f"grafana rule {rule['uid']} {query['refId']}", query["model"]["expr"]


def _dashboard_queries() -> Iterator[tuple[str, str]]:
    for panel in _dashboard()["panels"]:
        for target in panel["targets"]:
            yield f"panel {panel['id']} ({panel['title']}) {target['refId']}", target["expr"]


def _as_promql(expr: str) -> str:
    for variable in GRAFANA_RANGE_VARIABLES:
        expr = expr.replace(variable, "5m")
    return expr


# --------------------------------------------------------------------------------------- Prometheus
@pytest.mark.promtool
def test_prometheus_config_and_its_rule_files_are_valid() -> None:
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    # check config follows rule_files: both must have been found and checked.
    for path in RULE_FILES:
        assert path.name in (PROMETHEUS / "prometheus.yml").read_text()


@pytest.mark.promtool
def test_rule_files_are_valid() -> None:
    result = _promtool("check", "rules", *RULE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.promtool
def test_rule_unit_tests_pass() -> None:
    assert RULE_TESTS, "no promtool tests in monitoring/prometheus/tests"
    result = _promtool("test", "rules", *RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for case in _load_yaml(path)["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert set(_alerts()) - firing == set(), "alerts without a firing test"
    assert set(_alerts()) - quiet == set(), "alerts without a not-firing test"


def test_every_recording_rule_is_evaluated_with_expected_values() -> None:
    evaluated = set()
    for path in RULE_TESTS:
        for case in _load_yaml(path)["tests"]:
            for check in case.get("promql_expr_test", []):
                if check.get("exp_samples"):
                    evaluated.add(check["expr"].split("{")[0].strip())
    assert set(_records()) - evaluated == set()


def test_alerts_carry_severity_duration_and_templated_annotations() -> None:
    for name, rule in _alerts().items():
        assert rule.get("for"), f"{name}: no `for:`, one bad scrape would page"
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert set(rule["annotations"]) >= {"summary", "description"}, name
        for key in ("summary", "description"):
            assert "$value" in rule["annotations"][key], f"{name} {key} does not show the value"


def test_queries_use_only_metrics_the_code_exports_and_rules_it_records() -> None:
    # Import the metric modules so that their metrics are in the default registry.
    from prometheus_client import REGISTRY

    import monitoring.metrics
    import monitoring.serving_metrics  # noqa: F401

    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
    exported = {
        family.name + suffix for family in REGISTRY.collect() for suffix in suffixes.get(family.type, ("",))
    }
    queries = [(f"rule {r.get('alert') or r['record']}", r["expr"]) for r in _rules()]
    queries += list(_dashboard_queries()) + list(_grafana_rule_queries())
    recorded = set(_records())
    for where, expr in queries:
        unknown = set(METRIC_NAME.findall(expr)) - exported
        assert not unknown, f"{where}: {sorted(unknown)} not exported by monitoring/*metrics.py"
        unrecorded = set(RECORDED_NAME.findall(expr)) - recorded
        assert not unrecorded, f"{where}: {sorted(unrecorded)} not in recording_rules.yml"


# ------------------------------------------------------------------------------------------ Grafana
def test_dashboard_panels_are_complete_and_uniquely_numbered() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    templated = {"type": "prometheus", "uid": "${datasource}"}
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["title"].strip(), panel["id"]
        assert panel["datasource"] == templated, panel["title"]
        assert panel["targets"], f"{panel['title']}: no targets"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target.get("datasource", templated) == templated, panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area


def test_dashboard_shows_the_signals_the_alerts_are_about() -> None:
    exprs = " ".join(expr for _, expr in _dashboard_queries())
    for needed in (
        "job:gistrank_cache_hit_ratio:rate5m",
        "job_reason:gistrank_recompute_fallbacks:rate5m",
        "job_stage:gistrank_rerank_request_duration_seconds:p50_rate5m",
        "job_stage:gistrank_rerank_request_duration_seconds:p99_rate5m",
        "job_k:gistrank_shadow_recall:ratio_rate1h",
        "job_k:gistrank_shadow_recall:ratio_rate7d",
        "gistrank_consumer_lag_records",
        "gistrank_consumer_events_total",
        "gistrank_consumer_batch_retries_total",
        "gistrank_consumer_rejoins_total",
    ):
        assert needed in exprs, needed


@pytest.mark.promtool
def test_every_dashboard_and_grafana_alert_query_parses(tmp_path: Path) -> None:
    queries = list(_dashboard_queries()) + list(_grafana_rule_queries())
    rules = [{"record": f"parse_check_{i}", "expr": _as_promql(expr)} for i, (_, expr) in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _promtool("check", "rules", path)
    output = result.stdout + result.stderr
    failed = [where for i, (where, _) in enumerate(queries) if f'"parse_check_{i}"' in output]
    assert result.returncode == 0, f"{failed}\n{output}"


@pytest.mark.promtool
def test_the_promql_check_rejects_a_broken_expression(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    rule = {"record": "broken", "expr": "sum(rate(gistrank_consumer_events_total[5m])"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "broken", "rules": [rule]}]}))
    assert _promtool("check", "rules", path).returncode != 0


def test_datasource_provisioning_points_at_the_compose_prometheus() -> None:
    config = _load_yaml(PROVISIONING / "datasources" / "prometheus.yml")
    assert config["apiVersion"] == 1
    (source,) = config["datasources"]
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    assert source["uid"] and source["isDefault"] is True
    assert source["url"] == "http://prometheus:9090"
    assert "prometheus" in _compose_config()["services"]


def test_dashboard_provider_reads_the_mounted_dashboard_folder() -> None:
    config = _load_yaml(PROVISIONING / "dashboards" / "gistrank.yml")
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file" and provider["folder"]
    mounts = _bind_mounts(_compose_config()["services"]["grafana"])
    assert mounts[provider["options"]["path"]] == GRAFANA / "dashboards"
    assert mounts["/etc/grafana/provisioning"] == PROVISIONING


def test_alerting_provisioning_is_consistent() -> None:
    config = _alerting()
    assert config["apiVersion"] == 1
    datasource_uid = _load_yaml(PROVISIONING / "datasources" / "prometheus.yml")["datasources"][0]["uid"]
    contact_points = {cp["name"] for cp in config["contactPoints"]}
    for point in config["contactPoints"]:
        for receiver in point["receivers"]:
            assert receiver["uid"] and receiver["type"] and receiver["settings"], point["name"]
    for policy in config["policies"]:
        assert policy["receiver"] in contact_points
    rules = [rule for group in config["groups"] for rule in group["rules"]]
    assert any("recall" in rule["title"].lower() for rule in rules)
    for group in config["groups"]:
        assert group["name"] and group["folder"] and re.fullmatch(r"\d+[smh]", group["interval"])
    for rule in rules:
        ref_ids = [query["refId"] for query in rule["data"]]
        assert rule["uid"] and rule["title"] and len(ref_ids) == len(set(ref_ids))
        assert rule["condition"] in ref_ids, rule["title"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["title"]
        assert rule["noDataState"] in ("OK", "NoData", "Alerting", "KeepLast"), rule["title"]
        assert rule["execErrState"] in ("OK", "Error", "Alerting", "KeepLast"), rule["title"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert {"summary", "description"} <= set(rule["annotations"])
        for query in rule["data"]:
            assert query["datasourceUid"] in (datasource_uid, "__expr__"), rule["title"]
            if query["datasourceUid"] == "__expr__":
                assert query["model"]["expression"] in ref_ids, rule["title"]


def test_alerting_environment_references_are_provided_by_compose() -> None:
    # Grafana expands $VAR and ${VAR} in provisioning files: a stray `$` would be replaced by an
    # empty string, and every variable used must reach Grafana's environment.
    text = (PROVISIONING / "alerting" / "gistrank.yml").read_text()
    uncommented = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    references = re.findall(r"\$\{?(\w*)\}?", uncommented)
    assert references, "the contact point's URL should come from the environment"
    environment = _compose_config()["services"]["grafana"]["environment"]
    for name in references:
        assert name in environment, f"${name} is not in the grafana service's environment"


# ------------------------------------------------------------------------------------------- compose
def _compose_env() -> dict[str, str]:
    # The one variable compose.yml requires; a real deployment sets its own.
    kafka = {
        f"KAFKA_{user}_PASSWORD": f"test-{user.lower()}"
        for user in ("ADMIN", "PUBLISHER", "CONSUMER", "SERVING")
    }
    return {**os.environ, "GRAFANA_ADMIN_PASSWORD": "test-only", **kafka}


def _compose(*files: Path) -> subprocess.CompletedProcess[str]:
    args = [_tool("docker-compose")]
    for path in files:
        args += ["-f", str(path)]
    return _run([*args, "config"], cwd=DOCKER, env=_compose_env())


_CONFIG_CACHE: dict[tuple[Path, ...], dict[str, Any]] = {}


def _compose_config(*files: Path) -> dict[str, Any]:
    """The stack as docker-compose resolves it (interpolated, paths absolute, ports normalized)."""
    files = files or (COMPOSE,)
    if files not in _CONFIG_CACHE:
        result = _compose(*files)
        assert result.returncode == 0, result.stderr
        _CONFIG_CACHE[files] = yaml.safe_load(result.stdout)
    return _CONFIG_CACHE[files]


def _bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """{container path: host path} of a service's bind mounts (named volumes left out)."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            source, target = volume.get("source", ""), volume["target"]
        else:
            source, target = volume.split(":")[:2]
        if source.startswith("/"):
            mounts[target] = Path(source)
    return mounts


def _published_host_ips(port: str | dict[str, Any]) -> str:
    if isinstance(port, dict):
        return str(port.get("host_ip", ""))
    parts = str(port).split(":")
    # host_ip:published:target[/proto]; a bare port or published:target binds every interface.
    return parts[0] if len(parts) == 3 else ""


@pytest.mark.parametrize("files", [(COMPOSE,), (COMPOSE, COMPOSE_GPU)], ids=["cpu", "gpu"])
def test_compose_file_is_valid(files: tuple[Path, ...]) -> None:
    result = _compose(*files)
    assert result.returncode == 0, result.stderr


def test_compose_requires_the_grafana_admin_password() -> None:
    env = {k: v for k, v in _compose_env().items() if k != "GRAFANA_ADMIN_PASSWORD"}
    result = _run([_tool("docker-compose"), "-f", str(COMPOSE), "config"], cwd=DOCKER, env=env)
    assert result.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in result.stderr


def test_every_kafka_client_authenticates_as_a_user_the_acls_name() -> None:
    """The broker knows each client's user, kafka-acls grants each role to that user, and every service
    that talks to Kafka logs in as its role's user: nothing reaches the topics unauthenticated."""
    from reranker.catalog.kafka_acls import ROLES

    services = _compose_config()["services"]
    kafka = services["kafka"]["environment"]
    users = dict(
        re.findall(r'user_(\w+)="([^"]*)"', kafka["KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"])
    )
    assert (
        kafka["KAFKA_LISTENER_NAME_HOST_PLAIN_SASL_JAAS_CONFIG"]
        == kafka["KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"]
    )
    protocols = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols["INTERNAL"] == protocols["HOST"] == "SASL_PLAINTEXT"
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    command = services["kafka-acls"]["command"]
    roles = {command[i].removeprefix("--"): command[i + 1] for i in range(1, len(command), 2)}
    assert set(roles) == set(ROLES)
    logins = {"kafka-acls": "admin", "consumer": roles["consumer"], "triton": roles["serving"]}
    logins["tools"] = roles["publisher"]
    for service, user in logins.items():
        env = services[service]["environment"]
        assert env["GISTRANK_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT", service
        assert (env["GISTRANK_KAFKA_SASL_USERNAME"], env["GISTRANK_KAFKA_SASL_PASSWORD"]) == (
            user,
            users[user],
        )
    assert "User:admin" in kafka["KAFKA_SUPER_USERS"].split(";")


def test_compose_has_the_whole_stack() -> None:
    services = _compose_config()["services"]
    assert {"kafka", "redis", "triton", "consumer", "prometheus", "grafana"} <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
    assert services["consumer"]["command"][0] == "consume"
    triton_dockerfile = ROOT / services["triton"]["build"]["dockerfile"]
    base = re.search(r"^FROM (\S+)", triton_dockerfile.read_text(), re.M)
    assert base and base[1] == "nvcr.io/nvidia/tritonserver:${TRITON_TAG}-py3"
    assert _bind_mounts(services["triton"])["/app/reranker/triton_repo"] == ROOT / "reranker" / "triton_repo"
    assert _bind_mounts(services["prometheus"])["/etc/prometheus"] == PROMETHEUS


def test_triton_serves_the_model_the_consumer_writes() -> None:
    """The consumer writes rows under its model's fingerprint and Triton reads only its own model's
    view, so each deployment names one model for both (the consumer's --model, else the default)."""
    from reranker.core.checkpoints import DEFAULT_MODEL

    def consumer_model(args: list[str]) -> str:
        return args[args.index("--model") + 1] if "--model" in args else DEFAULT_MODEL

    services = _compose_config()["services"]
    served = services["triton"]["environment"]["GISTRANK_SERVE_MODEL_PATH"]
    assert served == consumer_model(services["consumer"]["command"])

    def container(name: str) -> dict[str, Any]:
        docs = [d for d in yaml.safe_load_all((DOCKER / "k8s" / f"{name}.yaml").read_text()) if d]
        (deployment,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
        (only,) = deployment["spec"]["template"]["spec"]["containers"]
        return only

    env = {e["name"]: e.get("value") for e in container("triton")["env"]}
    assert env["GISTRANK_SERVE_MODEL_PATH"] == consumer_model(container("consumer")["args"])


def test_every_published_port_binds_localhost() -> None:
    for files in ((COMPOSE,), (COMPOSE, COMPOSE_GPU)):
        for name, service in _compose_config(*files)["services"].items():
            for port in service.get("ports", []):
                assert _published_host_ips(port) == "127.0.0.1", f"{name}: {port}"


def test_compose_paths_exist() -> None:
    for name, service in _compose_config()["services"].items():
        for target, source in _bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"
        if "build" in service:
            context = Path(service["build"]["context"])
            assert (context / service["build"]["dockerfile"]).is_file(), name
            dockerfile = (context / service["build"]["dockerfile"]).read_text()
            for source in re.findall(r"^COPY (\S+) ", dockerfile, re.M):
                assert (context / source).exists(), f"{name}: COPY {source}"


def test_gistrank_image_is_the_locked_python_311_environment() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", dockerfile, re.M)
    assert "pip install -r requirements.lock" in dockerfile
    assert re.search(r"pip install --no-deps -e \.", dockerfile)


def test_prometheus_scrapes_the_ports_the_stack_serves_metrics_on() -> None:
    services = _compose_config()["services"]
    triton_env = services["triton"]["environment"]
    consumer_command = services["consumer"]["command"]
    serving = {
        ("triton", str(triton_env["GISTRANK_SERVE_METRICS_PORT"])),
        ("consumer", consumer_command[consumer_command.index("--metrics-port") + 1]),
    }
    scraped = set()
    for job in _load_yaml(PROMETHEUS / "prometheus.yml")["scrape_configs"]:
        for static in job["static_configs"]:
            for target in static["targets"]:
                host, port = target.rsplit(":", 1)
                if host != "localhost":  # Prometheus itself
                    scraped.add((host, port))
    assert scraped == serving


def test_consumer_command_uses_only_options_gistrank_consume_accepts() -> None:
    import typer.main

    from reranker.cli import app

    commands = typer.main.get_command(app).commands
    assert "consume" in commands, "`gistrank consume` is not registered in reranker/cli/"
    accepted = {opt for param in commands["consume"].params for opt in (*param.opts, *param.secondary_opts)}
    used = [arg for arg in _compose_config()["services"]["consumer"]["command"][1:] if arg.startswith("--")]
    assert set(used) <= accepted, f"not options of `gistrank consume`: {sorted(set(used) - accepted)}"


# ---------------------------------------------------------------------------- Triton container start
def _entrypoint() -> ModuleType:
    spec = importlib.util.spec_from_file_location("triton_entrypoint", DOCKER / "triton" / "entrypoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_triton_entrypoint_writes_the_compose_deployment_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reranker.serving.runtime import FullParams, GistParams
    from reranker.serving.server import FULL_MODEL, GIST_MODEL, read_parameters, write_repository

    entrypoint = _entrypoint()
    env = {k: str(v) for k, v in _compose_config()["services"]["triton"]["environment"].items()}
    settings = entrypoint.settings_from_env(env)
    repo = write_repository(tmp_path / "models", settings.parameters(), settings.instance_counts())
    gist = read_parameters((repo / GIST_MODEL / "config.pbtxt").read_text())
    full = read_parameters((repo / FULL_MODEL / "config.pbtxt").read_text())
    assert "redis://" not in str(gist) + str(full)  # Triton serves the configs: URLs come from the env
    # The model processes parse these at load, in tritonserver's environment; a bad value would fail the
    # container's start.
    for name, value in entrypoint.exec_environment(settings, env).items():
        monkeypatch.setenv(name, value)
    gist_params, full_params = GistParams.parse(gist), FullParams.parse(full)
    assert settings.host == "0.0.0.0" and settings.metrics_port == 8002  # gistrank_* go out through Triton
    assert gist_params.kafka_bootstrap_servers == "kafka:9092"
    assert gist_params.feast_online == "redis"
    assert gist_params.redis_url == "redis://redis:6379/0"
    assert gist_params.catalog_url == full_params.catalog_url == "sqlite:////app/var/catalog.db"
    command = entrypoint.tritonserver_command(settings, repo)
    assert f"--model-repository={repo}" in command
    assert {"--metrics-port=8002", "--http-port=8000", "--grpc-port=8001"} <= set(command)
    assert "--metrics-address=0.0.0.0" in command


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GISTRANK_SERVE_MODEL_PATH": "m", "GISTRANK_SERVE_HTTP_PROT": "8000"}, "names no setting"),
        ({"GISTRANK_SERVE_MODEL_PATH": "m", "GISTRANK_SERVE_HTTP_PORT": "http"}, "not a valid int"),
        ({"GISTRANK_SERVE_SHADOW_RATE": "0.1"}, "MODEL_PATH is required"),
    ],
)
def test_triton_entrypoint_refuses_bad_settings(env: dict[str, str], message: str) -> None:
    entrypoint = _entrypoint()
    with pytest.raises(entrypoint.SettingsError, match=message):
        entrypoint.settings_from_env(env)


def test_triton_stub_environment_names_the_project_and_the_environment() -> None:
    entrypoint = _entrypoint()
    paths = entrypoint.stub_environment({"PYTHONPATH": "/extra"})["PYTHONPATH"].split(os.pathsep)
    assert paths[0] == str(ROOT) and paths[-1] == "/extra" and len(paths) == 3
