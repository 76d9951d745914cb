"""The CRD's CEL rules, evaluated: what pydantic refuses, the API server refuses too.

An API server checks a pool in three steps: structural defaults, the OpenAPI schema, then the
``x-kubernetes-validations`` CEL rules on the defaulted object. This test does the same with
``cel-python`` (a CEL engine from the package index) over the whole invalid-spec table and the
shipped examples, so a rule that is wrong, too weak or too strict fails here. Known gaps of
the engine against Kubernetes' CEL: none of the Kubernetes extension libraries (``isURL``,
``url()``, ``quantity()``, ``ip()``/``cidr()``, the strings/lists/sets extensions, ``format``)
nor cost limits; trimtab's rules use only standard CEL (``has``, ``size``, ``duration``,
``filter``, ``in``, comparisons). List-map key uniqueness (``x-kubernetes-list-map-keys``) is
the API server's job too and is checked here by hand.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml

from trimtab.api.crd import build_crd
from trimtab.api.validation import parse_spec
from trimtab.errors import SpecInvalid

from .test_spec_validation import BASE, INVALID

Node = dict[str, Any]
_ENV = celpy.Environment()


def _schema() -> Node:
    schema: Node = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _defaulted(value: Any, schema: Node) -> Any:
    """Structural defaulting as the API server does it: absent fields with a default."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, sub in schema["properties"].items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = _defaulted(out[name], sub)
        return out
    if isinstance(value, list) and "items" in schema:
        return [_defaulted(item, schema["items"]) for item in value]
    return value


def _instances(value: Any, schema: Node) -> Iterator[tuple[Any, Node]]:
    """Every (sub-object, its schema) pair of ``value``, the root first."""
    yield value, schema
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                yield from _instances(value[name], sub)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            yield from _instances(item, schema["items"])


def _unknown_fields(value: Any, schema: Node, path: str = "") -> list[str]:
    """Fields the schema does not know: kubectl's default strict field validation refuses them
    (with ``--validate=false`` the API server would prune them instead)."""
    found = []
    if isinstance(value, dict) and "properties" in schema:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return []
        for name, sub in value.items():
            if name not in schema["properties"]:
                found.append(f"unknown field {path}.{name}")
            else:
                found += _unknown_fields(sub, schema["properties"][name], f"{path}.{name}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += _unknown_fields(item, schema["items"], f"{path}[{index}]")
    return found


def _cel_failures(document: Node) -> list[str]:
    failures = []
    for value, schema in _instances(document, _schema()):
        for rule in schema.get("x-kubernetes-validations", []):
            program = _ENV.program(_ENV.compile(rule["rule"]))
            try:
                result = program.evaluate({"self": celpy.json_to_cel(value)})
            except celpy.CELEvalError as exc:  # the API server refuses a rule that errors too
                failures.append(f"{rule['message']} (error: {exc})")
                continue
            if isinstance(result, celpy.CELEvalError) or not bool(result):
                failures.append(rule["message"])
        keys = schema.get("x-kubernetes-list-map-keys")
        if keys and isinstance(value, list):
            seen = [tuple(item.get(k) for k in keys) for item in value]
            if len(set(seen)) != len(seen):
                failures.append(f"duplicate list-map keys {keys}")
    return failures


def api_server_refuses(spec: Node) -> list[str]:
    document = {"apiVersion": "trimtab.io/v1alpha1", "kind": "InferencePool", "spec": spec}
    document = _defaulted(document, _schema())
    schema_errors = [e.message for e in jsonschema.Draft4Validator(_schema()).iter_errors(document)]
    return schema_errors + _unknown_fields(document, _schema()) + _cel_failures(document)


def _pydantic_refuses(spec: Node) -> bool:
    try:
        parse_spec(spec)
    except SpecInvalid:
        return True
    return False


# Refused by pydantic only: rules no CRD schema can state. Each must still be refused by the
# operator (Ready=False, SpecInvalid); the list is exact, so a new gap fails the test.
PYDANTIC_ONLY = {
    # The CRD's address pattern admits anything IPv6-shaped; Kubernetes' isIP() would do, but
    # only from 1.31 on and cel-python lacks it.
    "endpoint address with a port",
    # Pairwise checks over up to 1,000 endpoints would exceed the API server's CEL cost budget.
    "endpoints repeat an address and port",
}


@pytest.mark.parametrize(("case", "spec", "field", "hint"), INVALID, ids=[c[0] for c in INVALID])
def test_the_api_server_refuses_what_pydantic_refuses(
    case: str, spec: Node, field: str, hint: str
) -> None:
    assert _pydantic_refuses(spec)
    refused = api_server_refuses(spec)
    if case in PYDANTIC_ONLY:
        assert refused == [], f"{case} is refused by the CRD now: drop it from PYDANTIC_ONLY"
    else:
        assert refused, f"{case}: the CRD lets it through"


def _valid_specs(repo: Path) -> list[Node]:
    specs = [copy.deepcopy(BASE)]
    for path in sorted((repo / "deploy" / "examples").glob("*.yaml")):
        specs += [doc["spec"] for doc in yaml.safe_load_all(path.read_text()) if doc]
    admission = copy.deepcopy(BASE)
    admission["admission"] = {"mode": "picker", "queueTtl": "1m30s", "retryAfter": "500ms"}
    specs.append(admission)
    return specs


def test_the_api_server_accepts_every_valid_spec(repo: Path) -> None:
    for spec in _valid_specs(repo):
        assert not _pydantic_refuses(spec), spec
        assert api_server_refuses(spec) == [], spec


@pytest.mark.parametrize(
    ("spec_change", "message"),
    [
        ({"admission": {"mode": "picker", "queueTtl": "2s", "retryAfter": "3s"}}, "retryAfter"),
        ({"metrics": {"interval": "10s", "staleAfter": "5s"}}, "staleAfter"),
        ({"policy": {"minInFlightPerPod": 9, "maxInFlightPerPod": 8}}, "minInFlightPerPod"),
    ],
)
def test_cross_field_rules_fire_with_their_message(spec_change: Node, message: str) -> None:
    spec = {**copy.deepcopy(BASE), **spec_change}
    assert any(message in failure for failure in api_server_refuses(spec))
