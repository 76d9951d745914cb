"""The docs name the tree as it is: README's layout table, and every repository path they cite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "Dockerfile",
    REPO / "Makefile",
    REPO / "charts" / "trimtab" / "values.yaml",
]
CITED = re.compile(r"\b(?:tests|operator|lab|scripts|benchmarks|deploy|charts|docs)/[\w./-]*\w")
#: Cited like paths but not paths: `kubectl logs deploy/trimtab` names a Deployment.
NOT_PATHS = {"deploy/trimtab"}


def _layout_rows() -> list[tuple[list[str], str]]:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines()[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2 and not set(cells[0]) <= {"-"}:
            rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    assert len(rows) > 5, "README lost its layout table"
    return rows[1:]  # the header row


def _packages(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/__init__.py"))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_cited_path_exists(document: Path) -> None:
    cited = set(CITED.findall(document.read_text())) - NOT_PATHS
    missing = sorted(path for path in cited if not (REPO / path).exists())
    assert missing == [], f"{document.name} cites paths that do not exist"


def test_layout_table_names_only_what_exists() -> None:
    for paths, _ in _layout_rows():
        for path in paths:
            assert (REPO / path.rstrip("/")).exists(), f"README's layout names {path}"


def test_layout_table_names_every_package() -> None:
    named = {path.rstrip("/") for paths, _ in _layout_rows() for path in paths}
    for root in (REPO / "operator" / "trimtab", REPO / "lab" / "trimtab_lab"):
        for package in _packages(root):
            relative = package.relative_to(REPO).as_posix()
            assert relative in named, f"README's layout does not name {relative}"


def test_layout_table_names_every_test_folder() -> None:
    (tests_row,) = [what for paths, what in _layout_rows() if paths == ["tests/"]]
    packages = {p.name for p in _packages(REPO / "operator" / "trimtab")}
    for folder in sorted(p for p in (REPO / "tests").iterdir() if p.is_dir()):
        if folder.name == "__pycache__" or folder.name in packages:
            continue
        assert f"`{folder.name}/`" in tests_row or f"`tests/{folder.name}/`" in tests_row, (
            f"README's layout does not say what tests/{folder.name} is"
        )
