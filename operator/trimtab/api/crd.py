"""Generate the InferencePool CustomResourceDefinition from the pydantic models.

Pydantic emits JSON Schema (draft 2020-12, with ``$ref`` and ``anyOf`` for optionals); a CRD
needs a *structural* OpenAPI v3.0 schema: every node typed, no references, no ``anyOf`` of
types, ``exclusiveMinimum`` as a boolean. :func:`structural` performs that translation, and
:func:`build_crd` wraps the result with names, printer columns and the status subresource.
The committed ``crds/inferencepool.yaml`` is ``trimtab crd``'s output; a test guards the drift.
"""

from __future__ import annotations

from typing import Any

import yaml

from trimtab.api import resource
from trimtab.api.spec import InferencePoolSpec
from trimtab.api.status import InferencePoolStatus

__all__ = ["build_crd", "render_crd", "structural"]

# Keywords of JSON Schema that the Kubernetes OpenAPI v3 subset accepts as they are.
_KEPT = {
    "type",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "format",
    "required",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict) and "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return node


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Translate one pydantic JSON-Schema node into a structural CRD schema node."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        choices = [c for c in node["anyOf"] if _resolve(c, defs).get("type") != "null"]
        if len(choices) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {node}")
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        inner = _resolve(choices[0], defs)
        node = {**inner, **outer}
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _KEPT}
    if out.get("default") is None:
        out.pop("default", None)
    if "exclusiveMinimum" in node:
        out["minimum"] = node["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        out["maximum"] = node["exclusiveMaximum"]
        out["exclusiveMaximum"] = True
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {
            name: structural(child, defs) for name, child in node["properties"].items()
        }
    if isinstance(node.get("additionalProperties"), dict):
        out["type"] = "object"
        out["additionalProperties"] = structural(node["additionalProperties"], defs)
    if "items" in node:
        out["type"] = "array"
        out["items"] = structural(node["items"], defs)
    if "type" not in out:
        raise ValueError(f"schema node without a type is not structural: {node}")
    if out["type"] == "object" and not out.get("required"):
        out.pop("required", None)
    return out


def _schema_of(model: type[InferencePoolSpec] | type[InferencePoolStatus]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    return structural(raw, raw.get("$defs", {}))


def _printer_columns() -> list[dict[str, Any]]:
    return [
        {
            "name": "Ready",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        },
        {"name": "Pods", "type": "integer", "jsonPath": ".status.readyPods"},
        {
            "name": "Max-KV",
            "type": "number",
            "jsonPath": ".status.maxKvUsage",
            "description": "Highest KV-cache usage in the pool, 0..1.",
        },
        {
            "name": "Spread",
            "type": "number",
            "jsonPath": ".status.weightSpread",
            "description": "Highest weight divided by the lowest.",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def build_crd() -> dict[str, Any]:
    """The CRD as a dict, ready for YAML."""
    schema = {
        "type": "object",
        "description": "A pool of LLM serving replicas balanced by trimtab.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _schema_of(InferencePoolSpec),
            "status": _schema_of(InferencePoolStatus),
        },
        "required": ["spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{resource.PLURAL}.{resource.GROUP}",
            "labels": {"app.kubernetes.io/name": "trimtab", "app.kubernetes.io/part-of": "trimtab"},
        },
        "spec": {
            "group": resource.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": resource.KIND,
                "listKind": f"{resource.KIND}List",
                "plural": resource.PLURAL,
                "singular": resource.SINGULAR,
                "shortNames": list(resource.SHORT_NAMES),
                "categories": list(resource.CATEGORIES),
            },
            "versions": [
                {
                    "name": resource.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _printer_columns(),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def render_crd() -> str:
    """The CRD as the YAML committed in ``crds/inferencepool.yaml``."""
    header = "# Generated by `trimtab crd` from operator/trimtab/api; do not edit by hand.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)
