"""Fixtures for the simulator tests: where the shared real traces live, tiny scenarios."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def traces() -> Path:
    """The shared trace folder (``TRIMTAB_TRACES`` or ``/work/shared/traces``)."""
    folder = Path(os.environ.get("TRIMTAB_TRACES", "/work/shared/traces"))
    if not (folder / "azure-llm-2023-conv.csv").exists():
        pytest.skip(f"shared traces not found in {folder}")
    return folder
