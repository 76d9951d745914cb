"""The release workflow (.github/workflows/release.yml): linted, and consistent with the chart.

It cannot run here (no forge, no registry); what can be checked is that it is valid YAML of the
workflow's shape (yamllint, a declared test dependency), that actionlint accepts it where the
actionlint binary is on PATH (it is not a declared dependency), and that what it publishes is
what the chart installs by default.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .conftest import REPO

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
YAMLLINT = (
    "{extends: default, rules: {line-length: {max: 140}, document-start: disable,"
    " truthy: {check-keys: false}, comments: {min-spaces-from-content: 1}}}"
)


def workflow() -> dict[Any, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def steps() -> list[dict[str, Any]]:
    return [step for job in workflow()["jobs"].values() for step in job["steps"]]


def scripts() -> str:
    return "\n".join(step.get("run", "") for step in steps())


def test_yamllint_accepts_the_workflow() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "yamllint", "--strict", "-d", YAMLLINT, str(WORKFLOW)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_releases_on_version_tags() -> None:
    triggers = workflow()[True]  # YAML 1.1: the key `on` loads as True
    assert triggers["push"]["tags"] == ["v*.*.*"]


def test_it_builds_multi_arch_scans_signs_and_pushes() -> None:
    uses = [step.get("uses", "").split("@")[0] for step in steps()]
    build = next(s for s in steps() if s.get("uses", "").startswith("docker/build-push-action"))
    assert set(build["with"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert "aquasecurity/trivy-action" in uses
    assert uses.index("aquasecurity/trivy-action") < uses.index("sigstore/cosign-installer")
    assert "cosign sign --yes" in scripts()
    assert workflow()["jobs"]["release"]["permissions"]["id-token"] == "write"  # keyless
    assert "skopeo copy --all" in scripts()


def test_it_publishes_the_charts_default_image_and_the_chart() -> None:
    values = yaml.safe_load((REPO / "charts" / "trimtab" / "values.yaml").read_text())
    env = workflow()["env"]
    # The chart's `trimtab/trimtab` is Docker Hub's docker.io/trimtab/trimtab.
    assert env["DOCKERHUB_IMAGE"] == f"docker.io/{values['image']['repository']}"
    assert values["image"]["tag"] == ""  # = appVersion, which the workflow sets to the tag
    assert '--app-version "$VERSION"' in scripts()
    assert 'helm push "dist/trimtab-$VERSION.tgz"' in scripts()
    assert env["GHCR_IMAGE"].startswith("ghcr.io/")


def test_the_workflow_refuses_a_tag_that_is_not_the_package_version() -> None:
    # The version check reads trimtab.__version__ from the file the package declares it in.
    init = Path(REPO / "operator" / "trimtab" / "__init__.py")
    assert init.exists()
    assert str(init.relative_to(REPO)) in scripts()
