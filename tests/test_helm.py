"""The Helm chart, checked the way chart-testing would, without a cluster or a helm binary.

helm-python-sdk bundles the Helm v4 Go library (lint, values.schema.json, render), and
kubernetes-validate holds the Kubernetes OpenAPI schemas offline. The chart is rendered with
its default values and with every ci/*-values.yaml file, linted, validated against the
oldest and newest Kubernetes versions the chart accepts, and then read like a reviewer
would: the security context, the probes, the agent's placement and the selectors that must
agree across objects.
"""

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan import __version__

pytestmark = pytest.mark.helm

helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk (the dev extra)")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

from gpuplan.cli.commands.agent import agent_command  # noqa: E402
from gpuplan.config.settings import load_settings  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "gpuplan"
VALUE_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
# The chart's kubeVersion floor and the newest schema kubernetes-validate ships.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ScaledObject"}
"""Kinds of CRDs (the Prometheus Operator's, KEDA's): no Kubernetes schema to check."""
RELEASE, NAMESPACE = "demo", "gpuplan"


def _values(name: str) -> dict[str, Any]:
    if name == "default":
        return {}
    return yaml.safe_load((CHART / "ci" / name).read_text()) or {}


def _render_values(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifests of a render, NOTES.txt aside."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    docs: list[dict[str, Any]] = []
    for path, text in rendered.items():
        if not path.endswith("NOTES.txt"):
            docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


@functools.cache
def _render(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(_render_values(_values(name)))


def _objects(name: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in _render(name) if doc["kind"] == kind]


def _one(name: str, kind: str, component: str | None = None) -> dict[str, Any]:
    found = [
        doc
        for doc in _objects(name, kind)
        if component is None
        or doc["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects for {component}"
    return found[0]


CASES = ["default", *(path.name for path in VALUE_FILES)]


def test_ci_values_files_exist() -> None:
    assert "full-values.yaml" in CASES


@pytest.mark.parametrize("case", CASES)
def test_lint_has_no_warnings(case: str) -> None:
    report = helm.lint(CHART, _values(case), strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    # Severity 1 is informational ("icon is recommended"); warnings and errors fail.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(case: str, kube_version: str) -> None:
    docs = [doc for doc in _render(case) if doc["kind"] not in OPERATOR_KINDS]
    assert docs
    for doc in docs:
        # strict: an unknown field (a misplaced key) is an error, as kubectl --validate=strict.
        kubernetes_validate.validate(doc, kube_version, strict=True)
        assert doc["metadata"]["namespace"] == NAMESPACE or doc["kind"] == "ConfigMap"


def test_default_install_is_the_api_alone() -> None:
    kinds = sorted(doc["kind"] for doc in _render("default"))
    assert kinds == [
        "ConfigMap", "ConfigMap", "ConfigMap", "Deployment", "HorizontalPodAutoscaler",
        "NetworkPolicy", "PodDisruptionBudget", "Service", "ServiceAccount",
    ]  # fmt: skip
    # No CRDs in an offline render, so no operator objects; no agent, no Redis.
    assert not _objects("default", "DaemonSet")


def test_full_values_render_every_part() -> None:
    kinds = {doc["kind"] for doc in _render("full-values.yaml")}
    assert {"DaemonSet", "Ingress", "ServiceMonitor", "PodMonitor", "PrometheusRule"} <= kinds
    assert len(_objects("full-values.yaml", "Deployment")) == 3  # the API, workers and Redis
    assert len(_objects("full-values.yaml", "NetworkPolicy")) == 4


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _assert_hardened(workload: dict[str, Any]) -> None:
    pod = workload["spec"]["template"]["spec"]
    container = _container(workload)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in ctx
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False  # else GPUPLAN_PORT=tcp://... breaks start-up
    assert "memory" in container["resources"]["limits"]
    assert container["resources"]["requests"]


@pytest.mark.parametrize("case", CASES)
def test_every_workload_is_hardened(case: str) -> None:
    workloads = _objects(case, "Deployment") + _objects(case, "DaemonSet")
    for workload in workloads:
        _assert_hardened(workload)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_api_deployment() -> None:
    deployment = _one("default", "Deployment", "api")
    container = _container(deployment)
    assert container["args"] == ["gpuplan", "serve"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    # The read-only root needs one writable directory: /tmp (multi-worker metrics files).
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert _env(container)["TMPDIR"] == "/tmp"
    # With the HPA on, the Deployment leaves the replica count to it.
    assert "replicas" not in deployment["spec"]
    hpa = _one("default", "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] == 2


def test_api_tokens_come_from_a_mounted_secret_and_cors_from_a_list() -> None:
    deployment = _one("full-values.yaml", "Deployment", "api")
    container = _container(deployment)
    env = _env(container)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    secret = volumes["api-tokens"]["secret"]
    assert secret["secretName"] == "gpuplan-api-tokens"
    assert mounts["api-tokens"]["readOnly"] is True
    path = f"{mounts['api-tokens']['mountPath']}/{secret['items'][0]['path']}"
    assert env["GPUPLAN_API_TOKENS_FILE"] == path
    assert (
        env["GPUPLAN_CORS_ALLOW_ORIGINS"] == "https://dash.example.com,https://grafana.example.com"
    )
    # The default install has neither: no authentication, CORS off.
    default = _env(_container(_one("default", "Deployment", "api")))
    assert "GPUPLAN_API_TOKENS_FILE" not in default
    assert "GPUPLAN_CORS_ALLOW_ORIGINS" not in default
    assert default["GPUPLAN_ANSWER_CACHE_BYTES"] == str(16 * 1024 * 1024)


def test_the_api_reads_the_chart_s_token_file(tmp_path: Path) -> None:
    """The settings loader and the app accept the file the chart mounts (here written
    to a temporary path with the Secret's content)."""
    from litestar.testing import TestClient

    from gpuplan.api.app import create_app

    env = _env(_container(_one("full-values.yaml", "Deployment", "api")))
    tokens = tmp_path / Path(env["GPUPLAN_API_TOKENS_FILE"]).name
    tokens.write_text("a" * 32 + "\n" + "b" * 32 + "\n")
    plain = {k: v for k, v in env.items() if isinstance(v, str) and k.startswith("GPUPLAN_")}
    plain.pop("GPUPLAN_CATALOG_FILE")
    plain["GPUPLAN_API_TOKENS_FILE"] = str(tokens)
    with TestClient(app=create_app(load_settings(plain))) as client:
        assert client.get("/v1/gpus").status_code == 401
        ok = client.get("/v1/gpus", headers={"authorization": "Bearer " + "b" * 32})
        assert ok.status_code == 200


@pytest.mark.parametrize(("grace", "expected"), [(None, 25), (60, 55), (3, 1)])
def test_workers_stop_by_themselves_before_the_kubelet_kills_them(
    grace: int | None, expected: int
) -> None:
    values = {} if grace is None else {"api": {"terminationGracePeriodSeconds": grace}}
    (deployment,) = (
        doc
        for doc in _render_values(values)
        if doc["kind"] == "Deployment"
        and doc["metadata"]["labels"].get("app.kubernetes.io/component") == "api"
    )
    pod = deployment["spec"]["template"]["spec"]
    env = _env(_container(deployment))
    settings = load_settings(
        {"GPUPLAN_SHUTDOWN_TIMEOUT_SECONDS": env["GPUPLAN_SHUTDOWN_TIMEOUT_SECONDS"]}
    )
    assert settings.shutdown_timeout_seconds == expected
    assert settings.shutdown_timeout_seconds < pod["terminationGracePeriodSeconds"]


def test_api_environment_is_accepted_by_the_settings_loader() -> None:
    for case in CASES:
        env = _env(_container(_one(case, "Deployment", "api")))
        plain = {k: v for k, v in env.items() if isinstance(v, str) and k.startswith("GPUPLAN_")}
        if "GPUPLAN_REDIS_URL" in env and not isinstance(env["GPUPLAN_REDIS_URL"], str):
            plain["GPUPLAN_REDIS_URL"] = "redis://from-secret:6379/0"
        plain.pop("GPUPLAN_CATALOG_FILE", None)  # a path inside the pod
        plain.pop("GPUPLAN_API_TOKENS_FILE", None)
        settings = load_settings(plain)
        assert settings.port == 8000
        assert settings.host == "0.0.0.0"


def test_fixed_replicas_without_autoscaling() -> None:
    deployment = _one("external-redis-values.yaml", "Deployment", "api")
    assert deployment["spec"]["replicas"] == 3
    scaled = _objects("external-redis-values.yaml", "HorizontalPodAutoscaler")
    assert [h["metadata"]["labels"]["app.kubernetes.io/component"] for h in scaled] == ["worker"]


def test_service_and_pdb_select_the_api_pods() -> None:
    deployment = _one("default", "Deployment", "api")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = _one("default", "Service", "api")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    pdb = _one("default", "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


def test_agent_daemonset_runs_on_gpu_nodes_only() -> None:
    daemonset = _one("full-values.yaml", "DaemonSet", "agent")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["runtimeClassName"] == "nvidia"
    container = _container(daemonset)
    env = _env(container)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["GPUPLAN_AGENT_REDIS_URL"] == "redis://demo-gpuplan-redis:6379/0"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # An empty runtimeClassName leaves the node's default runtime.
    other = _one("external-redis-values.yaml", "DaemonSet", "agent")
    assert "runtimeClassName" not in other["spec"]["template"]["spec"]


@pytest.mark.parametrize("case", ["full-values.yaml", "external-redis-values.yaml"])
def test_agent_arguments_parse_with_the_real_cli(case: str) -> None:
    container = _container(_one(case, "DaemonSet", "agent"))
    program, command, *args = container["args"]
    assert (program, command) == ("gpuplan", "agent")
    context = agent_command.make_context("agent", list(args))
    assert context.params["metrics_port"] == 9400
    assert context.params["key_prefix"] == "gpuplan:v1:"
    if case == "full-values.yaml":
        assert context.params["benchmark"] is True
        assert context.params["benchmark_interval_seconds"] == 21600
    else:
        assert context.params["benchmark"] is False


def test_external_redis_url_comes_from_a_secret() -> None:
    (secret,) = _objects("external-redis-values.yaml", "Secret")
    url = secret["stringData"]["redis-url"]
    assert url.startswith("rediss://")
    for kind, component, name in (
        ("Deployment", "api", "GPUPLAN_REDIS_URL"),
        ("DaemonSet", "agent", "GPUPLAN_AGENT_REDIS_URL"),
    ):
        workload = _one("external-redis-values.yaml", kind, component)
        ref = _env(_container(workload))[name]["secretKeyRef"]
        assert ref == {"name": secret["metadata"]["name"], "key": "redis-url"}
        # A changed URL rolls the pods.
        assert "checksum/redis-url" in workload["spec"]["template"]["metadata"]["annotations"]


def test_existing_secret_is_referenced_not_created() -> None:
    values = {"redis": {"external": {"enabled": True, "existingSecret": "ops-redis"}}}
    docs = _render_values(values)
    assert not [d for d in docs if d["kind"] == "Secret"]
    (api,) = [d for d in docs if d["kind"] == "Deployment"]
    env = _env(_container(api))
    assert env["GPUPLAN_REDIS_URL"]["secretKeyRef"]["name"] == "ops-redis"


def _worker_environment(container: dict[str, Any]) -> dict[str, str]:
    """The worker container's plain variables, and stand-ins for those a pod fills in."""
    env: dict[str, str] = {}
    for item in container["env"]:
        env[item["name"]] = item.get("value", "redis://redis.example.com:6379/0")
    env["GPUPLAN_WORKER_NAME"] = "demo-gpuplan-worker-abc"
    return env


@pytest.mark.parametrize("case", ["full-values.yaml", "external-redis-values.yaml"])
def test_worker_deployment_reads_the_api_s_queue(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuplan.cli.commands.worker import worker_command

    worker = _one(case, "Deployment", "worker")
    container = _container(worker)
    assert container["args"] == ["gpuplan", "worker"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9500, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert "startupProbe" in container
    pod = worker["spec"]["template"]["spec"]
    # SIGTERM lets the running job finish within its time limit.
    limit = _values(case).get("worker", {}).get("traceTimeoutSeconds", 120)
    assert pod["terminationGracePeriodSeconds"] > limit
    # The real command reads the worker's variables.
    for name, value in _worker_environment(container).items():
        monkeypatch.setenv(name, value)
    context = worker_command.make_context("worker", [])
    assert context.params["queue_prefix"] == "gpuplan:jobs:"
    assert context.params["metrics_port"] == 9500
    # The API is told to queue, on the same prefix, with the same time limit.
    api = _env(_container(_one(case, "Deployment", "api")))
    assert api["GPUPLAN_JOB_QUEUE"] == "true"
    assert api["GPUPLAN_JOB_QUEUE_PREFIX"] == context.params["queue_prefix"]
    assert float(api["GPUPLAN_TRACE_TIMEOUT_SECONDS"]) == limit
    env = {k: v for k, v in api.items() if isinstance(v, str)}
    env["GPUPLAN_REDIS_URL"] = "redis://redis.example.com:6379/0"
    env.pop("GPUPLAN_CATALOG_FILE", None)
    env.pop("GPUPLAN_API_TOKENS_FILE", None)
    assert load_settings(env).job_queue is True


def test_no_worker_no_queue() -> None:
    api = _env(_container(_one("default", "Deployment", "api")))
    assert "GPUPLAN_JOB_QUEUE" not in api
    assert not [d for d in _render("default") if d["kind"] == "ScaledObject"]


def test_workers_scale_on_queue_depth_with_keda_else_on_cpu() -> None:
    from gpuplan.jobs.queue import queue_names

    (scaled,) = _objects("full-values.yaml", "ScaledObject")
    worker = _one("full-values.yaml", "Deployment", "worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert "replicas" not in worker["spec"]
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (0, 20)
    lists = [t["metadata"]["listName"] for t in scaled["spec"]["triggers"]]
    assert lists == [f"rq:queue:{name}" for name in queue_names("gpuplan:jobs:")]
    for trigger in scaled["spec"]["triggers"]:
        assert trigger["type"] == "redis"
        assert trigger["metadata"]["address"] == "demo-gpuplan-redis.gpuplan.svc:6379"
    hpas = _objects("full-values.yaml", "HorizontalPodAutoscaler")
    assert [h["metadata"]["labels"]["app.kubernetes.io/component"] for h in hpas] == ["api"]
    # Without KEDA: an HPA on CPU.
    (hpa,) = [
        h
        for h in _objects("external-redis-values.yaml", "HorizontalPodAutoscaler")
        if h["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    ]
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert not _objects("external-redis-values.yaml", "ScaledObject")


def _pod_monitor(kind: str, component: str, job: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full values' PodMonitor of ``component``, checked: it selects the pods of the
    ``kind`` workload of ``component`` and scrapes them through one endpoint that labels
    them ``job``. Returns that endpoint and the workload."""
    monitor = _one("full-values.yaml", "PodMonitor", component)
    workload = _one("full-values.yaml", kind, component)
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert {"targetLabel": "job", "replacement": job} in endpoint["relabelings"]
    return endpoint, workload


def test_worker_pod_monitor_labels_the_workers_job() -> None:
    _pod_monitor("Deployment", "worker", job="gpuplan-worker")


def test_internal_redis_is_one_hardened_instance_only_our_pods_reach() -> None:
    redis = _one("full-values.yaml", "Deployment", "redis")
    assert redis["spec"]["replicas"] == 1
    args = _container(redis)["args"]
    assert args[args.index("--save") + 1] == ""  # no persistence
    policy = _one("full-values.yaml", "NetworkPolicy", "redis")
    peers = policy["spec"]["ingress"][0]["from"]
    components = sorted(
        p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in peers
    )
    assert components == ["agent", "api", "worker"]
    assert policy["spec"]["egress"] == []


def _ports(rule: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(p["protocol"], p["port"]) for p in rule["ports"]]


@pytest.mark.parametrize("case", CASES)
def test_network_policies_allow_only_our_ports_dns_and_redis(case: str) -> None:
    for policy in _objects(case, "NetworkPolicy"):
        component = policy["metadata"]["labels"]["app.kubernetes.io/component"]
        spec = policy["spec"]
        assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
        served = {
            "api": ("TCP", "http"),
            "agent": ("TCP", "metrics"),
            "worker": ("TCP", "metrics"),
            "redis": ("TCP", "redis"),
        }
        assert [port for rule in spec["ingress"] for port in _ports(rule)] == [served[component]]
        if component == "redis":
            continue
        egress = [port for rule in spec["egress"] for port in _ports(rule)]
        assert egress[:2] == [("UDP", 53), ("TCP", 53)]
        redis_ports = egress[2:]
        values = _values(case).get("redis", {})
        if values.get("internal", {}).get("enabled"):
            assert redis_ports == [("TCP", 6379)]
        elif values.get("external", {}).get("enabled"):
            assert redis_ports == [("TCP", values["external"].get("port", 6379))]
        else:
            assert redis_ports == []


def test_operator_objects_only_when_the_crds_exist() -> None:
    default = {doc["kind"] for doc in _render("default")}
    assert not default & OPERATOR_KINDS
    values = {"monitoring": {"assumeCRDs": True}}
    kinds = {d["kind"] for d in _render_values(values)}
    # No agent by default, so no PodMonitor.
    assert kinds & OPERATOR_KINDS == {"ServiceMonitor", "PrometheusRule"}


def test_service_monitor_scrapes_the_api_service() -> None:
    monitor = _one("full-values.yaml", "ServiceMonitor")
    service = _one("full-values.yaml", "Service", "api")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert {"targetLabel": "job", "replacement": "gpuplan-api"} in endpoint["relabelings"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_pod_monitor_scrapes_the_agents() -> None:
    endpoint, daemonset = _pod_monitor("DaemonSet", "agent", job="gpuplan-agent")
    assert endpoint["port"] == _container(daemonset)["ports"][0]["name"]


def test_prometheus_rule_is_the_rules_file() -> None:
    rule = _one("full-values.yaml", "PrometheusRule")
    source = yaml.safe_load((ROOT / "deploy" / "prometheus" / "gpuplan.rules.yaml").read_text())
    assert rule["spec"] == source
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {
        "GpuplanAgentDown", "GpuplanBenchmarkStale", "GpuplanMatmulFarBelowPeak",
        "GpuplanApiErrorRatio", "GpuplanApiLatencyP99",
    } <= alerts  # fmt: skip


def test_dashboard_config_maps_carry_the_sidecar_label_and_the_json() -> None:
    maps = _objects("full-values.yaml", "ConfigMap")
    assert len(maps) == 3
    sources = {p.name: p.read_text() for p in (ROOT / "deploy" / "grafana").glob("*.json")}
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "GPU"}
        ((name, text),) = config_map["data"].items()
        assert text.rstrip("\n") == sources[name].rstrip("\n")


@pytest.mark.parametrize(
    ("source", "packaged"),
    [
        (ROOT / "deploy" / "grafana", CHART / "files" / "dashboards"),
        (ROOT / "deploy" / "prometheus", CHART / "files" / "prometheus"),
    ],
)
def test_chart_copies_equal_their_sources(source: Path, packaged: Path) -> None:
    # deploy/grafana and deploy/prometheus are the sources; the chart cannot read outside
    # its directory, so it carries copies: cp deploy/grafana/*.json deploy/helm/gpuplan/files/dashboards/
    copies = {p.name: p.read_bytes() for p in packaged.iterdir()}
    originals = {p.name: p.read_bytes() for p in source.iterdir() if p.name in copies}
    assert copies, packaged
    assert copies == originals, f"stale copy in {packaged}: copy the files from {source}"
    if source.name == "grafana":
        assert set(copies) == {p.name for p in source.glob("*.json")}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"api": {"replcas": 3}}, "additional properties 'replcas' not allowed"),
        ({"agent": {"backend": "cuda"}}, "/agent/backend"),
        ({"api": {"image": {"digest": "latest"}}}, "/api/image/digest"),
        (
            {
                "redis": {
                    "internal": {"enabled": True},
                    "external": {"enabled": True, "url": "redis://r"},
                }
            },
            "exclusive",
        ),
        ({"redis": {"external": {"enabled": True}}}, "existingSecret or redis.external.url"),
        ({"api": {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}}, "minReplicas"),
        ({"api": {"corsAllowOrigins": ["dash.example.com"]}}, "/api/corsAllowOrigins/0"),
        ({"api": {"auth": {"existingSecret": "s", "existingSecretKey": ""}}}, "existingSecretKey"),
        ({"api": {"answerCacheBytes": -1}}, "/api/answerCacheBytes"),
        ({"worker": {"enabled": True}}, "worker.enabled needs a Redis"),
        ({"worker": {"queuePrefix": "has space"}}, "/worker/queuePrefix"),
        (
            {
                "worker": {"enabled": True, "autoscaling": {"keda": {"assumeCRDs": True}}},
                "redis": {"external": {"enabled": True, "url": "redis://r:6379/0"}},
            },
            "worker.autoscaling.keda.address",
        ),
    ],
)
def test_bad_values_are_refused_with_a_message(values: dict[str, Any], message: str) -> None:
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmError, match=message):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_digest_pins_the_image() -> None:
    image = _container(_one("full-values.yaml", "Deployment", "api"))["image"]
    assert image.startswith("registry.example.com/gpuplan@sha256:")
    assert _container(_one("default", "Deployment", "api"))["image"] == f"gpuplan:{__version__}"


def test_the_chart_carries_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == __version__


def test_notes_name_the_service() -> None:
    with helm.Chart.load(CHART) as chart:
        notes = chart.render({}, name=RELEASE, namespace=NAMESPACE)["gpuplan/templates/NOTES.txt"]
    assert "svc/demo-gpuplan-api" in notes
    assert "CRDs" in notes  # no operator in an offline render: says how to scrape instead


def test_packaged_chart_carries_the_dashboards_and_renders_the_same(tmp_path: Path) -> None:
    archive = Path(helm.package(CHART, destination=tmp_path))
    with helm.Chart.load_archive(archive.read_bytes()) as chart:
        files = {f["name"] for f in chart.files}
        rendered = chart.render(_values("full-values.yaml"), name=RELEASE, namespace=NAMESPACE)
    assert {"files/dashboards/gpuplan-fleet.json", "files/prometheus/gpuplan.rules.yaml"} <= files
    assert not any(name.startswith("ci/") for name in files)  # .helmignore
    docs = [
        d
        for p, t in rendered.items()
        if not p.endswith("NOTES.txt")
        for d in yaml.safe_load_all(t)
        if d
    ]
    assert docs == list(_render("full-values.yaml"))
