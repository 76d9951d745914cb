"""Fixtures for the simulator tests: where the shared real traces live, tiny scenarios."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The shared folder sits beside the checkout (tests/lab/sim/conftest.py -> four folders up).
_SHARED_TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"


@pytest.fixture(scope="session")
def traces() -> Path:
    """The shared trace folder: ``TRIMTAB_TRACES``, else ``../shared/traces`` beside the checkout.

    Skipped where the traces are absent, but failed in CI (``CI=true``): a green CI run must
    have replayed the real traces.
    """
    folder = Path(os.environ.get("TRIMTAB_TRACES", _SHARED_TRACES))
    if not (folder / "azure-llm-2023-conv.csv").exists():
        message = f"the shared traces (azure-llm-2023-conv.csv) are not in {folder}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI needs them", pytrace=False)
        pytest.skip(message)
    return folder
