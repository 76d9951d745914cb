"""The RBAC table in docs/install.md is the only RBAC list in the docs, and each row's switch works.

tests/chart/test_chart_rbac.py compares the whole table with the rendered chart for four value
sets. Here: each optional row appears in the rendered chart exactly when its `only when` value
is set; each such value is documented in the values table with the chart's real default; every
row has its "why"; and no other document carries a second, drifting RBAC list.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .rendering import CHART, REPO, render
from .test_chart_rbac import DOC, documented_rows, rendered_grants

#: Documents that must defer to the table instead of listing permissions themselves.
OTHER_DOCS = [
    *sorted(p for p in (REPO / "docs").glob("*.md") if p != DOC),
    REPO / "README.md",
    CHART / "templates" / "NOTES.txt",
    CHART / "values.yaml",
]
#: Two RBAC verbs in a row ("get/list", "get, create"): the shape of a permission list.
_VERB = r"(get|list|watch|create|patch|update|delete)"
VERB_LIST = re.compile(rf"\b{_VERB}(/|, ){_VERB}\b", re.IGNORECASE)


def _optional_rows() -> list[tuple[str, str, str]]:
    """(group/resource, value key, value) of every row granted only under a chart value."""
    rows = []
    for _, group, name, _, when in documented_rows():
        # With the group: inferencepools of trimtab.io and of GIE are different grants.
        resource = f"{'' if group == 'core' else group}/{name}"
        if when == "always":
            continue
        match = re.fullmatch(r"`([\w.]+)=(\w+)`", when)
        assert match, f"unreadable condition {when!r} in docs/install.md"
        rows.append((resource, match.group(1), match.group(2)))
    return rows


def _chart_default(key: str) -> object:
    node: object = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in key.split("."):
        assert isinstance(node, dict) and part in node, f"{key} is not in values.yaml"
        node = node[part]
    return node


def _values_table() -> dict[str, str]:
    """Key → documented default, from the `## Values` table of docs/install.md."""
    text = DOC.read_text()
    section = text.split("\n## Values\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2:
            for key in re.findall(r"`([\w.]+)`", cells[0]):
                table[key] = cells[1]
    return table


@pytest.mark.parametrize(("resource", "key", "value"), _optional_rows())
def test_each_optional_row_is_granted_exactly_when_its_value_is_set(
    helm: Path, resource: str, key: str, value: str
) -> None:
    default = str(_chart_default(key)).lower()
    assert default != value, f"{key}={value} is the chart's default: the row is not optional"
    # Namespaced mode needs a namespace to grant pool rules in (and only it takes one).
    extra = {"watch.namespaces": "{serving}"} if key == "watch.allNamespaces" else {}
    with_it = {f"{g[2]}/{g[3]}" for g in rendered_grants(render(helm, {key: value, **extra}))}
    without = {f"{g[2]}/{g[3]}" for g in rendered_grants(render(helm, {key: default}))}
    assert resource in with_it, f"{key}={value} does not grant {resource}"
    assert resource not in without, f"{resource} is granted without {key}={value}"


def test_every_switch_is_in_the_values_table_with_the_charts_default() -> None:
    documented = _values_table()
    for _, key, _ in _optional_rows():
        assert key in documented, f"{key} is missing from the values table"
        assert f"`{str(_chart_default(key)).lower()}`" in documented[key], key


def test_every_row_says_why() -> None:
    why = DOC.read_text().split("Why each one:", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"\*\*([^*]+)\*\*", why)
    explained = {name.strip() for names in named for name in names.split(",")}
    for _, _, resource, _, _ in documented_rows():
        assert resource in explained, f"no 'why' bullet for {resource}"


@pytest.mark.parametrize("path", OTHER_DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_other_document_lists_permissions(path: Path) -> None:
    found = [line for line in path.read_text().splitlines() if VERB_LIST.search(line)]
    assert found == [], f"{path.name} lists RBAC verbs; link docs/install.md#rbac instead"


def test_operations_links_to_the_table() -> None:
    assert "## RBAC\n" in DOC.read_text()
    assert "(install.md#rbac)" in (REPO / "docs" / "operations.md").read_text()
