"""Replacing a file so that a reader sees the old content or the new, never a mix.

The content goes to a temporary file in the target's directory (a rename is atomic only
within one file system), is fsynced, and is renamed over the target; the directory is then
fsynced so that the rename itself survives a crash. Envoy's file-based EDS relies on the
rename: it notices only a file moved into its watched directory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, content: str) -> None:
    """Replace ``path`` with ``content`` (UTF-8), creating its directory if need be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
