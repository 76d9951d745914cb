"""The committed CRD: generated from the models, structural, and valid Kubernetes.

Aspects: drift between ``trimtab crd`` and crds/inferencepool.yaml; the structural-schema
rules the API server enforces (every node typed, no $ref/anyOf, defaults valid); validity
against the real CustomResourceDefinition schema of two Kubernetes versions; the shipped
examples accepted by the generated OpenAPI schema and a table of bad specs refused by it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from trimtab.api.crd import build_crd
from trimtab.commands.main import main

KUBERNETES_VERSIONS = ["1.33.0", "1.35.0"]


def _committed(repo: Path) -> str:
    return (repo / "crds" / "inferencepool.yaml").read_text()


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_matches_the_models(repo: Path) -> None:
    result = CliRunner().invoke(main, ["crd"])
    assert result.exit_code == 0, result.output
    assert result.output == _committed(repo), "run `trimtab crd > crds/inferencepool.yaml`"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_crd_is_valid_kubernetes(repo: Path, version: str) -> None:
    crd = yaml.safe_load(_committed(repo))
    kubernetes_validate.validate(crd, version, strict=True)


def _walk(node: dict[str, Any], path: str) -> list[str]:
    problems = []
    for banned in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "title"):
        if banned in node:
            problems.append(f"{path}: has {banned}")
    if "type" not in node:
        problems.append(f"{path}: no type")
    for name, child in node.get("properties", {}).items():
        problems += _walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _walk(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        problems += _walk(node["items"], f"{path}[]")
    if node.get("type") == "object" and "x-kubernetes-list-type" in node:
        problems.append(f"{path}: list type on an object")
    return problems


def test_schema_is_structural() -> None:
    assert _walk(_schema(), "") == []


def test_crd_carries_status_printer_columns_and_names() -> None:
    version = build_crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Pods"] == ".status.readyPods"
    assert columns["Max-KV"] == ".status.maxKvUsage"
    assert columns["Spread"] == ".status.weightSpread"
    assert "Age" in columns
    names = build_crd()["spec"]["names"]
    assert names["shortNames"] == ["ipool"] and "trimtab" in names["categories"]


def test_defaults_and_enums_are_carried_over() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    assert spec["engine"]["default"] == "vllm"
    assert "triton-trtllm" in spec["engine"]["enum"]
    assert spec["metrics"]["properties"]["interval"]["default"] == "2s"
    assert spec["retry"]["properties"]["budgetPercent"]["maximum"] == 100
    rules = [r["rule"] for r in spec["metrics"]["x-kubernetes-validations"]]
    assert any("duration(self.staleAfter)" in r for r in rules)


def _validator() -> jsonschema.Draft4Validator:
    # OpenAPI v3.0 schemas use draft-4 semantics (boolean exclusiveMinimum); CEL rules and
    # x-kubernetes-* keywords are not evaluated here.
    return jsonschema.Draft4Validator(_schema())


def test_examples_pass_the_generated_schema(repo: Path) -> None:
    for path in sorted((repo / "deploy" / "examples").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            errors = [e.message for e in _validator().iter_errors(document)]
            assert errors == [], f"{path.name}: {errors}"


@pytest.mark.parametrize(
    "spec",
    [
        {"targets": [{"envoy": {"cluster": "a"}}], "targetPorts": [{"number": 0}]},
        {"targets": [{"envoy": {"cluster": "a"}}], "metrics": {"interval": "2 s"}},
        {"targets": [{"envoy": {"cluster": "a"}}], "engine": "llamacpp"},
        {"targets": []},
        {"targets": [{"envoy": {"cluster": "a"}}], "retry": {"budgetPercent": 101}},
        {"targets": [{"envoy": {"cluster": "a"}}], "policy": {"kvHighWatermark": 0}},
    ],
)
def test_schema_refuses_bad_values(spec: dict[str, Any]) -> None:
    document = {"apiVersion": "trimtab.io/v1alpha1", "kind": "InferencePool", "spec": spec}
    assert list(_validator().iter_errors(document)), spec
