"""The Dockerfile, built by buildah (no Docker daemon) on the base scripts/image.sh made.

`--build-arg PYTHON_IMAGE=` is how Docker users pick their own base; here it is the mmdebstrap
base, so the Dockerfile and scripts/image.sh are proven to build from the same base. The RUN
steps use chroot isolation; this machine's pip configuration and CA bundle, where present, are
mounted read-only so pip inside reaches the package index the way pip outside does.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import trimtab

from .conftest import REPO, Image, Podman

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

HOST_PIP_FILES = ["/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt"]


def test_dockerfile_builds_from_the_same_base(podman: Podman, image: Image) -> None:
    labels = json.loads(
        podman("image", "inspect", "--format", "{{json .Labels}}", image.ref).stdout
    )
    base = labels["org.opencontainers.image.base.name"]
    tag = f"localhost/trimtab-dockerfile:{trimtab.__version__}"
    volumes = [f"--volume={p}:{p}:ro" for p in HOST_PIP_FILES if Path(p).exists()]
    result = subprocess.run(
        [
            "buildah",
            "bud",
            "--isolation",
            "chroot",
            "--layers=false",
            "--quiet",
            "--build-arg",
            f"PYTHON_IMAGE={base}",
            *volumes,
            "--tag",
            tag,
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        flags = podman.run_flags()
        assert podman("run", *flags, tag, "version").stdout.strip() == trimtab.__version__
        code = "import os; print(os.getuid())"
        uid = podman("run", *flags, "--entrypoint", "python3", tag, "-c", code)
        assert int(uid.stdout) == 65532
    finally:
        podman("rmi", "--force", tag, check=False)
