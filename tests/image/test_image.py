"""The real operator image, built by scripts/image.sh and run under podman.

Each test runs the image as it ships: its own user (no --user), a read-only root filesystem and
no network. `trimtab run --local` balances a static-endpoints pool whose replica is unreachable
(there is no network), so it reports the endpoint unreachable; what is checked is that it starts,
writes its status file to a mounted folder, keeps running and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import textwrap
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import trimtab

from .conftest import REPO, Image, Podman

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

UID = 65532  # the chart's runAsUser


def python_in_image(podman: Podman, image: Image, code: str) -> str:
    result = podman("run", *podman.run_flags(), "--entrypoint", "python3", image.ref, "-c", code)
    return result.stdout


def test_image_config_is_the_charts(podman: Podman, image: Image) -> None:
    fmt = "{{json .Config.User}} {{json .Config.Entrypoint}} {{json .Config.Cmd}}"
    user, entrypoint, cmd = podman("image", "inspect", "--format", fmt, image.ref).stdout.split()
    assert json.loads(user) == f"{UID}:{UID}"
    assert json.loads(entrypoint) == ["trimtab"]
    assert json.loads(cmd) == ["run", "--all-namespaces"]


def test_runs_as_non_root_on_a_read_only_root(podman: Podman, image: Image) -> None:
    out = python_in_image(
        podman,
        image,
        textwrap.dedent(
            """
            import errno, os
            print(os.getuid(), os.getgid())
            for path in ("/probe", "/opt/trimtab/probe", "/tmp/probe"):
                try:
                    open(path, "w").close()
                    print(path, "written")
                except OSError as error:
                    print(path, errno.errorcode[error.errno])
            """
        ),
    )
    lines = out.splitlines()
    uid, gid = map(int, lines[0].split())
    assert uid != 0 and gid != 0
    assert (uid, gid) == (UID, UID)
    for line in lines[1:]:
        assert line.split()[1] == "EROFS", f"{line}: the root filesystem is not read-only"


def test_trimtab_version(podman: Podman, image: Image) -> None:
    result = podman("run", *podman.run_flags(), image.ref, "version")
    assert result.stdout.strip() == trimtab.__version__
    assert image.ref.endswith(f":{trimtab.__version__}")


POOLS = """\
apiVersion: trimtab.io/v1alpha1
kind: InferencePool
metadata:
  name: static
  namespace: local
spec:
  endpoints:
    - name: gpu-a
      address: 127.0.0.1
      port: 8000
  engine: vllm
  metrics:
    source: direct
    interval: 1s
    staleAfter: 5s
  targets:
    - envoyFile:
        path: /state/eds/static.json
        cluster: static
"""


def test_run_local_writes_status_and_stops_on_sigterm(
    podman: Podman, image: Image, tmp_path: Path, container_name: str
) -> None:
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)  # the image's user writes here
    podman(
        "run",
        "--detach",
        "--name",
        container_name,
        *[flag for flag in podman.run_flags() if flag != "--rm"],
        "--volume",
        f"{pools}:/etc/trimtab/pools.yaml:ro",
        "--volume",
        f"{state}:/state",
        "--tmpfs",  # the chart mounts an emptyDir there
        "/tmp",
        image.ref,
        "run",
        "--local",
        "/etc/trimtab/pools.yaml",
        "--status-file",
        "/state/status.json",
        # envoyFile paths must stay inside a directory the installer names.
        "--envoy-file-dir",
        "/state",
    )
    status_file = state / "status.json"
    deadline = time.monotonic() + 60
    status: dict[str, dict[str, object]] = {}
    while time.monotonic() < deadline:
        if status_file.exists():
            try:
                status = json.loads(status_file.read_text())
            except json.JSONDecodeError:
                status = {}  # between writes is not possible (rename), but be safe
            if "local/static" in status:
                break
        assert running(podman, container_name), logs(podman, container_name)
        time.sleep(0.5)
    assert "local/static" in status, f"no status within 60 s\n{logs(podman, container_name)}"
    pool = status["local/static"]
    conditions = {c["type"]: c for c in pool["conditions"]}  # type: ignore[attr-defined]
    # No network: the replica cannot be reached, and the status says so.
    assert conditions["MetricsAvailable"]["status"] == "False"
    assert "gpu-a" in conditions["MetricsAvailable"]["message"]
    assert [p["name"] for p in pool["pods"]] == ["gpu-a"]  # type: ignore[attr-defined]
    assert (state / "eds" / "static.json").exists()

    time.sleep(3)
    assert running(podman, container_name), logs(podman, container_name)
    started = time.monotonic()
    podman("stop", "--time", "20", container_name, timeout=60)
    stopped_in = time.monotonic() - started
    exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", container_name).stdout
    assert int(exit_code) == 0, f"exit {exit_code.strip()} on SIGTERM\n" + logs(
        podman, container_name
    )
    assert stopped_in < 15, f"took {stopped_in:.1f} s to stop on SIGTERM"


def running(podman: Podman, name: str) -> bool:
    out = podman("inspect", "--format", "{{.State.Running}}", name, check=False).stdout
    return out.strip() == "true"


def logs(podman: Podman, name: str) -> str:
    result = podman("logs", name, check=False)
    return result.stdout + result.stderr


def extra_requirements() -> set[str]:
    """Names of every distribution only the optional extras (test, demo, dev, ...) bring."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = set()
    for requirements in project.get("optional-dependencies", {}).values():
        for requirement in requirements:
            names.add(normalized(requirement))
    return names - {normalized(r) for r in project["dependencies"]}


def runtime_closure() -> set[str]:
    """What trimtab's runtime requirements reach here, extras' requirements not followed."""
    reach, todo = set(), ["trimtab"]
    while todo:
        name = todo.pop()
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" in requirement:
                continue
            found = normalized(requirement)
            if found not in reach:
                reach.add(found)
                todo.append(found)
    return reach


def normalized(requirement: str) -> str:
    name = requirement
    for stop in "[<>=!~;( ":
        name = name.split(stop, 1)[0]
    return name.strip().lower().replace("_", "-").replace(".", "-")


INSPECT = textwrap.dedent(
    """
    import importlib.metadata as md, importlib.util, json, re, shutil
    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()
    installed = {norm(d.metadata["Name"]) for d in md.distributions()}
    # What trimtab's runtime requirements reach (extras' requirements are not followed).
    reach, todo = set(), ["trimtab"]
    while todo:
        name = todo.pop()
        if name in reach or name not in installed:
            continue
        reach.add(name)
        for req in md.requires(name) or []:
            if "extra ==" not in req.replace("extra==", "extra =="):
                todo.append(norm(re.match(r"[A-Za-z0-9._-]+", req).group(0)))
    tools = ["gcc", "cc", "c++", "g++", "clang", "ld", "as", "make", "pip", "pip3", "bash"]
    modules = ["pytest", "hypothesis", "kmock", "trimtab_lab", "pip", "setuptools", "matplotlib"]
    print(json.dumps({
        "installed": sorted(installed),
        "unreached": sorted(installed - reach),
        "tools": {t: shutil.which(t) for t in tools},
        "modules": {m: importlib.util.find_spec(m) is not None for m in modules},
    }))
    """
)


def test_holds_only_trimtab_and_its_runtime_dependencies(podman: Podman, image: Image) -> None:
    found = json.loads(python_in_image(podman, image, INSPECT))
    assert "trimtab" in found["installed"]
    assert found["unreached"] == [], "installed but not a runtime dependency of trimtab"
    # A package an extra names may still be a runtime need of a dependency (jsonpatch: kopf).
    extras_only = extra_requirements() - runtime_closure()
    assert not set(found["installed"]) & extras_only, "an extra's package is installed"
    assert not any(d.startswith("trimtab-lab") or d == "trimtab_lab" for d in found["installed"])
    assert {m for m, present in found["modules"].items() if present} == set()
    assert {t: p for t, p in found["tools"].items() if p} == {}, "a compiler or shell tool ships"


def test_size_is_reported(
    podman: Podman, image: Image, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image.ref).stdout)
    archive = image.oci_archive.stat().st_size
    line = (
        f"trimtab image {image.ref}: {size / 1e6:.0f} MB uncompressed, OCI archive"
        f" {archive / 1e6:.0f} MB ({image.oci_archive.relative_to(REPO)}); scripts/image.sh took"
        f" {image.build_seconds:.0f} s this session"
    )
    with capsys.disabled():
        print(f"\n{line}")
    request.node.user_properties.append(("image_size_bytes", size))
    assert image.docker_archive.stat().st_size > 0
    # Today about 310 MB (the kubernetes client alone is 120 MB); a jump means a stray package.
    assert size < 500e6, line
