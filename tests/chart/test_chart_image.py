"""The operator image: what the Dockerfile promises, and that its install steps give a working CLI.

No container engine runs here, so the image itself is never built in tests. Instead:
the Dockerfile is checked for a pinned slim base, two stages, the non-root user the chart
expects, and the entrypoint; .dockerignore must let through exactly what the build stage
copies; and the build stage's steps are replayed: the files it COPYs go to a temporary folder,
`pip install` builds and installs trimtab from them (not editable) into a fresh venv, and the
installed `trimtab` must answer `--help` and `run --help` with every flag the chart passes.

Honest shortcut: the fresh venv does not download trimtab's dependencies again (minutes, and
the registry each time); it sees the project venv's site-packages through a .pth file placed
after its own, so `trimtab` itself is imported from the fresh install (asserted) while kopf,
grpc and the rest come from the project venv. `pip check` then proves the declared
dependencies are satisfied, as the Dockerfile's own `pip check` does inside the image.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from .rendering import REPO, Manifest, only

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def build_stage_sources() -> list[str]:
    """Paths the first stage COPYs from the build context."""
    sources: list[str] = []
    stage = 0
    for keyword, args in instructions():
        if keyword == "FROM":
            stage += 1
        elif keyword == "COPY" and stage == 1 and not args.startswith("--from"):
            sources += args.split()[:-1]
    return sources


def test_dockerfile_is_multistage_on_a_pinned_slim_base() -> None:
    steps = instructions()
    args = dict(a.split("=", 1) for k, a in steps if k == "ARG" and "=" in a)
    base = args["PYTHON_IMAGE"]
    name, _, tag = base.partition(":")
    assert name == "python"
    major, minor, patch_and_variant = tag.split(".", 2)
    assert (major, minor) == ("3", "11")
    patch, _, variant = patch_and_variant.partition("-")
    assert patch.isdigit(), f"pin the patch release, not {tag!r}"
    assert variant == "slim-bookworm"
    froms = [a for k, a in steps if k == "FROM"]
    assert len(froms) == 2
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    assert any(k == "COPY" and a.startswith("--from=build ") for k, a in steps)


def test_dockerfile_runs_as_the_charts_user(rendered_default: list[Manifest]) -> None:
    steps = instructions()
    final = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]
    users = [a for k, a in final if k == "USER"]
    assert users == ["65532:65532"]
    pod = only(rendered_default, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    assert json.loads(next(a for k, a in final if k == "ENTRYPOINT")) == ["trimtab"]
    assert json.loads(next(a for k, a in final if k == "CMD")) == ["run", "--all-namespaces"]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            result = not negate
    return result


def test_dockerignore_lets_the_build_sources_through() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    for source in build_stage_sources():
        assert not ignored(source.rstrip("/"), patterns), f"{source} is ignored"
    for local_state in (".venv", ".git", ".tools", "tests"):
        assert ignored(local_state, patterns), f"{local_state} would be sent to the daemon"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with trimtab built and installed from the Dockerfile's COPY sources."""
    root = tmp_path_factory.mktemp("image")
    source = root / "src"
    source.mkdir()
    for item in build_stage_sources():
        origin = REPO / item
        if origin.is_dir():
            shutil.copytree(origin, source / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / item)
    target = root / "venv"
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    result = subprocess.run(
        [*pip, "install", "--no-deps", "--quiet", str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # See the module docstring: dependencies from the project venv, after the fresh ones.
    (Path(site) / "_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield target
    shutil.rmtree(root, ignore_errors=True)


def test_installed_trimtab_is_the_fresh_build(installed: Path) -> None:
    result = subprocess.run(
        [str(installed / "bin" / "python"), "-c", "import trimtab; print(trimtab.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(result.stdout.strip()).is_relative_to(installed)


def test_installed_dependencies_are_satisfied(installed: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(installed / "bin" / "python"), "check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_installed_cli_answers_help(installed: Path) -> None:
    result = subprocess.run(
        [str(installed / "bin" / "trimtab"), "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: trimtab" in result.stdout


def test_installed_run_accepts_every_flag_the_chart_passes(
    installed: Path, rendered_default: list[Manifest]
) -> None:
    result = subprocess.run(
        [str(installed / "bin" / "trimtab"), "run", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (container,) = only(rendered_default, "Deployment")["spec"]["template"]["spec"]["containers"]
    flags = {arg.split("=", 1)[0] for arg in container["args"] if arg.startswith("--")}
    flags.add("--namespace")  # namespaced mode
    for flag in sorted(flags):
        assert flag in result.stdout, f"`trimtab run` has no {flag} (the chart passes it)"
