"""The one atomic write: content replaced whole, file and directory fsynced, no litter."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trimtab.files import write_atomically


def test_creates_the_directory_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "eds.json"
    write_atomically(path, "ünïcode\n")
    assert path.read_text(encoding="utf-8") == "ünïcode\n"
    assert os.listdir(path.parent) == ["eds.json"]


def test_replaces_the_old_content_by_a_new_inode(tmp_path: Path) -> None:
    # Envoy's watched-directory EDS notices only a file moved into place, not one rewritten.
    path = tmp_path / "eds.json"
    path.write_text("old")
    before = path.stat().st_ino
    write_atomically(path, "new")
    assert path.read_text() == "new"
    assert path.stat().st_ino != before
    assert os.listdir(tmp_path) == ["eds.json"]


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(path, "\ud800")  # a lone surrogate cannot be encoded
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["status.json"]


def test_fsyncs_the_file_then_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_atomically(tmp_path / "eds.json", "{}")
    assert synced == ["file", "directory"]
