"""The package layering, enforced by import-linter's contracts in ``pyproject.toml``.

The contracts count indirect imports, so a kopf import anywhere under the core fails them even
when it arrives through a chain of modules; the second test proves they can fail.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{root / 'operator'}:{root / 'lab'}", "PATH": "/usr/bin:/bin"},
    )


def test_contracts_are_kept() -> None:
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_kopf_import_two_modules_away_breaks_the_contracts(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(REPO / "pyproject.toml", copy)
    shutil.copytree(REPO / "operator" / "trimtab", copy / "operator" / "trimtab")
    shutil.copytree(REPO / "lab" / "trimtab_lab", copy / "lab" / "trimtab_lab")
    helper = copy / "operator" / "trimtab" / "api" / "leak.py"
    helper.write_text("import kopf  # noqa\n")
    times = copy / "operator" / "trimtab" / "api" / "times.py"
    times.write_text(times.read_text() + "\nfrom trimtab.api import leak  # noqa\n")
    result = _lint(copy)
    assert result.returncode != 0
    assert "Only trimtab.kube talks to Kubernetes BROKEN" in result.stdout
    assert "trimtab.api.leak -> kopf" in result.stdout


def test_no_module_shadows_the_standard_library() -> None:
    assert not list((REPO / "operator").glob("operator.py"))
    assert not (REPO / "operator" / "operator" / "__init__.py").exists()
