"""The Helm chart renders, lints, and produces manifests that Kubernetes would accept.

Aspects: `helm lint` (default and all options on); every rendered object, the CRD included,
validated against the real Kubernetes OpenAPI schemas of two recent versions (strict: unknown
fields fail), except Prometheus Operator kinds, which have no schema there and are checked by
test_chart_monitoring.py; values.schema.json rejects bad values; the chart's CRD is the
generated one, byte for byte; the Deployment's security context, probes, ports, env and args.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from .rendering import (
    ALL_ON,
    CHART,
    NAMESPACE,
    NAMESPACED,
    PROMETHEUS_OPERATOR_KINDS,
    REPO,
    Manifest,
    only,
    render,
    run_helm,
    validate_k8s,
)


def test_chart_lints(helm: Path) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_lints_with_every_option(helm: Path) -> None:
    sets = [arg for key, value in ALL_ON.items() for arg in ("--set", f"{key}={value}")]
    result = run_helm(helm, "lint", "--strict", str(CHART), *sets)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mode", ["default", "all", "namespaced"])
def test_rendered_manifests_are_valid_kubernetes(
    mode: str,
    rendered_default: list[Manifest],
    rendered_all: list[Manifest],
    rendered_namespaced: list[Manifest],
) -> None:
    manifests = {
        "default": rendered_default,
        "all": rendered_all,
        "namespaced": rendered_namespaced,
    }
    checked = 0
    for manifest in manifests[mode]:
        if manifest["kind"] in PROMETHEUS_OPERATOR_KINDS:
            continue
        validate_k8s(manifest)
        checked += 1
    assert checked >= 8


def test_default_render_has_the_expected_objects(rendered_default: list[Manifest]) -> None:
    kinds = sorted(m["kind"] for m in rendered_default)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",  # the Grafana dashboard
            "CustomResourceDefinition",
            "Deployment",
            "PodDisruptionBudget",
            "Role",  # leader election
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    )


def test_optional_parts_render_when_enabled(rendered_all: list[Manifest]) -> None:
    kinds = {m["kind"] for m in rendered_all}
    assert {"ServiceMonitor", "PrometheusRule", "NetworkPolicy"} <= kinds


def test_chart_crd_is_the_generated_crd() -> None:
    generated = REPO / "crds" / "inferencepool.yaml"
    copied = CHART / "crds" / "inferencepool.yaml"
    assert copied.read_bytes() == generated.read_bytes(), (
        "charts/trimtab/crds/inferencepool.yaml differs from crds/inferencepool.yaml: "
        "cp crds/inferencepool.yaml charts/trimtab/crds/"
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"unknownKey": "1"},
        {"ports.xds": "0"},
        {"operator.logFormat": "xml"},
        {"replicaCount": "0"},
        {"watch.allNamespaces": "false"},  # and no namespaces
        {"watch.namespaces": "{serving}"},  # namespaces while watching all
        {"image.digest": "latest"},
        {"prometheusRule.kvPinned": "1.5"},
    ],
    ids=lambda bad: ",".join(bad),
)
def test_values_schema_rejects(helm: Path, bad: dict[str, str]) -> None:
    sets = [arg for key, value in bad.items() for arg in ("--set", f"{key}={value}")]
    result = run_helm(helm, "template", "trimtab", str(CHART), *sets)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower() or "values don't meet" in result.stderr.lower()


def _container(manifests: list[Manifest]) -> dict[str, Any]:
    pod = only(manifests, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert isinstance(container, dict)
    return container


def test_deployment_is_locked_down(rendered_default: list[Manifest]) -> None:
    deployment = only(rendered_default, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = _container(rendered_default)["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] == 65532
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    resources = _container(rendered_default)["resources"]
    assert set(resources) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]


def test_deployment_ports_probes_and_env(rendered_default: list[Manifest]) -> None:
    container = _container(rendered_default)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"xds": 18000, "http-metrics": 9090, "liveness": 8080}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    service = only(rendered_default, "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "xds": 18000,
        "http-metrics": 9090,
    }
    # deploy/envoy/ and `trimtab envoy-bootstrap` point Envoys at this address.
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == (
        "trimtab",
        NAMESPACE,
    )


def test_args_all_namespaces(rendered_default: list[Manifest]) -> None:
    assert _container(rendered_default)["args"] == [
        "run",
        "--all-namespaces",
        "--liveness-port=8080",
        "--metrics-port=9090",
        "--xds-port=18000",
        "--log-format=json",
        "--leader-election",
    ]


def test_args_namespaced(helm: Path) -> None:
    manifests = render(helm, {**NAMESPACED, "operator.extraArgs": "{--verbose}"})
    args = _container(manifests)["args"]
    assert args[:3] == ["run", "--namespace=serving", "--namespace=batch"]
    assert "--all-namespaces" not in args
    assert args[-1] == "--verbose"


def test_image_digest_wins_over_tag(helm: Path) -> None:
    digest = "sha256:" + "a" * 64
    manifests = render(helm, {"image.digest": digest, "image.tag": "9.9.9"})
    assert _container(manifests)["image"] == f"trimtab/trimtab@{digest}"
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert _container(render(helm))["image"] == f"trimtab/trimtab:{app_version}"


def test_notes_tell_the_user_what_to_do_next(helm: Path) -> None:
    # --dry-run=client renders NOTES.txt without a cluster (helm template does not).
    result = run_helm(
        helm, "install", "trimtab", str(CHART), "--namespace", NAMESPACE, "--dry-run=client"
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    for step in (
        "kubectl apply -f deploy/examples/",
        "kubectl get inferencepools",
        "kubectl describe ipool",
        "kubectl get events",
        "trimtab envoy-bootstrap",
        f"trimtab.{NAMESPACE}.svc:18000",
    ):
        assert step in notes


def _leaf_paths(tree: dict[str, Any], prefix: str = "") -> set[str]:
    paths: set[str] = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            paths |= _leaf_paths(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def test_values_table_in_docs_matches_values_yaml() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    leaves = _leaf_paths(values)
    section = (REPO / "docs" / "install.md").read_text().split("## Values", 1)[1]
    section = section.split("\n## ", 1)[0]
    documented = {
        key.strip().strip("`")
        for line in section.splitlines()
        if line.startswith("| `")
        for key in line.split("|")[1].split(",")
    }
    undocumented = {
        leaf
        for leaf in leaves
        if not any(leaf == d or leaf.startswith(f"{d}.") for d in documented)
    }
    assert undocumented == set()
    unknown = {
        d for d in documented if not any(leaf == d or leaf.startswith(f"{d}.") for leaf in leaves)
    }
    assert unknown == set()
