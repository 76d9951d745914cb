"""The chart grants exactly the RBAC rules that docs/install.md documents, and no wildcard.

The table between the `rbac-table` markers in docs/install.md is the contract. For several
value sets (default, every option on, namespaced with every option on, namespaced with none)
the expected grants are derived from that table and compared, as sets, with the rules of the
rendered ClusterRoles and Roles, including the namespace each Role lives in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from .rendering import ALL_ON, NAMESPACE, NAMESPACED, REPO, Manifest, render

DOC = REPO / "docs" / "install.md"
#: (role kind, namespace or "", API group, resource, verbs)
Grant = tuple[str, str, str, str, frozenset[str]]
Values = dict[str, str]

CONDITIONS: dict[str, Callable[[Values], bool]] = {
    "always": lambda v: True,
    "`watch.allNamespaces=false`": lambda v: v.get("watch.allNamespaces") == "false",
    "`rbac.readSecrets=true`": lambda v: v.get("rbac.readSecrets") == "true",
    "`targets.envoyFile.enabled=true`": lambda v: v.get("targets.envoyFile.enabled") == "true",
    "`targets.gatewayAPI.enabled=true`": lambda v: v.get("targets.gatewayAPI.enabled") == "true",
    "`inferenceExtension.enabled=true`": lambda v: v.get("inferenceExtension.enabled") == "true",
}

VALUE_SETS: dict[str, Values] = {
    "default": {},
    "all-on": ALL_ON,
    "namespaced-all-on": {**NAMESPACED, **ALL_ON},
    "namespaced-minimal": NAMESPACED,
}


def documented_rows() -> list[list[str]]:
    text = DOC.read_text()
    match = re.search(r"<!-- rbac-table:begin -->\n(.*?)<!-- rbac-table:end -->", text, re.S)
    assert match, "docs/install.md lost its rbac-table markers"
    lines = [line for line in match.group(1).splitlines() if line.startswith("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert rows, "the RBAC table is empty"
    return rows


def expected_grants(values: Values) -> set[Grant]:
    all_namespaces = values.get("watch.allNamespaces", "true") == "true"
    watched = values.get("watch.namespaces", "{}").strip("{}").split(",")
    grants: set[Grant] = set()
    for where, group, resource, verbs, when in documented_rows():
        assert when in CONDITIONS, f"unknown condition {when!r} in docs/install.md"
        if not CONDITIONS[when](values):
            continue
        api_group = "" if group == "core" else group
        verb_set = frozenset(v.strip() for v in verbs.split(","))
        if where == "ClusterRole" or (where == "pools" and all_namespaces):
            grants.add(("ClusterRole", "", api_group, resource, verb_set))
        elif where == "pools":
            grants |= {("Role", ns, api_group, resource, verb_set) for ns in watched}
        elif where == "Role in the release namespace":
            grants.add(("Role", NAMESPACE, api_group, resource, verb_set))
        else:
            raise AssertionError(f"unknown scope {where!r} in docs/install.md")
    return grants


def rendered_grants(manifests: list[Manifest]) -> set[Grant]:
    grants: set[Grant] = set()
    for m in manifests:
        if m["kind"] not in ("ClusterRole", "Role"):
            continue
        namespace = m["metadata"].get("namespace", "")
        for rule in m["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grant = (m["kind"], namespace, group, resource, frozenset(rule["verbs"]))
                    assert grant not in grants, f"granted twice: {grant}"
                    grants.add(grant)
    return grants


@pytest.mark.parametrize("name", VALUE_SETS)
def test_rendered_rbac_matches_the_documented_list(helm: Path, name: str) -> None:
    values = VALUE_SETS[name]
    rendered = rendered_grants(render(helm, values))
    expected = expected_grants(values)
    assert rendered - expected == set(), "granted but not documented"
    assert expected - rendered == set(), "documented but not granted"


@pytest.mark.parametrize("name", VALUE_SETS)
def test_no_wildcards_and_no_non_resource_urls(helm: Path, name: str) -> None:
    for m in render(helm, VALUE_SETS[name]):
        if m["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in m["rules"]:
            assert "nonResourceURLs" not in rule
            assert "resourceNames" not in rule or rule["resourceNames"]
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{m['metadata']['name']}: wildcard in {field}"
                assert all("*" not in item for item in rule[field])


def test_namespaced_mode_grants_nothing_on_pods_cluster_wide(helm: Path) -> None:
    for m in render(helm, {**NAMESPACED, **ALL_ON}):
        if m["kind"] == "ClusterRole":
            resources = {r for rule in m["rules"] for r in rule["resources"]}
            assert resources == {"customresourcedefinitions", "namespaces"}


def test_every_role_is_bound_to_the_service_account(rendered_namespaced: list[Manifest]) -> None:
    roles = {
        (m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"])
        for m in rendered_namespaced
        if m["kind"] in ("ClusterRole", "Role")
    }
    bound = set()
    for m in rendered_namespaced:
        if m["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        assert m["subjects"] == [
            {"kind": "ServiceAccount", "name": "trimtab", "namespace": NAMESPACE}
        ]
        ref = m["roleRef"]
        bound.add((ref["kind"], m["metadata"].get("namespace", ""), ref["name"]))
    assert bound == roles


def test_rbac_can_be_left_to_the_user(helm: Path) -> None:
    kinds = {m["kind"] for m in render(helm, {"rbac.create": "false"})}
    assert kinds.isdisjoint({"ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"})
