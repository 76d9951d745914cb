"""Every manifest in deploy/ is something Kubernetes (and Envoy, and Prometheus) would accept.

Aspects: each Kubernetes object in deploy/ passes the real OpenAPI schemas of two recent
Kubernetes versions (strict); each InferencePool passes the CRD's openAPIV3Schema (jsonschema;
the CEL rules are not evaluated here, so the pydantic models, which carry the same rules, check
it too); Prometheus Operator kinds have no schema in kubernetes-validate and get a structural
check only. The Envoy bootstrap passes `envoy --mode validate` with the real binary and points
at the chart's xDS Service; the scrape config passes `promtool check config` (with static
targets swapped in: Debian's Prometheus is built without Kubernetes discovery); the vLLM fleet,
its pool, the Envoy route and the PodMonitor agree on labels, ports and cluster names.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from trimtab.api.resource import InferencePool

from .rendering import (
    NAMESPACE,
    PROMETHEUS_OPERATOR_KINDS,
    RELEASE,
    REPO,
    Manifest,
    validate_k8s,
)

DEPLOY = REPO / "deploy"
CRD = REPO / "crds" / "inferencepool.yaml"


def load_all(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def deploy_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.is_file())


def crd_schema() -> dict[str, Any]:
    (crd,) = load_all(CRD)
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def check_inference_pool(manifest: Manifest) -> None:
    # OpenAPI v3.0 schemas use draft-4 style booleans for exclusiveMinimum/Maximum.
    jsonschema.Draft4Validator(crd_schema()).validate(manifest)
    InferencePool.model_validate(manifest)


def check_prometheus_operator_object(manifest: Manifest) -> None:
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["metadata"]["name"]
    assert isinstance(manifest["spec"], dict) and manifest["spec"]


def test_deploy_has_every_part() -> None:
    folders = {p.parent.relative_to(DEPLOY).as_posix() for p in deploy_files()}
    assert {"vllm", "envoy", "prometheus", "examples"} <= folders
    engines = {
        doc["spec"].get("engine", "vllm")
        for path in (DEPLOY / "examples").glob("*.yaml")
        for doc in load_all(path)
        if doc["kind"] == "InferencePool"
    }
    assert {"vllm", "sglang", "tgi"} <= engines


@pytest.mark.parametrize("path", deploy_files(), ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_deploy_manifest_is_valid(path: Path) -> None:
    documents = load_all(path)
    assert documents, f"{path} holds no manifest"
    for manifest in documents:
        if manifest["kind"] == "InferencePool":
            check_inference_pool(manifest)
        elif manifest["kind"] in PROMETHEUS_OPERATOR_KINDS:
            check_prometheus_operator_object(manifest)
        else:
            validate_k8s(manifest)


def test_the_pool_check_rejects_a_bad_pool() -> None:
    (pool,) = load_all(DEPLOY / "examples" / "vllm-pool.yaml")
    pool["spec"]["engine"] = "llama.cpp"
    with pytest.raises(jsonschema.ValidationError):
        check_inference_pool(pool)


def by_kind(path: Path, kind: str) -> Manifest:
    (found,) = [m for m in load_all(path) if m["kind"] == kind]
    return found


def envoy_bootstrap() -> dict[str, Any]:
    configmap = by_kind(DEPLOY / "envoy" / "envoy.yaml", "ConfigMap")
    bootstrap = yaml.safe_load(configmap["data"]["envoy.yaml"])
    assert isinstance(bootstrap, dict)
    return bootstrap


def test_envoy_bootstrap_passes_envoy_validation(envoy: Path, scratch: Path) -> None:
    configmap = by_kind(DEPLOY / "envoy" / "envoy.yaml", "ConfigMap")
    (scratch / "envoy.yaml").write_text(configmap["data"]["envoy.yaml"])
    result = subprocess.run(
        [
            str(envoy),
            "--mode",
            "validate",
            "--config-path",
            str(scratch / "envoy.yaml"),
            "--service-node",
            "validate",
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "--log-level",
            "warn",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_envoy_talks_ads_to_the_charts_service() -> None:
    bootstrap = envoy_bootstrap()
    (ads,) = bootstrap["dynamic_resources"]["ads_config"]["grpc_services"]
    xds_cluster = ads["envoy_grpc"]["cluster_name"]
    (cluster,) = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == xds_cluster]
    (endpoint,) = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    address = endpoint["endpoint"]["address"]["socket_address"]
    assert address == {"address": f"{RELEASE}.{NAMESPACE}.svc", "port_value": 18000}
    assert bootstrap["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"


def test_envoy_runs_with_one_worker() -> None:
    deployment = by_kind(DEPLOY / "envoy" / "envoy.yaml", "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--concurrency=1" in container["args"]


def test_fleet_pool_envoy_and_podmonitor_agree() -> None:
    (pool,) = load_all(DEPLOY / "examples" / "vllm-pool.yaml")
    fleet = by_kind(DEPLOY / "vllm" / "vllm.yaml", "Deployment")
    pod = fleet["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert pool["metadata"]["namespace"] == fleet["metadata"]["namespace"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["spec"]["containers"]
    ports = {p["containerPort"] for p in container["ports"]}
    assert {p["number"] for p in pool["spec"]["targetPorts"]} <= ports
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) in ports
    # Envoy routes to the cluster that trimtab serves for this pool.
    clusters = {t["envoy"]["cluster"] for t in pool["spec"]["targets"] if "envoy" in t}
    listener = envoy_bootstrap()["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    assert {r["route"]["cluster"] for r in routes} <= clusters
    monitor = by_kind(DEPLOY / "prometheus" / "podmonitor.yaml", "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    port_names = {p["name"] for p in container["ports"]}
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= port_names


def test_scrape_config_passes_promtool(promtool: Path, scratch: Path) -> None:
    configmap = by_kind(DEPLOY / "prometheus" / "scrape-config.yaml", "ConfigMap")
    config = yaml.safe_load(configmap["data"]["prometheus.yml"])
    for job in config["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs")
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    (scratch / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [str(promtool), "check", "config", str(scratch / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    trimtab_job = next(j for j in config["scrape_configs"] if j["job_name"] == "trimtab")
    assert trimtab_job["honor_labels"] is True


def test_envoy_ports_and_probes_match_the_bootstrap_listeners() -> None:
    # Guards a regenerated bootstrap (`trimtab envoy-bootstrap`): the Deployment's ports and
    # probes must still land on listeners that Envoy binds on every interface.
    deployment = by_kind(DEPLOY / "envoy" / "envoy.yaml", "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    bound = {
        listener["address"]["socket_address"]["port_value"]
        for listener in envoy_bootstrap()["static_resources"]["listeners"]
        if listener["address"]["socket_address"]["address"] == "0.0.0.0"
    }
    assert set(ports.values()) == bound
    for probe in ("readinessProbe", "livenessProbe"):
        assert ports[container[probe]["httpGet"]["port"]] in bound
