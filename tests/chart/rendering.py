"""Helpers of the chart tests: where things are, rendering the chart, validating objects.

Fixtures live in conftest.py; these are plain functions and constants that tests import.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "trimtab"
RELEASE = "trimtab"
NAMESPACE = "trimtab-system"

#: Every optional part of the chart switched on.
ALL_ON: dict[str, str] = {
    "serviceMonitor.enabled": "true",
    "prometheusRule.enabled": "true",
    "networkPolicy.enabled": "true",
    "grafanaDashboard.enabled": "true",
    "rbac.readSecrets": "true",
    "targets.envoyFile.enabled": "true",
    "targets.gatewayAPI.enabled": "true",
    "inferenceExtension.enabled": "true",
}
#: Namespaced mode: pools only in two namespaces.
NAMESPACED: dict[str, str] = {
    "watch.allNamespaces": "false",
    "watch.namespaces": "{serving,batch}",
}
#: Two recent Kubernetes versions whose schemas kubernetes-validate ships (it has 1.25..1.37).
K8S_VERSIONS = ["1.34.0", "1.35.0"]
#: Custom resources of the Prometheus Operator: kubernetes-validate has no schema for them.
PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}

Manifest = dict[str, Any]


def missing(what: str) -> NoReturn:
    """Skip on a developer machine, fail in CI: CI must never go green without the tool."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required in CI", pytrace=False)
    pytest.skip(f"{what} is not available")


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)


def render(helm: Path, values: dict[str, str] | None = None) -> list[Manifest]:
    """`helm template` the chart (CRDs included) and parse every document."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds"]
    for key, value in (values or {}).items():
        args += ["--set", f"{key}={value}"]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def only(manifests: list[Manifest], kind: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def validate_k8s(manifest: Manifest) -> None:
    """Strict validation (unknown fields fail) against each of K8S_VERSIONS."""
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)
