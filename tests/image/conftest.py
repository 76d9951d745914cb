"""Fixtures of the image tests: the real operator image, built once per session by scripts/image.sh.

The image is built without a Docker daemon (mmdebstrap, buildah) and run under podman with runc,
the cgroupfs manager and no default ulimits: the settings that work on these machines. The
build reuses the last image when its inputs (the wheel's contents, the script, the base) are
unchanged. On a developer machine a missing tool, or not being root, skips these tests with the
reason; in CI (CI=true) it fails them, so a broken setup can never pass as green.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPT = REPO / "scripts" / "image.sh"
# The Debian packages scripts/setup.sh installs for these tests, by the command each provides.
TOOLS = {"mmdebstrap": "mmdebstrap", "buildah": "buildah", "podman": "podman", "runc": "runc"}


def unavailable(reason: str) -> None:
    """Skip on a developer machine, fail in CI: CI must never go green without the tools."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: required in CI (scripts/setup.sh installs it)", pytrace=False)
    pytest.skip(f"{reason} (scripts/setup.sh installs the image tools)")


def require_tools() -> None:
    missing = [f"{cmd} ({pkg})" for cmd, pkg in TOOLS.items() if shutil.which(cmd) is None]
    if missing:
        unavailable("missing for the image tests: " + ", ".join(missing))
    if os.geteuid() != 0:
        unavailable("the image build needs root (mmdebstrap, buildah mount, chroot)")


@dataclass(frozen=True)
class Podman:
    """podman with the settings that work here: runc, cgroupfs, no default ulimits."""

    conf: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.conf)}

    def argv(self, *args: str) -> list[str]:
        return ["podman", "--cgroup-manager=cgroupfs", "--runtime", "runc", *args]

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        if check:
            assert result.returncode == 0, (
                f"podman {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def run_flags(self) -> list[str]:
        """`podman run` flags of every test: a read-only root with no tmpfs of podman's own
        (as readOnlyRootFilesystem in Kubernetes), no network, host ulimits."""
        flags = ["--rm", "--read-only", "--read-only-tmpfs=false", "--network", "none"]
        return [*flags, "--ulimit", "host"]


@dataclass(frozen=True)
class Image:
    ref: str
    oci_archive: Path
    docker_archive: Path
    build_seconds: float
    build_log: str


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    require_tools()
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    # Without this podman fails on setrlimit here; crun fails on cgroups, hence runc.
    conf.write_text("[containers]\ndefault_ulimits = []\n")
    return Podman(conf)


@pytest.fixture(scope="session")
def image(podman: Podman) -> Image:
    """The operator image, built (or reused when its inputs are unchanged) by scripts/image.sh."""
    started = time.monotonic()
    result = subprocess.run(
        [str(SCRIPT)], capture_output=True, text=True, cwd=REPO, timeout=1200, check=False
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, f"scripts/image.sh failed:\n{result.stdout}\n{result.stderr}"
    ref = result.stdout.strip().splitlines()[-1]
    return Image(
        ref=ref,
        oci_archive=REPO / "build" / "trimtab-image.oci.tar",
        docker_archive=REPO / "build" / "trimtab-image.docker.tar",
        build_seconds=seconds,
        build_log=result.stderr,
    )


@pytest.fixture
def container_name(request: pytest.FixtureRequest, podman: Podman) -> Iterator[str]:
    """A unique container name; the container is removed afterwards whatever happened."""
    name = f"trimtab-test-{os.getpid()}-{request.node.name}".replace("[", "-").replace("]", "")
    yield name
    podman("rm", "--force", "--ignore", name, check=False)
