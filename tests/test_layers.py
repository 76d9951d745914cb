"""The package layering, as an import contract (what kopf does with import-linter).

Lowest first: ``api`` → ``policy`` → ``metrics`` / ``targets`` → ``controller`` / ``local``.
``replica``, ``sim`` and ``emulator`` sit beside the operator: they may use ``api`` and
``policy`` but the operator never imports them; only ``controller`` imports kopf. ``demo``
and ``cli`` are the top and may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "operator" / "trimtab"

# sub-package -> trimtab sub-packages it may import (besides itself, errors and the root).
ALLOWED: dict[str, set[str]] = {
    "api": set(),
    "policy": {"api"},
    "replica": {"api"},
    "metrics": {"api"},
    "targets": {"api", "policy"},
    "envoy": {"api", "targets"},
    "controller": {"api", "policy", "metrics", "targets", "local"},
    "local": {"api", "policy", "metrics", "targets", "controller"},
    "sim": {"api", "policy", "replica"},
    "emulator": {"api", "replica", "metrics"},
}
KOPF_ALLOWED = {"controller"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package: str) -> None:
    problems = []
    for path in _modules(package):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "kopf" and package not in KOPF_ALLOWED:
                problems.append(f"{path.relative_to(PACKAGE)} imports kopf")
            if parts[0] != "trimtab" or len(parts) < 2:
                continue
            target = parts[1]
            if target in {package, "errors"}:
                continue
            if target not in ALLOWED[package]:
                problems.append(f"{path.relative_to(PACKAGE)} imports trimtab.{target}")
    assert problems == []


def test_every_subpackage_is_placed() -> None:
    on_disk = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert on_disk - {"demo"} <= set(ALLOWED), on_disk - set(ALLOWED)


def test_no_module_shadows_the_standard_library() -> None:
    assert not list(PACKAGE.parent.glob("operator.py"))
    assert not (PACKAGE.parent / "operator" / "__init__.py").exists()
